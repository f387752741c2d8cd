package quotaexporter

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
)

// The quotas of each region, read with the real SDK client from the
// loopback Compute API, become limit and usage gauges labelled with the
// project, the region and the quota's metric; a region the API does not
// know is up 0 with no quota series, and logged, while the others are
// still published.
func TestCollectorPublishesRegionQuotas(t *testing.T) {
	srv := gcetest.New(gcetest.WithProject("ci-prod"))
	defer srv.Close()
	srv.SetRegionQuotas("us-central1",
		gcetest.Quota{Metric: "INSTANCES", Limit: 1000, Usage: 912},
		gcetest.Quota{Metric: "N2D_CPUS", Limit: 2400, Usage: 1800},
	)
	srv.SetRegionQuotas("europe-west4", gcetest.Quota{Metric: "PREEMPTIBLE_CPUS", Limit: 500, Usage: 0})

	var log bytes.Buffer
	c, err := New(context.Background(), "ci-prod", []string{"us-central1", "europe-west4", "asia-east9"}, &log, srv.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)

	want := `
# HELP runnerfleet_gce_quota_limit The limit of a Compute Engine regional quota (regions.get).
# TYPE runnerfleet_gce_quota_limit gauge
runnerfleet_gce_quota_limit{metric="INSTANCES",project="ci-prod",region="us-central1"} 1000
runnerfleet_gce_quota_limit{metric="N2D_CPUS",project="ci-prod",region="us-central1"} 2400
runnerfleet_gce_quota_limit{metric="PREEMPTIBLE_CPUS",project="ci-prod",region="europe-west4"} 500
# HELP runnerfleet_gce_quota_up 1 if the region's quotas were read at this scrape, 0 if regions.get failed.
# TYPE runnerfleet_gce_quota_up gauge
runnerfleet_gce_quota_up{project="ci-prod",region="asia-east9"} 0
runnerfleet_gce_quota_up{project="ci-prod",region="europe-west4"} 1
runnerfleet_gce_quota_up{project="ci-prod",region="us-central1"} 1
# HELP runnerfleet_gce_quota_usage The usage of a Compute Engine regional quota (regions.get).
# TYPE runnerfleet_gce_quota_usage gauge
runnerfleet_gce_quota_usage{metric="INSTANCES",project="ci-prod",region="us-central1"} 912
runnerfleet_gce_quota_usage{metric="N2D_CPUS",project="ci-prod",region="us-central1"} 1800
runnerfleet_gce_quota_usage{metric="PREEMPTIBLE_CPUS",project="ci-prod",region="europe-west4"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if got := len(srv.Calls("GET", "/regions/*")); got != 3 {
		t.Errorf("regions.get calls = %d, want 3 (one per region per scrape)", got)
	}
	if !strings.Contains(log.String(), "asia-east9") || !strings.Contains(log.String(), "404") {
		t.Errorf("the failed region is not logged with the API's answer: %q", log.String())
	}

	// A second scrape reads the cloud again: the usage is the API's now.
	srv.SetRegionQuotas("europe-west4", gcetest.Quota{Metric: "PREEMPTIBLE_CPUS", Limit: 500, Usage: 480})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP runnerfleet_gce_quota_usage The usage of a Compute Engine regional quota (regions.get).
# TYPE runnerfleet_gce_quota_usage gauge
runnerfleet_gce_quota_usage{metric="INSTANCES",project="ci-prod",region="us-central1"} 912
runnerfleet_gce_quota_usage{metric="N2D_CPUS",project="ci-prod",region="us-central1"} 1800
runnerfleet_gce_quota_usage{metric="PREEMPTIBLE_CPUS",project="ci-prod",region="europe-west4"} 480
`), MetricUsage); err != nil {
		t.Fatal(err)
	}
}

// Without a project or a region, or with a zone for a region, New says
// which flag is wrong and what it wants.
func TestNewRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		project string
		regions []string
		want    string
	}{
		{"", []string{"us-central1"}, "--project is required"},
		{"ci-prod", nil, "--region is required"},
		{"ci-prod", []string{"us-central1-a"}, `--region "us-central1-a" is not a region name`},
		{"ci-prod", []string{"us-central1", "us-central1"}, `--region "us-central1" is given twice`},
	} {
		_, err := New(context.Background(), tc.project, tc.regions, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %q) = %v, want an error containing %q", tc.project, tc.regions, err, tc.want)
		}
	}
}
