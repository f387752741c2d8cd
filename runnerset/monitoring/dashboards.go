package monitoring

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
)

// GrafanaDashboardLabel is the label kube-prometheus-stack's Grafana sidecar
// loads dashboards from ConfigMaps by (its default sidecar.dashboards.label).
const GrafanaDashboardLabel = "grafana_dashboard"

// Dashboard is one generated Grafana dashboard.
type Dashboard struct {
	// UID is the dashboard's uid and its file name.
	UID string
	// Answers says what the dashboard answers, for the README.
	Answers string
	build   func() *dashboard.DashboardBuilder
}

// JSON is the dashboard model Grafana imports.
func (d Dashboard) JSON() ([]byte, error) {
	m, err := d.build().Build()
	if err != nil {
		return nil, fmt.Errorf("building dashboard %s: %w", d.UID, err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Dashboards are the fleet overview and the per-team view.
func Dashboards() []Dashboard {
	return []Dashboard{
		{UID: "runnerfleet-overview", build: overview,
			Answers: "Is the fleet healthy? RunnerSets not Ready and why, jobs running and queueing by runner, managers up, capacity against its limits and nodes by runner, cost per hour by team, drains in progress, reconcile and GitLab API errors."},
		{UID: "runnerfleet-team", build: team,
			Answers: "How is my runner doing? For one RunnerSet: Ready, days until its token expires, managers up and draining, jobs running against concurrent, queue time, job durations and failures, its capacity and nodes, GitLab's answers to its managers, and what it and its team's other runners cost."},
	}
}

// Queries are every PromQL expression of every panel, by dashboard UID.
func Queries() (map[string][]string, error) {
	out := map[string][]string{}
	for _, d := range Dashboards() {
		m, err := d.build().Build()
		if err != nil {
			return nil, err
		}
		for _, p := range m.Panels {
			if p.Panel == nil {
				continue
			}
			for _, t := range p.Panel.Targets {
				switch q := t.(type) {
				case *prometheus.Dataquery:
					out[d.UID] = append(out[d.UID], q.Expr)
				case prometheus.Dataquery:
					out[d.UID] = append(out[d.UID], q.Expr)
				default:
					return nil, fmt.Errorf("dashboard %s: panel %v has a %T target", d.UID, p.Panel.Title, t)
				}
			}
		}
	}
	return out, nil
}

var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// Query is one PromQL target on the dashboard's ${datasource}; Series and
// Single are a time series and a stat panel of the size every runnerfleet
// dashboard uses (the team runners' and the shared fleets').
func Query(expr, legend string) *prometheus.DataqueryBuilder { return q(expr, legend) }

// Series is a time series panel of targets, w of 24 columns wide.
func Series(title, desc, unit string, w uint32, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return series(title, desc, unit, w, targets...)
}

// Single is a stat panel of one target.
func Single(title, desc, unit string, t *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return single(title, desc, unit, t)
}

func q(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).LegendFormat(legend).Datasource(ds)
}

func series(title, desc, unit string, w uint32, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(desc).Unit(unit).Datasource(ds).Height(8).Span(w).Min(0)
	for _, t := range targets {
		p = p.WithTarget(t)
	}
	return p
}

func single(title, desc, unit string, t *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(desc).Unit(unit).Datasource(ds).Height(4).Span(6).WithTarget(t)
}

func base(title, uid, desc string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).Uid(uid).Description(desc).
		Tags([]string{"runnerfleet", "gitlab-runner"}).
		Refresh("1m").Time("now-6h", "now").Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus"))
}

func queryVar(name, label, query string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).Label(label).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
		Datasource(ds).Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc)
}

// mgr selects the team managers' series, as the PodMonitor and the
// scrape config label them.
var mgr = fmt.Sprintf(`job=%q`, ManagersName)

func overview() *dashboard.DashboardBuilder {
	return base("runnerfleet / fleet overview", "runnerfleet-overview", "Every team runner of the cluster: health, jobs, capacity, drains and errors.").
		WithRow(dashboard.NewRowBuilder("Health")).
		WithPanel(single("RunnerSets", "RunnerSets the controller manages.", "short",
			q(fmt.Sprintf(`sum(%s{condition="Ready"})`, metrics.RunnerSets), "RunnerSets"))).
		WithPanel(single("Not Ready", "RunnerSets whose Ready condition is not True.", "short",
			q(fmt.Sprintf(`sum(%s{condition="Ready",status!="True"}) or vector(0)`, metrics.RunnerSets), "not Ready"))).
		WithPanel(single("Managers up", "Manager pods Prometheus scrapes successfully.", "short",
			q(fmt.Sprintf(`sum(up{%s})`, mgr), "up"))).
		WithPanel(single("Draining", "RunnerSets being deleted and manager pods finishing their jobs before they stop.", "short",
			q(fmt.Sprintf(`sum(%s) + (sum(%s) or vector(0))`, metrics.RunnerSetsDeleting, metrics.DrainingManagerPods), "draining"))).
		WithPanel(series("Not Ready by reason", "Why RunnerSets are not Ready: the reason of their Ready condition.", "short", 24,
			q(fmt.Sprintf(`sum by (reason) (%s{condition="Ready",status!="True"})`, metrics.RunnerSets), "{{reason}}"))).
		WithRow(dashboard.NewRowBuilder("Jobs")).
		WithPanel(series("Jobs running by runner", "Jobs the managers of each RunnerSet run now.", "short", 12,
			q(fmt.Sprintf(`sum by (namespace, runnerset) (%s{%s})`, RunnerJobs, mgr), "{{namespace}}/{{runnerset}}"))).
		WithPanel(series("Queue time (p90) by runner", "How long 90% of the jobs each RunnerSet picked up had waited in GitLab's queue.", "s", 12,
			q(fmt.Sprintf(`histogram_quantile(0.9, sum by (namespace, runnerset, le) (rate(%s_bucket{%s}[$__rate_interval])))`, RunnerJobQueueDuration, mgr), "{{namespace}}/{{runnerset}}"))).
		WithPanel(series("Failed jobs by runner", "Jobs that failed, by RunnerSet and failure reason, per second.", "ops", 24,
			q(fmt.Sprintf(`sum by (namespace, runnerset, failure_reason) (rate(%s{%s}[$__rate_interval]))`, RunnerFailedJobsTotal, mgr), "{{namespace}}/{{runnerset}} {{failure_reason}}"))).
		WithRow(dashboard.NewRowBuilder("Capacity")).
		WithPanel(series("Capacity use of its limit by runner", "Each runner NodePool's provisioned CPU and memory as a share of its limit (spec.capacity.limits).", "percentunit", 12,
			q(fmt.Sprintf(`max by (nodepool, resource_type) (%s{nodepool=~"rf-.*"}) / max by (nodepool, resource_type) (%s{nodepool=~"rf-.*"})`, KarpenterNodePoolUsage, KarpenterNodePoolLimit), "{{nodepool}} {{resource_type}}"))).
		WithPanel(series("Nodes by runner", "Nodes Karpenter runs for each runner NodePool (its status.resources.nodes).", "short", 12,
			q(fmt.Sprintf(`max by (nodepool) (%s{nodepool=~"rf-.*",resource_type="nodes"})`, KarpenterNodePoolUsage), "{{nodepool}}"))).
		WithPanel(series("Cost per hour by team", "What the nodes of each namespace's RunnerSets cost per hour, by the stack's price table (docs/operations/cost.md).", "short", 12,
			q(fmt.Sprintf(`sum by (namespace, currency) (%s)`, RecordCost), "{{namespace}} {{currency}}"))).
		WithPanel(series("Nodes by team and capacity type", "Nodes of each namespace's RunnerSets, by capacity type.", "short", 12,
			q(fmt.Sprintf(`sum by (namespace, capacity_type) (%s)`, RecordNodes), "{{namespace}} {{capacity_type}}"))).
		WithPanel(series("Capacity objects", "NodePools and node classes runnerfleet manages, by kind.", "short", 24,
			q(fmt.Sprintf(`sum by (kind) (%s)`, metrics.CapacityObjects), "{{kind}}"))).
		WithRow(dashboard.NewRowBuilder("Errors")).
		WithPanel(series("Reconcile errors by step", "Failed reconcile steps of the controller, per second.", "ops", 12,
			q(fmt.Sprintf(`sum by (step) (rate(%s[$__rate_interval]))`, metrics.ReconcileErrorsTotal), "{{step}}"))).
		WithPanel(series("Controller's GitLab API calls by status", "Requests of the controller to GitLab, by endpoint and HTTP status, per second.", "reqps", 12,
			q(fmt.Sprintf(`sum by (endpoint, code) (rate(%s[$__rate_interval]))`, metrics.GitLabRequestsTotal), "{{endpoint}} {{code}}")))
}

func team() *dashboard.DashboardBuilder {
	sel := mgr + `,namespace="$namespace",runnerset="$runnerset"`
	rs := `namespace="$namespace",runnerset="$runnerset"`
	return base("runnerfleet / team runner", "runnerfleet-team", "One RunnerSet: its health, managers, jobs and capacity.").
		WithVariable(queryVar("namespace", "Namespace", fmt.Sprintf("label_values(%s, namespace)", metrics.RunnerSetReady))).
		WithVariable(queryVar("runnerset", "RunnerSet", fmt.Sprintf(`label_values(%s{namespace="$namespace"}, runnerset)`, metrics.RunnerSetReady))).
		WithVariable(queryVar("capacity", "Capacity", fmt.Sprintf(`label_values(%s{%s}, %s)`, metrics.RunnerSetReady, rs, metrics.LabelCapacity)).Hide(dashboard.VariableHideHideVariable)).
		WithRow(dashboard.NewRowBuilder("Health")).
		WithPanel(single("Ready", "1 when the RunnerSet is Ready; kubectl get runnerset -o wide says why not.", "short",
			q(fmt.Sprintf(`max(%s{%s})`, metrics.RunnerSetReady, rs), "Ready"))).
		WithPanel(single("Token expires in", "Time until the runner's authentication token expires.", "s",
			q(fmt.Sprintf(`max(%s{%s}) - time()`, metrics.TokenExpiry, rs), "expires in"))).
		WithPanel(single("Managers up", "Manager pods Prometheus scrapes successfully.", "short",
			q(fmt.Sprintf(`sum(up{%s})`, sel), "up"))).
		WithPanel(single("Managers draining", "Manager pods finishing their jobs before they stop.", "short",
			q(fmt.Sprintf(`sum(%s{%s}) or vector(0)`, metrics.DrainingManagerPods, rs), "draining"))).
		WithRow(dashboard.NewRowBuilder("Jobs")).
		WithPanel(series("Jobs running and concurrent", "Jobs the managers run now, against how many they may run at once.", "short", 12,
			q(fmt.Sprintf(`sum(%s{%s})`, RunnerJobs, sel), "running"),
			q(fmt.Sprintf(`sum(%s{%s})`, RunnerConcurrent, sel), "concurrent"))).
		WithPanel(series("Queue time", "How long jobs waited in GitLab's queue before a manager picked them up.", "s", 12,
			q(fmt.Sprintf(`histogram_quantile(0.5, sum by (le) (rate(%s_bucket{%s}[$__rate_interval])))`, RunnerJobQueueDuration, sel), "p50"),
			q(fmt.Sprintf(`histogram_quantile(0.9, sum by (le) (rate(%s_bucket{%s}[$__rate_interval])))`, RunnerJobQueueDuration, sel), "p90"))).
		WithPanel(series("Jobs started and failed", "Jobs started and failed, per second, by failure reason.", "ops", 12,
			q(fmt.Sprintf(`sum(rate(%s{%s}[$__rate_interval]))`, RunnerJobsTotal, sel), "started"),
			q(fmt.Sprintf(`sum by (failure_reason) (rate(%s{%s}[$__rate_interval]))`, RunnerFailedJobsTotal, sel), "failed {{failure_reason}}"))).
		WithPanel(series("Jobs interrupted", "Job pods taken away while their job ran, in the last hour, by reason: DeletionByPodGC is a node gone under its jobs (a spot reclaim), EvictionByEvictionAPI a drain, TerminationByKubelet a node shutdown. The RunnerSet's JobInterrupted Events name each pod and node. With spec.jobs.retryOnInterruption, the interrupted jobs by what the controller did: retried, or not (the JobNotRetried Event says why).", "short", 12,
			q(fmt.Sprintf(`sum by (reason) (increase(%s{%s}[1h]))`, metrics.JobsInterruptedTotal, rs), "{{reason}}"),
			q(fmt.Sprintf(`sum by (result) (increase(%s{%s}[1h]))`, metrics.JobRetriesTotal, rs), "retry: {{result}}"))).
		WithPanel(series("GitLab's answers to the managers", "Requests of the managers to GitLab by endpoint and status: 403 means GitLab refuses the token.", "reqps", 12,
			q(fmt.Sprintf(`sum by (endpoint, status) (rate(%s{%s}[$__rate_interval]))`, RunnerAPIRequests, sel), "{{endpoint}} {{status}}"))).
		WithRow(dashboard.NewRowBuilder("Capacity")).
		WithPanel(series("Capacity use of its limit", "The runner NodePool's provisioned CPU and memory as a share of its limit.", "percentunit", 12,
			q(fmt.Sprintf(`max by (resource_type) (%s{nodepool="$capacity"}) / max by (resource_type) (%s{nodepool="$capacity"})`,
				KarpenterNodePoolUsage, KarpenterNodePoolLimit), "{{resource_type}}"))).
		WithPanel(series("Nodes", "Nodes Karpenter runs for the runner's NodePool.", "short", 12,
			q(fmt.Sprintf(`max(%s{nodepool="$capacity",resource_type="nodes"})`, KarpenterNodePoolUsage), "nodes"))).
		WithPanel(series("Versions", "gitlab-runner versions the managers run.", "short", 24,
			q(fmt.Sprintf(`count by (version) (%s{%s})`, RunnerVersionInfo, sel), "{{version}}"))).
		WithRow(dashboard.NewRowBuilder("Cost")).
		WithPanel(single("Node-hours of the team", "Node-hours of every RunnerSet of the namespace over the dashboard's time range: its capacity's nodes, counted every minute.", "short",
			q(NodeSeconds(`{namespace="$namespace"}`, "", "$__range")+" / 3600", "node-hours"))).
		WithPanel(single("Cost of the team", "What the nodes of every RunnerSet of the namespace cost over the dashboard's time range, by the stack's price table (nodes of a type it has no price for are left out: RunnerCostUnpriced).", "short",
			q(Spent(`{namespace="$namespace"}`, "", "$__range"), "{{currency}}"))).
		WithPanel(single("Node-hours of this runner", "Node-hours of this RunnerSet's capacity over the dashboard's time range.", "short",
			q(NodeSeconds(fmt.Sprintf(`{%s}`, rs), "", "$__range")+" / 3600", "node-hours"))).
		WithPanel(single("Cost of this runner", "What this RunnerSet's nodes cost over the dashboard's time range.", "short",
			q(Spent(fmt.Sprintf(`{%s}`, rs), "", "$__range"), "{{currency}}"))).
		WithPanel(series("Team cost per hour by runner", "What the nodes of each RunnerSet of the namespace cost per hour, by the price table.", "short", 12,
			q(fmt.Sprintf(`sum by (runnerset, currency) (%s{namespace="$namespace"})`, RecordCost), "{{runnerset}} {{currency}}"))).
		WithPanel(series("Nodes by capacity and instance type", "This RunnerSet's nodes by capacity type and instance type, as the controller counts them from the nodes' labels.", "short", 12,
			q(fmt.Sprintf(`sum by (capacity_type, instance_type) (%s{%s})`, RecordNodes, rs), "{{capacity_type}} {{instance_type}}")))
}

// ConfigMaps hold the dashboards for Grafana's sidecar, in namespace, with
// the sidecar's label and labels.
func ConfigMaps(namespace string, labels map[string]string) ([]*corev1.ConfigMap, error) {
	var out []*corev1.ConfigMap
	for _, d := range Dashboards() {
		b, err := d.JSON()
		if err != nil {
			return nil, err
		}
		l := maps.Clone(labels)
		if l == nil {
			l = map[string]string{}
		}
		l[GrafanaDashboardLabel] = "1"
		out = append(out, &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: d.UID + "-dashboard", Labels: l},
			Data:       map[string]string{d.UID + ".json": string(b)},
		})
	}
	return out, nil
}
