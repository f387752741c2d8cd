// Package quotaexporter publishes a project's regional Compute Engine
// quotas (regions.get: Region.quotas, each a metric, its limit and its
// usage) as Prometheus gauges, so that alerts compare what the fleet uses
// with the limit the cloud enforces rather than a number typed into the
// stack. fleet quota-exporter serves it; the shared fleet's Prometheus
// scrapes it and GCEQuotaNearLimit (provisioning/sharedfleet) alerts on it.
//
// The regions are read on every scrape (one regions.get per region, the
// only permission needed is compute.regions.get), so the gauges are as
// fresh as the scrape.
package quotaexporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sync"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/api/option"

	"github.com/runnerfleet/runnerfleet/providers/gcp/gcenames"
)

// The exported series, the port and the permission, named in the leaf
// package gcenames (which the builders that scrape the exporter read).
const (
	MetricLimit = gcenames.QuotaMetricLimit
	MetricUsage = gcenames.QuotaMetricUsage
	MetricUp    = gcenames.QuotaMetricUp
	DefaultPort = gcenames.QuotaExporterPort
	Role        = gcenames.QuotaExporterRole
)

var regionRE = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)

// Collector is a prometheus.Collector of one project's regional quotas.
type Collector struct {
	project string
	regions []string
	client  *compute.RegionsClient
	timeout time.Duration
	log     *slog.Logger

	limit, usage, up *prometheus.Desc
}

// New makes a Collector for project's regions (such as us-central1, not a
// zone). opts are the client's options (credentials, endpoint;
// gcetest.Server.ClientOptions points it at the fake). Close releases the
// client.
func New(ctx context.Context, project string, regions []string, log io.Writer, opts ...option.ClientOption) (*Collector, error) {
	if project == "" {
		return nil, errors.New("quota exporter: --project is required: the Google Cloud project whose quotas to publish")
	}
	if len(regions) == 0 {
		return nil, errors.New("quota exporter: --region is required (repeatable): the regions the fleet's VMs run in, such as us-central1")
	}
	seen := map[string]bool{}
	for _, r := range regions {
		if !regionRE.MatchString(r) {
			return nil, fmt.Errorf("quota exporter: --region %q is not a region name: want one such as us-central1 (a zone's region is its name without the last -<letter>)", r)
		}
		if seen[r] {
			return nil, fmt.Errorf("quota exporter: --region %q is given twice", r)
		}
		seen[r] = true
	}
	client, err := compute.NewRegionsRESTClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("quota exporter: regions client: %w", err)
	}
	labels := []string{"project", "region", "metric"}
	return &Collector{
		project: project, regions: append([]string(nil), regions...), client: client,
		timeout: 20 * time.Second,
		log:     slog.New(slog.NewTextHandler(log, nil)),
		limit:   prometheus.NewDesc(MetricLimit, "The limit of a Compute Engine regional quota (regions.get).", labels, nil),
		usage:   prometheus.NewDesc(MetricUsage, "The usage of a Compute Engine regional quota (regions.get).", labels, nil),
		up:      prometheus.NewDesc(MetricUp, "1 if the region's quotas were read at this scrape, 0 if regions.get failed.", labels[:2], nil),
	}, nil
}

// Close closes the API client.
func (c *Collector) Close() error { return c.client.Close() }

// Describe is prometheus.Collector's.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.limit
	ch <- c.usage
	ch <- c.up
}

// Collect reads every region at once and sends its quotas.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, region := range c.regions {
		wg.Go(func() {
			r, err := c.client.Get(ctx, &computepb.GetRegionRequest{Project: c.project, Region: region})
			if err != nil {
				c.log.Error("regions.get failed", "project", c.project, "region", region, "err", err)
				ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0, c.project, region)
				return
			}
			ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1, c.project, region)
			for _, q := range r.GetQuotas() {
				ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, q.GetLimit(), c.project, region, q.GetMetric())
				ch <- prometheus.MustNewConstMetric(c.usage, prometheus.GaugeValue, q.GetUsage(), c.project, region, q.GetMetric())
			}
		})
	}
	wg.Wait()
}
