package sharedfleet

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

const (
	tokRole        = "kubernetes:rbac.authorization.k8s.io/v1:Role"
	tokRoleBinding = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
	tokPVC         = "kubernetes:core/v1:PersistentVolumeClaim"
	tokCRD         = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
)

// amtool checks an alertmanager.yml as Alertmanager loads it.
func amtool(t *testing.T, file string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, shared.AlertmanagerConfigFile), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	return prometheus.Amtool(dir, "check-config", shared.AlertmanagerConfigFile)
}

// The stack declares one Alertmanager whose configuration (as declared)
// passes amtool, whose receiver secret comes from the stack config as a
// Pulumi secret, and every fleet's Prometheus sends to it.
func TestAlertsReachTheStacksReceiver(t *testing.T) {
	m := deployedStack(t)
	cm := m.Get(t, tokConfigMap, "shared-monitoring-alertmanager-config")
	file := object(t, cm, "data")[shared.AlertmanagerConfigFile].StringValue()
	if out, err := amtool(t, file); err != nil {
		t.Fatalf("the declared alertmanager.yml fails amtool: %v\n%s", err, out)
	}
	if !strings.Contains(file, "name: ci-platform") || strings.Contains(file, "T0k3nNotReal") {
		t.Errorf("alertmanager.yml lacks the stack's receiver or holds its secret:\n%s", file)
	}
	sec := m.Get(t, tokSecret, "shared-monitoring-alertmanager-secret")
	// TestNoTokenIsInClearInAnyResource checks it is a Pulumi secret
	// (tokens holds it).
	if got := str(t, sec, "stringData."+shared.AlertmanagerSecretKey); got != tokens["runnerfleet:alertWebhookURL"] {
		t.Errorf("the receiver's webhook URL is %q, not the stack's config secret", got)
	}
	for _, fleet := range []string{"production", "staging"} {
		cfg := object(t, m.Get(t, tokConfigMap, "shared-"+fleet+"-prometheus-config"), "data")[shared.PrometheusConfigFile].StringValue()
		if !strings.Contains(cfg, shared.AlertmanagerAddress()) {
			t.Errorf("%s's Prometheus does not send alerts to %s:\n%s", fleet, shared.AlertmanagerAddress(), cfg)
		}
	}
}

// Without a receiver, Decode refuses a stack with shared fleets.
func TestSharedFleetsWithoutAReceiverAreRefused(t *testing.T) {
	raw := strings.Replace(stackJSON, `"alerting": {"receiver": {"name": "ci-platform", "webhookURLConfigKey": "alertWebhookURL"}},`, "", 1)
	if raw == stackJSON {
		t.Fatal("the case changes nothing")
	}
	_, err := stackconfig.Decode([]byte(raw), "gke-shared")
	if err == nil || !strings.Contains(err.Error(), "runnerfleet:fleet.alerting: Required value") || !strings.Contains(err.Error(), "webhookURLConfigKey") {
		t.Errorf("Decode without alerting = %v, want the key and the fix", err)
	}
	m, _, err := deploy(t, stackJSON, map[string]string{
		"runnerfleet:sharedProductionLinux":    tokens["runnerfleet:sharedProductionLinux"],
		"runnerfleet:sharedProductionFleeting": tokens["runnerfleet:sharedProductionFleeting"],
		"runnerfleet:sharedStagingLinux":       tokens["runnerfleet:sharedStagingLinux"],
	})
	if err == nil || !strings.Contains(err.Error(), "config key runnerfleet:alertWebhookURL is not set") {
		t.Errorf("a missing receiver secret: %v, want the key named", err)
	}
	if n := len(m.ByToken(tokDeployment)); n > 0 {
		t.Errorf("%d Deployments declared before the refusal", n)
	}
}

// Each fleet's Prometheus keeps its data on a PersistentVolumeClaim (and so
// is replaced, not surged, on a rollout), discovers pods with a Role that
// may only read its own namespace's pods, and scrapes a kube-state-metrics
// that watches only the fleet's namespace.
func TestFleetMonitoringPersistsAndSeesOnlyItsNamespace(t *testing.T) {
	m := deployedStack(t)
	for _, prefix := range []string{"shared-production", "shared-staging", "shared-monitoring"} {
		d := m.Get(t, tokDeployment, prefix+"-prometheus")
		spec := podSpecOf(t, d)
		var claim string
		for _, v := range spec.Volumes {
			if v.Name == "data" && v.PersistentVolumeClaim != nil {
				claim = v.PersistentVolumeClaim.ClaimName
			}
		}
		if claim != shared.PrometheusDataClaim {
			t.Errorf("%s's Prometheus keeps its data in %+v, not on its PersistentVolumeClaim", prefix, spec.Volumes)
		}
		pvc := m.Get(t, tokPVC, prefix+"-prometheus-data")
		if got := str(t, pvc, "spec.resources.requests.storage"); got == "" {
			t.Errorf("%s: PVC without a size", prefix)
		}
		if got := str(t, d, "spec.strategy.type"); got != "Recreate" {
			t.Errorf("%s: strategy %s; a surge would wait forever for the volume the old pod holds", prefix, got)
		}
	}
	for _, fleet := range []string{"production", "staging"} {
		for _, name := range []string{"shared-" + fleet + "-prometheus-role", "shared-" + fleet + "-kube-state-metrics-role"} {
			role := m.Get(t, tokRole, name)
			if ns := str(t, role, "metadata.namespace"); ns != fleet {
				t.Errorf("%s is in namespace %s", name, ns)
			}
			rules := role.Input("rules").ArrayValue()
			want := 1
			if strings.Contains(name, "kube-state-metrics") {
				// and lists and watches CronJobs, for GCFailing.
				want = 2
				if len(rules) == 2 && (!slices.Equal(strs(rules[1].ObjectValue()["apiGroups"]), []string{"batch"}) || !slices.Equal(strs(rules[1].ObjectValue()["resources"]), []string{"cronjobs"}) ||
					!slices.Equal(strs(rules[1].ObjectValue()["verbs"]), []string{"list", "watch"})) {
					t.Errorf("%s grants more than watching CronJobs: %v", name, rules[1])
				}
			}
			if len(rules) != want || !slices.Equal(strs(rules[0].ObjectValue()["resources"]), []string{"pods"}) ||
				!slices.Equal(strs(rules[0].ObjectValue()["verbs"]), []string{"get", "list", "watch"}) {
				t.Errorf("%s grants more than reading pods: %v", name, rules)
			}
		}
		ksm := podSpecOf(t, m.Get(t, tokDeployment, "shared-"+fleet+"-kube-state-metrics-deployment"))
		args := strings.Join(ksm.Containers[0].Args, " ")
		if !strings.Contains(args, "--namespaces="+fleet+" ") || !strings.Contains(args, "--resources=pods,cronjobs ") ||
			!strings.Contains(args, "kube_pod_deletion_timestamp") || !strings.Contains(args, "kube_cronjob_status_last_successful_time") {
			t.Errorf("%s's kube-state-metrics: %s", fleet, args)
		}
		cfg := object(t, m.Get(t, tokConfigMap, "shared-"+fleet+"-prometheus-config"), "data")[shared.PrometheusConfigFile].StringValue()
		if !strings.Contains(cfg, "job_name: "+shared.KubeStateMetricsName) || !strings.Contains(cfg, "kubernetes_sd_configs") {
			t.Errorf("%s's Prometheus does not scrape kube-state-metrics or discover its managers' pods:\n%s", fleet, cfg)
		}
	}
}

// strs are the strings of an array property.
func strs(v resource.PropertyValue) []string {
	var out []string
	if v.IsArray() {
		for _, e := range v.ArrayValue() {
			if e.IsString() {
				out = append(out, e.StringValue())
			}
		}
	}
	return out
}

// KEDA is a prerequisite that pulumi up checks first: the program reads
// its ScaledObject CRD, and every fleet's namespace (which every fleet
// object waits for) and the monitoring namespace wait for that read, so a
// cluster without KEDA stops there, the read's name saying what to do.
func TestKEDAIsReadBeforeAnyFleetObject(t *testing.T) {
	m := deployedStack(t)
	var read *infratest.Resource
	for _, r := range m.ByToken(tokCRD) {
		if r.Read && r.ID == kube.KEDAScaledObjectCRD {
			read = &r
		}
	}
	if read == nil {
		t.Fatalf("the program does not read %s", kube.KEDAScaledObjectCRD)
	}
	if !strings.Contains(read.Name, "install-KEDA-"+kube.KEDATestedVersion) {
		t.Errorf("the read's name %q does not say what to install", read.Name)
	}
	for _, name := range []string{"shared-production-ns", "shared-staging-ns", "shared-monitoring-ns"} {
		ns := m.Get(t, tokNamespace, name)
		if !slices.Contains(ns.DependsOn, read.URN) {
			t.Errorf("%s does not wait for the KEDA read: depends on %v", name, ns.DependsOn)
		}
	}
}
