package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ManagerAutoscale has KEDA scale a RunnerSet's managers with their
// running jobs: it reads gitlab_runner_jobs of the managers through the
// RunnerClass's spec.prometheus.address and keeps the managers' average
// at targetRunningJobs, between minReplicas and maxReplicas. A manager
// scaled away drains as on any stop (its preStop hook's SIGQUIT, the
// grace period of managers.shutdownTimeout): no running job is lost.
// spec.managers.replicas is not used while autoscale is set.
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="spec.managers.autoscale: minReplicas must not exceed maxReplicas; lower minReplicas or raise maxReplicas"
type ManagerAutoscale struct {
	// MinReplicas is the fewest managers; 0 lets them all go while no job
	// runs (an overflow's must be 0).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=50
	// +required
	MinReplicas int32 `json:"minReplicas"`

	// MaxReplicas is the most managers. spec.capacity.limits are shared
	// among this many (each manager's [[runners]] limit), so the managers
	// never run more than the limits hold, however many run.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	// +required
	MaxReplicas int32 `json:"maxReplicas"`

	// TargetRunningJobs is the running jobs per manager KEDA keeps the
	// managers at on average: managers = ceil(running jobs / target). It
	// must be below managers.concurrent: a manager never runs more than
	// concurrent jobs, so an average at concurrent could never pass it.
	// +kubebuilder:validation:Minimum=1
	// +required
	TargetRunningJobs int32 `json:"targetRunningJobs"`

	// PollingInterval is how often KEDA reads the metrics (whole seconds).
	// +kubebuilder:default="15s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('10m')",message="managers.autoscale.pollingInterval must be between 1s and 10m, for example 15s"
	// +optional
	PollingInterval *metav1.Duration `json:"pollingInterval,omitempty"`

	// ScaleDownDelay is how long the demand must stay lower before a
	// manager goes (the HPA's scale-down stabilization window, and KEDA's
	// cooldown before the last one goes to zero).
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="managers.autoscale.scaleDownDelay must be between 0s and 1h, for example 5m"
	// +optional
	ScaleDownDelay *metav1.Duration `json:"scaleDownDelay,omitempty"`
}

// OverflowSpec makes a RunnerSet the overflow of another, its primary,
// with the same tags: its managers start when the primary's jobs wait
// too long for a manager, and drain back to none when they no longer do.
type OverflowSpec struct {
	// Primary is the name of the RunnerSet, in this namespace, whose jobs
	// this one takes when they wait too long. It must have the same tags.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message="overflow.primary must be the name of a RunnerSet of this namespace (kubectl get runnersets), for example team-a"
	// +required
	Primary string `json:"primary"`

	// QueueTime is when the overflow starts: the 90th percentile of the
	// time jobs of the primary (and of this overflow) waited in GitLab's
	// queue over a window, above a threshold.
	// +required
	QueueTime QueueTimeTrigger `json:"queueTime"`

	// Prometheus overrides the RunnerClass's spec.prometheus.address for
	// the queue time: the Prometheus that scrapes the primary's managers,
	// when they run in another cluster. The controller then cannot see the
	// primary and does not check it.
	// +optional
	Prometheus *PrometheusEndpoint `json:"prometheus,omitempty"`
}

// QueueTimeTrigger is a threshold on the 90th percentile queue time.
type QueueTimeTrigger struct {
	// Threshold is the 90th percentile queue time above which the
	// overflow's managers start, for example 2m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="overflow.queueTime.threshold must be between 1s and 24h (a threshold of 0 would start the overflow at once), for example 2m"
	// +required
	Threshold metav1.Duration `json:"threshold"`

	// Window is the span the percentile is taken over (the rate's range).
	// +kubebuilder:default="2m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s') && duration(self) <= duration('1h')",message="overflow.queueTime.window must be between 30s and 1h (at least two scrapes), for example 2m"
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`
}

// PrometheusEndpoint is a Prometheus KEDA queries.
type PrometheusEndpoint struct {
	// Address is the Prometheus's URL as KEDA reaches it, for example
	// http://prometheus.monitoring.svc:9090.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="prometheus.address must be an http(s) URL such as http://prometheus.monitoring.svc:9090"
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getHostname() != ''",message="prometheus.address must be a URL with a host and no spaces or newlines, such as http://prometheus.monitoring.svc:9090"
	// +required
	Address string `json:"address"`
}

// Defaults of spec.managers.autoscale and spec.overflow when the API
// server's defaulting did not run (objects built in Go).
const (
	DefaultAutoscalePollingInterval = 15 * time.Second
	DefaultAutoscaleScaleDownDelay  = 5 * time.Minute
	DefaultQueueTimeWindow          = 2 * time.Minute
)

// PollingIntervalOrDefault is pollingInterval, DefaultAutoscalePollingInterval when unset.
func (a *ManagerAutoscale) PollingIntervalOrDefault() time.Duration {
	if a.PollingInterval == nil || a.PollingInterval.Duration <= 0 {
		return DefaultAutoscalePollingInterval
	}
	return a.PollingInterval.Duration
}

// ScaleDownDelayOrDefault is scaleDownDelay, DefaultAutoscaleScaleDownDelay when unset.
func (a *ManagerAutoscale) ScaleDownDelayOrDefault() time.Duration {
	if a.ScaleDownDelay == nil || a.ScaleDownDelay.Duration < 0 {
		return DefaultAutoscaleScaleDownDelay
	}
	return a.ScaleDownDelay.Duration
}

// WindowOrDefault is window, DefaultQueueTimeWindow when unset.
func (q QueueTimeTrigger) WindowOrDefault() time.Duration {
	if q.Window == nil || q.Window.Duration <= 0 {
		return DefaultQueueTimeWindow
	}
	return q.Window.Duration
}

// MaxManagers is the most managers the RunnerSet may run at once:
// autoscale's maxReplicas, else replicas. What is shared among the
// managers (spec.capacity.limits, the class's maxConcurrency) is judged
// against it, so a varying count never exceeds them.
func (m ManagerSpec) MaxManagers() int32 {
	if m.Autoscale != nil {
		return m.Autoscale.MaxReplicas
	}
	return m.ReplicasOrDefault()
}

// MaxManagersField is the field MaxManagers reads, for messages.
func (m ManagerSpec) MaxManagersField() string {
	if m.Autoscale != nil {
		return "spec.managers.autoscale.maxReplicas"
	}
	return "spec.managers.replicas"
}
