package naming

import (
	"regexp"
	"strings"
	"testing"
)

func TestNamesOfAShortRunnerSetAreReadable(t *testing.T) {
	r := For("team-a", "build")
	for got, want := range map[string]string{
		r.ManagerServiceAccount():        "build-manager",
		r.JobServiceAccount():            "build-job",
		r.Config():                       "build-config",
		r.Managers():                     "build-manager",
		r.Capacity():                     "rf-team-a-build",
		r.IAMRole("prod"):                "prod-team-a-build-job",
		r.ServiceAccountSubject():        "system:serviceaccount:team-a:build-job",
		r.ManagerServiceAccountSubject(): "system:serviceaccount:team-a:build-manager",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestLongNamesAreCutToMaxLengthAndStayDistinct(t *testing.T) {
	long := strings.Repeat("a", 70)
	a := For("ns", long+"x").Capacity()
	b := For("ns", long+"y").Capacity()
	if len(a) > MaxLength || len(b) > MaxLength {
		t.Fatalf("names longer than %d: %q (%d), %q (%d)", MaxLength, a, len(a), b, len(b))
	}
	if a == b {
		t.Fatalf("two different RunnerSets got the same name %q", a)
	}
	if a != For("ns", long+"x").Capacity() {
		t.Fatal("naming is not deterministic")
	}
}

func TestCutNamesNeverEndInASeparator(t *testing.T) {
	// 54 characters then '-' lands the cut right on a separator.
	n := Join(strings.Repeat("b", 53)+"-", strings.Repeat("c", 20))
	if strings.Contains(n, "--") || strings.HasSuffix(n, "-") {
		t.Fatalf("bad cut: %q", n)
	}
}

func TestGCPServiceAccountIDLeadsWithTheNamespaceAndFitsGoogleRules(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)
	longest := strings.Repeat("n", MaxGCPNamespace)
	for _, r := range []Runner{For("team-a", "build"), For("a", "b"), For(longest, strings.Repeat("r", 63))} {
		id := r.GCPServiceAccountID("runnerfleet-prod")
		if !valid.MatchString(id) {
			t.Errorf("%s/%s: %q is not a valid Google service account ID", r.Namespace, r.Name, id)
		}
		if !strings.HasPrefix(id, r.Namespace+"-") {
			t.Errorf("%s/%s: %q does not start with the namespace and '-', so a {namespace}-* pattern cannot match it", r.Namespace, r.Name, id)
		}
	}
	if id := For(longest+"n", "b").GCPServiceAccountID("c"); len(id) <= 30 {
		t.Errorf("a namespace one longer than MaxGCPNamespace gave %q (%d characters): MaxGCPNamespace is not the limit", id, len(id))
	}
}

func TestGCPServiceAccountIDsDifferByRunnerSetAndCluster(t *testing.T) {
	a := For("team-a", "build").GCPServiceAccountID("prod")
	for _, other := range []string{
		For("team-a", "deploy").GCPServiceAccountID("prod"),
		For("team-a", "build").GCPServiceAccountID("staging"),
	} {
		if other == a {
			t.Errorf("two identities share the account ID %q", a)
		}
	}
	if a != For("team-a", "build").GCPServiceAccountID("prod") {
		t.Error("GCPServiceAccountID is not deterministic")
	}
}
