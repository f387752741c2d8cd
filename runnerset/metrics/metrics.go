// Package metrics defines the runnerset-controller's own Prometheus metrics,
// served beside controller-runtime's on its metrics registry.
//
// Two kinds: counters the controller increments as it works (reconcile
// errors by step, GitLab API requests by endpoint and code, job pods
// interrupted by a disruption), and a Collector
// that reads the state at scrape time from the manager's cache (RunnerSets by
// condition, per-RunnerSet readiness and token expiry, capacity objects,
// drains). State read at scrape time cannot go stale and costs nothing
// between scrapes; BENCHMARKS.md has its cost with 1000 RunnerSets.
//
// Names follow Prometheus' conventions: the runnerfleet_ prefix, base units
// (seconds), _total on counters, timestamps as Unix seconds. The token
// expiry is exported as a timestamp, not as "seconds left", so that it does
// not change between scrapes; seconds left is
// runnerfleet_runnerset_token_expiry_timestamp_seconds - time().
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// Prefix starts every runnerfleet metric.
const Prefix = "runnerfleet_"

// Names of the metrics, the one place the dashboards, alert rules and tests
// take them from.
const (
	RunnerSets            = Prefix + "runnersets"
	RunnerSetReady        = Prefix + "runnerset_ready"
	TokenExpiry           = Prefix + "runnerset_token_expiry_timestamp_seconds"
	DrainingManagerPods   = Prefix + "runnerset_draining_manager_pods"
	DrainDeadline         = Prefix + "runnerset_drain_deadline_timestamp_seconds"
	RunnerSetsDeleting    = Prefix + "runnersets_deleting"
	CapacityObjects       = Prefix + "capacity_objects"
	ReconcileErrorsTotal  = Prefix + "reconcile_errors_total"
	GitLabRequestsTotal   = Prefix + "gitlab_api_requests_total"
	GitLabRequestDuration = Prefix + "gitlab_api_request_duration_seconds"
	JobsInterruptedTotal  = Prefix + "jobs_interrupted_total"
	JobRetriesTotal       = Prefix + "job_retries_total"
)

// Label names.
const (
	LabelNamespace = "namespace"
	LabelRunnerSet = "runnerset"
	LabelClass     = "class"
	LabelCapacity  = "capacity"
	LabelCondition = "condition"
	LabelStatus    = "status"
	LabelReason    = "reason"
	LabelKind      = "kind"
	LabelStep      = "step"
	LabelEndpoint  = "endpoint"
	LabelMethod    = "method"
	LabelCode      = "code"
	LabelResult    = "result"
)

// Steps a reconcile error is counted under besides the conditions'
// (v1alpha1.DependentConditions): the final status write and the
// finalizer's drain-release-delete.
const (
	StepStatus   = "Status"
	StepFinalize = "Finalize"
)

// ReconcileErrors counts failed reconcile steps: a step named by the
// condition it owns, Status for the status write, Finalize for deletion.
var ReconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: ReconcileErrorsTotal,
	Help: "Reconcile steps of RunnerSets that failed with an error worth a retry, by step (the condition it owns, Status or Finalize).",
}, []string{LabelStep})

// GitLabRequests counts the controller's requests to the GitLab API.
var GitLabRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: GitLabRequestsTotal,
	Help: "Requests of the controller to the GitLab REST API, by endpoint (path template), method and HTTP status code (none: no answer).",
}, []string{LabelEndpoint, LabelMethod, LabelCode})

// GitLabDuration observes how long GitLab took to answer.
var GitLabDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    GitLabRequestDuration,
	Help:    "Time from sending a GitLab REST API request to its answer, by endpoint.",
	Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
}, []string{LabelEndpoint})

// JobsInterrupted counts the job pods of a RunnerSet that a disruption
// took away while they ran (their node deleted, evicted, preempted, shut
// down), by the reason of the pod's DisruptionTarget condition; the
// controller counts each pod once, when it sees it deleted.
var JobsInterrupted = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: JobsInterruptedTotal,
	Help: "Job pods of a RunnerSet taken away while their job ran, by the reason of their DisruptionTarget condition (DeletionByPodGC: their node was deleted; DeletionByTaintManager, EvictionByEvictionAPI, PreemptionByScheduler, TerminationByKubelet; Other).",
}, []string{LabelNamespace, LabelRunnerSet, LabelReason})

// JobRetries counts the interrupted jobs of RunnerSets that retry them
// (spec.jobs.retryOnInterruption), by result: Retried (GitLab retried the
// job) or NotRetried (it ended on its own, reached the limit, or the token
// or GitLab kept it from being retried).
var JobRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: JobRetriesTotal,
	Help: "Interrupted jobs of RunnerSets that retry them (spec.jobs.retryOnInterruption), by result: Retried (GitLab retried the job) or NotRetried (it ended on its own, reached maxRetries, or the token or GitLab kept it from being retried; the JobNotRetried Event says why).",
}, []string{LabelNamespace, LabelRunnerSet, LabelResult})

// Results of JobRetries.
const (
	ResultRetried    = "Retried"
	ResultNotRetried = "NotRetried"
)

// Steps are every value of ReconcileErrors' step label.
func Steps() []string {
	return append(append([]string{}, v1alpha1.DependentConditions...), StepStatus, StepFinalize)
}

// Counters are the metrics the controller increments.
func Counters() []prometheus.Collector {
	return []prometheus.Collector{ReconcileErrors, GitLabRequests, GitLabDuration, JobsInterrupted, JobRetries}
}

func init() {
	// Every step is exported from the start, at 0, so that rate() and
	// increase() see the first error.
	for _, s := range Steps() {
		ReconcileErrors.WithLabelValues(s)
	}
	ctrlmetrics.Registry.MustRegister(Counters()...)
}
