package gitlabserver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
)

// The Jobs API as GitLab documents it (doc/api/jobs.md, "Get a single
// job", "Retry a job"), through the real client-go that runnerfleet's
// controller uses: reading a job needs read_api or api and at least the
// Reporter role; retrying needs api and the Developer role; only a
// finished job is retryable, and only once; the retry answers 201 with the
// new job, a copy queued for the same tags, which a runner then takes.
func TestTheJobsAPIRetriesAFinishedJobOnceWithTheAPIScopeAndTheDeveloperRole(t *testing.T) {
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	const other int64 = 77
	srv.AddProject(other)
	srv.AddUser("glpat-dev", gitlabserver.User{Scopes: []string{gitlabserver.ScopeAPI}, Projects: []int64{projectID}})
	srv.AddUser("glpat-reader", gitlabserver.User{Scopes: []string{gitlabserver.ScopeReadAPI}, Projects: []int64{projectID}})
	srv.AddUser("glpat-reporter", gitlabserver.User{Scopes: []string{gitlabserver.ScopeAPI}, ReporterProjects: []int64{projectID}})
	runner := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"spot"}})
	ctx := context.Background()
	api := func(pat string) gitlab.Jobs {
		j, err := gitlab.NewJobs(srv.URL(), pat, gitlab.Options{Retries: -1})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	dev, reader, reporter := api("glpat-dev"), api("glpat-reader"), api("glpat-reporter")

	id := srv.QueueProjectJob(projectID, []string{"spot"}, time.Minute)
	got, err := reader.GetJob(ctx, projectID, id)
	if err != nil || got.ID != id || got.Status != gitlabserver.JobPending || got.FailureReason != "" || got.Name != fmt.Sprintf("job-%d", id) {
		t.Fatalf("GetJob with read_api: %+v, %v; want the pending job %d", got, err, id)
	}
	if _, err := dev.GetJob(ctx, other, id); gitlab.StatusOf(err) != http.StatusNotFound {
		t.Errorf("a job of a project the user is no member of: %v, want 404", err)
	}
	if _, err := dev.RetryJob(ctx, projectID, id); gitlab.StatusOf(err) != http.StatusForbidden {
		t.Errorf("retrying a pending job: %v, want 403 not retryable", err)
	}

	// A runner takes it and its pod is lost.
	j, status := request(t, srv, runner.Token)
	if status != http.StatusCreated || j.ID != id {
		t.Fatalf("the runner got %d %+v, want job %d", status, j, id)
	}
	if resp := call(t, http.MethodPut, fmt.Sprintf("%s/api/v4/jobs/%d", srv.URL(), id), nil,
		fmt.Sprintf(`{"token":%q,"state":"failed","failure_reason":"runner_system_failure"}`, j.Token)); resp.StatusCode != http.StatusOK {
		t.Fatalf("reporting the failure: %d", resp.StatusCode)
	}
	got, err = dev.GetJob(ctx, projectID, id)
	if err != nil || got.Status != gitlab.JobStatusFailed || got.FailureReason != gitlab.FailureRunnerSystem {
		t.Fatalf("GetJob after the failure: %+v, %v", got, err)
	}

	var e *gitlab.Error
	if _, err := reader.RetryJob(ctx, projectID, id); !errors.As(err, &e) || !e.InsufficientScope() {
		t.Errorf("retrying with read_api: %v, want 403 insufficient_scope", err)
	}
	if _, err := reporter.RetryJob(ctx, projectID, id); gitlab.StatusOf(err) != http.StatusForbidden {
		t.Errorf("retrying as a reporter: %v, want 403", err)
	}
	n, err := dev.RetryJob(ctx, projectID, id)
	if err != nil || n.ID == id || n.Status != gitlabserver.JobPending || n.Name != got.Name {
		t.Fatalf("RetryJob: %+v, %v; want a new pending job named %s", n, err, got.Name)
	}
	if srv.Calls(http.MethodPost, fmt.Sprintf("/api/v4/projects/%d/jobs/%d/retry", projectID, id)) != 4 {
		t.Errorf("calls to the retry endpoint were not counted")
	}
	if _, err := dev.RetryJob(ctx, projectID, id); gitlab.StatusOf(err) != http.StatusForbidden {
		t.Errorf("retrying a job already retried: %v, want 403 not retryable", err)
	}
	// The retry is a job like any: the runner takes it.
	if j, status := request(t, srv, runner.Token); status != http.StatusCreated || j.ID != n.ID {
		t.Errorf("the runner got %d %+v, want the retry %d", status, j, n.ID)
	}
	for _, rec := range srv.Jobs() {
		switch rec.ID {
		case id:
			if rec.RetriedAs != n.ID {
				t.Errorf("job %d: retriedAs %d, want %d", id, rec.RetriedAs, n.ID)
			}
		case n.ID:
			if rec.RetryOf != id || rec.ProjectID != projectID || rec.State != gitlabserver.JobRunning {
				t.Errorf("the retry %+v: want a running retry of %d in project %d", rec, id, projectID)
			}
		}
	}
}
