package gitlab

import (
	"context"
	"fmt"

	gl "gitlab.com/gitlab-org/api/client-go"
)

// Job states and the failure reason runnerfleet reads, as GitLab spells
// them (the Jobs API's status and failure_reason).
const (
	JobStatusFailed  = "failed"
	JobStatusSuccess = "success"
	JobStatusCancel  = "canceled"
	// FailureRunnerSystem is the failure_reason of a job the runner could
	// not run to its end: its pod was lost, its node taken away.
	FailureRunnerSystem = "runner_system_failure"
)

// Job is what runnerfleet reads of a CI job (GET /projects/:id/jobs/:job_id).
type Job struct {
	ID        int64
	ProjectID int64
	Name      string
	// Status is GitLab's: created, pending, running, success, failed,
	// canceled, skipped, manual, …
	Status string
	// FailureReason is set on a failed job: script_failure,
	// runner_system_failure, stuck_or_timeout_failure, …
	FailureReason string
	WebURL        string
}

// Jobs is what runnerfleet asks of GitLab about CI jobs, with an access
// token whose user has at least the Developer role on the project (scope
// api; read_api is enough to read).
type Jobs interface {
	// GetJob reads a job (GET /projects/:id/jobs/:job_id).
	GetJob(ctx context.Context, projectID, jobID int64) (*Job, error)
	// RetryJob retries a finished job (POST
	// /projects/:id/jobs/:job_id/retry) and returns the new job GitLab
	// created. GitLab refuses (403) a job that is not finished or was
	// already retried.
	RetryJob(ctx context.Context, projectID, jobID int64) (*Job, error)
}

// NewJobs returns Jobs for the GitLab instance at baseURL acting with the
// access token pat.
func NewJobs(baseURL, pat string, o Options) (Jobs, error) {
	c, err := New(baseURL, pat, o)
	if err != nil {
		return nil, err
	}
	return c.(*client), nil
}

func (c *client) GetJob(ctx context.Context, projectID, jobID int64) (*Job, error) {
	j, resp, err := c.c.Jobs.GetJob(projectID, jobID, gl.WithContext(ctx))
	if err != nil {
		return nil, wrap(fmt.Sprintf("getting job %d of project %d", jobID, projectID), resp, err)
	}
	return toJob(j, projectID), nil
}

func (c *client) RetryJob(ctx context.Context, projectID, jobID int64) (*Job, error) {
	j, resp, err := c.c.Jobs.RetryJob(projectID, jobID, gl.WithContext(ctx))
	if err != nil {
		return nil, wrap(fmt.Sprintf("retrying job %d of project %d", jobID, projectID), resp, err)
	}
	return toJob(j, projectID), nil
}

func toJob(j *gl.Job, projectID int64) *Job {
	return &Job{ID: j.ID, ProjectID: projectID, Name: j.Name, Status: j.Status, FailureReason: j.FailureReason, WebURL: j.WebURL}
}
