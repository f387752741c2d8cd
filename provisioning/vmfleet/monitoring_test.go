package vmfleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
)

// promtool is Prometheus's own, from the tool cache (provisioning/prometheus).
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	out, err := prometheus.Promtool("", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWindowsScrapeConfigAndRulesPassPromtool(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "windows.rules.yml")
	if err := os.WriteFile(rules, []byte(WindowsAlertRules()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := prometheus.Render(prometheus.Config{
		Global:        prometheus.Global{ScrapeInterval: "30s"},
		RuleFiles:     []string{rules},
		ScrapeConfigs: []prometheus.ScrapeConfig{WindowsScrapeConfig("ci-project", []string{"us-east1-b", "us-east1-c"})},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	out := promtool(t, "check", "config", path)
	if !strings.Contains(out, "SUCCESS") || !strings.Contains(out, "3 rules found") {
		t.Errorf("promtool check config:\n%s", out)
	}
	for _, want := range []string{"job_name: " + WindowsPrometheusJob, "port: 9182", "port: 9252", `labels.runnerfleet-group = "windows-shared-runners-manager"`} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("prometheus.yml lacks %q:\n%s", want, cfg)
		}
	}
}

func TestWindowsAlertsFireWhenTheyShould(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "windows.rules.yml"), []byte(WindowsAlertRules()), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := `rule_files: [windows.rules.yml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'up{job="shared-runners-windows", exporter="gitlab-runner", instance="wsrm-blue-1"}'
    values: '1 1 0 0 0 0 0 0 0'
  - series: 'up{job="shared-runners-windows", exporter="gitlab-runner", instance="wsrm-blue-2"}'
    values: '1 1 1 1 1 1 1 1 1'
  - series: 'gitlab_runner_jobs{job="shared-runners-windows", instance="wsrm-blue-2", state="running"}'
    values: '400x20'
  alert_rule_test:
  - eval_time: 4m
    alertname: WindowsRunnerManagerDown
    exp_alerts: []
  - eval_time: 8m
    alertname: WindowsRunnerManagerDown
    exp_alerts:
    - exp_labels: {severity: page, job: shared-runners-windows, exporter: gitlab-runner, instance: wsrm-blue-1}
      exp_annotations:
        summary: "Windows runner manager wsrm-blue-1 does not answer"
        description: "gitlab-runner on wsrm-blue-1 has not been scraped for 5 minutes: its jobs are at risk."
  - eval_time: 16m
    alertname: WindowsRunnerManagerSaturated
    exp_alerts:
    - exp_labels: {severity: warning, instance: wsrm-blue-2}
      exp_annotations:
        summary: "wsrm-blue-2 has run at its concurrent limit (400) for 15 minutes: jobs queue"
`
	path := filepath.Join(dir, "windows.test.yml")
	if err := os.WriteFile(path, []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "test", "rules", path)
}
