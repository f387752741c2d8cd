package drainagent

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
)

// DefaultMetricsURL is where gitlab-runner serves its Prometheus metrics
// when its listen_address is gitlabrunner.ListenAddress.
var DefaultMetricsURL = gitlabrunner.LocalMetricsURL

// JobsMetric is gitlab-runner's gauge of the jobs it runs, one label set per
// runner, stage and state.
const JobsMetric = "gitlab_runner_jobs"

// maxMetricsBody bounds what a scrape reads.
const maxMetricsBody = 32 << 20

// MetricsJobCounter counts the runner's jobs from its Prometheus metrics
// endpoint: the sum of gitlab_runner_jobs over all its label sets. A runner
// that runs no job may not expose the metric at all, which counts as 0.
type MetricsJobCounter struct {
	URL    string       // default DefaultMetricsURL
	Client *http.Client // default a client with a 5s timeout
}

var defaultMetricsClient = &http.Client{Timeout: 5 * time.Second}

// Jobs scrapes the endpoint once.
func (m *MetricsJobCounter) Jobs(ctx context.Context) (int, error) {
	url := m.URL
	if url == "" {
		url = DefaultMetricsURL
	}
	client := m.Client
	if client == nil {
		client = defaultMetricsClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	// Only the text format is parsed: do not let the server pick protobuf
	// or OpenMetrics.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	n, err := CountJobs(io.LimitReader(resp.Body, maxMetricsBody))
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", url, err)
	}
	return n, nil
}

// CountJobs sums gitlab_runner_jobs over all its label sets in a text
// exposition.
func CountJobs(r io.Reader) (int, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("parsing metrics: %w", err)
	}
	mf, ok := families[JobsMetric]
	if !ok {
		return 0, nil
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		sum += sampleValue(mf.GetType(), m)
	}
	if math.IsNaN(sum) || sum < 0 || sum > math.MaxInt32 {
		return 0, fmt.Errorf("parsing metrics: %s sums to %v", JobsMetric, sum)
	}
	return int(math.Round(sum)), nil
}

func sampleValue(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue()
	default:
		return m.GetGauge().GetValue()
	}
}
