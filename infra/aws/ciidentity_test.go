package aws

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
)

func withCI(projects []any) func(f map[string]any) {
	return func(f map[string]any) {
		f["ciIdentity"] = map[string]any{
			"projects": projects,
			"aws": map[string]any{"policyARNs": []string{
				"arn:aws:iam::aws:policy/AdministratorAccess", "arn:aws:iam::123456789012:policy/runnerfleet-deploy",
			}},
		}
	}
}

// The IAM OIDC provider's ARN names its issuer, as IAM makes it.
func oidcByURL(m *infratest.Mocks) {
	m.Outputs["aws:iam/openIdConnectProvider:OpenIdConnectProvider"] = func(r infratest.Resource) resource.PropertyMap {
		return resource.PropertyMap{"arn": resource.NewStringProperty("arn:aws:iam::123456789012:oidc-provider/" + strings.TrimPrefix(str(r, "url"), "https://"))}
	}
}

// The deploy pipeline's role trusts GitLab's ID tokens of exactly the named
// projects' branches, with the template's audience, through an OIDC
// provider for the GitLab instance, and holds the stack's managed policies.
func TestTheDeployRoleTrustsOnlyTheNamedBranches(t *testing.T) {
	d := deployWith(t, fleet(withCI([]any{
		map[string]any{"path": "platform/runner-stacks", "branches": []string{"main", "release"}},
		map[string]any{"path": "platform/other", "branches": []string{"main"}},
	})), oidcByURL)
	var gitlab []infratest.Resource
	for _, r := range d.m.ByToken("aws:iam/openIdConnectProvider:OpenIdConnectProvider") {
		if str(r, "url") == "https://gitlab.example.com" {
			gitlab = append(gitlab, r)
		}
	}
	if len(gitlab) != 1 || !slices.Equal(strs(gitlab[0], "clientIdLists"), []string{stackconfig.DefaultCIAudience}) {
		t.Fatalf("GitLab OIDC providers %v, want one for https://gitlab.example.com with audience sts.amazonaws.com", gitlab)
	}
	var role *infratest.Resource
	for _, r := range d.m.ByToken("aws:iam/role:Role") {
		if str(r, "name") == cluster+"-deploy" {
			role = &r
		}
	}
	if role == nil {
		t.Fatal("no deploy role " + cluster + "-deploy")
	}
	for _, r := range append([]infratest.Resource{*role}, gitlab...) {
		if !strings.Contains(r.Parent, "runnerfleet:aws:CIIdentity") || !strings.Contains(r.Provider, "pulumi:providers:aws::"+cluster+"-aws::") || tagsOf(r)[TagStack] != stack {
			t.Errorf("%s %s: parent %q, provider %q, tags %v: want under the CIIdentity component, on the stack's provider, with the stack's tags", r.Token, r.Name, r.Parent, r.Provider, tagsOf(r))
		}
	}
	doc := document(t, *role, "assumeRolePolicy")
	if len(doc.Statement) != 1 {
		t.Fatalf("%d trust statements, want 1", len(doc.Statement))
	}
	s := doc.Statement[0]
	if s.Effect != "Allow" || !slices.Equal(s.Action, []string{"sts:AssumeRoleWithWebIdentity"}) {
		t.Errorf("trusts %s %v, want Allow sts:AssumeRoleWithWebIdentity only", s.Effect, s.Action)
	}
	if len(s.Principal) != 1 || s.Principal["Federated"] != "arn:aws:iam::123456789012:oidc-provider/gitlab.example.com" {
		t.Errorf("principal %v, want the GitLab OIDC provider only", s.Principal)
	}
	want := map[string]map[string]any{"StringEquals": {
		"gitlab.example.com:sub": []string{
			"project_path:platform/runner-stacks:ref_type:branch:ref:main",
			"project_path:platform/runner-stacks:ref_type:branch:ref:release",
			"project_path:platform/other:ref_type:branch:ref:main",
		},
		"gitlab.example.com:aud": "sts.amazonaws.com",
	}}
	if !equalJSON(s.Condition, want) {
		c, _ := json.Marshal(s.Condition)
		t.Errorf("condition %s, want exactly %v", c, want)
	}
	if c, _ := json.Marshal(s.Condition); strings.Contains(string(c), "*") || strings.Contains(string(c), "Like") {
		t.Errorf("condition has a wildcard: %s", c)
	}
	var attached []string
	for _, r := range d.m.ByToken("aws:iam/rolePolicyAttachment:RolePolicyAttachment") {
		if str(r, "role") == cluster+"-deploy" {
			attached = append(attached, str(r, "policyArn"))
		}
	}
	if !slices.Equal(sorted(attached), []string{"arn:aws:iam::123456789012:policy/runnerfleet-deploy", "arn:aws:iam::aws:policy/AdministratorAccess"}) {
		t.Errorf("deploy role policies %v", attached)
	}

	// Without ciIdentity there is no deploy role and no GitLab provider.
	d = deployWith(t, fleet(nil), oidcByURL)
	for _, r := range d.m.ByToken("aws:iam/role:Role") {
		if str(r, "name") == cluster+"-deploy" {
			t.Error("a deploy role without ciIdentity")
		}
	}
	if n := len(d.m.ByToken("aws:iam/openIdConnectProvider:OpenIdConnectProvider")); n != 1 {
		t.Errorf("%d OIDC providers without ciIdentity, want the cluster's only", n)
	}
}

// A wildcard in a subject is refused before anything is declared: IAM's
// StringEquals would not expand it, but a trust that meant "any project"
// must not reach a stack.
func TestAWildcardDeploySubjectIsRefused(t *testing.T) {
	for _, p := range []map[string]any{
		{"path": "platform/*", "branches": []string{"main"}},
		{"path": "platform/runner-stacks", "branches": []string{"*"}},
	} {
		raw, err := json.Marshal(fleet(withCI([]any{p})))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stackconfig.Decode(raw, stack); err == nil || !strings.Contains(err.Error(), "ciIdentity.projects[0]") {
			t.Errorf("%v: %v, want refused naming ciIdentity.projects[0]", p, err)
		}
	}
}
