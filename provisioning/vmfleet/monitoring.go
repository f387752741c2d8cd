package vmfleet

import (
	"fmt"
	"strings"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
)

// Ports the Windows managers serve metrics on.
const (
	RunnerMetricsPort = gitlabrunner.MetricsPort // gitlab-runner's listen_address
)

// WindowsScrapeConfig scrapes the Windows shared runner managers of project
// in zones as the job shared-runners-windows: gitlab-runner's metrics and
// windows_exporter's, found through GCE service discovery by their group
// label. Each target is labelled with its manager (instance), its color and
// the exporter it came from.
func WindowsScrapeConfig(project string, zones []string) prometheus.ScrapeConfig {
	sc := prometheus.ScrapeConfig{JobName: WindowsPrometheusJob, ScrapeInterval: "30s"}
	filter := fmt.Sprintf(`labels.%s = "%s"`, LabelGroup, WindowsGroup)
	for _, z := range zones {
		for _, port := range []int{RunnerMetricsPort, WindowsExporterPort} {
			sc.GCESDConfigs = append(sc.GCESDConfigs, prometheus.GCESDConfig{Project: project, Zone: z, Filter: filter, Port: port, RefreshInterval: "60s"})
		}
	}
	sc.RelabelConfigs = []prometheus.RelabelConfig{
		// Terminated and stopping VMs serve nothing.
		{SourceLabels: []string{"__meta_gce_instance_status"}, Regex: "RUNNING", Action: "keep"},
		{SourceLabels: []string{"__meta_gce_instance_name"}, TargetLabel: "instance"},
		{SourceLabels: []string{"__meta_gce_label_" + strings.ReplaceAll(LabelColor, "-", "_")}, TargetLabel: "color"},
		{SourceLabels: []string{"__meta_gce_zone"}, Regex: ".*/zones/(.+)", TargetLabel: "zone", Replacement: "$1"},
		{SourceLabels: []string{"__address__"}, Regex: fmt.Sprintf(".*:%d", RunnerMetricsPort), TargetLabel: "exporter", Replacement: "gitlab-runner"},
		{SourceLabels: []string{"__address__"}, Regex: fmt.Sprintf(".*:%d", WindowsExporterPort), TargetLabel: "exporter", Replacement: "windows_exporter"},
		{TargetLabel: "shard", Replacement: WindowsPrefix},
	}
	return sc
}

// WindowsAlertRules are the alerting rules of the Windows managers, in
// Prometheus's rule file format.
func WindowsAlertRules() string {
	job := WindowsPrometheusJob
	return fmt.Sprintf(`groups:
- name: %[1]s
  rules:
  - alert: WindowsRunnerManagerDown
    expr: up{job="%[2]s", exporter="gitlab-runner"} == 0
    for: 5m
    labels: {severity: page}
    annotations:
      summary: "Windows runner manager {{ $labels.instance }} does not answer"
      description: "gitlab-runner on {{ $labels.instance }} has not been scraped for 5 minutes: its jobs are at risk."
  - alert: WindowsRunnerManagerHostDown
    expr: up{job="%[2]s", exporter="windows_exporter"} == 0
    for: 5m
    labels: {severity: warning}
    annotations:
      summary: "windows_exporter on {{ $labels.instance }} does not answer"
  - alert: WindowsRunnerManagerSaturated
    expr: sum by (instance) (gitlab_runner_jobs{job="%[2]s"}) >= %[3]d
    for: 15m
    labels: {severity: warning}
    annotations:
      summary: "{{ $labels.instance }} has run at its concurrent limit (%[3]d) for 15 minutes: jobs queue"
`, WindowsPrefix, job, fleetspec.WindowsConcurrent)
}
