package sharedfleet

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	grafanaprom "github.com/grafana/grafana-foundation-sdk/go/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/providers/gcp/gcenames"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

// The scrape jobs of the fleet's Prometheus (PrometheusConfig), which the
// dashboard's and the rules' selectors name.
const (
	ManagersJob = "runner-managers"
	VMsJob      = "autoscaled-vms"
)

// The metrics of gitlab-runner's docker+machine executor (its
// executors/docker/machine/provider.go) and of the GCE quota exporter.
const (
	// RunnerMachineStates is docker+machine's machines by state
	// (labels state, executor, runner…).
	RunnerMachineStates = "gitlab_runner_autoscaling_machine_states"
	// QuotaLimit and QuotaUsage are the quota exporter's gauges (labels
	// project, region, metric): the GCE regional quotas of the fleets'
	// projects, named once in providers/gcp/quotametrics.
	QuotaLimit = gcenames.QuotaMetricLimit
	QuotaUsage = gcenames.QuotaMetricUsage
)

// DashboardUID is fleet f's dashboard uid and the key of its ConfigMap.
func (f Fleet) DashboardUID() string { return "runnerfleet-shared-" + f.Name }

// dashboard is fleet f's dashboard, read from the fleet's own Prometheus
// (the datasource variable): its managers, jobs, VMs, queue time and quota.
func (f Fleet) dashboard() *dashboard.DashboardBuilder {
	mgr := fmt.Sprintf(`job=%q`, ManagersJob)
	vm := fmt.Sprintf(`job=%q`, VMsJob)
	ksm := fmt.Sprintf(`job=%q, namespace=%q`, KubeStateMetricsName, f.Name)
	quota := f.alertQuota()
	return dashboard.NewDashboardBuilder("runnerfleet / shared fleet "+f.Name).Uid(f.DashboardUID()).
		Description("The shared fleet "+f.Name+": its managers, jobs, VMs, queue time and quota, from the fleet's own Prometheus.").
		Tags([]string{"runnerfleet", "gitlab-runner", "shared-fleet"}).
		Refresh("1m").Time("now-6h", "now").Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source (the fleet's Prometheus)").Type("prometheus")).
		WithRow(dashboard.NewRowBuilder("Managers")).
		WithPanel(monitoring.Single("Managers up", "Manager pods the fleet's Prometheus scrapes successfully (RunnerManagerDown fires on one down for 5m).", "short",
			monitoring.Query(fmt.Sprintf(`sum(up{%s})`, mgr), "up"))).
		WithPanel(monitoring.Single("Managers down", "Manager pods that do not answer their scrape.", "short",
			monitoring.Query(fmt.Sprintf(`count(up{%s} == 0) or vector(0)`, mgr), "down"))).
		WithPanel(monitoring.Single("Managers draining", "Manager pods being deleted (kube-state-metrics' deletion time) that still run: they finish their jobs before they stop.", "short",
			monitoring.Query(fmt.Sprintf(`count(kube_pod_deletion_timestamp{%s} and on (namespace, pod) up{%s}) or vector(0)`, ksm, mgr), "draining"))).
		WithPanel(monitoring.Single("Longest drain", fmt.Sprintf("How long the longest-draining manager has drained; RunnerDrainStuck fires past %s with jobs left.", shortDuration(f.drainLimit())), "s",
			monitoring.Query(fmt.Sprintf(`max(time() - (kube_pod_deletion_timestamp{%s} and on (namespace, pod) up{%s})) or vector(0)`, ksm, mgr), "longest"))).
		WithRow(dashboard.NewRowBuilder("Jobs")).
		WithPanel(monitoring.Series("Jobs by state", "Jobs the fleet's managers run now, by state.", "short", 12,
			monitoring.Query(fmt.Sprintf(`sum by (state) (%s{%s})`, monitoring.RunnerJobs, mgr), "{{state}}"),
			monitoring.Query(fmt.Sprintf(`sum(%s{%s})`, monitoring.RunnerConcurrent, mgr), "concurrent"))).
		WithPanel(monitoring.Series("Jobs by manager", "Jobs each manager group runs now.", "short", 12,
			monitoring.Query(fmt.Sprintf(`sum by (manager) (%s{%s})`, monitoring.RunnerJobs, mgr), "{{manager}}"))).
		WithPanel(monitoring.Series("Jobs started by manager", "Jobs the managers pick up, per second.", "ops", 12,
			monitoring.Query(fmt.Sprintf(`sum by (manager) (rate(%s{%s}[$__rate_interval]))`, monitoring.RunnerJobsTotal, mgr), "{{manager}}"))).
		WithPanel(monitoring.Series("Failed jobs by reason", "Jobs that failed, per second, by failure reason.", "ops", 12,
			monitoring.Query(fmt.Sprintf(`sum by (failure_reason) (rate(%s{%s}[$__rate_interval]))`, monitoring.RunnerFailedJobsTotal, mgr), "{{failure_reason}}"))).
		WithRow(dashboard.NewRowBuilder("Queue time")).
		WithPanel(monitoring.Series("Queue time", "How long jobs waited in GitLab's queue before a manager picked them up (JobsQueuedTooLong fires on p90 over 5m for 15m).", "s", 12,
			monitoring.Query(fmt.Sprintf(`histogram_quantile(0.5, sum by (le) (rate(%s_bucket{%s}[$__rate_interval])))`, monitoring.RunnerJobQueueDuration, mgr), "p50"),
			monitoring.Query(fmt.Sprintf(`histogram_quantile(0.9, sum by (le) (rate(%s_bucket{%s}[$__rate_interval])))`, monitoring.RunnerJobQueueDuration, mgr), "p90"))).
		WithPanel(monitoring.Series("Queue time (p90) by manager", "How long 90% of the jobs each manager group picked up had waited.", "s", 12,
			monitoring.Query(fmt.Sprintf(`histogram_quantile(0.9, sum by (manager, le) (rate(%s_bucket{%s}[$__rate_interval])))`, monitoring.RunnerJobQueueDuration, mgr), "{{manager}}"))).
		WithRow(dashboard.NewRowBuilder("VMs")).
		WithPanel(monitoring.Series("VMs by state (docker+machine)", "The machines docker+machine's managers hold, by state (creating, idle, used, removing…), as gitlab-runner reports them.", "short", 12,
			monitoring.Query(fmt.Sprintf(`sum by (state) (%s{%s})`, RunnerMachineStates, mgr), "{{state}}"))).
		WithPanel(monitoring.Series("Running VMs by manager group", "RUNNING VMs GCE discovery finds with the fleet's label, and those whose node_exporter does not answer.", "short", 12,
			monitoring.Query(fmt.Sprintf(`count by (manager) (up{%s})`, vm), "{{manager}}"),
			monitoring.Query(fmt.Sprintf(`count(up{%s} == 0) or vector(0)`, vm), "not answering"))).
		WithPanel(monitoring.Series("Orphaned VMs", "Running VMs fleet gc noted orphaned (their manager proven absent) and has not deleted yet, by the VM's manager.", "short", 24,
			monitoring.Query(fmt.Sprintf(`count by (vm_manager) (up{%s, orphaned_since!=""})`, vm), "{{vm_manager}}"))).
		WithRow(dashboard.NewRowBuilder("Quota")).
		WithPanel(monitoring.Series("VMs against the quota", fmt.Sprintf("Running VMs against the fleet's VM quota of %d (VMCountNearQuota fires over 90%%).", quota), "short", 12,
			monitoring.Query(`fleet:autoscaled_vms:count`, "VMs"),
			monitoring.Query(fmt.Sprintf(`vector(%d)`, quota), "quota"))).
		WithPanel(monitoring.Series("GCE quota use", "Usage of the GCE regional quotas of the fleet's projects as a share of their limits. These gauges come from the quota exporter; without it the panel is empty.", "percentunit", 12,
			monitoring.Query(fmt.Sprintf(`max by (project, region, metric) (%s) / max by (project, region, metric) (%s > 0)`, QuotaUsage, QuotaLimit), "{{project}} {{region}} {{metric}}")))
}

// alertQuota is the VM quota VMCountNearQuota and the dashboard use: the
// fleet's, or its groups' maxVMs.
func (f Fleet) alertQuota() int {
	quota := f.VMQuota
	if quota == 0 {
		for _, g := range f.Groups {
			quota += g.MaxVMs
		}
	}
	return quota
}

// DashboardJSON is fleet f's Grafana dashboard model.
func (f Fleet) DashboardJSON() ([]byte, error) {
	m, err := f.dashboard().Build()
	if err != nil {
		return nil, fmt.Errorf("building dashboard %s: %w", f.DashboardUID(), err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DashboardQueries are the PromQL expressions of every panel of fleet f's
// dashboard.
func (f Fleet) DashboardQueries() ([]string, error) {
	m, err := f.dashboard().Build()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range m.Panels {
		if p.Panel == nil {
			continue
		}
		for _, t := range p.Panel.Targets {
			switch q := t.(type) {
			case *grafanaprom.Dataquery:
				out = append(out, q.Expr)
			case grafanaprom.Dataquery:
				out = append(out, q.Expr)
			default:
				return nil, fmt.Errorf("dashboard %s: panel %v has a %T target", f.DashboardUID(), p.Panel.Title, t)
			}
		}
	}
	return out, nil
}

// DashboardConfigMap holds fleet f's dashboard for Grafana's sidecar, in
// namespace, labelled as the team dashboards are.
func (f Fleet) DashboardConfigMap(namespace string) (*corev1.ConfigMap, error) {
	b, err := f.DashboardJSON()
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: f.DashboardUID() + "-dashboard",
			Labels: map[string]string{monitoring.GrafanaDashboardLabel: "1"}},
		Data: map[string]string{f.DashboardUID() + ".json": string(b)},
	}, nil
}
