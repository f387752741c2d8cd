package sharedfleet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Images of the fleets' kube-state-metrics and of the Alertmanager; the
// Alertmanager is the release whose amtool checks its configuration
// (hack/alertmanager/go.mod).
const (
	KubeStateMetricsImage = "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.17.0"
	AlertmanagerImage     = "quay.io/prometheus/alertmanager:v0.35.0"
)

// The Alertmanager's names, files and mounts.
const (
	alertmanagerName       = "alertmanager"
	AlertmanagerConfigFile = "alertmanager.yml"
	alertmanagerConfigDir  = "/etc/alertmanager"
	// alertmanagerSecretsDir holds the receiver's secret as a file
	// (url_file, api_url_file, routing_key_file).
	alertmanagerSecretsDir = "/etc/alertmanager/secrets"
	// AlertmanagerSecretKey is the key of the receiver's secret in the
	// Alertmanager's Secret.
	AlertmanagerSecretKey = "receiver"
)

// KubeStateMetricsMetrics are the only series a fleet's kube-state-metrics
// exports: what the fleet's alerts read (RunnerDrainStuck the pods',
// GCFailing fleet gc's CronJob's).
var KubeStateMetricsMetrics = []string{
	"kube_pod_deletion_timestamp", "kube_pod_status_phase", "kube_pod_info",
	"kube_cronjob_status_last_successful_time", "kube_cronjob_created",
}

// KubeStateMetricsResources are the kinds a fleet's kube-state-metrics
// watches, in the fleet's namespace only.
var KubeStateMetricsResources = []string{"pods", "cronjobs"}

// AlertmanagerAddress is where every fleet's Prometheus sends its alerts.
func AlertmanagerAddress() string {
	return fmt.Sprintf("%s.%s.svc:%d", alertmanagerName, fleetspec.MonitoringNamespace, AlertmanagerPort)
}

// planKubeStateMetrics is the fleet's own kube-state-metrics: it watches
// only the pods and CronJobs of the fleet's namespace, with a Role that may
// only read them, and exports only KubeStateMetricsMetrics.
func planKubeStateMetrics(ns string) []runtime.Object {
	sel := map[string]string{naming.LabelName: KubeStateMetricsName}
	labels := merged(sel, map[string]string{resources.LabelManagedBy: resources.ManagedBy})
	meta := metav1.ObjectMeta{Name: KubeStateMetricsName, Namespace: ns, Labels: labels}
	sa := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta}
	role, binding := podReader(meta, KubeStateMetricsName)
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{"batch"}, Resources: []string{"cronjobs"}, Verbs: []string{"list", "watch"}})
	deploy := monitoringDeployment(meta, sel, nil, false, corev1.PodSpec{
		ServiceAccountName: KubeStateMetricsName,
		Containers: []corev1.Container{monitoringContainer(corev1.Container{
			Name:  KubeStateMetricsName,
			Image: KubeStateMetricsImage,
			Args: []string{
				"--namespaces=" + ns,
				"--resources=" + strings.Join(KubeStateMetricsResources, ","),
				"--metric-allowlist=" + strings.Join(KubeStateMetricsMetrics, ","),
				fmt.Sprintf("--port=%d", KubeStateMetricsPort),
			},
		}, "http-metrics", KubeStateMetricsPort, "/metrics", "10m", "64Mi", "256Mi")},
	})
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{{
			Name: "http-metrics", Port: KubeStateMetricsPort, TargetPort: intstr.FromString("http-metrics"), Protocol: corev1.ProtocolTCP,
		}}},
	}
	return []runtime.Object{sa, role, binding, deploy, svc}
}

// AlertmanagerPlan is the Alertmanager of the monitoring namespace.
type AlertmanagerPlan struct {
	// File is alertmanager.yml, without secrets.
	File string
	// SecretKey is the stack config key of the receiver's secret, which
	// the declaration puts into Secret under AlertmanagerSecretKey.
	SecretKey string
	ConfigMap *corev1.ConfigMap
	Secret    *corev1.Secret
	// Objects are its Deployment and Service, in that order.
	Objects []runtime.Object
}

// AlertmanagerConfig is the Alertmanager's configuration for the stack's
// receiver: every alert to it, its secret read from a file.
func AlertmanagerConfig(r fleetspec.AlertReceiver) prometheus.AlertmanagerFile {
	secret := path.Join(alertmanagerSecretsDir, AlertmanagerSecretKey)
	recv := prometheus.Receiver{Name: r.Name}
	switch {
	case r.WebhookURLConfigKey != "":
		recv.WebhookConfigs = []prometheus.WebhookConfig{{URLFile: secret, SendResolved: true}}
	case r.SlackWebhookURLConfigKey != "":
		recv.SlackConfigs = []prometheus.SlackConfig{{APIURLFile: secret, Channel: r.SlackChannel, SendResolved: true}}
	case r.PagerDutyRoutingKeyConfigKey != "":
		recv.PagerdutyConfigs = []prometheus.PagerdutyConfig{{RoutingKeyFile: secret, SendResolved: true}}
	}
	return prometheus.AlertmanagerFile{
		Route: prometheus.Route{
			Receiver: r.Name, GroupBy: []string{"alertname", "fleet", "manager"},
			GroupWait: "30s", GroupInterval: "5m", RepeatInterval: "4h",
		},
		Receivers: []prometheus.Receiver{recv},
	}
}

// PlanAlertmanager plans the Alertmanager for the stack config's alerting
// a, whose key is key (errors name it).
func PlanAlertmanager(a *fleetspec.Alerting, key string) (*AlertmanagerPlan, error) {
	if a == nil {
		return nil, fmt.Errorf("%s: the shared fleets' alerts need a receiver", key)
	}
	keys := a.Receiver.SecretKeys()
	if len(keys) != 1 {
		return nil, fmt.Errorf("%s.receiver: give exactly one receiver secret", key)
	}
	b, err := prometheus.Render(AlertmanagerConfig(a.Receiver))
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", AlertmanagerConfigFile, err)
	}
	ns := fleetspec.MonitoringNamespace
	sel := map[string]string{naming.LabelName: alertmanagerName}
	labels := merged(sel, map[string]string{resources.LabelManagedBy: resources.ManagedBy})
	meta := metav1.ObjectMeta{Name: alertmanagerName, Namespace: ns, Labels: labels}
	ap := &AlertmanagerPlan{File: string(b), SecretKey: keys[0]}
	ap.ConfigMap = &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: meta,
		Data: map[string]string{AlertmanagerConfigFile: ap.File}}
	ap.Secret = &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta, Type: corev1.SecretTypeOpaque}
	sum := sha256.Sum256(b)
	deploy := monitoringDeployment(meta, sel, map[string]string{
		naming.AnnotationConfigHash: hex.EncodeToString(sum[:])[:16],
	}, true, corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(false),
		Containers: []corev1.Container{monitoringContainer(corev1.Container{
			Name:  alertmanagerName,
			Image: AlertmanagerImage,
			Args: []string{
				"--config.file=" + path.Join(alertmanagerConfigDir, AlertmanagerConfigFile),
				"--storage.path=/alertmanager",
				fmt.Sprintf("--web.listen-address=:%d", AlertmanagerPort),
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "config", MountPath: alertmanagerConfigDir, ReadOnly: true},
				{Name: "secrets", MountPath: alertmanagerSecretsDir, ReadOnly: true},
				{Name: "data", MountPath: "/alertmanager"},
			},
		}, "web", AlertmanagerPort, "/-/ready", "20m", "64Mi", "256Mi")},
		Volumes: []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: alertmanagerName}}}},
			{Name: "secrets", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: alertmanagerName, DefaultMode: ptr.To[int32](0o440)}}},
			// Silences and the notification log; a restart
			// forgets silences (one replica, no cluster).
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	})
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{{
			Name: "web", Port: AlertmanagerPort, TargetPort: intstr.FromString("web"), Protocol: corev1.ProtocolTCP,
		}}},
	}
	ap.Objects = []runtime.Object{deploy, svc}
	return ap, nil
}
