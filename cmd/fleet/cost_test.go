package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

// promAnswers serves the Prometheus HTTP API's instant queries: the
// answer of the first entry whose key the query contains, as Prometheus
// encodes a vector; it records the queries it was asked.
type promAnswers struct {
	mu      sync.Mutex
	asked   []string
	answers [][2]string // query substring, result JSON
}

func (p *promAnswers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.Form.Get("query")
	p.mu.Lock()
	p.asked = append(p.asked, q)
	p.mu.Unlock()
	result := "[]"
	for _, a := range p.answers {
		if strings.Contains(q, a[0]) {
			result = a[1]
			break
		}
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":%s}}`, result)
}

func sample(labels string, v float64) string {
	return fmt.Sprintf(`{"metric":%s,"value":[1765000000,"%v"]}`, labels, v)
}

// fleet cost asks for the recorded node-seconds and cost of every
// RunnerSet and shared fleet group over --since and prints a table per
// team and per fleet, naming what has no price.
func TestFleetCostPrintsATablePerTeam(t *testing.T) {
	a := &promAnswers{answers: [][2]string{
		{monitoring.RecordCost, "[" + sample(`{"namespace":"team-a","runnerset":"build","capacity_type":"spot","instance_type":"m7i.large","currency":"USD"}`, 2.5) + "]"},
		{monitoring.RecordNodes, "[" + strings.Join([]string{
			sample(`{"namespace":"team-a","runnerset":"build","capacity_type":"spot","instance_type":"m7i.large"}`, 36000),
			sample(`{"namespace":"team-b","runnerset":"web","capacity_type":"on-demand","instance_type":"c9.huge"}`, 7200),
		}, ",") + "]"},
		{monitoring.RecordVMCost, "[" + sample(`{"fleet":"production","group":"linux","capacity_type":"spot","instance_type":"n2d-standard-4","currency":"USD"}`, 1.25) + "]"},
		{monitoring.RecordVMs, "[" + sample(`{"fleet":"production","group":"linux","capacity_type":"spot","instance_type":"n2d-standard-4"}`, 18000) + "]"},
	}}
	srv := httptest.NewServer(a)
	defer srv.Close()

	var out bytes.Buffer
	if err := run(context.Background(), []string{"cost", "--since", "7d", "--prometheus", srv.URL}, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"Cost over the last 7d",
		"Team team-a", "build      spot           m7i.large      10.00       2.50 USD",
		"Team team-b", "web        on-demand      c9.huge        2.00        no price",
		"No price for on-demand c9.huge",
		"Shared fleet production", "linux  spot           n2d-standard-4  5.00      1.25 USD",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("fleet cost printed no %q:\n%s", want, got)
		}
	}
	for _, q := range a.asked {
		if !strings.Contains(q, "[7d:1m]") {
			t.Errorf("asked %q, not over 7d in steps of a minute", q)
		}
	}

	out.Reset()
	if err := run(context.Background(), []string{"cost", "--since", "30d", "--prometheus", srv.URL, "-o", "json"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var rep costReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Teams) != 2 || rep.Teams[0].NodeSeconds != 36000 || rep.Teams[0].Cost["USD"] != 2.5 || rep.Teams[1].Unpriced[0] != "on-demand c9.huge" || rep.SharedFleets[0].NodeSeconds != 18000 {
		t.Errorf("fleet cost -o json: %+v", rep)
	}

	// Bad input names the flag; no Prometheus to ask says how to give one.
	for args, want := range map[string]string{
		"cost --since 7days --prometheus " + srv.URL: "--since",
		"cost --since -1d --prometheus " + srv.URL:   "--since",
		"cost -o yaml --prometheus " + srv.URL:       "-o",
		"cost --state-dir " + t.TempDir():            "--prometheus URL",
	} {
		if err := run(context.Background(), strings.Fields(args), &out, &out); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("fleet %s: %v, want an error naming %s", args, err, want)
		}
	}
}
