package monitoring

import (
	"fmt"
	"maps"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
)

// Metrics of the other exporters the rules and dashboards read, as their
// sources name them: gitlab-runner (commands/builds_helper.go and the
// network client) and Karpenter (pkg/controllers/metrics/nodepool). The
// tests check each against the exporter's own source or registry.
const (
	RunnerJobQueueDuration = "gitlab_runner_job_queue_duration_seconds"
	RunnerJobs             = "gitlab_runner_jobs"
	RunnerConcurrent       = "gitlab_runner_concurrent"
	RunnerJobsTotal        = "gitlab_runner_jobs_total"
	RunnerFailedJobsTotal  = "gitlab_runner_failed_jobs_total"
	RunnerVersionInfo      = "gitlab_runner_version_info"
	RunnerAPIRequests      = "gitlab_runner_api_request_statuses_total"
	KarpenterNodePoolUsage = "karpenter_nodepools_usage"
	KarpenterNodePoolLimit = "karpenter_nodepools_limit"
)

// Thresholds of the alerts.
const (
	// NotReadyFor is how long a RunnerSet may stay not Ready.
	NotReadyFor = 15 * time.Minute
	// TokenExpiresWithin is how early a token's expiry is warned of.
	TokenExpiresWithin = 7 * 24 * time.Hour
	// JobQueueThreshold is the 90th percentile queue time of a runner's
	// jobs that counts as queueing.
	JobQueueThreshold = 5 * time.Minute
	// CapacityLimitRatio of a NodePool's limit in use counts as at the limit.
	CapacityLimitRatio = 0.95
	// JobsInterruptedPerHour is how many of a RunnerSet's jobs a
	// disruption may take in an hour before it is alerted on: one spot
	// reclaim now and then is expected, a pool that keeps losing jobs is not.
	JobsInterruptedPerHour = 3
)

// Alert names.
const (
	AlertNotReady          = "RunnerSetNotReady"
	AlertTokenExpiresSoon  = "RunnerTokenExpiresSoon"
	AlertDrainOverdue      = "RunnerManagerDrainOverdue"
	AlertJobsQueueing      = "RunnerJobsQueueing"
	AlertCapacityAtLimit   = "RunnerCapacityAtLimit"
	AlertReconcileFailures = "RunnerfleetReconcileErrors"
	AlertTokenRefused      = "RunnerTokenRefused"
	AlertJobsInterrupted   = "RunnerJobsInterrupted"
)

// RunnerRequestJobEndpoint is the endpoint label gitlab-runner gives its
// job requests (network.apiEndpointRequestJob); GitLab answers them 403 when
// it refuses the runner's token.
const RunnerRequestJobEndpoint = "request_job"

func seconds(d time.Duration) string { return fmt.Sprint(int64(d.Seconds())) }

func promDuration(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", int64(d.Hours()))
	}
	return fmt.Sprintf("%dm", int64(d.Minutes()))
}

func rule(alert, expr string, forDur time.Duration, severity, summary, description string) monitoringv1.Rule {
	var f *monitoringv1.Duration
	if forDur > 0 {
		d := monitoringv1.Duration(promDuration(forDur))
		f = &d
	}
	return monitoringv1.Rule{
		Alert:       alert,
		Expr:        intstr.FromString(expr),
		For:         f,
		Labels:      map[string]string{"severity": severity},
		Annotations: map[string]string{"summary": summary, "description": description},
	}
}

// RuleGroups are the alert rules of the team runners.
func RuleGroups() []monitoringv1.RuleGroup {
	return []monitoringv1.RuleGroup{{
		Name: "runnerfleet.runnersets",
		Rules: []monitoringv1.Rule{
			rule(AlertNotReady,
				fmt.Sprintf("max by (namespace, runnerset, class) (%s) == 0", metrics.RunnerSetReady),
				NotReadyFor, "warning",
				"RunnerSet {{ $labels.namespace }}/{{ $labels.runnerset }} is not Ready",
				fmt.Sprintf("RunnerSet {{ $labels.namespace }}/{{ $labels.runnerset }} (class {{ $labels.class }}) has not been Ready for %s: kubectl -n {{ $labels.namespace }} get runnerset {{ $labels.runnerset }} -o wide shows the condition that says why.", promDuration(NotReadyFor))),
			rule(AlertTokenExpiresSoon,
				fmt.Sprintf("(max by (namespace, runnerset) (%s) - time()) < %s", metrics.TokenExpiry, seconds(TokenExpiresWithin)),
				10*time.Minute, "warning",
				"The runner token of {{ $labels.namespace }}/{{ $labels.runnerset }} expires within 7 days",
				"The runner authentication token of RunnerSet {{ $labels.namespace }}/{{ $labels.runnerset }} expires within 7 days. A runner the controller created (spec.gitlab.runner) is rotated two thirds into its life: if this fires for one, the controller cannot reach GitLab. A stored token (spec.gitlab.tokenSecretRef) must be replaced by you: store a new glrt- token and its runnerfleet.dev/token-expires-at annotation."),
			rule(AlertDrainOverdue,
				fmt.Sprintf("time() - min by (namespace, runnerset) (%s) > 0", metrics.DrainDeadline),
				5*time.Minute, "warning",
				"A manager of {{ $labels.namespace }}/{{ $labels.runnerset }} drains longer than its shutdown timeout",
				"A manager pod of RunnerSet {{ $labels.namespace }}/{{ $labels.runnerset }} was asked to stop and still exists 5 minutes after its shutdown timeout (spec.managers.shutdownTimeout): its node may be gone or its kubelet stuck. Jobs it ran may be lost; check the pod and its node."),
			rule(AlertJobsQueueing,
				fmt.Sprintf("histogram_quantile(0.9, sum by (namespace, runnerset, le) (rate(%s_bucket[10m]))) > %s", RunnerJobQueueDuration, seconds(JobQueueThreshold)),
				15*time.Minute, "warning",
				"Jobs of {{ $labels.namespace }}/{{ $labels.runnerset }} queue for more than 5 minutes",
				"90% of the jobs RunnerSet {{ $labels.namespace }}/{{ $labels.runnerset }} picked up in the last 10 minutes waited more than 5 minutes in GitLab's queue: raise spec.managers.replicas or concurrent, or check its capacity (RunnerCapacityAtLimit)."),
			rule(AlertCapacityAtLimit,
				fmt.Sprintf(`max by (nodepool, resource_type) (%s{nodepool=~"rf-.*"}) / max by (nodepool, resource_type) (%s{nodepool=~"rf-.*"}) >= %v`, KarpenterNodePoolUsage, KarpenterNodePoolLimit, CapacityLimitRatio),
				15*time.Minute, "warning",
				"Runner capacity {{ $labels.nodepool }} is at its {{ $labels.resource_type }} limit",
				"NodePool {{ $labels.nodepool }} uses at least 95% of its {{ $labels.resource_type }} limit (the RunnerSet's spec.capacity.limits): new job pods wait for capacity. Raise the limit or lower concurrency."),
			rule(AlertTokenRefused,
				fmt.Sprintf(`sum by (namespace, runnerset) (increase(%s{endpoint=%q, status="403"}[10m])) > 0`, RunnerAPIRequests, RunnerRequestJobEndpoint),
				10*time.Minute, "critical",
				"GitLab refuses the runner token of {{ $labels.namespace }}/{{ $labels.runnerset }}",
				"The managers of RunnerSet {{ $labels.namespace }}/{{ $labels.runnerset }} have been asking GitLab for jobs with a token it refuses (403) for 10 minutes: they run no job. The controller makes no GitLab call while nothing changes, so this is how a revoked token shows first. A runner the controller created (spec.gitlab.runner) is re-created at its next token check; a stored token (spec.gitlab.tokenSecretRef) must be replaced by you: reset the runner's token in GitLab and store the new glrt- token in its Secret."),
			rule(AlertJobsInterrupted,
				fmt.Sprintf("sum by (namespace, runnerset) (increase(%s[1h])) > %d", metrics.JobsInterruptedTotal, JobsInterruptedPerHour),
				0, "warning",
				"Jobs of {{ $labels.namespace }}/{{ $labels.runnerset }} keep losing their nodes",
				fmt.Sprintf("More than %d job pods of RunnerSet {{ $labels.namespace }}/{{ $labels.runnerset }} were taken away while their job ran in the last hour (runnerfleet_jobs_interrupted_total by reason; the RunnerSet's JobInterrupted Events name each pod and node): DeletionByPodGC is a node that went away under its jobs, as a spot reclaim does. Those jobs failed; if spot capacity is being reclaimed this often, allow on-demand (spec.capacity.capacityTypes) or more instance families.", JobsInterruptedPerHour)),
			rule(AlertReconcileFailures,
				fmt.Sprintf("sum by (step) (increase(%s[15m])) > 0", metrics.ReconcileErrorsTotal),
				15*time.Minute, "warning",
				"The runnerset-controller keeps failing at step {{ $labels.step }}",
				"Reconciles of RunnerSets have failed at step {{ $labels.step }} for 15 minutes: the controller's logs and the RunnerSets' conditions say why."),
		},
	}}
}

// AllRuleGroups are RuleGroups and the cost rules priced by prices.
func AllRuleGroups(prices cost.Table) []monitoringv1.RuleGroup {
	return append(RuleGroups(), CostRuleGroups(prices)...)
}

// PrometheusRule is AllRuleGroups for the Prometheus operator.
func PrometheusRule(namespace string, labels map[string]string, prices cost.Table) *monitoringv1.PrometheusRule {
	return &monitoringv1.PrometheusRule{
		TypeMeta:   metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PrometheusRuleKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "runnerfleet", Labels: maps.Clone(labels)},
		Spec:       monitoringv1.PrometheusRuleSpec{Groups: AllRuleGroups(prices)},
	}
}

// RuleFileYAML is AllRuleGroups as a Prometheus rule file (rule_files:).
func RuleFileYAML(prices cost.Table) ([]byte, error) {
	return yaml.Marshal(monitoringv1.PrometheusRuleSpec{Groups: AllRuleGroups(prices)})
}
