package monitoring_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/internal/promtool"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// The PodMonitor selects every RunnerSet's manager pods, by the labels the
// controller puts on them, and scrapes the port their container declares;
// the controller's own pods it does not select.
func TestThePodMonitorSelectsTheManagerPodsAndNothingElse(t *testing.T) {
	pm := monitoring.ManagersPodMonitor("monitoring", nil, "30s")
	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
	pod := resources.Deployment(rs, "gitlab/gitlab-runner:v18.6.0", "h", "team-a-build-j6").Spec.Template
	if !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("selector %v does not select the manager pods %v", sel, pod.Labels)
	}
	if !pm.Spec.NamespaceSelector.Any {
		t.Error("the PodMonitor looks in its own namespace only; RunnerSets live in the teams'")
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	var ports []string
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			ports = append(ports, p.Name)
		}
	}
	if ep.Port == nil || !slices.Contains(ports, *ep.Port) {
		t.Errorf("scrapes port %v, the manager container declares %v", ep.Port, ports)
	}
	job := ""
	for _, r := range ep.RelabelConfigs {
		if r.TargetLabel == "job" && r.Replacement != nil {
			job = *r.Replacement
		}
	}
	if job != monitoring.ManagersName {
		t.Errorf("job label %q, the dashboards select %q", job, monitoring.ManagersName)
	}
	// The negative control: the controller's own pods are not managers
	// (they have their own ServiceMonitor).
	if own := install.Deployment(install.Defaults()).Spec.Template; sel.Matches(labels.Set(own.Labels)) {
		t.Errorf("the selector also selects the controller's pods %v", own.Labels)
	}
}

// The PodMonitor is judged by the Prometheus operator's own CRD on a
// real API server: an unknown field or a wrong type is refused.
func TestThePodMonitorIsValidByTheOperatorsCRD(t *testing.T) {
	ctx := context.Background()
	pm := monitoring.ManagersPodMonitor("default", map[string]string{"release": "kube-prometheus-stack"}, "30s")
	if err := env.Client.Create(ctx, pm, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("the operator's CRD refuses the PodMonitor: %v", err)
	}
	// The negative control: the same CRD refuses a bad interval.
	bad := pm.DeepCopy()
	bad.Spec.PodMetricsEndpoints[0].Interval = "every minute"
	if err := env.Client.Create(ctx, bad, client.DryRunAll); err == nil {
		t.Error("the CRD accepted interval \"every minute\"")
	}
}

// promtool checks the plain scrape config inside a prometheus.yml.
func TestThePlainScrapeConfigPassesPromtool(t *testing.T) {
	sc, err := monitoring.ScrapeConfigYAML("30s")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := append([]byte("global:\n  scrape_interval: 30s\nscrape_configs:\n"), indent(sc)...)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool.Run(dir, nil, "check", "config", "prometheus.yml"); err != nil {
		t.Errorf("%v\n%s\n%s", err, out, conf)
	}
	// The negative control: promtool refuses an unknown relabel action.
	broken := append([]byte("scrape_configs:\n"), indent([]byte(
		"- job_name: x\n  kubernetes_sd_configs: [{role: pod}]\n  relabel_configs: [{action: keepall}]\n"))...)
	if err := os.WriteFile(filepath.Join(dir, "broken.yml"), broken, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool.Run(dir, nil, "check", "config", "broken.yml"); err == nil {
		t.Errorf("promtool accepted relabel action keepall:\n%s", out)
	}
}

func indent(b []byte) []byte {
	out := []byte("  ")
	for i, c := range b {
		out = append(out, c)
		if c == '\n' && i < len(b)-1 {
			out = append(out, ' ', ' ')
		}
	}
	return out
}
