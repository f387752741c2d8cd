package sharedfleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/runnerfleet/runnerfleet/internal/gomod"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

var (
	runnerNamesOnce sync.Once
	runnerNames     map[string]bool
	runnerLabels    map[string]bool
	runnerNamesErr  error
)

// gitlabRunnerMetrics are the metric names gitlab-runner's source (the
// module the config oracle pins) defines: every "gitlab_runner_…" string
// of its non-test Go files.
func gitlabRunnerMetrics(t *testing.T) map[string]bool {
	t.Helper()
	runnerNamesOnce.Do(func() {
		dir, err := gomod.Download(context.Background(), oracle.GitLabRunnerModule, oracle.GitLabRunnerVersion)
		if err != nil {
			runnerNamesErr = err
			return
		}
		name := regexp.MustCompile(`"(gitlab_runner_[a-z_]+)"`)
		// A metric's variable labels: the first string list after its name.
		def := regexp.MustCompile(`(?s)(?:Name:\s*|NewDesc\(\s*)"gitlab_runner_[a-z_]+".{0,600}?\[\]string\{([^}]*)\}`)
		runnerNames, runnerLabels = map[string]bool{}, map[string]bool{}
		runnerNamesErr = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range name.FindAllStringSubmatch(string(b), -1) {
				runnerNames[m[1]] = true
			}
			for _, m := range def.FindAllStringSubmatch(string(b), -1) {
				for _, l := range strings.Split(m[1], ",") {
					if l = strings.Trim(strings.TrimSpace(l), `"`); l != "" {
						runnerLabels[l] = true
					}
				}
			}
			return nil
		})
	})
	if runnerNamesErr != nil {
		t.Fatal(runnerNamesErr)
	}
	return runnerNames
}

// fleetLabels are the labels the fleet's series may carry: gitlab-runner's
// metrics' own, the target labels the fleet's scrape config sets, the ones
// every scrape and histogram has, kube-state-metrics' pod labels and the
// quota exporter's.
func fleetLabels(t *testing.T, f Fleet) map[string]bool {
	t.Helper()
	gitlabRunnerMetrics(t)
	out := map[string]bool{"job": true, "instance": true, "le": true, "namespace": true, "pod": true, "uid": true,
		"project": true, "region": true, "metric": true}
	for l := range runnerLabels {
		out[l] = true
	}
	for _, sc := range f.PrometheusConfig().ScrapeConfigs {
		for _, r := range sc.RelabelConfigs {
			if r.TargetLabel != "" {
				out[r.TargetLabel] = true
			}
		}
	}
	return out
}

// fleetMetrics are the metrics fleet f's Prometheus has, each with the
// scrape job it comes from ("" for a recording rule's or the quota
// exporter's, which carry no job of the fleet's scrape config).
func fleetMetrics(t *testing.T, f Fleet) map[string]string {
	t.Helper()
	out := map[string]string{
		// Every target's own health, of every job.
		"up": "*",
		// kube-state-metrics' pod deletion time, as RunnerDrainStuck
		// reads it (TestFleetAlertsFireWhenTheyShould feeds its label set).
		"kube_pod_deletion_timestamp": KubeStateMetricsName,
		// The quota exporter's gauges.
		QuotaLimit: "", QuotaUsage: "",
	}
	for n := range gitlabRunnerMetrics(t) {
		out[n] = ManagersJob
	}
	for _, g := range f.RecordingRules().Groups {
		for _, r := range g.Rules {
			out[r.Record] = ""
		}
	}
	return out
}

var (
	// metricToken finds the metric names of a query: the exporters'
	// prefixes and the recording rules' level:metric:operation names.
	metricToken = regexp.MustCompile(`\b(?:(?:gitlab_runner|kube|node|runnerfleet)_[a-z_]+|fleet(?:_manager)?:[a-z_:0-9]+|up)\b`)
	// selector is a metric's name and its label matchers.
	selector = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)
	// constant is a line drawn at a number (the quota).
	constant = regexp.MustCompile(`^vector\([0-9]+\)$`)
	// grouping is the label list of an aggregation or a vector match.
	grouping = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	// matcher is a label matcher's label name.
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	jobLabel = regexp.MustCompile(`\bjob\s*=\s*"([^"]*)"`)
)

// checkNames returns why query reads a metric fleet f's Prometheus does not
// have, one from a scrape job that does not produce it, or a label no
// series of the fleet has; nil when every name and label is known and
// every job= matcher names the job the metric comes from.
func checkNames(t *testing.T, f Fleet, query string) error {
	t.Helper()
	known := fleetMetrics(t, f)
	jobs := map[string]bool{}
	for _, sc := range f.PrometheusConfig().ScrapeConfigs {
		jobs[sc.JobName] = true
	}
	names := metricToken.FindAllString(query, -1)
	if len(names) == 0 && !constant.MatchString(query) {
		return fmt.Errorf("%q reads no metric", query)
	}
	for _, n := range names {
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suf)
		}
		if _, ok := known[base]; !ok {
			if _, ok := known[n]; !ok {
				return fmt.Errorf("%q reads %s, which the fleet's Prometheus does not collect", query, n)
			}
		}
	}
	labels := fleetLabels(t, f)
	for _, g := range grouping.FindAllStringSubmatch(query, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				return fmt.Errorf("%q groups by %s, a label no series of the fleet has", query, l)
			}
		}
	}
	for _, m := range selector.FindAllStringSubmatch(query, -1) {
		for _, l := range matcher.FindAllStringSubmatch(m[2], -1) {
			if !labels[l[1]] {
				return fmt.Errorf("%q selects on %s, a label no series of the fleet has", query, l[1])
			}
		}
		j := jobLabel.FindStringSubmatch(m[2])
		if j == nil {
			continue
		}
		if !jobs[j[1]] {
			return fmt.Errorf("%q selects job %q, which the fleet's Prometheus does not scrape", query, j[1])
		}
		base := strings.TrimSuffix(m[1], "_bucket")
		if from, ok := known[base]; ok && from != "*" && from != j[1] {
			return fmt.Errorf("%q reads %s from job %q; it comes from %q", query, m[1], j[1], from)
		}
	}
	return nil
}

// checkParse has promtool parse queries as the expressions of recording
// rules, with Grafana's variables put in.
func checkParse(t *testing.T, queries []string) error {
	t.Helper()
	vars := strings.NewReplacer("$__rate_interval", "5m")
	rf := prometheus.RuleFile{Groups: []prometheus.RuleGroup{{Name: "dashboard"}}}
	for i, q := range queries {
		rf.Groups[0].Rules = append(rf.Groups[0].Rules, prometheus.Rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: vars.Replace(q)})
	}
	dir := t.TempDir()
	if err := (prometheus.Files{"queries.yml": render(t, rf)}).Write(dir); err != nil {
		t.Fatal(err)
	}
	_, err := prometheus.Promtool(dir, "check", "rules", "queries.yml")
	return err
}

// Every panel's query reads only metrics the fleet's Prometheus collects,
// from the job that collects them, and parses as PromQL.
func TestFleetDashboardQueriesParseAndReadCollectedMetrics(t *testing.T) {
	prod, _ := fleets()
	qs, err := prod.DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 15 {
		t.Fatalf("%d queries", len(qs))
	}
	for _, q := range qs {
		if err := checkNames(t, prod, q); err != nil {
			t.Error(err)
		}
	}
	if err := checkParse(t, qs); err != nil {
		t.Error(err)
	}
	// The negative controls: a misspelt metric, a metric from the wrong
	// job, a job the fleet does not scrape, and a query that does not parse.
	for _, bad := range []string{
		`sum by (state) (gitlab_runner_job{job="runner-managers"})`,
		`sum(gitlab_runner_jobs{job="autoscaled-vms"})`,
		`sum(up{job="runner-manager"})`,
		`sum(kube_pod_deleted_timestamp{job="kube-state-metrics"})`,
		`sum by (stat) (gitlab_runner_jobs{job="runner-managers"})`,
		`sum(gitlab_runner_jobs{job="runner-managers", managr="x"})`,
	} {
		if checkNames(t, prod, bad) == nil {
			t.Errorf("the name check accepts %q", bad)
		}
	}
	if checkParse(t, []string{`sum by (state (gitlab_runner_jobs)`}) == nil {
		t.Error("promtool accepted a query with an unclosed parenthesis")
	}
}

// The dashboard covers what the fleet's alerts watch and carries the
// fleet's own quota, in a ConfigMap Grafana's sidecar loads.
func TestFleetDashboardShipsAsSidecarConfigMap(t *testing.T) {
	prod, staging := fleets()
	cm, err := prod.DashboardConfigMap("monitoring")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Labels[monitoring.GrafanaDashboardLabel] != "1" || cm.Namespace != "monitoring" || cm.Name != "runnerfleet-shared-production-dashboard" {
		t.Errorf("ConfigMap %s/%s labels %v", cm.Namespace, cm.Name, cm.Labels)
	}
	var m struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data[prod.DashboardUID()+".json"]), &m); err != nil {
		t.Fatal(err)
	}
	if m.UID != prod.DashboardUID() {
		t.Errorf("uid %q", m.UID)
	}
	var rows []string
	for _, p := range m.Panels {
		if p.Type == "row" {
			rows = append(rows, p.Title)
		} else if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q reads datasource %q", p.Title, p.Datasource.UID)
		}
	}
	if got := strings.Join(rows, ","); got != "Managers,Jobs,Queue time,VMs,Quota" {
		t.Errorf("rows %s", got)
	}
	pq, _ := prod.DashboardQueries()
	sq, _ := staging.DashboardQueries()
	all := strings.Join(pq, "\n")
	// production's quota is its own 500; staging's, without one, its
	// groups' maxVMs (10), as VMCountNearQuota has them.
	if !strings.Contains(all, "vector(500)") || !strings.Contains(strings.Join(sq, "\n"), "vector(10)") {
		t.Errorf("the quota panels do not carry the fleets' quotas:\n%s", all)
	}
	for _, want := range []string{"kube_pod_deletion_timestamp", RunnerMachineStates, monitoring.RunnerJobQueueDuration + "_bucket", monitoring.RunnerFailedJobsTotal, QuotaUsage} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel reads %s", want)
		}
	}
}

// A fleet's plan carries its dashboard, in its namespace, with the quota
// its VMCountNearQuota alert uses (the stack's vmQuota, or maxVMs times
// maxManagers); the central plan carries none.
func TestFleetPlanCarriesItsDashboard(t *testing.T) {
	g := production()
	g.Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 3, TargetUtilization: 0.7}
	s := fleetspec.SharedFleet{
		Name: "production", Namespace: "ci-production", GitLabURL: g.GitLabURL,
		ManagerImage: "registry.example.com/ci/runner:v1",
		Groups:       []fleetspec.ManagerGroup{g},
	}
	p, err := PlanFleet(s, "sharedFleets[0]", fleetspec.Platform{Project: "ci-prod", Cluster: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	cm := p.Prometheus.Dashboard
	if cm == nil {
		t.Fatal("the fleet's plan has no dashboard")
	}
	quota := fmt.Sprintf("vector(%d)", g.MaxVMs*3)
	if cm.Namespace != "ci-production" || cm.Labels[monitoring.GrafanaDashboardLabel] != "1" ||
		!strings.Contains(cm.Data["runnerfleet-shared-ci-production.json"], quota) ||
		!strings.Contains(p.Prometheus.Files[AlertRulesFile], fmt.Sprintf("fleet:autoscaled_vms:count > %d", g.MaxVMs*3*9/10)) {
		t.Errorf("dashboard %s/%s labels %v, want the quota %s the alert has", cm.Namespace, cm.Name, cm.Labels, quota)
	}
	central, err := PlanCentral([]*FleetPlan{p})
	if err != nil {
		t.Fatal(err)
	}
	if central.Dashboard != nil {
		t.Error("the central Prometheus's plan has a dashboard")
	}
}
