package vmfleet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
)

func groupRunner(t *testing.T, srv *gitlabserver.Server, pat string, declared ...string) vmfleet.GroupRunner {
	t.Helper()
	api, err := gitlab.New(srv.URL(), pat, gitlab.Options{Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	tags, err := vmimage.GroupTags(vmimage.OSWindows, "2022", declared)
	if err != nil {
		t.Fatal(err)
	}
	return vmfleet.GroupRunner{
		API: api, Group: "wsrm", OS: vmimage.OSWindows, OSVersion: "2022", Tags: tags,
		RunnerTags: func(ctx context.Context, id int64) ([]string, error) {
			d, err := gitlab.GetRunner(ctx, srv.URL(), pat, id, gitlab.Options{Retries: -1})
			return d.Tags, err
		},
	}
}

// The group's runner is created in the loopback GitLab with windows and
// windows-<version>; a rerun adopts it instead of creating another.
func TestAVMGroupsRunnerIsCreatedWithTheGroupsTags(t *testing.T) {
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	const pat = "glpat-admin"
	srv.AddUser(pat, gitlabserver.User{Admin: true, Scopes: []string{gitlabserver.ScopeAPI}})
	gr := groupRunner(t, srv, pat)
	ctx := context.Background()
	id, tok, err := gr.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tok == nil || tok.Value == "" || tok.RunnerID != id {
		t.Fatalf("created runner %d without its token: %+v", id, tok)
	}
	rs := srv.Runners()
	if len(rs) != 1 || rs[0].ID != id || !slices.Equal(rs[0].Tags, []string{"windows", "windows-2022"}) || !strings.Contains(rs[0].Description, vmfleet.RunnerMarker("wsrm")) {
		t.Fatalf("GitLab's runners: %+v", rs)
	}
	again, tok, err := gr.Ensure(ctx)
	if err != nil || again != id || tok != nil || len(srv.Runners()) != 1 {
		t.Fatalf("rerun: runner %d, token %v, %v; %d runners in GitLab", again, tok, err, len(srv.Runners()))
	}
}

// An existing runner is adopted only when its tags in GitLab are the
// group's: a windows-1809 runner for a Windows 2022 image is refused,
// naming the version; the negative control, a runner with the group's
// tags, is adopted.
func TestAnAdoptedRunnerWhoseTagsDisagreeIsRefused(t *testing.T) {
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	const pat = "glpat-reader"
	srv.AddUser(pat, gitlabserver.User{Admin: true, Scopes: []string{gitlabserver.ScopeAPI}})
	ctx := context.Background()

	good := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"windows", "windows-2022"}})
	gr := groupRunner(t, srv, pat)
	gr.ID = good.ID
	if id, tok, err := gr.Ensure(ctx); err != nil || id != good.ID || tok != nil {
		t.Fatalf("negative control: a runner with the group's tags: %d, %v, %v", id, tok, err)
	}

	for _, tc := range []struct {
		tags []string
		want []string
	}{
		{[]string{"windows", "windows-1809"}, []string{"windows-1809", "the image is windows 2022 (os-version)", "lacks windows-2022"}},
		{[]string{"windows"}, []string{"lacks windows-2022"}},
		{[]string{"windows", "windows-2022", "gpu"}, []string{"carries gpu, which the group does not declare"}},
	} {
		r := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: tc.tags})
		gr.ID = r.ID
		_, _, err := gr.Ensure(ctx)
		var ie *vmimage.InputError
		if !errors.As(err, &ie) || ie.Key != vmimage.TagsKey {
			t.Errorf("runner tagged %v: %v, want an error naming %s", tc.tags, err, vmimage.TagsKey)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("runner tagged %v: %v, want %q", tc.tags, err, w)
			}
		}
	}

	// Declared tags replace the default ones, and are what is checked.
	declared := groupRunner(t, srv, pat, "shared-windows", "windows-2022")
	r := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"shared-windows", "windows-2022"}})
	declared.ID = r.ID
	if _, _, err := declared.Ensure(ctx); err != nil {
		t.Errorf("a runner with the declared tags: %v", err)
	}
}
