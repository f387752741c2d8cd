package gitlabserver

// The Jobs API of a project, as a personal (or project or group) access
// token calls it: read a job, retry it. GitLab's rules, as far as the
// server keeps them (doc/api/jobs.md; lib/api/ci/jobs.rb): reading needs
// the api or read_api scope and the Reporter role on the project (here: a
// member, User.Projects, or a reporter, User.ReporterProjects); retrying
// needs the api scope and the Developer role (a member), and only a
// finished job that was not retried already is retryable. A retry queues
// a new job, a copy of the old one, answered with 201 and the new job's
// JSON; failure_reason appears on a failed job only.

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
)

var jobNotFound = msg(http.StatusNotFound, "404 Job Not Found")

// routeProjectJobs serves /projects/:id/jobs/:job_id[/retry]; ok is false
// for any other path.
func (s *Server) routeProjectJobs(r *http.Request, seg []string) (reply, bool) {
	if len(seg) < 4 || len(seg) > 5 || seg[0] != "projects" || seg[2] != "jobs" || (len(seg) == 5 && seg[4] != "retry") {
		return reply{}, false
	}
	pid, bad := pathID(seg[1])
	if bad != nil {
		return *bad, true
	}
	id, bad := pathID(seg[3])
	if bad != nil {
		return *bad, true
	}
	if len(seg) == 4 {
		if r.Method != http.MethodGet {
			return notAllowed(http.MethodGet), true
		}
		return s.withParams(r, func(q *params) reply { return s.getProjectJob(q, pid, id) }), true
	}
	if r.Method != http.MethodPost {
		return notAllowed(http.MethodPost), true
	}
	return s.withParams(r, func(q *params) reply { return s.retryJob(q, pid, id) }), true
}

// canReadProjectLocked: may u read the project's jobs (Reporter or more)?
func (s *Server) canReadProjectLocked(u User, id int64) bool {
	return s.canProjectLocked(u, id) || s.projects[id] && slices.Contains(u.ReporterProjects, id)
}

// projectJobLocked finds job id of project pid, or the answer GitLab gives.
func (s *Server) projectJobLocked(pid, id int64) (*Job, *reply) {
	j := s.jobLocked(id)
	if j == nil || j.ProjectID != pid {
		return nil, &jobNotFound
	}
	return j, nil
}

func (s *Server) getProjectJob(q *params, pid, id int64) reply {
	u, bad := s.authLocked(q, ScopeAPI, ScopeReadAPI)
	if bad != nil {
		return *bad
	}
	if !s.canReadProjectLocked(u, pid) {
		return msg(http.StatusNotFound, "404 Project Not Found")
	}
	j, bad := s.projectJobLocked(pid, id)
	if bad != nil {
		return *bad
	}
	return reply{status: http.StatusOK, body: s.jobJSON(j)}
}

func (s *Server) retryJob(q *params, pid, id int64) reply {
	u, bad := s.authLocked(q, ScopeAPI)
	if bad != nil {
		return *bad
	}
	if !s.canReadProjectLocked(u, pid) {
		return msg(http.StatusNotFound, "404 Project Not Found")
	}
	j, bad := s.projectJobLocked(pid, id)
	if bad != nil {
		return *bad
	}
	if !s.canProjectLocked(u, pid) {
		return forbidden // a reporter may read the job, not retry it
	}
	if !slices.Contains([]string{JobSuccess, JobFailed}, j.State) || j.RetriedAs != 0 {
		return msg(http.StatusForbidden, "403 Forbidden - Job is not retryable")
	}
	n := &Job{ProjectID: j.ProjectID, Name: j.Name, Tags: slices.Clone(j.Tags), Duration: j.Duration, RetryOf: j.ID}
	j.RetriedAs = s.queueLocked(n)
	return reply{status: http.StatusCreated, body: s.jobJSON(n)}
}

func projectName(id int64) string { return fmt.Sprintf("project-%d", id) }

// jobJSON is GitLab's Job entity (API::Entities::Ci::Job), the fields a
// client reads of it.
func (s *Server) jobJSON(j *Job) map[string]any {
	status := j.State
	var started, finished any
	if !j.PickedAt.IsZero() {
		started = timeJSON(j.PickedAt)
	}
	if !j.FinishedAt.IsZero() {
		finished = timeJSON(j.FinishedAt)
	}
	tags := slices.Clone(j.Tags)
	if tags == nil {
		tags = []string{}
	}
	out := map[string]any{
		"id": j.ID, "name": j.Name, "stage": "test", "status": status, "ref": "main", "tag": false,
		"coverage": nil, "allow_failure": false, "archived": false,
		"created_at": timeJSON(j.QueuedAt), "started_at": started, "finished_at": finished, "erased_at": nil,
		"user": nil, "commit": nil, "runner": nil, "artifacts": []any{}, "tag_list": tags,
		"pipeline": map[string]any{"id": j.ProjectID*1000 + 1, "project_id": j.ProjectID, "ref": "main", "status": status},
		"project":  map[string]any{"ci_job_token_scope_enabled": false},
		"web_url":  s.srv.URL + "/namespace/" + projectName(j.ProjectID) + "/-/jobs/" + strconv.FormatInt(j.ID, 10),
	}
	if j.State == JobFailed {
		out["failure_reason"] = j.FailureReason
	}
	return out
}
