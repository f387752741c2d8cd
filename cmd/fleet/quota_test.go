package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
)

// fleet quota-exporter serves the regions' quotas, read from the loopback
// Compute API with the real SDK, on /metrics, and stops when its context
// ends.
func TestQuotaExporterServesMetrics(t *testing.T) {
	srv := gcetest.New(gcetest.WithProject("ci-prod"))
	defer srv.Close()
	srv.SetRegionQuotas("us-central1", gcetest.Quota{Metric: "INSTANCES", Limit: 1000, Usage: 950})

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var log bytes.Buffer
	go func() {
		done <- serveQuotaExporter(ctx, quotaExporterOptions{project: "ci-prod", regions: []string{"us-central1"}, listen: "127.0.0.1:0"}, ready, &log, srv.ClientOptions()...)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("quota-exporter stopped: %v", err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`runnerfleet_gce_quota_limit{metric="INSTANCES",project="ci-prod",region="us-central1"} 1000`,
		`runnerfleet_gce_quota_usage{metric="INSTANCES",project="ci-prod",region="us-central1"} 950`,
		`runnerfleet_gce_quota_up{project="ci-prod",region="us-central1"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("quota-exporter after its context ended: %v", err)
	}
}

// Without --project or --region, fleet quota-exporter says which flag it
// needs before it talks to the cloud.
func TestQuotaExporterNeedsProjectAndRegion(t *testing.T) {
	for args, want := range map[string]string{
		"quota-exporter --region us-central1":                     "--project is required",
		"quota-exporter --project ci-prod":                        "--region is required",
		"quota-exporter --project ci-prod --region us-central1-b": `--region "us-central1-b" is not a region name`,
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), strings.Fields(args), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("fleet %s: %v, want an error containing %q", args, err, want)
		}
	}
}
