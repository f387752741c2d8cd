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

// WindowsRotationAlertAfter is how long managers of two colors may serve
// side by side before WindowsRunnerManagersRotationUnfinished fires: longer
// than a rotation with fleet rotate's defaults takes (--health-timeout 15m,
// --settle 2m, --drain-timeout = --job-timeout 3h + 10m).
const WindowsRotationAlertAfter = "4h"

// WindowsAlertRules are the alerting rules of the Windows managers.
//
// A rotation that failed or stopped half-way leaves managers of both colors
// running (a failure before the drain deletes the new VMs that never became
// healthy; one that passed a check once is kept, as are old VMs whose jobs
// outlive --drain-timeout): WindowsRunnerManagersRotationUnfinished sees the
// two colors among the scraped (RUNNING) VMs, whatever their runner answers.
func WindowsAlertRules() prometheus.RuleFile {
	job := WindowsPrometheusJob
	runner := fmt.Sprintf(`up{job="%s", exporter="gitlab-runner"}`, job)
	return prometheus.RuleFile{Groups: []prometheus.RuleGroup{{Name: WindowsPrefix, Rules: []prometheus.Rule{
		{
			Alert: "WindowsRunnerManagerDown", Expr: runner + " == 0", For: "5m",
			Labels: map[string]string{"severity": "page"},
			Annotations: map[string]string{
				"summary":     "Windows runner manager {{ $labels.instance }} does not answer",
				"description": "gitlab-runner on {{ $labels.instance }} has not been scraped for 5 minutes: its jobs are at risk.",
			},
		},
		{
			Alert: "WindowsRunnerManagerHostDown", Expr: fmt.Sprintf(`up{job="%s", exporter="windows_exporter"} == 0`, job), For: "5m",
			Labels:      map[string]string{"severity": "warning"},
			Annotations: map[string]string{"summary": "windows_exporter on {{ $labels.instance }} does not answer"},
		},
		{
			Alert: "WindowsRunnerManagerSaturated", Expr: fmt.Sprintf(`sum by (instance) (gitlab_runner_jobs{job="%s"}) >= %d`, job, fleetspec.WindowsConcurrent), For: "15m",
			Labels: map[string]string{"severity": "warning"},
			Annotations: map[string]string{
				"summary": fmt.Sprintf("{{ $labels.instance }} has run at its concurrent limit (%d) for 15 minutes: jobs queue", fleetspec.WindowsConcurrent),
			},
		},
		{
			Alert:  "WindowsRunnerManagersRotationUnfinished",
			Expr:   fmt.Sprintf(`count by (job) (count by (job, color) (%s)) > 1`, runner),
			For:    WindowsRotationAlertAfter,
			Labels: map[string]string{"severity": "warning"},
			Annotations: map[string]string{
				"summary": "Windows runner managers of two colors have run side by side for " + WindowsRotationAlertAfter + ": a rotation failed or stopped half-way",
				"description": "Run the same fleet rotate again: it continues where the last one stopped, read from the VMs' labels " +
					"(its notification named the step it stopped at). See docs/tasks/rotate-vm-managers.md.",
			},
		},
	}}}}
}
