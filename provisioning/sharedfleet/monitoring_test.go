package sharedfleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
)

func fleets() (Fleet, Fleet) {
	staging := production()
	staging.Fleet, staging.MaxVMs, staging.IdleCount = "staging", 10, 2
	staging.Periods[0].IdleCount = 1
	return Fleet{Name: "production", Groups: []fleetspec.ManagerGroup{production()}, VMQuota: 500, QuotaExporter: "localhost:9465"},
		Fleet{Name: "staging", Groups: []fleetspec.ManagerGroup{staging}}
}

func render(t *testing.T, v any) []byte {
	t.Helper()
	b, err := prometheus.Render(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEveryPrometheusFilePassesPromtool(t *testing.T) {
	prod, staging := fleets()
	dir := t.TempDir()
	files := prometheus.Files{
		"central.yml": render(t, CentralConfig(prod, staging)),
	}
	for _, f := range []Fleet{prod, staging} {
		files[f.Name+".yml"] = render(t, f.PrometheusConfig(f.Name+".recording.yml", f.Name+".alerts.yml"))
		files[f.Name+".recording.yml"] = render(t, f.RecordingRules())
		files[f.Name+".alerts.yml"] = render(t, f.AlertRules())
	}
	if err := files.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []string{"production.yml", "staging.yml", "central.yml"} {
		out, err := prometheus.Promtool(dir, "check", "config", cfg)
		if err != nil || !strings.Contains(out, "SUCCESS") {
			t.Errorf("%s: %v\n%s", cfg, err, out)
		}
	}
	out, err := prometheus.Promtool(dir, "check", "rules", "production.recording.yml", "production.alerts.yml")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(files["production.yml"]), `labels.runnerfleet-fleet = "production"`) ||
		!strings.Contains(string(files["central.yml"]), "prometheus.staging.svc:9090") {
		t.Errorf("discovery or federation targets missing:\n%s\n%s", files["production.yml"], files["central.yml"])
	}
}

func TestFleetAlertsFireWhenTheyShould(t *testing.T) {
	prod, _ := fleets()
	// The times below are production's: a grace of 1h (its longest
	// IdleTime, 30m, plus 30m), so OrphanedVMs waits 1h30m.
	if prod.GCGrace() != time.Hour || GCInterval != 15*time.Minute {
		t.Fatalf("production's gc grace %s, interval %s: the test's times assume 1h and 15m", prod.GCGrace(), GCInterval)
	}
	dir := t.TempDir()
	files := prometheus.Files{
		"recording.yml": render(t, prod.RecordingRules()),
		"alerts.yml":    render(t, prod.AlertRules()),
		"alerts.test.yml": []byte(`rule_files: [recording.yml, alerts.yml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  # A manager that stopped answering.
  - series: 'up{job="runner-managers", instance="10-4-0-7.production-shared-gce.production.svc.cluster.local:9252", manager="production-shared-gce-1"}'
    values: '1 1 0 0 0 0 0 0 0 0'
  # A VM fleet gc noted orphaned and could not delete, and one it did not note.
  - series: 'up{job="autoscaled-vms", instance="runner-a", manager="production-shared-gce", vm_manager="production-shared-gce-9", orphaned_since="2026-12-01T10:00:00Z"}'
    values: '1x180'
  - series: 'up{job="autoscaled-vms", instance="runner-b", manager="production-shared-gce", vm_manager="production-shared-gce-1"}'
    values: '1x180'
  # kube_pod_deletion_timestamp as kube-state-metrics exports it (labels
  # namespace, pod, uid; read from its internal/store/pod.go) and the
  # fleet's Prometheus scrapes it (job kube-state-metrics, honor_labels).
  # A manager pod deleted 3h10m before the test starts, still stopping
  # with two jobs: stuck.
  - series: 'kube_pod_deletion_timestamp{job="kube-state-metrics", instance="kube-state-metrics.production.svc:8080", namespace="production", pod="production-linux-0-7d9f8b6c4-x2x7q", uid="0f0c3a51-2c7e-4d7b-9e0f-6f1f3b2a1c01"}'
    values: '-11400x60'
  - series: 'gitlab_runner_jobs{job="runner-managers", instance="10.20.1.7:9252", namespace="production", pod="production-linux-0-7d9f8b6c4-x2x7q", manager="production-linux", runner="x1y2z3", system_id="s_0123456789ab", executor_stage="build", stage="script", state="running"}'
    values: '2x60'
  # Negative controls: a manager deleted as long ago whose jobs are done,
  # and a pod that runs no jobs (the fleet's Prometheus) being deleted.
  - series: 'kube_pod_deletion_timestamp{job="kube-state-metrics", instance="kube-state-metrics.production.svc:8080", namespace="production", pod="production-linux-1-7d9f8b6c4-p8k2m", uid="1a2b3c4d-0000-4000-8000-000000000002"}'
    values: '-11400x60'
  - series: 'gitlab_runner_jobs{job="runner-managers", instance="10.20.1.8:9252", namespace="production", pod="production-linux-1-7d9f8b6c4-p8k2m", manager="production-linux", runner="x1y2z3", system_id="s_ba9876543210", executor_stage="build", stage="script", state="running"}'
    values: '0x60'
  - series: 'kube_pod_deletion_timestamp{job="kube-state-metrics", instance="kube-state-metrics.production.svc:8080", namespace="production", pod="prometheus-5c6d7e8f9-abcde", uid="1a2b3c4d-0000-4000-8000-000000000003"}'
    values: '-11400x60'
  - series: 'kube_cronjob_created{job="kube-state-metrics", instance="kube-state-metrics.production.svc:8080", namespace="production", cronjob="production-gc"}'
    values: '-86400x120'
  - series: 'kube_cronjob_status_last_successful_time{job="kube-state-metrics", instance="kube-state-metrics.production.svc:8080", namespace="production", cronjob="production-gc"}'
    values: '-600x120'
  - series: 'kube_cronjob_created{job="kube-state-metrics", instance="kube-state-metrics.production.svc:8080", namespace="production", cronjob="production-backup"}'
    values: '-86400x120'
  - series: 'kube_cronjob_status_last_successful_time{job="kube-state-metrics", instance="kube-state-metrics.production.svc:8080", namespace="production", cronjob="production-backup"}'
    values: '-86400x120'
  alert_rule_test:
  - eval_time: 3m
    alertname: RunnerManagerDown
    exp_alerts: []
  - eval_time: 8m
    alertname: RunnerManagerDown
    exp_alerts:
    - exp_labels: {severity: page, job: runner-managers, instance: "10-4-0-7.production-shared-gce.production.svc.cluster.local:9252", manager: production-shared-gce-1}
      exp_annotations: {summary: "Runner manager production-shared-gce-1 (10-4-0-7.production-shared-gce.production.svc.cluster.local:9252) of fleet production is down"}
  - eval_time: 80m
    alertname: OrphanedVMs
    exp_alerts: []
  - eval_time: 100m
    alertname: OrphanedVMs
    exp_alerts:
    - exp_labels: {severity: warning, manager: production-shared-gce, vm_manager: production-shared-gce-9}
      exp_annotations: {summary: "1 VMs of manager production-shared-gce-9 were found orphaned by fleet gc over 1h30m ago (its grace 1h and two runs) and are still there: gc could not prove them idle or could not delete them; see the Events of CronJob production/production-gc"}
  - eval_time: 15m
    alertname: RunnerDrainStuck
    exp_alerts:
    - exp_labels: {severity: page, job: kube-state-metrics, instance: "kube-state-metrics.production.svc:8080", namespace: production, pod: production-linux-0-7d9f8b6c4-x2x7q, uid: 0f0c3a51-2c7e-4d7b-9e0f-6f1f3b2a1c01}
      exp_annotations: {summary: "Manager production-linux-0-7d9f8b6c4-x2x7q has drained for over 3h with jobs left"}
  - eval_time: 15m
    alertname: VMCountNearQuota
    exp_alerts: []
  # A gc that last succeeded 10m before the test starts and then fails
  # every run, as kube-state-metrics exports its CronJob (labels
  # namespace, cronjob; internal/store/cronjob.go), created a day ago.
  # Another CronJob of the namespace that stopped succeeding is not gc.
  - eval_time: 40m
    alertname: GCFailing
    exp_alerts: []
  - eval_time: 60m
    alertname: GCFailing
    exp_alerts:
    - exp_labels: {severity: warning, namespace: production, cronjob: production-gc}
      exp_annotations: {summary: "fleet gc of fleet production has not succeeded for 1h: orphaned VMs are not removed; see the Events and Jobs of CronJob production/production-gc"}
  - eval_time: 60m
    alertname: OrphanedVMs
    exp_alerts: []
- interval: 1m
  # A gc CronJob made 30m before the test starts that has never
  # succeeded: no kube_cronjob_status_last_successful_time at all.
  input_series:
  - series: 'kube_cronjob_created{job="kube-state-metrics", instance="kube-state-metrics.production.svc:8080", namespace="production", cronjob="production-gc"}'
    values: '-1800x60'
  alert_rule_test:
  - eval_time: 25m
    alertname: GCFailing
    exp_alerts: []
  - eval_time: 40m
    alertname: GCFailing
    exp_alerts:
    - exp_labels: {severity: warning, namespace: production, cronjob: production-gc}
      exp_annotations: {summary: "fleet gc of fleet production has not succeeded for 1h: orphaned VMs are not removed; see the Events and Jobs of CronJob production/production-gc"}
- interval: 1m
  # Negative control: a gc that succeeds every 15 minutes, made a day ago.
  input_series:
  - series: 'kube_cronjob_created{job="kube-state-metrics", instance="kube-state-metrics.production.svc:8080", namespace="production", cronjob="production-gc"}'
    values: '-86400x120'
  - series: 'kube_cronjob_status_last_successful_time{job="kube-state-metrics", instance="kube-state-metrics.production.svc:8080", namespace="production", cronjob="production-gc"}'
    values: '-60x15 840x15 1740x15 2640x15 3540x15 4440x15 5340x15 6240x15'
  alert_rule_test:
  - eval_time: 110m
    alertname: GCFailing
    exp_alerts: []
- interval: 1m
  # The exporter's quotas: N2D_CPUS 92% used from the start, INSTANCES
  # 95% used for 10m only, PREEMPTIBLE_CPUS 50%, a family the project may
  # not use (limit 0, usage 0), and a region whose regions.get fails.
  input_series:
  - series: 'runnerfleet_gce_quota_limit{job="gce-quota", project="ci-prod", region="us-central1", metric="N2D_CPUS"}'
    values: '2400x30'
  - series: 'runnerfleet_gce_quota_usage{job="gce-quota", project="ci-prod", region="us-central1", metric="N2D_CPUS"}'
    values: '2208x30'
  - series: 'runnerfleet_gce_quota_limit{job="gce-quota", project="ci-prod", region="us-central1", metric="INSTANCES"}'
    values: '1000x30'
  - series: 'runnerfleet_gce_quota_usage{job="gce-quota", project="ci-prod", region="us-central1", metric="INSTANCES"}'
    values: '950x10 500x20'
  - series: 'runnerfleet_gce_quota_limit{job="gce-quota", project="ci-prod", region="us-central1", metric="PREEMPTIBLE_CPUS"}'
    values: '1000x30'
  - series: 'runnerfleet_gce_quota_usage{job="gce-quota", project="ci-prod", region="us-central1", metric="PREEMPTIBLE_CPUS"}'
    values: '500x30'
  - series: 'runnerfleet_gce_quota_limit{job="gce-quota", project="ci-prod", region="us-central1", metric="A2_CPUS"}'
    values: '0x30'
  - series: 'runnerfleet_gce_quota_usage{job="gce-quota", project="ci-prod", region="us-central1", metric="A2_CPUS"}'
    values: '0x30'
  - series: 'runnerfleet_gce_quota_up{job="gce-quota", project="ci-prod", region="us-central1"}'
    values: '1x30'
  - series: 'runnerfleet_gce_quota_up{job="gce-quota", project="ci-prod", region="europe-west4"}'
    values: '0x30'
  alert_rule_test:
  - eval_time: 10m
    alertname: GCEQuotaNearLimit
    exp_alerts: []
  - eval_time: 20m
    alertname: GCEQuotaNearLimit
    exp_alerts:
    - exp_labels: {severity: warning, job: gce-quota, project: ci-prod, region: us-central1, metric: N2D_CPUS}
      exp_annotations: {summary: "Quota N2D_CPUS of project ci-prod in us-central1 is 92% used: new VMs of fleet production will be refused at its limit"}
  - eval_time: 10m
    alertname: GCEQuotaUnknown
    exp_alerts: []
  - eval_time: 20m
    alertname: GCEQuotaUnknown
    exp_alerts:
    - exp_labels: {severity: warning, job: gce-quota, project: ci-prod, region: europe-west4}
      exp_annotations: {summary: "fleet quota-exporter of fleet production cannot read the quotas of project ci-prod in europe-west4 (regions.get fails; see its log): GCEQuotaNearLimit cannot fire"}
`),
	}
	if err := files.Write(dir); err != nil {
		t.Fatal(err)
	}
	if out, err := prometheus.Promtool(dir, "test", "rules", "alerts.test.yml"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// The VMs' node_exporter port is one definition, the fleet's: the port its
// Prometheus scrapes the VMs on, the port the exporter listens on (the
// VMs' startup script), and the port the fleet's firewall opens to its
// Prometheus agree, for the default and for a port of the stack's.
func TestTheVMsAreScrapedWhereTheirExporterListensAndTheFirewallOpens(t *testing.T) {
	for _, port := range []int{0, 9300} {
		g := production()
		g.Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 1, TargetUtilization: 0.7}
		s := fleetspec.SharedFleet{
			Name: "production", Namespace: "production", GitLabURL: g.GitLabURL,
			ManagerImage: "registry.example.com/ci/runner:v1",
			Monitoring:   fleetspec.SharedFleetMonitoring{NodeExporterPort: port},
			Groups:       []fleetspec.ManagerGroup{g},
		}
		want := port
		if want == 0 {
			want = fleetspec.DefaultNodeExporterPort
		}
		p, err := PlanFleet(s, "sharedFleets[0]", fleetspec.Platform{Project: "ci-prod", Cluster: "ci"})
		if err != nil {
			t.Fatal(err)
		}
		sd := p.Monitoring.PrometheusConfig().ScrapeConfigs[1].GCESDConfigs
		if len(sd) == 0 {
			t.Fatal("no GCE discovery")
		}
		for _, c := range sd {
			if c.Port != want {
				t.Errorf("port %d: Prometheus scrapes the VMs on %d", port, c.Port)
			}
		}
		cfg, err := p.Groups[0].Managers[0].ConfigTOML(placeholderBucket, "glrt-x")
		if err != nil {
			t.Fatal(err)
		}
		if listen := fmt.Sprintf("--web.listen-address :%d", want); !strings.Contains(string(cfg), listen) {
			t.Errorf("port %d: the VMs' node_exporter does not listen with %q:\n%s", port, listen, cfg)
		}
		var opened []int
		for _, in := range p.Spec.VMIngress() {
			if in.Consumer == fleetspec.ConsumerPrometheus {
				opened = append(opened, in.Ports...)
			}
		}
		if len(opened) != 1 || opened[0] != want {
			t.Errorf("port %d: the firewall opens %v to Prometheus", port, opened)
		}
	}
}

// The fleet's Prometheus pod runs fleet quota-exporter (the fleet image)
// for the project of its groups and the regions of their zones, each once,
// and scrapes it where it listens: GCEQuotaNearLimit has its series.
func TestTheFleetsPrometheusRunsAndScrapesTheQuotaExporter(t *testing.T) {
	g := production()
	g.Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 1, TargetUtilization: 0.7}
	g2 := g
	g2.Name, g2.Region, g2.Zone = "second", "europe-west4", "europe-west4-b"
	g2.Subnetwork = "projects/ci-prod/regions/europe-west4/subnetworks/ci-production-vms"
	g3 := g
	g3.Name, g3.Zone = "third", "us-east1-d"
	s := fleetspec.SharedFleet{
		Name: "production", Namespace: "production", GitLabURL: g.GitLabURL,
		ManagerImage: "registry.example.com/ci/runner:v1",
		Groups:       []fleetspec.ManagerGroup{g, g2, g3},
	}
	p, err := PlanFleet(s, "sharedFleets[0]", fleetspec.Platform{Project: "ci-prod", Cluster: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	var quota *corev1.Container
	for i, c := range p.Prometheus.Deployment.Spec.Template.Spec.Containers {
		if c.Name == QuotaExporterName {
			quota = &p.Prometheus.Deployment.Spec.Template.Spec.Containers[i]
		}
	}
	if quota == nil {
		t.Fatalf("no %s container in the fleet's Prometheus pod", QuotaExporterName)
	}
	want := []string{"quota-exporter", "--project", "ci-prod", "--listen", ":9465", "--region", "us-east1", "--region", "europe-west4"}
	if !slices.Equal(quota.Args, want) {
		t.Errorf("quota-exporter args %q, want %q", quota.Args, want)
	}
	if quota.Image != fleetspec.DefaultFleetImages.GC {
		t.Errorf("quota-exporter image %q, want the fleet image %q", quota.Image, fleetspec.DefaultFleetImages.GC)
	}
	var job *prometheus.ScrapeConfig
	for i, c := range p.Monitoring.PrometheusConfig().ScrapeConfigs {
		if c.JobName == QuotaJob {
			job = &p.Monitoring.PrometheusConfig().ScrapeConfigs[i]
		}
	}
	if job == nil || len(job.StaticConfigs) != 1 || !slices.Equal(job.StaticConfigs[0].Targets, []string{fmt.Sprintf("localhost:%d", quota.Ports[0].ContainerPort)}) {
		t.Errorf("the fleet's Prometheus does not scrape the exporter on its port %v: %+v", quota.Ports, job)
	}
	if !strings.Contains(p.Prometheus.Files[PrometheusConfigFile], "job_name: "+QuotaJob) {
		t.Errorf("the rendered prometheus.yml has no %s job:\n%s", QuotaJob, p.Prometheus.Files[PrometheusConfigFile])
	}
}
