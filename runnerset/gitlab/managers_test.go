package gitlab_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
)

// urlRecorder keeps the URL of every request the client sends.
type urlRecorder struct {
	mu   sync.Mutex
	urls []string
}

func (r *urlRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.urls = append(r.urls, req.URL.String())
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func TestGitLabsViewOfARunnerAndItsManagers(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	r := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.GroupType, GroupID: 7, Tags: []string{"b", "a"}})

	d, err := c.Runner(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != r.ID || !slices.Equal(d.Tags, []string{"b", "a"}) || d.Status != gitlab.StatusNeverContacted || d.ContactedAt != nil {
		t.Errorf("details of a runner no manager contacted: %+v", d)
	}

	now := time.Now()
	srv.SetManager(r.ID, gitlabserver.Manager{SystemID: "r_online00000", CreatedAt: now.Add(-time.Hour)})
	srv.SetManager(r.ID, gitlabserver.Manager{SystemID: "r_offline0000", CreatedAt: now.Add(-5 * time.Hour), ContactedAt: now.Add(-3 * time.Hour)})
	srv.SetManager(r.ID, gitlabserver.Manager{SystemID: "r_stale000000", CreatedAt: now.Add(-10 * 24 * time.Hour), ContactedAt: now.Add(-8 * 24 * time.Hour)})
	ms, err := c.Managers(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, m := range ms {
		if m.ContactedAt == nil || m.CreatedAt == nil {
			t.Errorf("manager %s without contacted_at or created_at", m.SystemID)
		}
		status[m.SystemID] = m.Status
	}
	want := map[string]string{"r_online00000": gitlab.StatusOnline, "r_offline0000": gitlab.StatusOffline, "r_stale000000": gitlab.StatusStale}
	for id, st := range want {
		if status[id] != st {
			t.Errorf("manager %s is %q, want %q (all: %v)", id, status[id], st, status)
		}
	}
	if d, err = c.Runner(ctx, r.ID); err != nil || d.Status != gitlab.StatusOnline || d.ContactedAt == nil || now.Sub(*d.ContactedAt) > time.Minute {
		t.Errorf("details of a runner with a manager online: %+v (%v)", d, err)
	}
}

func TestVerifiedRunnerIDNamesTheRunnerOrZeroWhenRefused(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	r := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.GroupType, GroupID: 7})
	if id, err := c.VerifiedRunnerID(ctx, r.Token, gitlab.SystemID); err != nil || id != r.ID {
		t.Errorf("verified %d (%v), want runner %d", id, err, r.ID)
	}
	if id, err := c.VerifiedRunnerID(ctx, "glrt-not-a-token-of-any-runner", gitlab.SystemID); err != nil || id != 0 {
		t.Errorf("a refused token verified as runner %d (%v), want 0 and no error", id, err)
	}
}

// DELETE /runners/managers takes the runner's token: it goes in the body,
// never in a URL that errors, logs and proxies repeat.
func TestDeleteManagerSendsTheTokenInTheBodyOnlyAndAGoneManagerCountsAsDeleted(t *testing.T) {
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	rec := &urlRecorder{}
	c, err := gitlab.New(srv.URL(), pat, gitlab.Options{Timeout: 2 * time.Second, Retries: -1, Transport: rec})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType})
	srv.SetManager(r.ID, gitlabserver.Manager{SystemID: "r_gone0000000"})
	srv.SetManager(r.ID, gitlabserver.Manager{SystemID: "r_kept0000000"})
	if err := c.DeleteManager(ctx, r.Token, "r_gone0000000"); err != nil {
		t.Fatal(err)
	}
	if got := srv.Managers(r.ID); !slices.Equal(got, []string{"r_kept0000000"}) {
		t.Errorf("managers after deleting r_gone0000000: %v", got)
	}
	if err := c.DeleteManager(ctx, r.Token, "r_gone0000000"); err != nil {
		t.Errorf("deleting a manager that is gone: %v", err)
	}
	err = c.DeleteManager(ctx, "glrt-not-a-token-of-any-runner", "r_kept0000000")
	if gitlab.StatusOf(err) != http.StatusForbidden {
		t.Errorf("a refused token deleted a manager or failed otherwise: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "glrt-") {
		t.Errorf("the error repeats the token: %v", err)
	}
	for _, u := range rec.urls {
		if strings.Contains(u, "glrt-") || strings.Contains(u, "token=") {
			t.Errorf("a request URL carries the runner token: %s", u)
		}
	}
	if len(rec.urls) != 3 {
		t.Errorf("%d requests recorded, want 3", len(rec.urls))
	}
}
