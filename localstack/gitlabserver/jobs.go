package gitlabserver

// The runner API's job queue: what gitlab-runner calls to take a job, stream
// its log and report its result. A test queues jobs with QueueJob; a runner
// whose authentication token the server issued takes them, oldest first,
// when its tags cover the job's (an untagged job only when it runs untagged
// jobs), exactly once each.
//
//	POST  /api/v4/jobs/request    {"token": <runner token>, "system_id": ..., "info": {...}}
//	                              201 and the job, or 204 when none is waiting
//	PUT   /api/v4/jobs/:id        {"token": <job token>, "state": "running"|"success"|"failed", ...}
//	PATCH /api/v4/jobs/:id/trace  JOB-TOKEN header, Content-Range: <start>-<end>, the log bytes
//
// A job's token is accepted until the job finishes; a report on a finished
// job is refused with 403 and its state in the Job-Status header, as GitLab
// does, so a runner that lost track of a job cannot turn a failure into a
// success.
//
// The Jobs API, with a personal access token (see projectjobs.go):
//
//	GET  /api/v4/projects/:id/jobs/:job_id        the job (PAT: api or read_api; a member or reporter of the project)
//	POST /api/v4/projects/:id/jobs/:job_id/retry  201 and the new job (PAT: api; a member of the project, GitLab's
//	                                              Developer role); 403 "Job is not retryable" for a job not finished
//	                                              or already retried

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Job states, as GitLab spells them.
const (
	JobPending = "pending"
	JobRunning = "running"
	JobSuccess = "success"
	JobFailed  = "failed"
)

// DurationVariable is the CI/CD variable that tells a stand-in runner how
// long a job runs (a Go duration, for example "30s"): the job's whole work.
const DurationVariable = "RUNNERFLEET_JOB_DURATION"

// DefaultProject is the project of the jobs QueueJob queues.
const DefaultProject = 1

// Job is the server's record of one CI job.
type Job struct {
	ID int64
	// ProjectID is the project the job belongs to.
	ProjectID int64
	// Name is the job's name in its pipeline (job-<ID> when queued; a
	// retry keeps its job's name).
	Name     string
	Tags     []string
	Duration time.Duration
	State    string // JobPending, JobRunning, JobSuccess or JobFailed
	// FailureReason is what the runner reported with JobFailed.
	FailureReason string
	// RunnerID and SystemID name the runner and the manager (its system_id)
	// that took the job.
	RunnerID int64
	SystemID string
	// QueuedAt, PickedAt and FinishedAt: when the test queued it, when a
	// runner took it, when the runner reported its end.
	QueuedAt, PickedAt, FinishedAt time.Time
	// RetryOf is the job this one retries (POST .../retry); RetriedAs the
	// job that retried this one. GitLab retries a job once: the retried
	// job is no longer retryable.
	RetryOf, RetriedAs int64
	Trace              []byte
	token              string
}

// QueueJob adds a pending job of DefaultProject with these tags that runs
// for d, and returns its ID.
func (s *Server) QueueJob(tags []string, d time.Duration) int64 {
	return s.QueueProjectJob(DefaultProject, tags, d)
}

// QueueProjectJob adds a pending job of project with these tags that runs
// for d, and returns its ID. The project is created if missing.
func (s *Server) QueueProjectJob(project int64, tags []string, d time.Duration) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.projects[project] = true
	return s.queueLocked(&Job{ProjectID: project, Tags: normalizeTags(tags), Duration: d})
}

func (s *Server) queueLocked(j *Job) int64 {
	s.nextJobID++
	j.ID, j.State, j.QueuedAt = s.nextJobID, JobPending, s.clockLocked()
	if j.Name == "" {
		j.Name = fmt.Sprintf("job-%d", j.ID)
	}
	s.jobs = append(s.jobs, j)
	return j.ID
}

// Jobs returns a copy of every job, in the order they were queued.
func (s *Server) Jobs() []Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Job, 0, len(s.jobs))
	for _, j := range s.jobs {
		c := *j
		c.Tags = slices.Clone(j.Tags)
		c.Trace = bytes.Clone(j.Trace)
		c.token = ""
		out = append(out, c)
	}
	return out
}

func (s *Server) jobLocked(id int64) *Job {
	for _, j := range s.jobs {
		if j.ID == id {
			return j
		}
	}
	return nil
}

// routeJobs serves /api/v4/jobs/...; ok is false for any other path.
func (s *Server) routeJobs(r *http.Request, seg []string) (reply, bool) {
	if len(seg) < 2 || seg[0] != "jobs" {
		return reply{}, false
	}
	m := r.Method
	switch {
	case len(seg) == 2 && seg[1] == "request":
		if m != http.MethodPost {
			return notAllowed(http.MethodPost), true
		}
		return s.requestJob(r), true
	case len(seg) == 2:
		id, bad := pathID(seg[1])
		if bad != nil {
			return *bad, true
		}
		if m != http.MethodPut {
			return notAllowed(http.MethodPut), true
		}
		return s.updateJob(r, id), true
	case len(seg) == 3 && seg[2] == "trace":
		id, bad := pathID(seg[1])
		if bad != nil {
			return *bad, true
		}
		if m != http.MethodPatch {
			return notAllowed(http.MethodPatch), true
		}
		return s.appendTrace(r, id), true
	}
	return reply{}, false
}

func readJSON(r *http.Request, v any) *reply {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	if err != nil {
		rep := paramError("reading body: " + err.Error())
		return &rep
	}
	if err := json.Unmarshal(body, v); err != nil {
		rep := reply{status: http.StatusBadRequest, body: map[string]any{"error": "There was a problem with the JSON in your request"}}
		return &rep
	}
	return nil
}

type jobRequest struct {
	Token    string `json:"token"`
	SystemID string `json:"system_id"`
}

func (s *Server) requestJob(r *http.Request) reply {
	var req jobRequest
	if bad := readJSON(r, &req); bad != nil {
		return *bad
	}
	if req.Token == "" {
		return paramError("token is missing")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rn := s.runnerByTokenLocked(req.Token)
	if rn == nil {
		return forbidden
	}
	s.contactedLocked(rn.ID, req.SystemID)
	lastUpdate := http.Header{"X-Gitlab-Last-Update": {strconv.FormatInt(int64(s.nextJobID), 10)}}
	if rn.Paused {
		return reply{status: http.StatusNoContent, header: lastUpdate, runner: rn.ID}
	}
	for _, j := range s.jobs {
		if j.State != JobPending {
			continue
		}
		if len(j.Tags) == 0 && !rn.RunUntagged || !containsAll(rn.Tags, j.Tags) {
			continue
		}
		j.State, j.RunnerID, j.SystemID, j.PickedAt = JobRunning, rn.ID, req.SystemID, s.clockLocked()
		j.token = newJobToken()
		return reply{status: http.StatusCreated, header: lastUpdate, runner: rn.ID, body: jobResponse(j, s.instanceJobsRunningLocked(rn, j.ProjectID))}
	}
	return reply{status: http.StatusNoContent, header: lastUpdate, runner: rn.ID}
}

func newJobToken() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "glcbt-" + hex.EncodeToString(b)
}

// instanceJobsRunningLocked is job_info's
// project_jobs_running_on_instance_runners_count, as GitLab computes it for
// the runner rn that takes a job of project: "+Inf" unless rn is an
// instance runner, else the project's jobs running on instance runners
// (the one just taken among them), "5+" from five on.
func (s *Server) instanceJobsRunningLocked(rn *Runner, project int64) string {
	if rn.Type != InstanceType {
		return "+Inf"
	}
	n := 0
	for _, j := range s.jobs {
		if j.State == JobRunning && j.ProjectID == project {
			if r := s.runners[j.RunnerID]; r != nil && r.Type == InstanceType {
				n++
			}
		}
	}
	if n >= instanceJobsRunningMaxBucket {
		return strconv.Itoa(instanceJobsRunningMaxBucket) + "+"
	}
	return strconv.Itoa(n)
}

// instanceJobsRunningMaxBucket is GitLab's cap on
// project_jobs_running_on_instance_runners_count.
const instanceJobsRunningMaxBucket = 5

// jobResponse is the part of GitLab's job payload a runner needs to run a
// shell job: its ID and token, its variables and its script. Its job_info
// carries the queue signals gitlab-runner turns into metrics:
// time_in_queue_seconds (whole seconds from the job's queueing to its pick,
// truncated, as GitLab sends it) and
// project_jobs_running_on_instance_runners_count (instanceJobs).
func jobResponse(j *Job, instanceJobs string) map[string]any {
	vars := []map[string]any{
		{"key": "CI_JOB_ID", "value": strconv.FormatInt(j.ID, 10), "public": true, "masked": false},
		{"key": "CI_JOB_TOKEN", "value": j.token, "public": false, "masked": true},
		{"key": DurationVariable, "value": j.Duration.String(), "public": true, "masked": false},
	}
	return map[string]any{
		"id":              j.ID,
		"token":           j.token,
		"allow_git_fetch": false,
		"job_info": map[string]any{
			"id": j.ID, "name": j.Name, "stage": "test",
			"project_id": j.ProjectID, "project_name": projectName(j.ProjectID),
			"time_in_queue_seconds":                          int64(j.PickedAt.Sub(j.QueuedAt) / time.Second),
			"project_jobs_running_on_instance_runners_count": instanceJobs,
		},
		"runner_info": map[string]any{"timeout": 3600},
		"variables":   vars,
		"steps": []map[string]any{{
			"name": "script", "script": []string{fmt.Sprintf("sleep %d", int(j.Duration.Seconds()))},
			"timeout": 3600, "when": "on_success", "allow_failure": false,
		}},
		"tags": j.Tags,
	}
}

type jobUpdate struct {
	Token         string `json:"token"`
	State         string `json:"state"`
	FailureReason string `json:"failure_reason"`
}

// jobByTokenLocked finds a job and checks the job token; a finished job
// refuses every report.
func (s *Server) jobByTokenLocked(id int64, tok string) (*Job, *reply) {
	j := s.jobLocked(id)
	if j == nil {
		rep := msg(http.StatusNotFound, "404 Not Found")
		return nil, &rep
	}
	if tok == "" || tok != j.token {
		return nil, &forbidden
	}
	if j.State != JobRunning {
		rep := msg(http.StatusForbidden, "403 Forbidden - Job is not running")
		rep.header = http.Header{"Job-Status": {j.State}}
		return nil, &rep
	}
	return j, nil
}

func (s *Server) updateJob(r *http.Request, id int64) reply {
	var u jobUpdate
	if bad := readJSON(r, &u); bad != nil {
		return *bad
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, bad := s.jobByTokenLocked(id, u.Token)
	if bad != nil {
		return *bad
	}
	switch u.State {
	case "", JobRunning:
	case JobSuccess, JobFailed:
		j.State, j.FailureReason, j.FinishedAt = u.State, u.FailureReason, time.Now()
	default:
		return paramError("state does not have a valid value")
	}
	return reply{status: http.StatusOK, header: http.Header{"Job-Status": {j.State}}, runner: j.RunnerID}
}

func (s *Server) appendTrace(r *http.Request, id int64) reply {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	if err != nil {
		return paramError("reading body: " + err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, bad := s.jobByTokenLocked(id, r.Header.Get("Job-Token"))
	if bad != nil {
		return *bad
	}
	rangeHeader := func() http.Header {
		return http.Header{"Range": {fmt.Sprintf("0-%d", len(j.Trace))}, "Job-Status": {j.State}}
	}
	start, end, ok := contentRange(r.Header.Get("Content-Range"))
	if !ok || start != len(j.Trace) || end-start+1 != len(body) && len(body) > 0 {
		return reply{status: http.StatusRequestedRangeNotSatisfiable, header: rangeHeader(), runner: j.RunnerID}
	}
	j.Trace = append(j.Trace, body...)
	return reply{status: http.StatusAccepted, header: rangeHeader(), runner: j.RunnerID}
}

// contentRange parses gitlab-runner's Content-Range: "<start>-<end>", both
// inclusive byte offsets.
func contentRange(v string) (start, end int, ok bool) {
	a, b, found := strings.Cut(v, "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.Atoi(a)
	end, err2 := strconv.Atoi(b)
	return start, end, err1 == nil && err2 == nil && start >= 0 && end >= start-1
}
