package drainagent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
)

// JobLabel is the Docker label gitlab-runner puts on every container of a
// job (build, helper, services; executors/docker/internal/labels): the
// job's ID.
const JobLabel = "com.gitlab.gitlab-runner.job.id"

// DefaultDockerHost is the Docker engine of an autoscaled VM.
const DefaultDockerHost = "unix:///var/run/docker.sock"

// DockerJobCounter counts the jobs that have a running container on a
// Docker engine: the distinct values of JobLabel among its running
// containers (the Engine API's GET /containers/json lists running ones).
type DockerJobCounter struct {
	// Host is unix:///path or tcp://host:port; default DefaultDockerHost.
	Host string
}

func (d *DockerJobCounter) client() (*http.Client, string, error) {
	host := d.Host
	if host == "" {
		host = DefaultDockerHost
	}
	u, err := url.Parse(host)
	if err != nil {
		return nil, "", fmt.Errorf("docker host %q: %w", host, err)
	}
	switch u.Scheme {
	case "unix":
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", u.Path)
		}}
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}, "http://docker", nil
	case "tcp", "http":
		return &http.Client{Timeout: 10 * time.Second}, "http://" + u.Host, nil
	}
	return nil, "", fmt.Errorf("docker host %q: want unix:// or tcp://", host)
}

// Jobs counts the jobs with a running container.
func (d *DockerJobCounter) Jobs(ctx context.Context) (int, error) {
	c, base, err := d.client()
	if err != nil {
		return 0, err
	}
	filters, _ := json.Marshal(map[string][]string{"label": {JobLabel}, "status": {"running"}})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/containers/json?filters="+url.QueryEscape(string(filters)), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("listing containers: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("listing containers: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var cs []struct {
		State  string
		Labels map[string]string
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&cs); err != nil {
		return 0, fmt.Errorf("listing containers: %w", err)
	}
	jobs := map[string]bool{}
	for _, c := range cs {
		if id := c.Labels[JobLabel]; id != "" && (c.State == "" || c.State == "running") {
			jobs[id] = true
		}
	}
	return len(jobs), nil
}

// JobReporter runs on an autoscaled VM (fleet-agent --report-jobs) and
// publishes how many jobs run on it, every Interval, where fleet gc reads
// it (providers.Compute.JobReport). When it cannot count, it reports
// nothing: the last report ages, and gc keeps a VM whose report is stale.
type JobReporter struct {
	Self     providers.Self
	Jobs     JobCounter
	Interval time.Duration
	Log      *slog.Logger
	Now      func() time.Time
}

// Run reports until ctx ends.
func (r *JobReporter) Run(ctx context.Context) error {
	now := r.Now
	if now == nil {
		now = time.Now
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		n, err := r.Jobs.Jobs(ctx)
		if err != nil {
			r.Log.Warn("counting the jobs failed; not reporting", "err", err)
		} else if err := r.Self.ReportJobs(ctx, providers.JobReport{Found: true, Jobs: n, UpdatedAt: now()}); err != nil {
			r.Log.Warn("reporting the jobs failed", "jobs", n, "err", err)
		} else {
			r.Log.Debug("reported the jobs", "jobs", n)
		}
		t.Reset(r.Interval)
	}
}
