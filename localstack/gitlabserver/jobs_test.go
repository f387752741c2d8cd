package gitlabserver_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
)

// call sends one runner-API request as gitlab-runner does.
func call(t *testing.T, method, url string, header map[string]string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type job struct {
	ID        int64  `json:"id"`
	Token     string `json:"token"`
	Variables []struct {
		Key, Value string
	} `json:"variables"`
}

func request(t *testing.T, srv *gitlabserver.Server, token string) (*job, int) {
	t.Helper()
	resp := call(t, http.MethodPost, srv.URL()+"/api/v4/jobs/request", nil, fmt.Sprintf(`{"token":%q,"system_id":"s_test","info":{"name":"gitlab-runner"}}`, token))
	if resp.StatusCode != http.StatusCreated {
		return nil, resp.StatusCode
	}
	j := &job{}
	if err := json.NewDecoder(resp.Body).Decode(j); err != nil {
		t.Fatal(err)
	}
	return j, resp.StatusCode
}

func TestJobQueueHandsEachJobToOneRunnerWhoseTagsCoverIt(t *testing.T) {
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	a := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"a", "linux"}})
	b := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"b"}, RunUntagged: true})
	paused := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"a"}, Paused: true})

	forA := srv.QueueJob([]string{"a"}, 3*time.Second)
	untagged := srv.QueueJob(nil, time.Second)

	if _, code := request(t, srv, "glrt-unknown"); code != http.StatusForbidden {
		t.Errorf("unknown token: %d, want 403", code)
	}
	if _, code := request(t, srv, paused.Token); code != http.StatusNoContent {
		t.Errorf("paused runner: %d, want 204", code)
	}
	j, code := request(t, srv, a.Token)
	if code != http.StatusCreated || j.ID != forA {
		t.Fatalf("runner a got %+v (%d), want job %d", j, code, forA)
	}
	if _, code := request(t, srv, a.Token); code != http.StatusNoContent {
		t.Errorf("runner a asked again: %d, want 204 (the untagged job is not for a runner that runs no untagged jobs)", code)
	}
	found := false
	for _, v := range j.Variables {
		found = found || v.Key == gitlabserver.DurationVariable && v.Value == "3s"
	}
	if !found {
		t.Errorf("job variables %+v lack %s=3s", j.Variables, gitlabserver.DurationVariable)
	}
	jb, code := request(t, srv, b.Token)
	if code != http.StatusCreated || jb.ID != untagged {
		t.Fatalf("runner b got %+v (%d), want the untagged job %d", jb, code, untagged)
	}

	// Trace: appended at the offset the server has, refused elsewhere.
	trace := func(tok, rng, body string) *http.Response {
		return call(t, http.MethodPatch, fmt.Sprintf("%s/api/v4/jobs/%d/trace", srv.URL(), j.ID), map[string]string{"Job-Token": tok, "Content-Range": rng}, body)
	}
	if r := trace(j.Token, "0-5", "hello\n"); r.StatusCode != http.StatusAccepted || r.Header.Get("Range") != "0-6" {
		t.Errorf("first trace chunk: %d Range %q", r.StatusCode, r.Header.Get("Range"))
	}
	if r := trace(j.Token, "0-5", "again\n"); r.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("a chunk at a stale offset: %d, want 416", r.StatusCode)
	}
	if r := trace("glcbt-wrong", "6-8", "x\n"); r.StatusCode != http.StatusForbidden {
		t.Errorf("a wrong job token: %d, want 403", r.StatusCode)
	}
	update := func(state string) *http.Response {
		return call(t, http.MethodPut, fmt.Sprintf("%s/api/v4/jobs/%d", srv.URL(), j.ID), nil, fmt.Sprintf(`{"token":%q,"state":%q}`, j.Token, state))
	}
	if r := update("success"); r.StatusCode != http.StatusOK {
		t.Fatalf("success: %d", r.StatusCode)
	}
	if r := update("failed"); r.StatusCode != http.StatusForbidden || r.Header.Get("Job-Status") != "success" {
		t.Errorf("a report on a finished job: %d Job-Status %q, want 403 and success", r.StatusCode, r.Header.Get("Job-Status"))
	}
	for _, got := range srv.Jobs() {
		switch got.ID {
		case forA:
			if got.State != gitlabserver.JobSuccess || got.RunnerID != a.ID || got.SystemID != "s_test" || !bytes.Equal(got.Trace, []byte("hello\n")) || got.PickedAt.IsZero() {
				t.Errorf("job %d = %+v", got.ID, got)
			}
		case untagged:
			if got.State != gitlabserver.JobRunning || got.RunnerID != b.ID {
				t.Errorf("untagged job = %+v", got)
			}
		}
	}
}

// jobInfo is the queue part of job_info, spelled as gitlab-runner's
// spec.JobInfo reads it.
type jobInfo struct {
	TimeInQueueSeconds                       float64 `json:"time_in_queue_seconds"`
	ProjectJobsRunningOnInstanceRunnersCount string  `json:"project_jobs_running_on_instance_runners_count"`
}

func requestJobInfo(t *testing.T, srv *gitlabserver.Server, token string) (int64, jobInfo) {
	t.Helper()
	resp := call(t, http.MethodPost, srv.URL()+"/api/v4/jobs/request", nil, fmt.Sprintf(`{"token":%q,"system_id":"s_test"}`, token))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("request: %d, want 201", resp.StatusCode)
	}
	var p struct {
		ID      int64   `json:"id"`
		JobInfo jobInfo `json:"job_info"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p.ID, p.JobInfo
}

// GitLab sends, in each job's job_info, the whole seconds the job waited
// between its queueing and the request that took it (by GitLab's clock),
// and how many of the project's jobs run on instance runners ("+Inf" for a
// runner that is not one).
func TestJobInfoCarriesTimeInQueueByServerClock(t *testing.T) {
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	inst := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"q"}})
	group := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.GroupType, GroupID: 7, Tags: []string{"g"}})

	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0
	srv.SetClock(func() time.Time { return now })
	first := srv.QueueJob([]string{"q"}, time.Second)
	now = t0.Add(30 * time.Second)
	second := srv.QueueJob([]string{"q"}, time.Second)
	forGroup := srv.QueueJob([]string{"g"}, time.Second)

	now = t0.Add(90*time.Second + 700*time.Millisecond)
	id, info := requestJobInfo(t, srv, inst.Token)
	if id != first || info.TimeInQueueSeconds != 90 || info.ProjectJobsRunningOnInstanceRunnersCount != "1" {
		t.Errorf("first job: %d %+v, want job %d, 90 s in queue (truncated), 1 running on instance runners", id, info, first)
	}
	id, info = requestJobInfo(t, srv, inst.Token)
	if id != second || info.TimeInQueueSeconds != 60 || info.ProjectJobsRunningOnInstanceRunnersCount != "2" {
		t.Errorf("second job: %d %+v, want job %d, 60 s in queue, 2 running on instance runners", id, info, second)
	}
	now = t0.Add(30 * time.Second)
	id, info = requestJobInfo(t, srv, group.Token)
	if id != forGroup || info.TimeInQueueSeconds != 0 || info.ProjectJobsRunningOnInstanceRunnersCount != "+Inf" {
		t.Errorf("group runner's job: %d %+v, want job %d, 0 s in queue, +Inf", id, info, forGroup)
	}
}
