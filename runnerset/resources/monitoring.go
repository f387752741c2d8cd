package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// LabelComponent tells a RunnerSet's managers from its job pods and the rest.
const LabelComponent = "app.kubernetes.io/component"

// ComponentManager is LabelComponent's value on manager pods and what
// serves them.
const ComponentManager = "manager"

// ManagerPods selects the manager pods of every RunnerSet: what the
// controller caches to see drains, and what scrapes select.
func ManagerPods() labels.Set {
	return labels.Set{LabelManagedBy: ManagedBy, LabelComponent: ComponentManager}
}

// MetricsPortName names the managers' metrics port (gitlab-runner's
// listen_address) on their pods and their Service; scrapes select it by name.
const MetricsPortName = "metrics"

// ManagerService is the headless Service of the managers of rs: one DNS
// record and one endpoint per manager pod, for Prometheus to find each
// manager's listen_address (ServiceMonitor, or kubernetes_sd endpoints).
// Managers that are not ready (starting, or draining their jobs) stay in it,
// so a drain is watched to its end.
func ManagerService(rs *v1alpha1.RunnerSet) *corev1.Service {
	return WithHash(&corev1.Service{
		ObjectMeta: meta(rs, naming.For(rs.Namespace, rs.Name).Managers(), ComponentManager),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 SelectorLabels(rs, ComponentManager),
			PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{{
				Name: MetricsPortName, Port: gitlabrunner.MetricsPort, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromString(MetricsPortName),
			}},
		},
	})
}
