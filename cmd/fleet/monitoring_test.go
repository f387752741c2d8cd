package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/internal/promtool"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
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
	files, err := localPrometheusFiles("http://127.0.0.1:8081/metrics", "http://127.0.0.1:8082/metrics", kubeconfig)
	if err != nil {
		t.Fatal(err)
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

	if _, err := localPrometheusFiles("", "http://127.0.0.1:8082/metrics", kubeconfig); err == nil || !strings.Contains(err.Error(), localcluster.Controller) {
		t.Errorf("a missing controller endpoint: %v, want an error naming %s", err, localcluster.Controller)
	}
}
