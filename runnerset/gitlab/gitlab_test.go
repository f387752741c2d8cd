package gitlab_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
)

const pat = "glpat-wrapper-test-000000000000"

func setup(t *testing.T) (*gitlabserver.Server, gitlab.Client) {
	t.Helper()
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	srv.AddUser(pat, gitlabserver.User{Scopes: []string{gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner}, Groups: []int64{7}, Projects: []int64{9}})
	c, err := gitlab.New(srv.URL(), pat, gitlab.Options{Timeout: 2 * time.Second, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

func TestCreateMapsEveryOption(t *testing.T) {
	srv, c := setup(t)
	tok, err := c.CreateRunner(context.Background(), gitlab.CreateOptions{
		Scope: gitlab.Scope{Type: "project", ProjectID: 9}, Description: "d [runnerfleet u1]", MaintenanceNote: "n",
		Tags: []string{"a", "b"}, RunUntagged: true, Locked: true, Paused: true, Protected: true, MaximumTimeout: 2 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := srv.Runners()[0]
	if r.ID != tok.RunnerID || r.Token != tok.Value || r.Type != gitlabserver.ProjectType || r.ProjectID != 9 || !r.Locked || !r.Paused ||
		!r.RunUntagged || r.AccessLevel != gitlabserver.RefProtected || r.MaximumTimeout != 7200 || r.MaintenanceNote != "n" || len(r.Tags) != 2 {
		t.Errorf("runner %+v from token %+v", r, tok)
	}
}

func TestFindRunnersPagesAndMatchesTheMarkerOnly(t *testing.T) {
	srv, c := setup(t)
	for i := range 130 {
		desc := "someone else's"
		if i%40 == 0 {
			desc = "ours [runnerfleet u2]"
		}
		srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.GroupType, GroupID: 7, Description: desc})
	}
	ids, err := c.FindRunners(context.Background(), gitlab.Scope{Type: "group", GroupID: 7}, "[runnerfleet u2]")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 4 || ids[0] > ids[1] {
		t.Fatalf("found %v, want the 4 marked runners across pages, oldest first", ids)
	}
}

func TestErrorsCarryTheirStatusAndRetryability(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	cases := []struct {
		name      string
		fail      func()
		call      func() error
		status    int
		retryable bool
	}{
		{"unknown group", func() {}, func() error {
			_, err := c.CreateRunner(ctx, gitlab.CreateOptions{Scope: gitlab.Scope{Type: "group", GroupID: 404}})
			return err
		}, http.StatusNotFound, false},
		{"rate limited", func() { srv.FailNext("POST", "/api/v4/user/runners", 429, 1) }, func() error {
			_, err := c.CreateRunner(ctx, gitlab.CreateOptions{Scope: gitlab.Scope{Type: "group", GroupID: 7}})
			return err
		}, http.StatusTooManyRequests, true},
		{"server error", func() { srv.FailNext("POST", "/api/v4/runners/*/reset_authentication_token", 502, 1) }, func() error {
			_, err := c.ResetToken(ctx, 1)
			return err
		}, http.StatusBadGateway, true},
		{"answer lost", func() { srv.DropAfterNext("POST", "/api/v4/user/runners", 1) }, func() error {
			_, err := c.CreateRunner(ctx, gitlab.CreateOptions{Scope: gitlab.Scope{Type: "group", GroupID: 7}})
			return err
		}, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.fail()
			err := tc.call()
			var ge *gitlab.Error
			if err == nil || !asError(err, &ge) {
				t.Fatalf("error %v", err)
			}
			if ge.Status != tc.status || ge.Retryable() != tc.retryable {
				t.Errorf("status %d retryable %v, want %d %v (%v)", ge.Status, ge.Retryable(), tc.status, tc.retryable, err)
			}
		})
	}
}

func TestDeletingARunnerThatIsGoneSucceeds(t *testing.T) {
	_, c := setup(t)
	if err := c.DeleteRunner(context.Background(), 999); err != nil {
		t.Fatalf("404 on delete: %v", err)
	}
}

func asError(err error, target **gitlab.Error) bool {
	e, ok := err.(*gitlab.Error)
	if ok {
		*target = e
	}
	return ok
}
