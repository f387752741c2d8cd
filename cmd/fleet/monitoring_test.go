package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/internal/promtool"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

// The local stack's Prometheus files pass Prometheus' own checks (promtool
// check config loads the rule file it names too), and the managers' scrape
// is the one the chart ships, discovering through the local kubeconfig.
func TestLocalPrometheusFilesPassPromtool(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prices, err := localPrices(context.Background(), &stackconfig.Fleet{Cost: &cost.Table{Prices: []cost.Price{{InstanceType: "c-1x-amd64-linux", OnDemand: ptr.To(7.0), Spot: ptr.To(3.0)}}}})
	if err != nil {
		t.Fatal(err)
	}
	files, err := localPrometheusFiles("http://127.0.0.1:8081/metrics", "http://127.0.0.1:8082/metrics", kubeconfig, prices)
	if err != nil {
		t.Fatal(err)
	}
	// The cost rules price the kwok provider's instance types, the
	// stack's entry over the provider's price, and the cloud defaults.
	rules := string(files[localRulesFile])
	for _, want := range []string{"instance_type: c-4x-amd64-linux", "vector(7)", "vector(3)", "instance_type: m7i.large"} {
		if !strings.Contains(rules, want) {
			t.Errorf("the local rule file lacks %q", want)
		}
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := promtool.Run(dir, nil, "check", "config", localcluster.PrometheusConfig); err != nil {
		t.Fatalf("%v\n%s", err, files[localcluster.PrometheusConfig])
	} else if !strings.Contains(out, "SUCCESS: 1 rule files found") {
		t.Errorf("promtool did not check the rule file:\n%s", out)
	}
	cfg := string(files[localcluster.PrometheusConfig])
	for _, want := range []string{"job_name: " + monitoring.ManagersName, "kubeconfig_file: " + kubeconfig, "- 127.0.0.1:8081", "- 127.0.0.1:8082"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("prometheus.yml lacks %q:\n%s", want, cfg)
		}
	}

	// Negative control: without its rule file the configuration fails.
	if err := os.Remove(filepath.Join(dir, localRulesFile)); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool.Run(dir, nil, "check", "config", localcluster.PrometheusConfig); err == nil {
		t.Errorf("promtool check config passed without the rule file:\n%s", out)
	}

	if _, err := localPrometheusFiles("", "http://127.0.0.1:8082/metrics", kubeconfig, prices); err == nil || !strings.Contains(err.Error(), localcluster.Controller) {
		t.Errorf("a missing controller endpoint: %v, want an error naming %s", err, localcluster.Controller)
	}
}
