package monitoring_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/internal/promtool"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

// grafanaVars are what Grafana puts in for the dashboards' variables before
// a query reaches Prometheus.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__range", "6h", "$namespace", "team-a", "$runnerset", "build", "$capacity", "rf-team-a.build")

// checkQueries has promtool parse every query, as the expressions of
// recording rules (promtool check rules parses them with Prometheus' own
// PromQL parser), and returns its complaint.
func checkQueries(t *testing.T, queries []string) error {
	t.Helper()
	type rec struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rec
	for i, q := range queries {
		rules = append(rules, rec{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: grafanaVars.Replace(q)})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "queries.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = promtool.Run(dir, nil, "check", "rules", "queries.yaml")
	return err
}

var metricName = regexp.MustCompile(`\b(?:runnerfleet|gitlab_runner|karpenter)_[a-z_]+\b`)

// recordedName is a series runnerfleet's recording rules record.
var recordedName = regexp.MustCompile(`\brunnerfleet:[a-z_]+:[a-z_0-9]+\b`)

// recorded reports whether the rule file records name.
func recorded(name string) bool {
	for _, g := range monitoring.AllRuleGroups(cost.Defaults()) {
		for _, r := range g.Rules {
			if r.Record == name {
				return true
			}
		}
	}
	return false
}

// Every panel's query parses as PromQL and reads only metrics the
// controller, gitlab-runner or Karpenter export.
func TestEveryDashboardQueryParsesAndUsesExportedMetrics(t *testing.T) {
	all, err := monitoring.Queries()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(monitoring.Dashboards()) {
		t.Fatalf("queries of %d dashboards, want %d", len(all), len(monitoring.Dashboards()))
	}
	var qs []string
	for uid, list := range all {
		if len(list) < 8 {
			t.Errorf("dashboard %s has %d queries", uid, len(list))
		}
		for _, q := range list {
			qs = append(qs, q)
			names := metricName.FindAllString(q, -1)
			records := recordedName.FindAllString(q, -1)
			if len(names) == 0 && len(records) == 0 && !strings.Contains(q, "up{") {
				t.Errorf("%s: %q reads no metric", uid, q)
			}
			for _, n := range records {
				if !recorded(n) {
					t.Errorf("%s: %q reads %s, which no rule records", uid, q, n)
				}
			}
			for _, n := range names {
				if !exported(t, n) {
					t.Errorf("%s: %q reads %s, which no exporter produces", uid, q, n)
				}
			}
		}
	}
	if err := checkQueries(t, qs); err != nil {
		t.Error(err)
	}
	// The negative controls: promtool refuses a query that does not parse,
	// and the name check refuses a metric no exporter has.
	if err := checkQueries(t, []string{`sum by (runnerset (gitlab_runner_jobs)`}); err == nil {
		t.Error("promtool accepted a query with an unclosed parenthesis")
	}
	if exported(t, "gitlab_runner_jobs_running") {
		t.Error("gitlab_runner_jobs_running counts as exported")
	}
	if recorded("runnerfleet:runnerset_nodes:sum") {
		t.Error("runnerfleet:runnerset_nodes:sum counts as recorded")
	}
}

// The dashboards are Grafana dashboard models: a uid, panels with a
// Prometheus datasource variable, in the ConfigMaps Grafana's sidecar loads.
func TestDashboardsShipAsSidecarConfigMaps(t *testing.T) {
	cms, err := monitoring.ConfigMaps("monitoring", map[string]string{"release": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms) != len(monitoring.Dashboards()) {
		t.Fatalf("%d ConfigMaps for %d dashboards", len(cms), len(monitoring.Dashboards()))
	}
	for i, cm := range cms {
		d := monitoring.Dashboards()[i]
		if cm.Labels[monitoring.GrafanaDashboardLabel] != "1" || cm.Labels["release"] != "x" {
			t.Errorf("%s labels %v", cm.Name, cm.Labels)
		}
		var m struct {
			UID    string `json:"uid"`
			Panels []struct {
				Type       string `json:"type"`
				Datasource struct {
					UID string `json:"uid"`
				} `json:"datasource"`
			} `json:"panels"`
		}
		if err := json.Unmarshal([]byte(cm.Data[d.UID+".json"]), &m); err != nil {
			t.Fatal(err)
		}
		if m.UID != d.UID || len(m.Panels) < 8 {
			t.Errorf("%s: uid %q, %d panels", cm.Name, m.UID, len(m.Panels))
		}
		for _, p := range m.Panels {
			if p.Type != "row" && p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: a %s panel reads datasource %q", cm.Name, p.Type, p.Datasource.UID)
			}
		}
	}
}
