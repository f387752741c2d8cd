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

// windowsRules writes WindowsAlertRules into dir/windows.rules.yml.
func windowsRules(t *testing.T, dir string) string {
	t.Helper()
	b, err := prometheus.Render(WindowsAlertRules())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "windows.rules.yml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestWindowsScrapeConfigAndRulesPassPromtool(t *testing.T) {
	dir := t.TempDir()
	rules := windowsRules(t, dir)
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
	if !strings.Contains(out, "SUCCESS") || !strings.Contains(out, "4 rules found") {
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
	windowsRules(t, dir)
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
# A rotation that finishes: blue's last VM goes after 3h30m (a long drain);
# two VMs of one color are no alert.
- interval: 1m
  input_series:
  - series: 'up{job="shared-runners-windows", exporter="gitlab-runner", instance="wsrm-blue-1", color="blue"}'
    values: '1x210 stale'
  - series: 'up{job="shared-runners-windows", exporter="gitlab-runner", instance="wsrm-green-2", color="green"}'
    values: '1x400'
  - series: 'up{job="shared-runners-windows", exporter="windows_exporter", instance="wsrm-blue-1", color="blue"}'
    values: '1x400'
  - series: 'up{job="shared-runners-windows", exporter="gitlab-runner", instance="wsrm-green-1", color="green"}'
    values: '1x400'
  alert_rule_test:
  - eval_time: 6h
    alertname: WindowsRunnerManagersRotationUnfinished
    exp_alerts: []
# One that stopped half-way: both colors still serve, one runner even down
# (it drained and exited, its VM was not deleted).
- interval: 1m
  input_series:
  - series: 'up{job="shared-runners-windows", exporter="gitlab-runner", instance="wsrm-blue-1", color="blue"}'
    values: '1x50 0x300'
  - series: 'up{job="shared-runners-windows", exporter="gitlab-runner", instance="wsrm-green-1", color="green"}'
    values: '1x350'
  - series: 'up{job="shared-runners-windows", exporter="gitlab-runner", instance="wsrm-green-2", color="green"}'
    values: '1x350'
  alert_rule_test:
  - eval_time: 3h50m
    alertname: WindowsRunnerManagersRotationUnfinished
    exp_alerts: []
  - eval_time: 4h10m
    alertname: WindowsRunnerManagersRotationUnfinished
    exp_alerts:
    - exp_labels: {severity: warning, job: shared-runners-windows}
      exp_annotations:
        summary: "Windows runner managers of two colors have run side by side for 4h: a rotation failed or stopped half-way"
        description: "Run the same fleet rotate again: it continues where the last one stopped, read from the VMs' labels (its notification named the step it stopped at). See docs/tasks/rotate-vm-managers.md."
`
	path := filepath.Join(dir, "windows.test.yml")
	if err := os.WriteFile(path, []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "test", "rules", path)
}
