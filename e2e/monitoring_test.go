//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/internal/promtool"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

// checkLocalMonitoring asks the local stack's Prometheus, through its HTTP
// API, what a platform engineer would: are the controller, Karpenter and the
// team's manager pod scraped and up, are runnerfleet's alert rules loaded and
// evaluating without error, does the controller's readiness series say the
// RunnerSet is Ready; and it checks a live scrape of the controller with
// promtool check metrics.
func checkLocalMonitoring(t *testing.T, state, namespace, runnerSet, managerPod string) {
	t.Helper()
	st, err := localcluster.ReadState(state)
	if err != nil || st == nil {
		t.Fatalf("reading the local cluster's state: %v", err)
	}
	prom := st.Endpoints[localcluster.Prometheus]
	if prom == "" {
		t.Fatalf("fleet up started no %s (state endpoints: %v)", localcluster.Prometheus, st.Endpoints)
	}
	start := time.Now()
	waitFor(t, 2*time.Minute, "Prometheus scraping the controller, Karpenter and manager "+managerPod, func() error {
		var targets struct {
			ActiveTargets []struct {
				Labels     map[string]string `json:"labels"`
				ScrapePool string            `json:"scrapePool"`
				Health     string            `json:"health"`
				LastError  string            `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := promAPI(prom, "/api/v1/targets?state=active", &targets); err != nil {
			return err
		}
		up := map[string]bool{}
		var seen []string
		for _, tg := range targets.ActiveTargets {
			seen = append(seen, fmt.Sprintf("%s %v %s %s", tg.ScrapePool, tg.Labels, tg.Health, tg.LastError))
			if tg.Health != "up" {
				continue
			}
			switch tg.ScrapePool {
			case localcluster.Controller, localcluster.Karpenter:
				up[tg.ScrapePool] = true
			case monitoring.ManagersName:
				if tg.Labels["namespace"] == namespace && tg.Labels[monitoring.LabelRunnerSet] == runnerSet && tg.Labels["pod"] == managerPod {
					up[tg.ScrapePool] = true
				}
			}
		}
		for _, job := range []string{localcluster.Controller, localcluster.Karpenter, monitoring.ManagersName} {
			if !up[job] {
				return fmt.Errorf("no healthy target of %s among:\n%s", job, strings.Join(seen, "\n"))
			}
		}
		return nil
	})
	t.Logf("Prometheus scrapes the controller, Karpenter and manager %s (%s)", managerPod, time.Since(start).Round(time.Second))

	var want []string
	for _, g := range monitoring.RuleGroups() {
		for _, r := range g.Rules {
			want = append(want, r.Alert)
		}
	}
	waitFor(t, time.Minute, "runnerfleet's alert rules loaded and evaluated", func() error {
		var rules struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := promAPI(prom, "/api/v1/rules?type=alert", &rules); err != nil {
			return err
		}
		ok := map[string]bool{}
		var bad []string
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				if r.Health == "ok" {
					ok[r.Name] = true
				} else {
					bad = append(bad, fmt.Sprintf("%s: %s %s", r.Name, r.Health, r.LastError))
				}
			}
		}
		for _, a := range want {
			if !ok[a] {
				return fmt.Errorf("alert %s is not loaded and healthy; not ok: %v", a, bad)
			}
		}
		return nil
	})

	q := fmt.Sprintf(`%s{namespace=%q,%s=%q}`, metrics.RunnerSetReady, namespace, metrics.LabelRunnerSet, runnerSet)
	waitFor(t, time.Minute, q+" == 1", func() error {
		var res struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		}
		if err := promAPI(prom, "/api/v1/query?query="+url.QueryEscape(q), &res); err != nil {
			return err
		}
		if len(res.Result) != 1 || len(res.Result[0].Value) != 2 || res.Result[0].Value[1] != "1" {
			return fmt.Errorf("%s = %+v", q, res.Result)
		}
		return nil
	})

	// A live scrape of the controller passes promtool's lint.
	resp, err := http.Get(st.Endpoints[localcluster.Controller])
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping the controller: %v %s", err, resp.Status)
	}
	if out, err := promtool.Run(t.TempDir(), body, "check", "metrics"); err != nil {
		t.Errorf("the controller's live metrics fail promtool check metrics: %v\n%s", err, out)
	}
	if !slices.ContainsFunc(strings.Split(string(body), "\n"), func(l string) bool { return strings.HasPrefix(l, metrics.RunnerSets+"{") }) {
		t.Errorf("the controller's metrics have no %s series", metrics.RunnerSets)
	}
}

// promAPI GETs a Prometheus HTTP API path and decodes its data.
func promAPI(base, path string, data any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, resp.Status, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s %s", path, env.Status, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}
