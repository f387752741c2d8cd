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

// VMGroupMonitoring is how one group of manager VMs is scraped and alerted
// on: gitlab-runner's metrics and the host exporter's (windows_exporter or
// node_exporter) of every RUNNING VM labelled LabelGroup=Group in Zones of
// Project, found through GCE service discovery, as the scrape job Job.
// The Windows shared runner managers of fleet rotate --windows are one
// (WindowsScrapeConfig, WindowsAlertRules); a stack's declared VM groups
// are others (provisioning/sharedfleet scrapes them from the fleet's
// Prometheus).
type VMGroupMonitoring struct {
	Job   string
	Group string
	// Shard is the shard label of every target, and names the rule group.
	Shard   string
	Project string
	Zones   []string
	// Exporter names the host exporter (the exporter label of its
	// targets); ExporterPort is where it listens.
	Exporter     string
	ExporterPort int
	// Kind names the managers in alert names and summaries: Windows
	// (WindowsRunnerManagerDown, …) or Linux.
	Kind string
	// Concurrent is each manager's concurrent jobs, for the saturation
	// alert.
	Concurrent int
	// RotationAlertAfter is how long managers of two colors may serve
	// side by side before the rotation alert fires: longer than a
	// rotation takes.
	RotationAlertAfter string
}

// windows is the monitoring of fleet rotate --windows's group.
func windows(project string, zones []string) VMGroupMonitoring {
	return VMGroupMonitoring{
		Job: WindowsPrometheusJob, Group: WindowsGroup, Shard: WindowsPrefix, Project: project, Zones: zones,
		Exporter: "windows_exporter", ExporterPort: WindowsExporterPort, Kind: "Windows",
		Concurrent: fleetspec.WindowsConcurrent, RotationAlertAfter: WindowsRotationAlertAfter,
	}
}

// WindowsScrapeConfig scrapes the Windows shared runner managers of project
// in zones as the job shared-runners-windows: gitlab-runner's metrics and
// windows_exporter's, found through GCE service discovery by their group
// label. Each target is labelled with its manager (instance), its color and
// the exporter it came from.
func WindowsScrapeConfig(project string, zones []string) prometheus.ScrapeConfig {
	return windows(project, zones).ScrapeConfig()
}

// ScrapeConfig scrapes the group: each target labelled with its manager
// (instance), its color, its zone, the exporter it came from and the
// shard.
func (m VMGroupMonitoring) ScrapeConfig() prometheus.ScrapeConfig {
	sc := prometheus.ScrapeConfig{JobName: m.Job, ScrapeInterval: "30s"}
	filter := fmt.Sprintf(`labels.%s = "%s"`, LabelGroup, m.Group)
	for _, z := range m.Zones {
		for _, port := range []int{RunnerMetricsPort, m.ExporterPort} {
			sc.GCESDConfigs = append(sc.GCESDConfigs, prometheus.GCESDConfig{Project: m.Project, Zone: z, Filter: filter, Port: port, RefreshInterval: "60s"})
		}
	}
	sc.RelabelConfigs = []prometheus.RelabelConfig{
		// Terminated and stopping VMs serve nothing.
		{SourceLabels: []string{"__meta_gce_instance_status"}, Regex: "RUNNING", Action: "keep"},
		{SourceLabels: []string{"__meta_gce_instance_name"}, TargetLabel: "instance"},
		{SourceLabels: []string{"__meta_gce_label_" + strings.ReplaceAll(LabelColor, "-", "_")}, TargetLabel: "color"},
		{SourceLabels: []string{"__meta_gce_zone"}, Regex: ".*/zones/(.+)", TargetLabel: "zone", Replacement: "$1"},
		{SourceLabels: []string{"__address__"}, Regex: fmt.Sprintf(".*:%d", RunnerMetricsPort), TargetLabel: "exporter", Replacement: "gitlab-runner"},
		{SourceLabels: []string{"__address__"}, Regex: fmt.Sprintf(".*:%d", m.ExporterPort), TargetLabel: "exporter", Replacement: m.Exporter},
		{TargetLabel: "shard", Replacement: m.Shard},
	}
	return sc
}

// WindowsRotationAlertAfter is how long managers of two colors may serve
// side by side before WindowsRunnerManagersRotationUnfinished fires: longer
// than a rotation with fleet rotate's defaults takes (--health-timeout 15m,
// --settle 2m, --drain-timeout = --job-timeout 3h + 10m).
const WindowsRotationAlertAfter = "4h"

// WindowsAlertRules are the alerting rules of the Windows managers.
func WindowsAlertRules() prometheus.RuleFile {
	return prometheus.RuleFile{Groups: []prometheus.RuleGroup{windows("", nil).AlertRules()}}
}

// AlertRules are the alerting rules of the group's managers, one rule
// group named after its shard.
//
// A rotation that failed or stopped half-way leaves managers of both colors
// running (a failure before the drain deletes the new VMs that never became
// healthy; one that passed a check once is kept, as are old VMs whose jobs
// outlive --drain-timeout): <Kind>RunnerManagersRotationUnfinished sees the
// two colors among the scraped (RUNNING) VMs, whatever their runner answers.
func (m VMGroupMonitoring) AlertRules() prometheus.RuleGroup {
	job := m.Job
	runner := fmt.Sprintf(`up{job="%s", exporter="gitlab-runner"}`, job)
	return prometheus.RuleGroup{Name: m.Shard, Rules: []prometheus.Rule{
		{
			Alert: m.Kind + "RunnerManagerDown", Expr: runner + " == 0", For: "5m",
			Labels: map[string]string{"severity": "page"},
			Annotations: map[string]string{
				"summary":     m.Kind + " runner manager {{ $labels.instance }} does not answer",
				"description": "gitlab-runner on {{ $labels.instance }} has not been scraped for 5 minutes: its jobs are at risk.",
			},
		},
		{
			Alert: m.Kind + "RunnerManagerHostDown", Expr: fmt.Sprintf(`up{job="%s", exporter="%s"} == 0`, job, m.Exporter), For: "5m",
			Labels:      map[string]string{"severity": "warning"},
			Annotations: map[string]string{"summary": m.Exporter + " on {{ $labels.instance }} does not answer"},
		},
		{
			Alert: m.Kind + "RunnerManagerSaturated", Expr: fmt.Sprintf(`sum by (instance) (gitlab_runner_jobs{job="%s"}) >= %d`, job, m.Concurrent), For: "15m",
			Labels: map[string]string{"severity": "warning"},
			Annotations: map[string]string{
				"summary": fmt.Sprintf("{{ $labels.instance }} has run at its concurrent limit (%d) for 15 minutes: jobs queue", m.Concurrent),
			},
		},
		{
			Alert:  m.Kind + "RunnerManagersRotationUnfinished",
			Expr:   fmt.Sprintf(`count by (job) (count by (job, color) (%s)) > 1`, runner),
			For:    m.RotationAlertAfter,
			Labels: map[string]string{"severity": "warning"},
			Annotations: map[string]string{
				"summary": m.Kind + " runner managers of two colors have run side by side for " + m.RotationAlertAfter + ": a rotation failed or stopped half-way",
				"description": "Run the same fleet rotate again: it continues where the last one stopped, read from the VMs' labels " +
					"(its notification named the step it stopped at). See docs/tasks/rotate-vm-managers.md.",
			},
		},
	}}
}
