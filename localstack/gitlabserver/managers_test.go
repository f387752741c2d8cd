package gitlabserver_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
)

// DELETE /runners/managers takes the runner's token and the manager's
// system_id, as gitlab-runner unregister sends them (a JSON body) or as
// GitLab's docs show them (the query); it deletes that manager only.
func TestDeleteManagerByRunnerTokenAndSystemID(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	r := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType})
	other := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType})
	for _, id := range []string{"r_json0000000", "r_query000000", "r_kept0000000"} {
		srv.SetManager(r.ID, gitlabserver.Manager{SystemID: id})
	}
	srv.SetManager(other.ID, gitlabserver.Manager{SystemID: "r_json0000000"})
	del := func(query, body string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodDelete, srv.URL()+"/api/v4/runners/managers"+query, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := del("", `{"token":"`+r.Token+`","system_id":"r_json0000000"}`); code != http.StatusNoContent {
		t.Errorf("JSON body: %d", code)
	}
	if code := del("?"+url.Values{"token": {r.Token}, "system_id": {"r_query000000"}}.Encode(), ""); code != http.StatusNoContent {
		t.Errorf("query: %d", code)
	}
	if code := del("", `{"token":"`+r.Token+`","system_id":"r_query000000"}`); code != http.StatusNotFound {
		t.Errorf("a manager already deleted: %d, want 404", code)
	}
	if code := del("", `{"token":"`+r.Token+`"}`); code != http.StatusBadRequest {
		t.Errorf("no system_id: %d, want 400", code)
	}
	if code := del("", `{"token":"glrt-nobody","system_id":"r_kept0000000"}`); code != http.StatusForbidden {
		t.Errorf("an unknown token: %d, want 403", code)
	}
	if got := srv.Managers(r.ID); !slices.Equal(got, []string{"r_kept0000000"}) {
		t.Errorf("managers left: %v", got)
	}
	if got := srv.Managers(other.ID); !slices.Equal(got, []string{"r_json0000000"}) {
		t.Errorf("another runner's manager of the same system_id: %v", got)
	}
}

// GitLab judges managers by its own clock; SetClock moves it.
func TestManagersStatusFollowsTheServersClock(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	r := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType})
	srv.SetManager(r.ID, gitlabserver.Manager{SystemID: "r_a0000000000"})
	status := func() string {
		c := newClient(t, srv, adminPAT)
		d, _, err := c.Runners.GetRunnerDetails(r.ID)
		if err != nil {
			t.Fatal(err)
		}
		return d.Status
	}
	for _, tc := range []struct {
		ahead time.Duration
		want  string
	}{{0, "online"}, {3 * time.Hour, "offline"}, {8 * 24 * time.Hour, "stale"}} {
		srv.SetClock(func() time.Time { return time.Now().Add(tc.ahead) })
		if got := status(); got != tc.want {
			t.Errorf("%v later: %s, want %s", tc.ahead, got, tc.want)
		}
	}
}
