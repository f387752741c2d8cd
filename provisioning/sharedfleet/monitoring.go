package sharedfleet

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/runnerfleet/runnerfleet/providers/gcp/gcenames"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Monitoring ports. The VMs' node_exporter port is the fleet's
// (fleetspec.SharedFleet.NodeExporterPort, Fleet.NodeExporterPort).
const (
	PrometheusPort       = 9090
	KubeStateMetricsPort = 8080
	AlertmanagerPort     = 9093
)

// KubeStateMetricsName names the fleet's kube-state-metrics: its
// Deployment and Service in the fleet's namespace, and the scrape job.
const KubeStateMetricsName = "kube-state-metrics"

// DefaultDrainLimit is how long a manager may drain when the fleet names
// no job timeout: the shared fleets' shortest.
const DefaultDrainLimit = 3 * time.Hour

// MetricsPortName is the name of the managers' metrics container port,
// which the fleet's Prometheus scrapes.
const MetricsPortName = "metrics"

// LabelManagerPod is the pod label that names a manager, so that its metrics
// and its VMs' (label runnerfleet-manager) can be joined.
const LabelManagerPod = naming.LabelSharedFleetManager

// Fleet is one fleet namespace (production, staging, …) and its manager groups.
type Fleet struct {
	Name   string
	Groups []fleetspec.ManagerGroup
	// VMQuota is the CPU-independent VM count quota of the fleet's project
	// and region, for the VMCountNearQuota alert.
	VMQuota int
	// JobTimeout is the longest a job may run, so the longest a manager
	// may drain with jobs left before RunnerDrainStuck; default
	// DefaultDrainLimit.
	JobTimeout time.Duration
	// Alertmanager is where the fleet's Prometheus sends its alerts
	// (host:port); none without it.
	Alertmanager string
	// NodeExporterPort is where its VMs' node_exporter listens; default
	// fleetspec.DefaultNodeExporterPort.
	NodeExporterPort int
	// QuotaExporter is where fleet quota-exporter serves the project's
	// regional quotas (host:port), scraped as job QuotaJob for
	// GCEQuotaNearLimit; no such job without it.
	QuotaExporter string
	// VMGroups are the fleet's VM manager groups, each scraped as its own
	// job (VMGroupJob) with its alert rules (VMGroupMonitoring).
	VMGroups []fleetspec.VMGroup
	// Prices are what the cost rules price the VMs by (CostRules); nil is
	// the defaults.
	Prices *cost.Table
}

// VMGroupJob is the scrape job of VM group name in its fleet's Prometheus.
func VMGroupJob(name string) string { return "vm-group-" + name }

// VMGroupRotationMargin is added to a VM group's drain timeout for the
// time two colors may serve side by side before its rotation alert
// fires: fleet rotate's --health-timeout (15m) and --settle (2m), and
// more.
const VMGroupRotationMargin = 30 * time.Minute

// VMGroupMonitoring is how the fleet's Prometheus scrapes and alerts on
// VM group g: its runners' and host exporter's metrics as the job
// VMGroupJob, with the managers' alert rules (vmfleet's, as the Windows
// shared runners' of fleet rotate --windows).
func VMGroupMonitoring(g fleetspec.VMGroup) vmfleet.VMGroupMonitoring {
	kind := "Linux"
	if g.IsWindows() {
		kind = "Windows"
	}
	drain := g.DrainTimeoutOr(fleetspec.MinSharedJobTimeout)
	return vmfleet.VMGroupMonitoring{
		Job: VMGroupJob(g.Name), Group: g.Name, Shard: g.Name, Project: g.Project, Zones: g.Zones,
		Exporter: g.Exporter(), ExporterPort: g.ExporterPort(), Kind: kind, Concurrent: g.ConcurrentOrDefault(),
		RotationAlertAfter: shortDuration(drain + VMGroupRotationMargin),
	}
}

// QuotaJob is the scrape job of the fleet's quota exporter.
const QuotaJob = "gce-quota"

// nodeExporterPort is the port the fleet's Prometheus scrapes the VMs on.
func (f Fleet) nodeExporterPort() int {
	return fleetspec.NodeExporter{Port: f.NodeExporterPort}.OrDefault().Port
}

// shortDuration is d without trailing zero units: 3h, 4h30m, 1h30m (a
// Prometheus duration too).
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// drainLimit is how long a manager may drain before RunnerDrainStuck.
func (f Fleet) drainLimit() time.Duration {
	if f.JobTimeout > 0 {
		return f.JobTimeout
	}
	return DefaultDrainLimit
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
// Kubernetes pod discovery in the fleet's namespace, its autoscaled VMs
// (node_exporter) by GCE service discovery, and the fleet's rule files.
func (f Fleet) PrometheusConfig(ruleFiles ...string) prometheus.Config {
	// Managers are found by Kubernetes pod discovery in the fleet's
	// namespace, not by the DNS records of their Service. A draining
	// manager (a pod being deleted, for up to jobTimeout) leaves its
	// Service's endpoints, and so its DNS records, the moment it starts
	// to drain, while it still runs jobs: only pod discovery keeps
	// scraping its gitlab_runner_jobs, which KEDA and the drain alert
	// need. It also names each target by its pod (the label a real
	// kube-state-metrics puts on kube_pod_deletion_timestamp) and sees a
	// new pod at once, where SRV records are polled. The price is a Role
	// that lets the fleet's Prometheus list and watch the pods of its own
	// namespace. (Debian's promtool 2.42, which this project once used,
	// had no Kubernetes discovery; the pinned promtool checks it.)
	podLabel := func(l string) string { return "__meta_kubernetes_pod_label_" + promLabel(l) }
	managers := prometheus.ScrapeConfig{
		JobName: ManagersJob,
		KubernetesSDConfigs: []prometheus.KubernetesSDConfig{{
			Role:       "pod",
			Namespaces: &prometheus.KubernetesNamespaces{Names: []string{f.Name}},
			// Only the managers' pods are listed and watched.
			Selectors: []prometheus.KubernetesSDSelector{{Role: "pod", Label: LabelManagerPod}},
		}},
		RelabelConfigs: []prometheus.RelabelConfig{
			{SourceLabels: []string{"__meta_kubernetes_pod_container_port_name"}, Regex: MetricsPortName, Action: "keep"},
			{SourceLabels: []string{podLabel(LabelManagerPod)}, TargetLabel: "manager"},
			{SourceLabels: []string{"__meta_kubernetes_namespace"}, TargetLabel: "namespace"},
			{SourceLabels: []string{"__meta_kubernetes_pod_name"}, TargetLabel: "pod"},
		},
	}
	vms := prometheus.ScrapeConfig{
		JobName: VMsJob,
		RelabelConfigs: []prometheus.RelabelConfig{
			{SourceLabels: []string{"__meta_gce_instance_status"}, Regex: "RUNNING", Action: "keep"},
			{SourceLabels: []string{"__meta_gce_instance_name"}, TargetLabel: "instance"},
			// manager is the group's, as the managers' job has it:
			// <fleet>-<group> (ManagerName); the VM's own manager is
			// vm_manager.
			{SourceLabels: []string{gceLabel(vmfleet.LabelFleet), gceLabel(vmfleet.LabelManagerGroup)}, Separator: "-", TargetLabel: "manager"},
			{SourceLabels: []string{gceLabel(vmfleet.LabelManager)}, TargetLabel: "vm_manager"},
			// The group alone and the machine type (the last part of
			// GCE's machine type URL), for the cost rules (CostRules).
			{SourceLabels: []string{gceLabel(vmfleet.LabelManagerGroup)}, TargetLabel: monitoring.LabelGroup},
			{SourceLabels: []string{"__meta_gce_machine_type"}, Regex: ".*/machineTypes/([^/]+)", TargetLabel: metrics.LabelInstanceType, Replacement: "$1"},
			// fleet gc's note on a VM whose manager it proved absent
			// (instance metadata runnerfleet-note-orphaned-since).
			{SourceLabels: []string{"__meta_gce_metadata_" + strings.ReplaceAll(gcenames.NoteMetadataKey(vmfleet.NoteOrphanedSince), "-", "_")}, TargetLabel: "orphaned_since"},
		},
	}
	zones := f.zones()
	for _, project := range slices.Sorted(maps.Keys(zones)) {
		for _, z := range zones[project] {
			vms.GCESDConfigs = append(vms.GCESDConfigs, prometheus.GCESDConfig{
				Project: project, Zone: z, Port: f.nodeExporterPort(), RefreshInterval: "60s",
				Filter: fmt.Sprintf(`labels.%s = "%s"`, vmfleet.LabelFleet, f.Name),
			})
		}
	}
	// The fleet's own kube-state-metrics, which watches only the fleet's
	// namespace: its series keep their own namespace and pod labels.
	ksm := prometheus.ScrapeConfig{
		JobName:     KubeStateMetricsName,
		HonorLabels: true,
		StaticConfigs: []prometheus.StaticConfig{{
			Targets: []string{fmt.Sprintf("%s.%s.svc:%d", KubeStateMetricsName, f.Name, KubeStateMetricsPort)},
		}},
	}
	c := prometheus.Config{
		Global:        prometheus.Global{ScrapeInterval: "30s", EvaluationInterval: "30s", ExternalLabels: map[string]string{"fleet": f.Name}},
		RuleFiles:     ruleFiles,
		ScrapeConfigs: []prometheus.ScrapeConfig{managers, vms, ksm},
	}
	for _, g := range f.VMGroups {
		c.ScrapeConfigs = append(c.ScrapeConfigs, VMGroupMonitoring(g).ScrapeConfig())
	}
	if f.QuotaExporter != "" {
		// Quotas change slowly and each scrape is a regions.get per region.
		c.ScrapeConfigs = append(c.ScrapeConfigs, prometheus.ScrapeConfig{
			JobName: QuotaJob, ScrapeInterval: "60s",
			StaticConfigs: []prometheus.StaticConfig{{Targets: []string{f.QuotaExporter}}},
		})
	}
	if f.Alertmanager != "" {
		c.Alerting = &prometheus.Alerting{Alertmanagers: []prometheus.AlertmanagerConfig{{
			APIVersion: "v2", StaticConfigs: []prometheus.StaticConfig{{Targets: []string{f.Alertmanager}}},
		}}}
	}
	return c
}

// gceLabel is the GCE service discovery meta label of a VM label.
func gceLabel(l string) string { return "__meta_gce_label_" + promLabel(l) }

// promLabel is a label name as Prometheus's discovery spells it in meta
// labels: every character outside [a-zA-Z0-9_] becomes '_'.
func promLabel(l string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, l)
}

// RecordingRules pre-aggregate what the central Prometheus federates: small
// series per fleet and manager instead of every VM's, and the cost of the
// VMs (CostRules).
func (f Fleet) RecordingRules() prometheus.RuleFile {
	return prometheus.RuleFile{Groups: []prometheus.RuleGroup{f.CostRules(), {
		Name: "fleet-" + f.Name + "-aggregates",
		Rules: []prometheus.Rule{
			{Record: "fleet_manager:gitlab_runner_jobs:sum", Expr: `sum by (manager) (gitlab_runner_jobs{job="runner-managers"})`},
			{Record: "fleet:gitlab_runner_jobs:sum", Expr: `sum(gitlab_runner_jobs{job="runner-managers"})`},
			{Record: "fleet:gitlab_runner_concurrent:sum", Expr: `sum(gitlab_runner_concurrent{job="runner-managers"})`},
			{Record: "fleet:runner_managers_up:sum", Expr: `sum(up{job="runner-managers"})`},
			{Record: "fleet:autoscaled_vms:count", Expr: `count(up{job="autoscaled-vms"}) or vector(0)`},
			{Record: "fleet_manager:autoscaled_vms:count", Expr: `count by (manager) (up{job="autoscaled-vms"})`},
			// fleet gc's result as the VMs carry it: how many running VMs
			// it found orphaned and has not deleted (yet).
			{Record: "fleet:orphaned_vms:count", Expr: `count(up{job="autoscaled-vms", orphaned_since!=""}) or vector(0)`},
			{Record: "fleet:gitlab_runner_job_queue_duration_seconds:p90", Expr: `histogram_quantile(0.9, sum by (le) (rate(gitlab_runner_job_queue_duration_seconds_bucket{job="runner-managers"}[10m])))`},
		},
	}}}
}

// AlertRules are the fleet's alerts, evaluated on its own Prometheus.
func (f Fleet) AlertRules() prometheus.RuleFile {
	rules := f.fleetAlertRules()
	for _, g := range f.VMGroups {
		rules.Groups = append(rules.Groups, VMGroupMonitoring(g).AlertRules())
	}
	return rules
}

// fleetAlertRules are the alerts on the fleet's Kubernetes managers, its
// autoscaled VMs, quotas and gc.
func (f Fleet) fleetAlertRules() prometheus.RuleFile {
	quota := f.alertQuota()
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
				// A manager pod stopping for longer than jobs may run, with
				// jobs left: its drain is stuck, and Kubernetes kills it (and
				// its jobs) at the end of its grace period. The deletion
				// time is kube-state-metrics' (labels namespace, pod, uid);
				// the jobs are the manager's own, found by the same pod.
				Alert: "RunnerDrainStuck",
				Expr: fmt.Sprintf(`(time() - kube_pod_deletion_timestamp{job=%q, namespace=%q}) > %d`+
					` and on (namespace, pod) (sum by (namespace, pod) (gitlab_runner_jobs{job="runner-managers"}) > 0)`,
					KubeStateMetricsName, f.Name, int(f.drainLimit().Seconds())),
				For: "10m", Labels: map[string]string{"severity": "page"},
				Annotations: map[string]string{"summary": "Manager {{ $labels.pod }} has drained for over " + shortDuration(f.drainLimit()) + " with jobs left"},
			},
			{
				Alert: "VMCountNearQuota", Expr: fmt.Sprintf(`fleet:autoscaled_vms:count > %d`, quota*9/10), For: "10m",
				Labels:      map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": fmt.Sprintf("Fleet %s runs {{ $value }} VMs, over 90%% of its quota of %d", f.Name, quota)},
			},
			{
				// The project's regional quotas as Compute Engine enforces
				// them (fleet quota-exporter, regions.get): any quota, VMs,
				// CPUs of a family, preemptible CPUs, addresses, SSD, over
				// 90% used. A limit of 0 with no usage (a family the project
				// may not use) is 0/0, NaN, and does not fire; usage over a
				// limit lowered to 0 does (+Inf).
				Alert: "GCEQuotaNearLimit",
				Expr:  fmt.Sprintf(`%s / %s > 0.9`, gcenames.QuotaMetricUsage, gcenames.QuotaMetricLimit),
				For:   "15m", Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "Quota {{ $labels.metric }} of project {{ $labels.project }} in {{ $labels.region }} is {{ $value | humanizePercentage }} used: new VMs of fleet " + f.Name + " will be refused at its limit"},
			},
			{
				// The exporter answers but cannot read a region's quotas
				// (its identity lacks compute.regions.get, the region is
				// misspelt, the API fails): GCEQuotaNearLimit is blind.
				Alert: "GCEQuotaUnknown",
				Expr:  gcenames.QuotaMetricUp + ` == 0`,
				For:   "15m", Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "fleet quota-exporter of fleet " + f.Name + " cannot read the quotas of project {{ $labels.project }} in {{ $labels.region }} (regions.get fails; see its log): GCEQuotaNearLimit cannot fire"},
			},
			{
				// VMs fleet gc noted orphaned (their manager proven absent)
				// that are still there its grace and two runs later: gc
				// could not prove them idle (a job runs, or no fresh job
				// report), or could not delete them.
				Alert: "OrphanedVMs",
				Expr:  `count by (manager, vm_manager) (up{job="autoscaled-vms", orphaned_since!=""})`,
				For:   shortDuration(f.orphanedFor()), Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": fmt.Sprintf("{{ $value }} VMs of manager {{ $labels.vm_manager }} were found orphaned by fleet gc over %s ago (its grace %s and two runs) and are still there: gc could not prove them idle or could not delete them; see the Events of CronJob %s/%s",
					shortDuration(f.orphanedFor()), shortDuration(f.GCGrace()), f.Name, GCName(f.Name))},
			},
			{
				// gc has not succeeded for GCMissedRuns runs: it failed
				// (a source or the cloud did not answer, a delete failed,
				// its identity lacks a permission), did not start (image,
				// quota, suspended), or has never succeeded since the
				// CronJob was made. kube-state-metrics exports
				// kube_cronjob_status_last_successful_time only once a run
				// succeeded, so the CronJob's age stands in until then.
				Alert: "GCFailing",
				Expr: fmt.Sprintf(`time() - max by (namespace, cronjob) (kube_cronjob_status_last_successful_time{%[1]s}) > %[2]d`+
					` or (time() - max by (namespace, cronjob) (kube_cronjob_created{%[1]s}) > %[2]d unless on (namespace, cronjob) kube_cronjob_status_last_successful_time{%[1]s})`,
					fmt.Sprintf(`job=%q, namespace=%q, cronjob=%q`, KubeStateMetricsName, f.Name, GCName(f.Name)), int((GCMissedRuns * GCInterval).Seconds())),
				For: "5m", Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": fmt.Sprintf("fleet gc of fleet %s has not succeeded for %s: orphaned VMs are not removed; see the Events and Jobs of CronJob %s/%s",
					f.Name, shortDuration(GCMissedRuns*GCInterval), f.Name, GCName(f.Name))},
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
			Params:        map[string][]string{"match[]": {`{__name__=~"fleet(_manager)?:.+"}`, fmt.Sprintf(`{__name__=~%q}`, monitoring.RecordVMs+"|"+monitoring.RecordVMCost), `ALERTS{alertstate="firing"}`}},
			StaticConfigs: []prometheus.StaticConfig{{Targets: targets}},
		}},
	}
}
