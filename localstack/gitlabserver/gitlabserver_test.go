package gitlabserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gitlab "gitlab.com/gitlab-org/api/client-go"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
)

const (
	adminPAT   = "glpat-admin-token"
	ownerPAT   = "glpat-owner-token"
	creatorPAT = "glpat-creator-only"
	readerPAT  = "glpat-read-api"
	managerPAT = "glpat-manage-runner"
	expiredPAT = "glpat-expired"

	groupID   int64 = 10
	projectID int64 = 20
	otherID   int64 = 30 // a group and a project the owner cannot reach
)

// newServer starts a server with a few users, and logs its requests to t.
func newServer(t *testing.T) *gitlabserver.Server {
	t.Helper()
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	srv.SetLogf(t.Logf)
	srv.AddUser(adminPAT, gitlabserver.User{Admin: true, Scopes: []string{gitlabserver.ScopeAPI}})
	owner := gitlabserver.User{Groups: []int64{groupID}, Projects: []int64{projectID}}
	withScopes := func(u gitlabserver.User, scopes ...string) gitlabserver.User {
		u.Scopes = scopes
		return u
	}
	srv.AddUser(ownerPAT, withScopes(owner, gitlabserver.ScopeAPI))
	srv.AddUser(creatorPAT, withScopes(owner, gitlabserver.ScopeCreateRunner))
	srv.AddUser(readerPAT, withScopes(owner, gitlabserver.ScopeReadAPI))
	srv.AddUser(managerPAT, withScopes(owner, gitlabserver.ScopeManageRunner, gitlabserver.ScopeCreateRunner))
	expired := withScopes(owner, gitlabserver.ScopeAPI)
	expired.ExpiresAt = time.Now().Add(-time.Minute)
	srv.AddUser(expiredPAT, expired)
	srv.AddGroup(otherID)
	srv.AddProject(otherID)
	return srv
}

// newClient is the real client-go against srv, with retries off so that
// every injected fault reaches the caller.
func newClient(t *testing.T, srv *gitlabserver.Server, pat string, opts ...gitlab.ClientOptionFunc) *gitlab.Client {
	t.Helper()
	opts = append([]gitlab.ClientOptionFunc{
		gitlab.WithBaseURL(srv.URL() + "/api/v4"),
		gitlab.WithCustomRetryMax(0),
	}, opts...)
	c, err := gitlab.NewClient(pat, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newDefaultClient keeps client-go's default retry policy.
func newDefaultClient(t *testing.T, srv *gitlabserver.Server, pat string) *gitlab.Client {
	t.Helper()
	c, err := gitlab.NewClient(pat, gitlab.WithBaseURL(srv.URL()+"/api/v4"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func groupRunner(desc string) *gitlab.CreateUserRunnerOptions {
	return &gitlab.CreateUserRunnerOptions{
		RunnerType:  gitlab.Ptr(gitlabserver.GroupType),
		GroupID:     gitlab.Ptr(groupID),
		Description: gitlab.Ptr(desc),
	}
}

func mustCreate(t *testing.T, c *gitlab.Client, o *gitlab.CreateUserRunnerOptions) *gitlab.UserRunner {
	t.Helper()
	r, _, err := c.Users.CreateUserRunner(o)
	if err != nil {
		t.Fatalf("CreateUserRunner: %v", err)
	}
	return r
}

func verify(c *gitlab.Client, tok string) (int, error) {
	resp, err := c.Runners.VerifyRegisteredRunner(&gitlab.VerifyRegisteredRunnerOptions{Token: gitlab.Ptr(tok)})
	if resp == nil {
		return 0, err
	}
	return resp.StatusCode, err
}

// apiError is the status and GitLab's message of a failed call; 404s come
// back from client-go as the bare gitlab.ErrNotFound, so the status is taken
// from the response.
func apiError(t *testing.T, resp *gitlab.Response, err error) (int, string) {
	t.Helper()
	if err == nil {
		t.Fatal("call succeeded, want an error")
	}
	var er *gitlab.ErrorResponse
	if errors.As(err, &er) {
		return er.Response.StatusCode, string(er.Body)
	}
	if errors.Is(err, gitlab.ErrNotFound) && resp != nil {
		return resp.StatusCode, err.Error()
	}
	t.Fatalf("want an API error, got %T %v", err, err)
	return 0, ""
}

func TestRunnerLifecycleThroughClientGo(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	srv.SetTokenLifetime(time.Hour)
	c := newClient(t, srv, ownerPAT)

	created, resp, err := c.Users.CreateUserRunner(&gitlab.CreateUserRunnerOptions{
		RunnerType:      gitlab.Ptr(gitlabserver.GroupType),
		GroupID:         gitlab.Ptr(groupID),
		Description:     gitlab.Ptr("fleet-a/0"),
		Paused:          gitlab.Ptr(true),
		Locked:          gitlab.Ptr(true),
		RunUntagged:     gitlab.Ptr(false),
		TagList:         &[]string{"k8s", "amd64"},
		AccessLevel:     gitlab.Ptr(gitlabserver.RefProtected),
		MaximumTimeout:  gitlab.Ptr(int64(3600)),
		MaintenanceNote: gitlab.Ptr("managed by runnerfleet"),
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("create status = %d, want 201", resp.StatusCode)
	}
	if !strings.HasPrefix(created.Token, gitlabserver.TokenPrefix) {
		t.Errorf("token does not start with %s", gitlabserver.TokenPrefix)
	}
	if created.TokenExpiresAt == nil || time.Until(*created.TokenExpiresAt) < 59*time.Minute {
		t.Errorf("token_expires_at = %v, want about an hour from now", created.TokenExpiresAt)
	}
	if code, err := verify(c, created.Token); err != nil || code != http.StatusOK {
		t.Errorf("verify new token = %d, %v; want 200", code, err)
	}

	stored := srv.Runners()
	if len(stored) != 1 {
		t.Fatalf("server has %d runners, want 1", len(stored))
	}
	want := gitlabserver.Runner{
		ID: created.ID, Type: gitlabserver.GroupType, GroupID: groupID, Description: "fleet-a/0",
		Tags: []string{"k8s", "amd64"}, RunUntagged: false, Locked: true, Paused: true,
		AccessLevel: gitlabserver.RefProtected, MaximumTimeout: 3600, MaintenanceNote: "managed by runnerfleet",
		Token: created.Token, TokenExpiresAt: *created.TokenExpiresAt, CreatedAt: stored[0].CreatedAt,
	}
	if got := stored[0]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stored runner\n got %+v\nwant %+v", got, want)
	}

	details, _, err := c.Runners.GetRunnerDetails(created.ID)
	if err != nil {
		t.Fatalf("details: %v", err)
	}
	if details.ID != created.ID || details.RunnerType != gitlabserver.GroupType || details.Description != "fleet-a/0" ||
		!details.Paused || !details.Locked || details.RunUntagged || details.AccessLevel != gitlabserver.RefProtected ||
		details.MaximumTimeout != 3600 || details.MaintenanceNote != "managed by runnerfleet" ||
		!slices.Equal(details.TagList, []string{"k8s", "amd64"}) || details.IsShared ||
		len(details.Groups) != 1 || details.Groups[0].ID != groupID || details.Status != "never_contacted" {
		t.Errorf("details = %+v", details)
	}

	listed, _, err := c.Runners.ListGroupsRunners(groupID, &gitlab.ListGroupsRunnersOptions{})
	if err != nil || len(listed) != 1 || listed[0].ID != created.ID || listed[0].Description != "fleet-a/0" {
		t.Fatalf("group runners = %+v, %v", listed, err)
	}

	reset, resp, err := c.Runners.ResetRunnerAuthenticationToken(created.ID)
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("reset status = %d, want 201 as GitLab answers", resp.StatusCode)
	}
	if *reset.Token == created.Token || !strings.HasPrefix(*reset.Token, gitlabserver.TokenPrefix) || reset.TokenExpiresAt == nil {
		t.Errorf("reset gave no fresh token with an expiry")
	}
	if code, _ := verify(c, created.Token); code != http.StatusForbidden {
		t.Errorf("verify old token = %d, want 403", code)
	}
	if srv.ValidToken(created.Token) {
		t.Error("old token still valid on the server")
	}
	if code, err := verify(c, *reset.Token); err != nil || code != http.StatusOK {
		t.Errorf("verify new token = %d, %v; want 200", code, err)
	}
	if got := srv.Runners()[0].TokenResets; got != 1 {
		t.Errorf("TokenResets = %d, want 1", got)
	}

	resp, err = c.Runners.DeleteRegisteredRunnerByID(created.ID)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete = %v, %v; want 204", resp, err)
	}
	if len(srv.Runners()) != 0 {
		t.Error("runner still on the server after delete")
	}
	if srv.ValidToken(*reset.Token) {
		t.Error("deleted runner's token still valid")
	}
	_, resp, err = c.Runners.GetRunnerDetails(created.ID)
	if code, _ := apiError(t, resp, err); code != http.StatusNotFound {
		t.Errorf("details after delete = %d, want 404", code)
	}
	resp, err = c.Runners.DeleteRegisteredRunnerByID(created.ID)
	if code, _ := apiError(t, resp, err); code != http.StatusNotFound {
		t.Errorf("second delete = %d, want 404", code)
	}
	if !errors.Is(err, gitlab.ErrNotFound) {
		t.Errorf("client-go reports a 404 as %v, want gitlab.ErrNotFound", err)
	}
}

func TestCreatedRunnerTypesLandInTheirScope(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	tests := []struct {
		name string
		pat  string
		opts *gitlab.CreateUserRunnerOptions
		want gitlabserver.Runner
	}{{
		name: "instance runner by an admin",
		pat:  adminPAT,
		opts: &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.InstanceType)},
		want: gitlabserver.Runner{Type: gitlabserver.InstanceType},
	}, {
		name: "group runner with a create_runner-only token",
		pat:  creatorPAT,
		opts: groupRunner("g"),
		want: gitlabserver.Runner{Type: gitlabserver.GroupType, GroupID: groupID, Description: "g"},
	}, {
		name: "project runner",
		pat:  ownerPAT,
		opts: &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.ProjectType), ProjectID: gitlab.Ptr(projectID)},
		want: gitlabserver.Runner{Type: gitlabserver.ProjectType, ProjectID: projectID},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustCreate(t, newClient(t, srv, tt.pat), tt.opts)
			if r.TokenExpiresAt != nil {
				t.Errorf("token_expires_at = %v, want null with no token lifetime", r.TokenExpiresAt)
			}
			i := slices.IndexFunc(srv.Runners(), func(s gitlabserver.Runner) bool { return s.ID == r.ID })
			if i < 0 {
				t.Fatal("runner not on the server")
			}
			got := srv.Runners()[i]
			if got.Type != tt.want.Type || got.GroupID != tt.want.GroupID || got.ProjectID != tt.want.ProjectID ||
				got.Description != tt.want.Description || !got.RunUntagged || got.AccessLevel != gitlabserver.NotProtected {
				t.Errorf("stored %+v, want type/scope/defaults of %+v", got, tt.want)
			}
		})
	}
}

func TestListingEndpointsPaginateLikeGitLab(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	owner := newClient(t, srv, ownerPAT)
	admin := newClient(t, srv, adminPAT)
	for i := range 2 {
		mustCreate(t, admin, &gitlab.CreateUserRunnerOptions{
			RunnerType: gitlab.Ptr(gitlabserver.InstanceType), Description: gitlab.Ptr(fmt.Sprintf("shared-%d", i)),
		})
	}
	for i := range 23 {
		mustCreate(t, owner, groupRunner(fmt.Sprintf("g-%d", i)))
		mustCreate(t, owner, &gitlab.CreateUserRunnerOptions{
			RunnerType: gitlab.Ptr(gitlabserver.ProjectType), ProjectID: gitlab.Ptr(projectID),
			Description: gitlab.Ptr(fmt.Sprintf("p-%d", i)),
		})
	}
	// A runner of a group the owner cannot see must not leak into listings.
	mustCreate(t, admin, &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.GroupType), GroupID: gitlab.Ptr(otherID)})

	const perPage = 10
	tests := []struct {
		name  string
		list  func(page int64) ([]*gitlab.Runner, *gitlab.Response, error)
		count int // instance runners are available to groups and projects too
	}{{
		name: "all runners (admin)",
		list: func(page int64) ([]*gitlab.Runner, *gitlab.Response, error) {
			return admin.Runners.ListAllRunners(&gitlab.ListRunnersOptions{ListOptions: gitlab.ListOptions{Page: page, PerPage: perPage}})
		},
		count: 2 + 23 + 23 + 1,
	}, {
		name: "group runners",
		list: func(page int64) ([]*gitlab.Runner, *gitlab.Response, error) {
			return owner.Runners.ListGroupsRunners(groupID, &gitlab.ListGroupsRunnersOptions{ListOptions: gitlab.ListOptions{Page: page, PerPage: perPage}})
		},
		count: 2 + 23,
	}, {
		name: "project runners",
		list: func(page int64) ([]*gitlab.Runner, *gitlab.Response, error) {
			return owner.Runners.ListProjectRunners(projectID, &gitlab.ListProjectRunnersOptions{ListOptions: gitlab.ListOptions{Page: page, PerPage: perPage}})
		},
		count: 2 + 23,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids []int64
			wantPages := int64((tt.count + perPage - 1) / perPage)
			for page := int64(1); page != 0; {
				got, resp, err := tt.list(page)
				if err != nil {
					t.Fatalf("page %d: %v", page, err)
				}
				if resp.TotalItems != int64(tt.count) || resp.TotalPages != wantPages || resp.CurrentPage != page || resp.ItemsPerPage != perPage {
					t.Errorf("page %d headers: total=%d pages=%d page=%d per_page=%d", page, resp.TotalItems, resp.TotalPages, resp.CurrentPage, resp.ItemsPerPage)
				}
				if page < wantPages && (len(got) != perPage || resp.NextPage != page+1 || resp.NextLink == "") {
					t.Errorf("page %d: %d items, next %d, next link %q", page, len(got), resp.NextPage, resp.NextLink)
				}
				if resp.FirstLink == "" || resp.LastLink == "" {
					t.Errorf("page %d: Link header lacks first/last", page)
				}
				for _, r := range got {
					ids = append(ids, r.ID)
				}
				page = resp.NextPage
			}
			if len(ids) != tt.count || !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
				t.Errorf("walked %d ids %v, want %d distinct ascending", len(ids), ids, tt.count)
			}
		})
	}

	t.Run("page past the end is empty", func(t *testing.T) {
		got, resp, err := owner.Runners.ListGroupsRunners(groupID, &gitlab.ListGroupsRunnersOptions{ListOptions: gitlab.ListOptions{Page: 9, PerPage: perPage}})
		if err != nil || len(got) != 0 || resp.NextPage != 0 || resp.TotalItems != 25 {
			t.Errorf("got %d runners, next %d, total %d, err %v", len(got), resp.NextPage, resp.TotalItems, err)
		}
	})
	t.Run("per_page is capped at 100 and defaults to 20", func(t *testing.T) {
		_, resp, err := admin.Runners.ListAllRunners(&gitlab.ListRunnersOptions{ListOptions: gitlab.ListOptions{PerPage: 500}})
		if err != nil || resp.ItemsPerPage != 100 {
			t.Errorf("per_page 500 gave %d, %v", resp.ItemsPerPage, err)
		}
		got, resp, err := admin.Runners.ListAllRunners(nil)
		if err != nil || resp.ItemsPerPage != 20 || len(got) != 20 {
			t.Errorf("default page: %d items, per_page %d, %v", len(got), resp.ItemsPerPage, err)
		}
	})
}

func TestListFiltersNarrowRunners(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	admin := newClient(t, srv, adminPAT)
	mustCreate(t, admin, &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.InstanceType), TagList: &[]string{"a", "b"}})
	mustCreate(t, admin, &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.GroupType), GroupID: gitlab.Ptr(groupID), Paused: gitlab.Ptr(true)})
	mustCreate(t, admin, &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.ProjectType), ProjectID: gitlab.Ptr(projectID), TagList: &[]string{"a"}})

	tests := []struct {
		name string
		opts gitlab.ListRunnersOptions
		want int
	}{
		{"no filter", gitlab.ListRunnersOptions{}, 3},
		{"instance type", gitlab.ListRunnersOptions{Type: gitlab.Ptr(gitlabserver.InstanceType)}, 1},
		{"group type", gitlab.ListRunnersOptions{Type: gitlab.Ptr(gitlabserver.GroupType)}, 1},
		{"paused", gitlab.ListRunnersOptions{Paused: gitlab.Ptr(true)}, 1},
		{"tag a", gitlab.ListRunnersOptions{TagList: &[]string{"a"}}, 2},
		{"tags a and b", gitlab.ListRunnersOptions{TagList: &[]string{"a", "b"}}, 1},
		{"never contacted", gitlab.ListRunnersOptions{Status: gitlab.Ptr("never_contacted")}, 3},
		{"online", gitlab.ListRunnersOptions{Status: gitlab.Ptr("online")}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := admin.Runners.ListAllRunners(&tt.opts)
			if err != nil || len(got) != tt.want {
				t.Errorf("got %d runners, %v; want %d", len(got), err, tt.want)
			}
		})
	}
	t.Run("unknown type is a 400", func(t *testing.T) {
		_, resp, err := admin.Runners.ListAllRunners(&gitlab.ListRunnersOptions{Type: gitlab.Ptr("specific")})
		if code, body := apiError(t, resp, err); code != http.StatusBadRequest || !strings.Contains(body, "type does not have a valid value") {
			t.Errorf("got %d %s", code, body)
		}
	})
}

func TestAuthAndPermissionErrorsMatchGitLab(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	instanceRunner := mustCreate(t, newClient(t, srv, adminPAT), &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.InstanceType)})
	groupRun := mustCreate(t, newClient(t, srv, ownerPAT), groupRunner("x"))

	create := func(pat string, o *gitlab.CreateUserRunnerOptions) func(*testing.T) (*gitlab.Response, error) {
		return func(t *testing.T) (*gitlab.Response, error) {
			_, resp, err := newClient(t, srv, pat).Users.CreateUserRunner(o)
			return resp, err
		}
	}
	tests := []struct {
		name     string
		call     func(*testing.T) (*gitlab.Response, error)
		wantCode int
		wantBody string
	}{
		{"missing PAT is 401", create("", groupRunner("x")), 401, `{"message":"401 Unauthorized"}`},
		{"unknown PAT is 401", create("glpat-nobody", groupRunner("x")), 401, `{"message":"401 Unauthorized"}`},
		{"expired PAT is 401 invalid_token", create(expiredPAT, groupRunner("x")), 401, `"error":"invalid_token"`},
		{"PAT without create_runner is 403 insufficient_scope", create(readerPAT, groupRunner("x")), 403, `"error":"insufficient_scope"`},
		{
			"non-admin instance runner is 403",
			create(ownerPAT, &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.InstanceType)}),
			403, "403 Forbidden - Insufficient permissions",
		},
		{
			"unknown group is 404",
			create(ownerPAT, &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.GroupType), GroupID: gitlab.Ptr(int64(999))}),
			404, "",
		},
		{
			"group the user cannot reach is 404",
			create(ownerPAT, &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.GroupType), GroupID: gitlab.Ptr(otherID)}),
			404, "",
		},
		{
			"unknown project is 404",
			create(ownerPAT, &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.ProjectType), ProjectID: gitlab.Ptr(int64(999))}),
			404, "",
		},
		{
			"listing all runners as a non-admin is 403",
			func(t *testing.T) (*gitlab.Response, error) {
				_, resp, err := newClient(t, srv, ownerPAT).Runners.ListAllRunners(nil)
				return resp, err
			},
			403, `{"message":"403 Forbidden"}`,
		},
		{
			"manage_runner cannot list all runners",
			func(t *testing.T) (*gitlab.Response, error) {
				_, resp, err := newClient(t, srv, managerPAT).Runners.ListAllRunners(nil)
				return resp, err
			},
			403, `"scope":"api read_api"`,
		},
		{
			"create_runner alone cannot list group runners",
			func(t *testing.T) (*gitlab.Response, error) {
				_, resp, err := newClient(t, srv, creatorPAT).Runners.ListGroupsRunners(groupID, nil)
				return resp, err
			},
			403, "insufficient_scope",
		},
		{
			"read_api cannot reset a token",
			func(t *testing.T) (*gitlab.Response, error) {
				_, resp, err := newClient(t, srv, readerPAT).Runners.ResetRunnerAuthenticationToken(groupRun.ID)
				return resp, err
			},
			403, "insufficient_scope",
		},
		{
			"non-admin cannot delete an instance runner",
			func(t *testing.T) (*gitlab.Response, error) {
				return newClient(t, srv, managerPAT).Runners.DeleteRegisteredRunnerByID(instanceRunner.ID)
			},
			403, "403 Forbidden - No access granted",
		},
		{
			"listing a group the user cannot reach is 404",
			func(t *testing.T) (*gitlab.Response, error) {
				_, resp, err := newClient(t, srv, ownerPAT).Runners.ListGroupsRunners(otherID, nil)
				return resp, err
			},
			404, "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := tt.call(t)
			code, body := apiError(t, resp, err)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("got %d %s; want %d containing %s", code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
	if n := len(srv.Runners()); n != 2 {
		t.Errorf("refused calls changed the server: %d runners, want 2", n)
	}
}

func TestManageRunnerScopeCanManageButNotCreateInstanceRunners(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := newClient(t, srv, managerPAT)
	r := mustCreate(t, c, groupRunner("m"))
	if _, _, err := c.Runners.GetRunnerDetails(r.ID); err != nil {
		t.Errorf("details: %v", err)
	}
	if _, _, err := c.Runners.ListProjectRunners(projectID, nil); err != nil {
		t.Errorf("project runners: %v", err)
	}
	if _, _, err := c.Runners.ResetRunnerAuthenticationToken(r.ID); err != nil {
		t.Errorf("reset: %v", err)
	}
	if _, err := c.Runners.DeleteRegisteredRunnerByID(r.ID); err != nil {
		t.Errorf("delete: %v", err)
	}
}

func TestCreateRunnerRejectsBadParameters(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := newClient(t, srv, ownerPAT)
	tests := []struct {
		name     string
		opts     *gitlab.CreateUserRunnerOptions
		wantBody string
	}{
		{"runner_type missing", &gitlab.CreateUserRunnerOptions{}, `{"error":"runner_type is missing"}`},
		{"runner_type unknown", &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr("specific")}, "runner_type does not have a valid value"},
		{"group_id missing", &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.GroupType)}, "group_id is missing"},
		{"project_id missing", &gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.ProjectType)}, "project_id is missing"},
		{
			"access_level unknown",
			&gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.GroupType), GroupID: gitlab.Ptr(groupID), AccessLevel: gitlab.Ptr("protected")},
			"access_level does not have a valid value",
		},
		{
			"maximum_timeout under ten minutes",
			&gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.GroupType), GroupID: gitlab.Ptr(groupID), MaximumTimeout: gitlab.Ptr(int64(60))},
			"Maximum timeout needs to be at least 10 minutes",
		},
		{
			"untagged jobs refused without tags",
			&gitlab.CreateUserRunnerOptions{RunnerType: gitlab.Ptr(gitlabserver.GroupType), GroupID: gitlab.Ptr(groupID), RunUntagged: gitlab.Ptr(false)},
			"Tags list can not be empty",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, resp, err := c.Users.CreateUserRunner(tt.opts)
			if code, body := apiError(t, resp, err); code != http.StatusBadRequest || !strings.Contains(body, tt.wantBody) {
				t.Errorf("got %d %s; want 400 containing %s", code, body, tt.wantBody)
			}
		})
	}
	if n := len(srv.Runners()); n != 0 {
		t.Errorf("%d runners created by bad requests", n)
	}
}

func TestRunnerAPIEndpoints(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := newClient(t, srv, ownerPAT)
	r := mustCreate(t, c, groupRunner("v"))
	tests := []struct {
		name     string
		call     func() (*gitlab.Response, error)
		wantCode int
		wantBody string
	}{{
		name: "registration with a registration token is gone",
		call: func() (*gitlab.Response, error) {
			_, resp, err := c.Runners.RegisterNewRunner(&gitlab.RegisterNewRunnerOptions{Token: gitlab.Ptr("GR1348941legacy")})
			return resp, err
		},
		wantCode: http.StatusGone,
		wantBody: "410 Gone - runner registration disallowed",
	}, {
		name: "verify with an unknown token is forbidden",
		call: func() (*gitlab.Response, error) {
			return c.Runners.VerifyRegisteredRunner(&gitlab.VerifyRegisteredRunnerOptions{Token: gitlab.Ptr("glrt-unknown")})
		},
		wantCode: http.StatusForbidden,
		wantBody: `{"message":"403 Forbidden"}`,
	}, {
		name: "verify without a token is a 400",
		call: func() (*gitlab.Response, error) {
			return c.Runners.VerifyRegisteredRunner(&gitlab.VerifyRegisteredRunnerOptions{})
		},
		wantCode: http.StatusBadRequest,
		wantBody: "token is missing",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := tt.call()
			if code, body := apiError(t, resp, err); code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("got %d %s; want %d containing %s", code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
	t.Run("delete by authentication token removes the runner", func(t *testing.T) {
		resp, err := c.Runners.DeleteRegisteredRunner(&gitlab.DeleteRegisteredRunnerOptions{Token: gitlab.Ptr(r.Token)})
		if err != nil || resp.StatusCode != http.StatusNoContent || len(srv.Runners()) != 0 {
			t.Errorf("got %v, %v, %d runners left", resp, err, len(srv.Runners()))
		}
	})
}

func TestExpiredRunnerTokenNoLongerVerifies(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	// The lifetime runs on the wall clock from the create: long enough
	// that a loaded machine still reads the fresh token before it ends.
	const lifetime = time.Second
	srv.SetTokenLifetime(lifetime)
	c := newClient(t, srv, ownerPAT)
	created := time.Now()
	r := mustCreate(t, c, groupRunner("e"))
	if !srv.ValidToken(r.Token) && time.Since(created) < lifetime {
		t.Fatal("fresh token invalid")
	}
	time.Sleep(time.Until(created.Add(lifetime + 50*time.Millisecond)))
	if srv.ValidToken(r.Token) {
		t.Error("expired token still valid")
	}
	if code, _ := verify(c, r.Token); code != http.StatusForbidden {
		t.Errorf("verify expired token = %d, want 403", code)
	}
}

func TestFailNextAnswersWithoutActing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
	}{
		{"rate limited", http.StatusTooManyRequests, `{"message":"429 Too Many Requests"}`},
		{"internal error", http.StatusInternalServerError, `{"message":"500 Internal Server Error"}`},
		{"unavailable", http.StatusServiceUnavailable, `{"message":"503 Service Unavailable"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			c := newClient(t, srv, ownerPAT)
			srv.FailNext(http.MethodPost, "/api/v4/user/runners", tt.status, 2)
			for i := range 2 {
				_, resp, err := c.Users.CreateUserRunner(groupRunner("f"))
				if code, body := apiError(t, resp, err); code != tt.status || body != tt.body {
					t.Errorf("call %d: got %d %s; want %d %s", i, code, body, tt.status, tt.body)
				}
			}
			if n := len(srv.Runners()); n != 0 {
				t.Errorf("failed calls created %d runners", n)
			}
			mustCreate(t, c, groupRunner("f")) // the fault is used up
			if got := srv.Calls(http.MethodPost, "/api/v4/user/runners"); got != 3 {
				t.Errorf("Calls = %d, want 3", got)
			}
		})
	}
}

func TestFaultsAreConsumedInOrderAndMatchByPattern(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := newClient(t, srv, ownerPAT)
	r := mustCreate(t, c, groupRunner("o"))

	srv.FailNext("*", "/api/v4/runners/*", http.StatusInternalServerError, 1)
	srv.FailNext(http.MethodDelete, "/api/v4/runners/*", http.StatusBadGateway, 1)
	srv.FailNext(http.MethodGet, "/api/v4/groups/*/runners", http.StatusServiceUnavailable, 1)

	// The reset path has one more segment, so "/api/v4/runners/*" misses it.
	if _, _, err := c.Runners.ResetRunnerAuthenticationToken(r.ID); err != nil {
		t.Fatalf("reset hit a fault meant for /runners/*: %v", err)
	}
	var codes []int
	for range 3 {
		resp, err := c.Runners.DeleteRegisteredRunnerByID(r.ID)
		if err == nil {
			codes = append(codes, resp.StatusCode)
			continue
		}
		code, _ := apiError(t, resp, err)
		codes = append(codes, code)
	}
	if want := []int{500, 502, 204}; !slices.Equal(codes, want) {
		t.Errorf("delete statuses = %v, want %v", codes, want)
	}
	_, resp, err := c.Runners.ListGroupsRunners(groupID, nil)
	if code, _ := apiError(t, resp, err); code != http.StatusServiceUnavailable {
		t.Errorf("group list = %d, want 503", code)
	}

	if got := srv.Calls(http.MethodDelete, "/api/v4/runners/*"); got != 3 {
		t.Errorf("DELETE calls = %d, want 3", got)
	}
	if got := srv.Calls("*", "/api/v4/runners/*/reset_authentication_token"); got != 1 {
		t.Errorf("reset calls = %d, want 1", got)
	}
	srv.FailNext(http.MethodGet, "/api/v4/groups/*/runners", http.StatusServiceUnavailable, 1)
	srv.Reset()
	if got := srv.Calls("", "/api/v4/*"); got != 0 {
		t.Errorf("Calls after Reset = %d, want 0", got)
	}
	if _, _, err := c.Runners.ListGroupsRunners(groupID, nil); err != nil {
		t.Errorf("fault survived Reset: %v", err)
	}
	if len(srv.Runners()) != 0 {
		t.Error("Reset brought back the runner deleted above; it must leave state alone")
	}
}

func TestClientGoDefaultRetriesHideTransientStatuses(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusTooManyRequests, http.StatusInternalServerError} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			srv.FailNext(http.MethodPost, "/api/v4/user/runners", status, 1)
			start := time.Now()
			if _, _, err := newDefaultClient(t, srv, ownerPAT).Users.CreateUserRunner(groupRunner("r")); err != nil {
				t.Fatalf("default client did not retry past one %d: %v", status, err)
			}
			t.Logf("retried past %d in %s", status, time.Since(start).Round(time.Millisecond))
			if got := srv.Calls(http.MethodPost, "/api/v4/user/runners"); got != 2 {
				t.Errorf("Calls = %d, want 2 (one failure, one retry)", got)
			}
			if n := len(srv.Runners()); n != 1 {
				t.Errorf("%d runners, want 1", n)
			}
		})
	}
}

func TestDropAfterNextActsButClientSeesTransportError(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	// Keep client-go's default retry policy: it must not retry a POST whose
	// connection broke after the request was sent.
	c := newDefaultClient(t, srv, ownerPAT)
	srv.DropAfterNext(http.MethodPost, "/api/v4/user/runners", 1)

	got, resp, err := c.Users.CreateUserRunner(groupRunner("lost"))
	if err == nil {
		t.Fatalf("create succeeded (%+v), want a transport error", got)
	}
	var er *gitlab.ErrorResponse
	var ue *url.Error
	if errors.As(err, &er) || resp != nil || !errors.As(err, &ue) {
		t.Errorf("want a transport error without a response, got %T %v (resp %v)", err, err, resp)
	}
	runners := srv.Runners()
	if len(runners) != 1 || runners[0].Description != "lost" || !srv.ValidToken(runners[0].Token) {
		t.Fatalf("server runners = %+v, want the one created before the drop", runners)
	}
	if n := srv.Calls(http.MethodPost, "/api/v4/user/runners"); n != 1 {
		t.Errorf("Calls = %d, want 1: client-go retried a POST", n)
	}

	// A reset whose answer is lost still rotates the token.
	srv.DropAfterNext(http.MethodPost, "/api/v4/runners/*/reset_authentication_token", 1)
	if _, _, err := c.Runners.ResetRunnerAuthenticationToken(runners[0].ID); err == nil {
		t.Fatal("reset succeeded, want a transport error")
	}
	if srv.ValidToken(runners[0].Token) || srv.Runners()[0].TokenResets != 1 {
		t.Error("dropped reset did not rotate the token on the server")
	}
}

func TestDropAfterNextOnGETIsRetriedByNetHTTPOnAReusedConnection(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := newClient(t, srv, adminPAT) // client-go retries off
	if _, _, err := c.Runners.ListAllRunners(nil); err != nil {
		t.Fatal(err) // leaves a kept-alive connection in the pool
	}
	srv.Reset()
	srv.DropAfterNext(http.MethodGet, "/api/v4/runners/all", 1)
	_, _, err := c.Runners.ListAllRunners(nil)
	calls := srv.Calls(http.MethodGet, "/api/v4/runners/all")
	t.Logf("after one drop on a reused connection: err=%v, server saw %d requests", err, calls)
	if err != nil || calls != 2 {
		t.Errorf("want net/http's silent replay of an idempotent request: err=%v calls=%d", err, calls)
	}

	// Two drops in a row are not hidden: the replay uses a fresh connection.
	srv.DropAfterNext(http.MethodGet, "/api/v4/runners/all", 2)
	if _, _, err := c.Runners.ListAllRunners(nil); err == nil {
		t.Error("two drops hidden from the caller")
	}
}

func TestDelayNextOutlastsClientTimeoutYetServerActs(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	// client-go's default retry policy, with a short HTTP timeout: a request
	// that timed out is not retried, as the server may have acted on it.
	c, err := gitlab.NewClient(ownerPAT,
		gitlab.WithBaseURL(srv.URL()+"/api/v4"),
		gitlab.WithHTTPClient(&http.Client{Timeout: 100 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	srv.DelayNext(http.MethodPost, "/api/v4/user/runners", time.Second, 1)

	_, _, err = c.Users.CreateUserRunner(groupRunner("slow"))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("want a client timeout, got %v", err)
	}
	if n := len(srv.Runners()); n != 0 {
		t.Errorf("runner created before the delay ran out (%d)", n)
	}
	if n := srv.Calls(http.MethodPost, "/api/v4/user/runners"); n != 1 {
		t.Errorf("Calls = %d, want 1: client-go retried a timed-out POST", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(srv.Runners()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(srv.Runners()); n != 1 {
		t.Errorf("after the delay the server has %d runners, want 1", n)
	}
	mustCreate(t, c, groupRunner("fast")) // the delay is used up
}

func TestDelayNextStopsWhenServerCloses(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := newClient(t, srv, ownerPAT)
	srv.DelayNext("", "/api/v4/user/runners", time.Hour, 1)
	errc := make(chan error, 1)
	go func() {
		_, _, err := c.Users.CreateUserRunner(groupRunner("never"))
		errc <- err
	}()
	for srv.Calls("", "/api/v4/user/runners") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked on a delayed request")
	}
	if err := <-errc; err == nil {
		t.Error("delayed request succeeded after Close")
	}
	if n := len(srv.Runners()); n != 0 {
		t.Errorf("request dropped at Close still acted: %d runners", n)
	}
}

func TestConcurrentCreatesGetDistinctRunners(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	srv.SetLogf(nil)
	c := newClient(t, srv, ownerPAT)
	var wg sync.WaitGroup
	ids := make([]int64, 16)
	for i := range ids {
		wg.Go(func() {
			r, _, err := c.Users.CreateUserRunner(groupRunner(fmt.Sprint(i)))
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = r.ID
		})
	}
	wg.Wait()
	slices.Sort(ids)
	if len(slices.Compact(ids)) != 16 || len(srv.Runners()) != 16 {
		t.Errorf("ids %v, %d runners", ids, len(srv.Runners()))
	}
}

func TestLogsNeverCarryTokens(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	var mu sync.Mutex
	var lines []string
	srv.SetLogf(func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	})
	c := newClient(t, srv, ownerPAT)
	r := mustCreate(t, c, groupRunner("l"))
	reset, _, err := c.Runners.ResetRunnerAuthenticationToken(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = verify(c, *reset.Token)
	srv.DropAfterNext("", "/api/v4/runners/verify", 1)
	_, _ = verify(c, *reset.Token)
	// A PAT in the query string must not reach the log either.
	resp, err := http.Get(srv.URL() + "/api/v4/groups/10/runners?private_token=" + ownerPAT)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.Contains(resp.Header.Get("Link"), "per_page") || strings.Contains(resp.Header.Get("Link"), ownerPAT) {
		t.Errorf("Link header %q", resp.Header.Get("Link"))
	}

	mu.Lock()
	defer mu.Unlock()
	if len(lines) == 0 {
		t.Fatal("nothing logged")
	}
	for _, l := range lines {
		for _, secret := range []string{r.Token, *reset.Token, ownerPAT, gitlabserver.TokenPrefix} {
			if strings.Contains(l, secret) {
				t.Errorf("log line carries a token: %q", l)
			}
		}
	}
}

func TestContextCancellationReachesDelayedRequest(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	c := newClient(t, srv, adminPAT)
	srv.DelayNext(http.MethodGet, "/api/v4/runners/all", 300*time.Millisecond, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := c.Runners.ListAllRunners(nil, gitlab.WithContext(ctx))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("want context.DeadlineExceeded, got %v", err)
	}
}

// TestWireFormat checks the bytes on the wire that client-go does not look at
// closely: exact JSON keys, pagination headers, other request encodings.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	do := func(method, path, contentType, body, pat string) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if pat != "" {
			req.Header.Set("PRIVATE-TOKEN", pat)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if resp.StatusCode != http.StatusNoContent && strings.HasPrefix(path, "/api/v4/user") {
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
		}
		return resp, m
	}

	t.Run("create answers id, token and a null expiry", func(t *testing.T) {
		resp, m := do(http.MethodPost, "/api/v4/user/runners", "application/json",
			`{"runner_type":"group_type","group_id":"10","tag_list":"a, b","paused":"true"}`, ownerPAT)
		if resp.StatusCode != http.StatusCreated || len(m) != 3 || m["token_expires_at"] != nil ||
			!strings.HasPrefix(fmt.Sprint(m["token"]), gitlabserver.TokenPrefix) || m["id"] == nil {
			t.Errorf("got %d %v", resp.StatusCode, m)
		}
		r := srv.Runners()[0]
		if !slices.Equal(r.Tags, []string{"a", "b"}) || !r.Paused || r.GroupID != groupID {
			t.Errorf("string-typed JSON parameters not coerced as Grape does: %+v", r)
		}
	})
	t.Run("create accepts a form body with repeated tag_list[]", func(t *testing.T) {
		resp, _ := do(http.MethodPost, "/api/v4/user/runners", "application/x-www-form-urlencoded",
			"runner_type=project_type&project_id=20&tag_list[]=x&tag_list[]=y", ownerPAT)
		last := srv.Runners()[len(srv.Runners())-1]
		if resp.StatusCode != http.StatusCreated || !slices.Equal(last.Tags, []string{"x", "y"}) {
			t.Errorf("got %d, tags %v", resp.StatusCode, last.Tags)
		}
	})
	t.Run("expired PAT gets an OAuth-style 401", func(t *testing.T) {
		resp, m := do(http.MethodPost, "/api/v4/user/runners", "application/json", `{}`, expiredPAT)
		if resp.StatusCode != 401 || m["error"] != "invalid_token" || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Errorf("got %d %v %q", resp.StatusCode, m, resp.Header.Get("WWW-Authenticate"))
		}
	})
	t.Run("pagination headers", func(t *testing.T) {
		srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType})
		resp, _ := do(http.MethodGet, "/api/v4/runners/all?per_page=1&page=2", "", "", adminPAT)
		want := map[string]string{
			"X-Page": "2", "X-Per-Page": "1", "X-Total": "3", "X-Total-Pages": "3", "X-Next-Page": "3", "X-Prev-Page": "1",
		}
		for k, v := range want {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
		link := resp.Header.Get("Link")
		for _, rel := range []string{`rel="prev"`, `rel="next"`, `rel="first"`, `rel="last"`} {
			if !strings.Contains(link, rel) {
				t.Errorf("Link %q lacks %s", link, rel)
			}
		}
	})
	t.Run("unknown route and wrong method", func(t *testing.T) {
		if resp, _ := do(http.MethodGet, "/api/v4/runners/all/nope", "", "", adminPAT); resp.StatusCode != 404 {
			t.Errorf("unknown route = %d", resp.StatusCode)
		}
		if resp, _ := do(http.MethodPut, "/api/v4/runners/all", "", "", adminPAT); resp.StatusCode != 405 {
			t.Errorf("PUT /runners/all = %d", resp.StatusCode)
		}
		if resp, _ := do(http.MethodGet, "/api/v4/runners/abc", "", "", adminPAT); resp.StatusCode != 400 {
			t.Errorf("non-numeric runner id = %d", resp.StatusCode)
		}
	})
}
