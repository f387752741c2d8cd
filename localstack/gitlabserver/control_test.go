package gitlabserver_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
)

// The control API fleet drives the local stack's GitLab with: a runner
// taken once however often fleet up registers it, jobs queued for its tags
// and listed back with their state, bad requests refused with what is
// wanted.
func TestTheControlAPI(t *testing.T) {
	srv, c := controlServer(t)
	ctx := context.Background()

	for range 2 { // fleet up registers the stack's runners on every run
		if err := c.AddRunner(ctx, "glrt-local", []string{"team-a"}); err != nil {
			t.Fatal(err)
		}
	}
	if rs := srv.Runners(); len(rs) != 1 || rs[0].Token != "glrt-local" || !slices.Equal(rs[0].Tags, []string{"team-a"}) || rs[0].Type != gitlabserver.InstanceType {
		var got []string
		for _, r := range rs { // never a token in the output
			got = append(got, fmt.Sprintf("%d %s %v", r.ID, r.Type, r.Tags))
		}
		t.Fatalf("runners after registering one twice: %v, want one instance runner with tags [team-a]", got)
	}
	if jobs, err := c.Jobs(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("jobs before any is queued: %v %v", jobs, err)
	}
	if err := c.QueueJobs(ctx, []string{"team-a"}, 30*time.Second, 3); err != nil {
		t.Fatal(err)
	}
	jobs, err := c.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want the 3 queued: %+v", len(jobs), jobs)
	}
	for _, j := range jobs {
		if j.State != gitlabserver.JobPending || j.Duration != "30s" || !slices.Equal(j.Tags, []string{"team-a"}) {
			t.Errorf("job %+v, want pending, 30s, tags [team-a]", j)
		}
	}

	for _, bad := range []struct {
		err  error
		want string
	}{
		{c.AddRunner(ctx, "", []string{"x"}), "want {token, tags}"},
		{c.QueueJobs(ctx, []string{"x"}, time.Second, 0), "want {tags, duration, count}"},
	} {
		if bad.err == nil || !strings.Contains(bad.err.Error(), bad.want) || !strings.Contains(bad.err.Error(), "400") {
			t.Errorf("a bad request: %v, want 400 and %q", bad.err, bad.want)
		}
	}
	if n := len(srv.Runners()); n != 1 {
		t.Errorf("%d runners after bad requests, want 1", n)
	}
}

// A job lists the description of the runner that took it (fleet names a
// RunnerSet's runner namespace/name, which fleet status turns into the
// RunnerSet and its region) and when it was queued and picked.
func TestTheControlAPINamesTheRunnerThatTookAJob(t *testing.T) {
	srv, c := controlServer(t)
	ctx := context.Background()
	if err := c.AddNamedRunner(ctx, "glrt-overflow", "team-a/build-overflow", []string{"team-a"}); err != nil {
		t.Fatal(err)
	}
	if err := c.QueueJobs(ctx, []string{"team-a"}, time.Second, 2); err != nil {
		t.Fatal(err)
	}
	if _, code := request(t, srv, "glrt-overflow"); code != 201 {
		t.Fatalf("picking a job: %d", code)
	}
	jobs, err := c.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	picked, pending := 0, 0
	for _, j := range jobs {
		switch {
		case j.State == gitlabserver.JobRunning && j.Runner == "team-a/build-overflow" && !j.QueuedAt.IsZero() && !j.PickedAt.Before(j.QueuedAt):
			picked++
		case j.State == gitlabserver.JobPending && j.Runner == "" && j.PickedAt.IsZero() && j.Waited(j.QueuedAt.Add(time.Minute)) == time.Minute:
			pending++
		}
	}
	if picked != 1 || pending != 1 {
		t.Errorf("jobs %+v: want one running, taken by team-a/build-overflow, and one pending that has waited a minute a minute after it was queued", jobs)
	}
}

// controlServer is a loopback GitLab with its control API, and a client of
// that API; both close when the test ends.
func controlServer(t *testing.T) (*gitlabserver.Server, gitlabserver.Control) {
	t.Helper()
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.ControlHandler())
	t.Cleanup(hs.Close)
	return srv, gitlabserver.Control{URL: hs.URL}
}
