package vmfleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/runnerfleet/runnerfleet/providers"
)

// Metrics gitlab-runner exports that tell its health (common/version.go and
// network/api_requests_collector.go of gitlab-runner).
const (
	// MetricVersionInfo is exported by every gitlab-runner process.
	MetricVersionInfo = "gitlab_runner_version_info"
	// MetricAPIRequests counts the runner's API requests by endpoint and
	// status; endpoint request_job is its asking GitLab for jobs, which
	// only a runner whose token GitLab accepts gets past: a rejected one
	// stops asking. A status 204 (no job) or 201 (a job) means GitLab
	// answered it as a runner.
	MetricAPIRequests = "gitlab_runner_api_request_statuses_total"
)

// RunnerHealth judges a manager VM healthy by its runner's own metrics: the
// endpoint answers, gitlab_runner_version_info is there, and
// gitlab_runner_api_request_statuses_total{endpoint="request_job"} counts a
// request GitLab answered with 201 or 204 (a job, or none for now).
type RunnerHealth struct {
	// URL is the metrics URL of a VM; default http://<address>:RunnerMetricsPort/metrics.
	URL    func(providers.Instance) string
	Client *http.Client
}

// Check is a Rotation.Healthy.
func (h RunnerHealth) Check(ctx context.Context, inst providers.Instance) error {
	url := fmt.Sprintf("http://%s:%d/metrics", inst.Address, RunnerMetricsPort)
	if h.URL != nil {
		url = h.URL(inst)
	} else if inst.Address == "" {
		return fmt.Errorf("%s has no address yet", inst.Name)
	}
	c := h.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s: runner metrics: %w", inst.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: runner metrics: GET %s: %s", inst.Name, url, resp.Status)
	}
	return RunnerHealthFromMetrics(inst.Name, io.LimitReader(resp.Body, 16<<20))
}

// RunnerHealthFromMetrics judges a runner's metrics page.
func RunnerHealthFromMetrics(name string, r io.Reader) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("%s: runner metrics: %w", name, err)
	}
	if _, ok := fams[MetricVersionInfo]; !ok {
		return fmt.Errorf("%s: no %s: what answers is not gitlab-runner", name, MetricVersionInfo)
	}
	answered := 0.0
	if f, ok := fams[MetricAPIRequests]; ok {
		for _, m := range f.GetMetric() {
			var endpoint, status string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "endpoint":
					endpoint = l.GetValue()
				case "status":
					status = l.GetValue()
				}
			}
			code, _ := strconv.Atoi(status)
			if endpoint == "request_job" && (code == http.StatusCreated || code == http.StatusNoContent) {
				answered += m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			}
		}
	}
	if answered == 0 {
		return fmt.Errorf("%s: the runner is up but GitLab has not answered a job request of it yet (no %s{endpoint=\"request_job\",status=\"201\"|\"204\"})", name, MetricAPIRequests)
	}
	return nil
}
