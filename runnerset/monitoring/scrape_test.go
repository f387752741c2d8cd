package monitoring_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/internal/promtool"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// The ServiceMonitor selects every RunnerSet's headless manager Service, by
// the labels the controller gives it, and a Service of anything else not.
func TestTheServiceMonitorSelectsTheManagersServicesAndNothingElse(t *testing.T) {
	sm := monitoring.ManagersServiceMonitor("monitoring", nil, "30s")
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
	svc := resources.ManagerService(rs)
	if !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("selector %v does not select the managers' Service %v", sel, svc.Labels)
	}
	if !sm.Spec.NamespaceSelector.Any {
		t.Error("the ServiceMonitor looks in its own namespace only; RunnerSets live in the teams'")
	}
	if sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
		t.Errorf("scrapes port %q, the Service serves %q", sm.Spec.Endpoints[0].Port, svc.Spec.Ports[0].Name)
	}
	// The negative control: the controller's own metrics Service is not a
	// manager's (it has its own ServiceMonitor).
	if own := install.Service(install.Defaults()); sel.Matches(labels.Set(own.Labels)) {
		t.Errorf("the selector also selects the controller's Service %v", own.Labels)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Error("the managers' Service is not headless: Prometheus would scrape one random manager")
	}
}

// The ServiceMonitor is judged by the Prometheus operator's own CRD on a
// real API server: an unknown field or a wrong type is refused.
func TestTheServiceMonitorIsValidByTheOperatorsCRD(t *testing.T) {
	ctx := context.Background()
	sm := monitoring.ManagersServiceMonitor("default", map[string]string{"release": "kube-prometheus-stack"}, "30s")
	if err := env.Client.Create(ctx, sm, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("the operator's CRD refuses the ServiceMonitor: %v", err)
	}
	// The negative control: the same CRD refuses a bad interval.
	bad := sm.DeepCopy()
	bad.Spec.Endpoints[0].Interval = "every minute"
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
		"- job_name: x\n  kubernetes_sd_configs: [{role: endpoints}]\n  relabel_configs: [{action: keepall}]\n"))...)
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
