package vmfleet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
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
	_, err := h.check(ctx, inst)
	return err
}

// check judges inst and returns the system_ids its runner reports.
func (h RunnerHealth) check(ctx context.Context, inst providers.Instance) ([]string, error) {
	page, err := h.scrape(ctx, inst)
	if err != nil {
		return nil, err
	}
	if err := RunnerHealthFromMetrics(inst.Name, bytes.NewReader(page)); err != nil {
		return nil, err
	}
	return SystemIDs(bytes.NewReader(page))
}

// scrape reads inst's runner metrics page.
func (h RunnerHealth) scrape(ctx context.Context, inst providers.Instance) ([]byte, error) {
	url := fmt.Sprintf("http://%s:%d/metrics", inst.Address, RunnerMetricsPort)
	if h.URL != nil {
		url = h.URL(inst)
	} else if inst.Address == "" {
		return nil, fmt.Errorf("%s has no address yet", inst.Name)
	}
	c := h.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: runner metrics: %w", inst.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: runner metrics: GET %s: %s", inst.Name, url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 16<<20))
}

// SystemIDs are the system_id labels of a runner's metrics page: the names
// GitLab knows the runner's process by (gitlab-runner labels its job and
// API request series with it).
func SystemIDs(r io.Reader) ([]string, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "system_id" && l.GetValue() != "" {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

// GitLabHealth adds GitLab's own word to RunnerHealth: for every system_id
// the VM's runner reports, runner RunnerID in GitLab has a manager of that
// system_id that contacted GitLab after the VM was created and that GitLab
// calls online. A runner that answers on its metrics port but talks to
// another GitLab, or authenticates as another runner, fails here.
type GitLabHealth struct {
	Metrics  RunnerHealth
	RunnerID int64
	// Managers lists runner RunnerID's managers (gitlab.Managers).
	Managers func(ctx context.Context) ([]gitlab.RunnerManager, error)
}

// Check is a Rotation.Healthy.
func (h GitLabHealth) Check(ctx context.Context, inst providers.Instance) error {
	ids, err := h.Metrics.check(ctx, inst)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("%s: its runner's metrics carry no system_id, so GitLab's record of it cannot be found", inst.Name)
	}
	ms, err := h.Managers(ctx)
	if err != nil {
		return fmt.Errorf("%s: asking GitLab for the managers of runner %d: %w", inst.Name, h.RunnerID, err)
	}
	byID := map[string]gitlab.RunnerManager{}
	for _, m := range ms {
		byID[m.SystemID] = m
	}
	for _, id := range ids {
		m, ok := byID[id]
		switch {
		case !ok:
			return fmt.Errorf("%s: GitLab has no manager %s of runner %d: the VM's runner does not authenticate as runner %d (another token, another GitLab?)", inst.Name, id, h.RunnerID, h.RunnerID)
		case m.ContactedAt == nil || !inst.CreatedAt.IsZero() && m.ContactedAt.Before(inst.CreatedAt):
			return fmt.Errorf("%s: manager %s of runner %d has not contacted GitLab since the VM was created", inst.Name, id, h.RunnerID)
		case m.Status != "online":
			return fmt.Errorf("%s: GitLab calls manager %s of runner %d %s", inst.Name, id, h.RunnerID, m.Status)
		}
	}
	return nil
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
