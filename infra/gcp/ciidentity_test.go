package gcp

import (
	"maps"
	"strings"
	"testing"
)

// fleetWithCI is fleetJSON with ciIdentity.gcp for two projects.
var fleetWithCI = strings.Replace(fleetJSON, `"cache": {"expireDays": 7},`, `"cache": {"expireDays": 7},
  "ciIdentity": {
    "projects": [
      {"path": "platform/runner-stacks", "branches": ["main", "release"]},
      {"path": "platform/other", "branches": ["main"]}
    ],
    "gcp": {"serviceAccount": "deploy-sa@ci-project-1.iam.gserviceaccount.com"}
  },`, 1)

// The deploy pipeline's pool admits only the named projects' branch
// pipelines' tokens, from the GitLab issuer, and only those projects may
// impersonate the deploy service account.
func TestTheDeployPoolAdmitsOnlyTheNamedBranches(t *testing.T) {
	if fleetWithCI == fleetJSON {
		t.Fatal("the ciIdentity was not spliced in")
	}
	d := run(t, fleetWithCI)
	pool := d.m.Get(t, "gcp:iam/workloadIdentityPool:WorkloadIdentityPool", "runners-prod-ci-pool")
	if got := str(pool.Input("workloadIdentityPoolId")); got != "runners-prod" {
		t.Errorf("pool ID %q, want the cluster's name", got)
	}
	prov := d.m.Get(t, "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider", "runners-prod-ci-provider")
	if got := str(prov.Input("oidc.issuerUri")); got != "https://gitlab.example.com" {
		t.Errorf("issuer %q", got)
	}
	if v := prov.Input("oidc.allowedAudiences"); !v.IsNull() {
		t.Errorf("allowedAudiences %v: the template's token carries the provider's default audience", v)
	}
	mapping := map[string]string{}
	for k, v := range prov.Input("attributeMapping").ObjectValue() {
		mapping[string(k)] = str(v)
	}
	if !maps.Equal(mapping, map[string]string{
		"google.subject": "assertion.sub", "attribute.project_path": "assertion.project_path",
		"attribute.ref": "assertion.ref", "attribute.ref_type": "assertion.ref_type",
	}) {
		t.Errorf("attribute mapping %v", mapping)
	}
	want := `(assertion.project_path == "platform/runner-stacks" && assertion.ref_type == "branch" && assertion.ref in ["main", "release"]) || ` +
		`(assertion.project_path == "platform/other" && assertion.ref_type == "branch" && assertion.ref in ["main"])`
	if got := str(prov.Input("attributeCondition")); got != want {
		t.Errorf("attribute condition\n%s\nwant\n%s", got, want)
	}
	members := map[string]string{}
	for _, r := range d.m.ByToken("gcp:serviceaccount/iAMMember:IAMMember") {
		if strings.HasPrefix(r.Name, "runners-prod-ci-") {
			if sa := str(r.Input("serviceAccountId")); sa != "projects/ci-project-1/serviceAccounts/deploy-sa@ci-project-1.iam.gserviceaccount.com" {
				t.Errorf("%s binds on %q", r.Name, sa)
			}
			members[str(r.Input("member"))] = str(r.Input("role"))
		}
	}
	pool0 := "principalSet://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/runners-prod/attribute.project_path/"
	if !maps.Equal(members, map[string]string{pool0 + "platform/runner-stacks": WorkloadIdentityRole, pool0 + "platform/other": WorkloadIdentityRole}) {
		t.Errorf("bindings %v", members)
	}
	for _, r := range []string{pool.Parent, prov.Parent} {
		if !strings.Contains(r, "runnerfleet:gcp:CIIdentity") {
			t.Errorf("parent %q, want the CIIdentity component", r)
		}
	}
	// Without ciIdentity, none of it.
	if n := len(shared(t).m.ByToken("gcp:iam/workloadIdentityPool:WorkloadIdentityPool")); n != 0 {
		t.Errorf("%d pools without ciIdentity", n)
	}
}
