package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// PrometheusConfig is the file StartPrometheus gives Prometheus as its
// configuration; the others are beside it, so that the configuration names
// them (rule_files) by their bare names.
const PrometheusConfig = "prometheus.yml"

// PrometheusDir is where StartPrometheus writes Prometheus' files and keeps
// its TSDB (data/).
func PrometheusDir(dir string) string { return filepath.Join(dir, Prometheus) }

// StartPrometheus runs the Prometheus server of `hack/tools.sh local` on
// files (name → content; PrometheusConfig among them), listening on
// localhost only, and returns its URL. A Prometheus already running on the
// same binary and the same files is kept; one whose files or binary changed
// is restarted (its TSDB stays). Prometheus refuses a configuration or a
// rule file it cannot load, so a started server has loaded all of them.
func (c *Cluster) StartPrometheus(ctx context.Context, files map[string][]byte, timeout time.Duration, log io.Writer) (string, error) {
	if _, ok := files[PrometheusConfig]; !ok {
		return "", fmt.Errorf("localcluster: StartPrometheus needs %s", PrometheusConfig)
	}
	bin := filepath.Join(c.State.Assets, Prometheus)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s is missing from %s: run hack/tools.sh local and use the directory it prints", Prometheus, c.State.Assets)
	}
	dir := PrometheusDir(c.Dir)
	same := true
	for _, name := range slices.Sorted(maps.Keys(files)) {
		old, err := os.ReadFile(filepath.Join(dir, name))
		same = same && err == nil && bytes.Equal(old, files[name])
	}
	if pid := c.Running(Prometheus); pid != 0 {
		if same && c.RunsBinary(Prometheus, bin) {
			fmt.Fprintf(log, "Reusing the running %s (pid %d)\n", Prometheus, pid)
			return c.State.Endpoints[Prometheus], nil
		}
		fmt.Fprintf(log, "Restarting %s on its new configuration\n", Prometheus)
		if err := c.StopProcess(Prometheus, 20*time.Second); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return "", err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return "", err
		}
	}
	url, err := c.PrometheusAddress()
	if err != nil {
		return "", err
	}
	port := c.State.ExtraPorts[Prometheus][0]
	plain := &http.Client{Timeout: 5 * time.Second}
	p := Process{
		Name: Prometheus,
		Path: bin,
		Args: []string{
			"--config.file=" + filepath.Join(dir, PrometheusConfig),
			"--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--storage.tsdb.retention.time=2d",
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		},
		Endpoint: url,
		Ready:    func(ctx context.Context) error { return httpOK(ctx, plain, url+"/-/ready") },
	}
	start := time.Now()
	pid, err := c.StartProcess(ctx, p, timeout, port)
	if err != nil {
		return "", fmt.Errorf("starting %s (its log: %s): %w", Prometheus, LogFile(c.Dir, Prometheus), err)
	}
	fmt.Fprintf(log, "Started %-23s pid %-7d %-28s %.1fs\n", p.Name, pid, p.Endpoint, time.Since(start).Seconds())
	return url, nil
}

// PrometheusAddress is the address the cluster's Prometheus serves on
// (http://127.0.0.1:port), known before it first starts and the same on
// every start: the port is picked once and kept in the cluster's state,
// because the RunnerClass the program declares names it (KEDA's
// Prometheus scaler reads it), and the program runs before Prometheus
// starts.
func (c *Cluster) PrometheusAddress() (string, error) {
	st, err := ReadState(c.Dir)
	if err != nil || st == nil {
		return "", errors.Join(err, fmt.Errorf("no cluster state in %s", c.Dir))
	}
	if ps := st.ExtraPorts[Prometheus]; len(ps) == 1 && ps[0] != 0 {
		c.State = st
		return fmt.Sprintf("http://127.0.0.1:%d", ps[0]), nil
	}
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	if st.ExtraPorts == nil {
		st.ExtraPorts = map[string][]int{}
	}
	st.ExtraPorts[Prometheus] = []int{port}
	if err := writeState(c.Dir, st); err != nil {
		return "", err
	}
	c.State = st
	return fmt.Sprintf("http://127.0.0.1:%d", port), nil
}
