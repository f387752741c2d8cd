package resources

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// LabelComponent tells a RunnerSet's managers from its job pods and the rest.
const LabelComponent = naming.LabelComponent

// ComponentManager is LabelComponent's value on manager pods and what
// serves them.
const ComponentManager = "manager"

// ComponentJob is LabelComponent's value on job pods (the executor puts
// the labels of [runners.kubernetes] pod_labels on them) and on what serves
// them in the jobs namespace.
const ComponentJob = "job"

// ComponentJobsNamespace is LabelComponent's value on jobs namespaces: the
// managers' NetworkPolicy admits no pod of a namespace that carries it.
const ComponentJobsNamespace = "jobs"

// ManagerPods selects the manager pods of every RunnerSet: what the
// controller caches to see drains, and what scrapes select.
func ManagerPods() labels.Set {
	return labels.Set{LabelManagedBy: ManagedBy, LabelComponent: ComponentManager}
}

// MetricsPortName names the managers' metrics port (gitlab-runner's
// listen_address) on their pods; scrapes select it by name.
const MetricsPortName = "metrics"
