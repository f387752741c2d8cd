package stackconfig

import (
	"errors"
	"strings"
	"testing"
)

func ciFleet(t *testing.T, ci map[string]any) []byte {
	t.Helper()
	return eksFleet(t, nil, map[string]any{"ciIdentity": ci})
}

func goodCI() map[string]any {
	return map[string]any{
		"projects": []any{map[string]any{"path": "platform/runner-stacks", "branches": []string{"main"}}},
		"aws":      map[string]any{"policyARNs": []string{"arn:aws:iam::aws:policy/AdministratorAccess"}},
	}
}

func TestCIIdentityDefaultsAndSubjects(t *testing.T) {
	f, err := Decode(ciFleet(t, goodCI()), "dev")
	if err != nil {
		t.Fatal(err)
	}
	c := f.CIIdentity
	if c.Issuer != "https://gitlab.example.com" || c.IssuerHost() != "gitlab.example.com" || c.Audience != DefaultCIAudience || c.AWS.RoleName != "runnerfleet-dev-deploy" {
		t.Errorf("defaults: %+v %+v", c, c.AWS)
	}
	if got := c.Subjects(); len(got) != 1 || got[0] != "project_path:platform/runner-stacks:ref_type:branch:ref:main" {
		t.Errorf("subjects: %q", got)
	}
}

// Input that would let more than the named pipelines deploy, or that the
// clouds cannot use, is refused naming the key.
func TestCIIdentityRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(m map[string]any)
		key  string
	}{
		"http issuer": {func(m map[string]any) { m["issuer"] = "http://gitlab.example.com" }, "ciIdentity.issuer"},
		"no projects": {func(m map[string]any) { delete(m, "projects") }, "ciIdentity.projects"},
		"wildcard project": {func(m map[string]any) {
			m["projects"] = []any{map[string]any{"path": "*", "branches": []string{"main"}}}
		}, "ciIdentity.projects[0].path"},
		"wildcard group": {func(m map[string]any) {
			m["projects"] = []any{map[string]any{"path": "platform/*", "branches": []string{"main"}}}
		}, "ciIdentity.projects[0].path"},
		"no branches": {func(m map[string]any) { m["projects"] = []any{map[string]any{"path": "platform/x"}} }, "ciIdentity.projects[0].branches"},
		"wildcard branch": {func(m map[string]any) {
			m["projects"] = []any{map[string]any{"path": "platform/x", "branches": []string{"*"}}}
		}, "ciIdentity.projects[0].branches[0]"},
		"audience glob": {func(m map[string]any) { m["audience"] = "*" }, "ciIdentity.audience"},
		"no cloud":      {func(m map[string]any) { delete(m, "aws") }, "ciIdentity"},
		"no policy":     {func(m map[string]any) { m["aws"] = map[string]any{} }, "ciIdentity.aws.policyARNs"},
		"bad policy":    {func(m map[string]any) { m["aws"] = map[string]any{"policyARNs": []string{"AdministratorAccess"}} }, "ciIdentity.aws.policyARNs[0]"},
		"unknown key":   {func(m map[string]any) { m["azure"] = map[string]any{} }, "ciIdentity.azure"},
		"quote in branch": {func(m map[string]any) {
			m["projects"] = []any{map[string]any{"path": "platform/x", "branches": []string{`main" || true`}}}
		}, "ciIdentity.projects[0].branches[0]"},
		"gcp on eks": {func(m map[string]any) {
			m["gcp"] = map[string]any{"serviceAccount": "deploy-sa@p-123456.iam.gserviceaccount.com"}
		}, "ciIdentity.gcp"},
	} {
		t.Run(name, func(t *testing.T) {
			m := goodCI()
			tc.edit(m)
			_, err := Decode(ciFleet(t, m), "dev")
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("accepted (err %v)", err)
			}
			if !strings.Contains(err.Error(), "runnerfleet:fleet."+tc.key+":") && !strings.Contains(err.Error(), "runnerfleet:fleet."+tc.key+" ") {
				t.Errorf("the error does not name %s:\n%v", tc.key, err)
			}
		})
	}
}

func TestCIIdentityAWSNeedsEKS(t *testing.T) {
	m := goodCI()
	raw := fleetJSON(t, "gke", "gcp", map[string]any{"project": "p-123456", "region": "europe-west1"}, nil, map[string]any{"ciIdentity": m})
	if _, err := Decode(raw, "dev"); err == nil || !strings.Contains(err.Error(), "ciIdentity.aws") {
		t.Errorf("ciIdentity.aws on gke: %v", err)
	}
}

func gkeCI(t *testing.T, gcp map[string]any) []byte {
	t.Helper()
	m := goodCI()
	delete(m, "aws")
	m["gcp"] = gcp
	return fleetJSON(t, "gke", "gcp", map[string]any{"project": "p-123456", "region": "europe-west1"}, nil, map[string]any{"ciIdentity": m})
}

func TestCIIdentityGCP(t *testing.T) {
	f, err := Decode(gkeCI(t, map[string]any{"serviceAccount": "deploy-sa@p-123456.iam.gserviceaccount.com"}), "dev")
	if err != nil {
		t.Fatal(err)
	}
	if g := f.CIIdentity.GCP; g.PoolID != "runnerfleet-dev" || g.ProviderID != "gitlab" {
		t.Errorf("defaults %+v", g)
	}
	for key, gcp := range map[string]map[string]any{
		"serviceAccount": {"serviceAccount": "deploy-sa"},
		"poolID":         {"serviceAccount": "deploy-sa@p-123456.iam.gserviceaccount.com", "poolID": "gcp-pool"},
		"providerID":     {"serviceAccount": "deploy-sa@p-123456.iam.gserviceaccount.com", "providerID": "Git Lab"},
	} {
		if _, err := Decode(gkeCI(t, gcp), "dev"); err == nil || !strings.Contains(err.Error(), "ciIdentity.gcp."+key+":") {
			t.Errorf("%s: %v", key, err)
		}
	}
}
