package gitlabserver_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
)

// scopeTable is GitLab's documented rule of which access token scopes may
// call each runner endpoint the fake serves. Sources:
//   - https://docs.gitlab.com/security/tokens/access_token_scopes/ (api:
//     complete read and write access; read_api: read access; create_runner:
//     create runners; manage_runner: manage runners)
//   - https://docs.gitlab.com/api/users/#create-a-runner-linked-to-a-user
//     (POST /user/runners: "an access token with the create_runner scope";
//     the api scope grants everything)
//   - https://docs.gitlab.com/api/runners/ (every endpoint below) and the
//     merge request that introduced manage_runner,
//     https://gitlab.com/gitlab-org/gitlab/-/merge_requests/153285, whose
//     tables list the endpoints manage_runner opens (GET, PUT, DELETE
//     /runners/:id, POST /runners/:id/reset_authentication_token, GET
//     /projects/:id/runners, GET /groups/:id/runners) and those it does not
//     (GET /runners, GET /runners/all: insufficient_scope).
//
// The runner API's own endpoints (POST /runners/verify, DELETE /runners)
// authenticate with the runner's token, not an access token, and are not
// in the table.
var scopeTable = []struct {
	method, path string
	allowed      []string
}{
	{"POST", "/user/runners", []string{"api", "create_runner"}},
	{"GET", "/runners", []string{"api", "read_api"}},
	{"GET", "/runners/all", []string{"api", "read_api"}},
	{"GET", "/runners/:id", []string{"api", "read_api", "manage_runner"}},
	{"GET", "/runners/:id/managers", []string{"api", "read_api", "manage_runner"}},
	{"PUT", "/runners/:id", []string{"api", "manage_runner"}},
	{"DELETE", "/runners/:id", []string{"api", "manage_runner"}},
	{"POST", "/runners/:id/reset_authentication_token", []string{"api", "manage_runner"}},
	{"GET", "/groups/:group/runners", []string{"api", "read_api", "manage_runner"}},
	{"GET", "/projects/:project/runners", []string{"api", "read_api", "manage_runner"}},
	// https://docs.gitlab.com/api/jobs/ (GET a single job: read_api or api).
	{"GET", "/projects/:project/jobs/:job", []string{"api", "read_api"}},
}

// TestEveryEndpointEnforcesGitLabsScopeTable calls every endpoint as an
// administrator whose token holds exactly one scope, and checks that the
// fake refuses with insufficient_scope exactly where GitLab does.
func TestEveryEndpointEnforcesGitLabsScopeTable(t *testing.T) {
	scopes := []string{gitlabserver.ScopeAPI, gitlabserver.ScopeReadAPI, gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner}
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	for _, sc := range scopes {
		srv.AddUser("glpat-only-"+sc, gitlabserver.User{Admin: true, Scopes: []string{sc}, Groups: []int64{groupID}, Projects: []int64{projectID}})
	}
	job := srv.QueueProjectJob(projectID, nil, 0)
	for _, row := range scopeTable {
		for _, sc := range scopes {
			t.Run(fmt.Sprintf("%s %s with %s", row.method, row.path, sc), func(t *testing.T) {
				r := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.GroupType, GroupID: groupID, Description: "scope"})
				p := strings.NewReplacer(":id", fmt.Sprint(r.ID), ":group", fmt.Sprint(groupID), ":project", fmt.Sprint(projectID), ":job", fmt.Sprint(job)).Replace(row.path)
				var body io.Reader
				if row.method == "POST" && row.path == "/user/runners" {
					body = strings.NewReader(fmt.Sprintf(`{"runner_type":"group_type","group_id":%d}`, groupID))
				}
				req, err := http.NewRequest(row.method, srv.URL()+"/api/v4"+p, body)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Private-Token", "glpat-only-"+sc)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var got map[string]any
				b, _ := io.ReadAll(resp.Body)
				_ = json.Unmarshal(b, &got)
				refused := resp.StatusCode == http.StatusForbidden && got["error"] == "insufficient_scope"
				want := !containsScope(row.allowed, sc)
				if refused != want {
					t.Errorf("status %d %s: refused for want of scope = %v, GitLab's table says %v", resp.StatusCode, b, refused, want)
				}
				if !refused && resp.StatusCode >= 400 {
					t.Errorf("an allowed scope was answered %d %s", resp.StatusCode, b)
				}
			})
		}
	}
}

func containsScope(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
