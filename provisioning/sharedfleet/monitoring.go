package sharedfleet

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// Monitoring ports.
const (
	NodeExporterPort = 9100
	PrometheusPort   = 9090
)

// LabelManagerPod is the pod label that names a manager, so that its metrics
// and its VMs' (label runnerfleet-manager) can be joined.
const LabelManagerPod = "runnerfleet.dev/manager"

// Fleet is one fleet namespace (production, staging, …) and its manager groups.
type Fleet struct {
	Name   string
	Groups []ManagerGroup
	// VMQuota is the CPU-independent VM count quota of the fleet's project
	// and region, for the VMCountNearQuota alert.
	VMQuota int
}

// zones are the zones the fleet's groups run VMs in, per project.
func (f Fleet) zones() map[string][]string {
	out := map[string][]string{}
	for _, g := range f.Groups {
		if !slices.Contains(out[g.Project], g.Zone) {
			out[g.Project] = append(out[g.Project], g.Zone)
		}
	}
	return out
}

// PrometheusConfig is the fleet's own Prometheus: its managers found by
// Kubernetes service discovery in the fleet's namespace, its autoscaled VMs
// (node_exporter) by GCE service discovery, and the fleet's rule files.
func (f Fleet) PrometheusConfig(ruleFiles ...string) prometheus.Config {
	// Managers are found through the SRV records of each manager's headless
	// Service (port "metrics"): Kubernetes-provided discovery that needs no
	// RBAC for Prometheus and works with every Prometheus build (Debian's
	// has no kubernetes_sd_configs).
	var names []string
	for _, g := range f.Groups {
		names = append(names, fmt.Sprintf("_metrics._tcp.%s.%s.svc.cluster.local", g.ManagerName(), f.Name))
	}
	managers := prometheus.ScrapeConfig{
		JobName:      "runner-managers",
		DNSSDConfigs: []prometheus.DNSSDConfig{{Names: names, Type: "SRV", RefreshInterval: "30s"}},
		RelabelConfigs: []prometheus.RelabelConfig{
			{SourceLabels: []string{"__meta_dns_name"}, Regex: `_metrics\._tcp\.([^.]+)\..*`, TargetLabel: "manager", Replacement: "$1"},
		},
	}
	vms := prometheus.ScrapeConfig{
		JobName: "autoscaled-vms",
		RelabelConfigs: []prometheus.RelabelConfig{
			{SourceLabels: []string{"__meta_gce_instance_status"}, Regex: "RUNNING", Action: "keep"},
			{SourceLabels: []string{"__meta_gce_instance_name"}, TargetLabel: "instance"},
			// manager is the group's, as the managers' job has it:
			// <fleet>-<group> (ManagerName); the VM's own manager is
			// vm_manager.
			{SourceLabels: []string{gceLabel(vmfleet.LabelFleet), gceLabel(vmfleet.LabelManagerGroup)}, Separator: "-", TargetLabel: "manager"},
			{SourceLabels: []string{gceLabel(vmfleet.LabelManager)}, TargetLabel: "vm_manager"},
			// fleet gc's note on a VM whose manager it proved absent
			// (instance metadata runnerfleet-note-orphaned-since).
			{SourceLabels: []string{"__meta_gce_metadata_" + strings.ReplaceAll(gcp.NoteMetadataKey(vmfleet.NoteOrphanedSince), "-", "_")}, TargetLabel: "orphaned_since"},
		},
	}
	zones := f.zones()
	for _, project := range slices.Sorted(maps.Keys(zones)) {
		for _, z := range zones[project] {
			vms.GCESDConfigs = append(vms.GCESDConfigs, prometheus.GCESDConfig{
				Project: project, Zone: z, Port: NodeExporterPort, RefreshInterval: "60s",
				Filter: fmt.Sprintf(`labels.%s = "%s"`, vmfleet.LabelFleet, f.Name),
			})
		}
	}
	return prometheus.Config{
		Global:        prometheus.Global{ScrapeInterval: "30s", EvaluationInterval: "30s", ExternalLabels: map[string]string{"fleet": f.Name}},
		RuleFiles:     ruleFiles,
		ScrapeConfigs: []prometheus.ScrapeConfig{managers, vms},
	}
}

// gceLabel is the GCE service discovery meta label of a VM label.
func gceLabel(l string) string { return "__meta_gce_label_" + strings.ReplaceAll(l, "-", "_") }

// RecordingRules pre-aggregate what the central Prometheus federates: small
// series per fleet and manager instead of every VM's.
func (f Fleet) RecordingRules() prometheus.RuleFile {
	return prometheus.RuleFile{Groups: []prometheus.RuleGroup{{
		Name: "fleet-" + f.Name + "-aggregates",
		Rules: []prometheus.Rule{
			{Record: "fleet_manager:gitlab_runner_jobs:sum", Expr: `sum by (manager) (gitlab_runner_jobs{job="runner-managers"})`},
			{Record: "fleet:gitlab_runner_jobs:sum", Expr: `sum(gitlab_runner_jobs{job="runner-managers"})`},
			{Record: "fleet:gitlab_runner_concurrent:sum", Expr: `sum(gitlab_runner_concurrent{job="runner-managers"})`},
			{Record: "fleet:runner_managers_up:sum", Expr: `sum(up{job="runner-managers"})`},
			{Record: "fleet:autoscaled_vms:count", Expr: `count(up{job="autoscaled-vms"}) or vector(0)`},
			{Record: "fleet_manager:autoscaled_vms:count", Expr: `count by (manager) (up{job="autoscaled-vms"})`},
			{Record: "fleet:gitlab_runner_job_queue_duration_seconds:p90", Expr: `histogram_quantile(0.9, sum by (le) (rate(gitlab_runner_job_queue_duration_seconds_bucket{job="runner-managers"}[10m])))`},
		},
	}}}
}

// AlertRules are the fleet's alerts, evaluated on its own Prometheus.
func (f Fleet) AlertRules() prometheus.RuleFile {
	quota := f.VMQuota
	if quota == 0 {
		for _, g := range f.Groups {
			quota += g.MaxVMs
		}
	}
	return prometheus.RuleFile{Groups: []prometheus.RuleGroup{{
		Name: "fleet-" + f.Name + "-alerts",
		Rules: []prometheus.Rule{
			{
				Alert: "RunnerManagerDown", Expr: `up{job="runner-managers"} == 0`, For: "5m",
				Labels:      map[string]string{"severity": "page"},
				Annotations: map[string]string{"summary": "Runner manager {{ $labels.manager }} ({{ $labels.instance }}) of fleet " + f.Name + " is down"},
			},
			{
				Alert: "JobsQueuedTooLong", Expr: `fleet:gitlab_runner_job_queue_duration_seconds:p90 > 300`, For: "15m",
				Labels:      map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "90% of fleet " + f.Name + "'s jobs wait up to {{ $value | humanizeDuration }} for a runner"},
			},
			{
				// A manager pod stopping for longer than jobs may run (3h on
				// the shared fleet): its drain is stuck, and Kubernetes kills
				// it at the end of its grace period. From kube-state-metrics.
				Alert: "RunnerDrainStuck",
				Expr:  fmt.Sprintf(`(time() - kube_pod_deletion_timestamp{namespace=%q}) > 3 * 3600`, f.Name),
				For:   "10m", Labels: map[string]string{"severity": "page"},
				Annotations: map[string]string{"summary": "Manager {{ $labels.pod }} has drained for over 3h with jobs left"},
			},
			{
				Alert: "VMCountNearQuota", Expr: fmt.Sprintf(`fleet:autoscaled_vms:count > %d`, quota*9/10), For: "10m",
				Labels:      map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": fmt.Sprintf("Fleet %s runs {{ $value }} VMs, over 90%% of its quota of %d", f.Name, quota)},
			},
			{
				// VMs fleet gc noted orphaned (their manager proven absent)
				// that are still there two hours on: past its grace, gc
				// could not prove them idle (a job runs, or no fresh job
				// report), or could not delete them.
				Alert: "OrphanedVMs",
				Expr:  `count by (manager, vm_manager) (up{job="autoscaled-vms", orphaned_since!=""})`,
				For:   "2h", Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "{{ $value }} VMs of manager {{ $labels.vm_manager }} were found orphaned by fleet gc 2h ago and are still there: it cannot prove them idle; see the Events of the fleet's gc CronJob"},
			},
		},
	}}}
}

// CentralConfig is the central Prometheus in the monitoring namespace: it
// federates the pre-aggregated series of every fleet's Prometheus.
func CentralConfig(fleets ...Fleet) prometheus.Config {
	var targets []string
	for _, f := range fleets {
		targets = append(targets, fmt.Sprintf("prometheus.%s.svc:%d", f.Name, PrometheusPort))
	}
	return prometheus.Config{
		Global: prometheus.Global{ScrapeInterval: "60s", EvaluationInterval: "60s"},
		ScrapeConfigs: []prometheus.ScrapeConfig{{
			JobName:       "federate-fleets",
			MetricsPath:   "/federate",
			HonorLabels:   true,
			Params:        map[string][]string{"match[]": {`{__name__=~"fleet(_manager)?:.+"}`, `ALERTS{alertstate="firing"}`}},
			StaticConfigs: []prometheus.StaticConfig{{Targets: targets}},
		}},
	}
}
