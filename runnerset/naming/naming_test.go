package naming

import (
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamesOfAShortRunnerSetAreReadable(t *testing.T) {
	r := For("team-a", "build")
	for got, want := range map[string]string{
		r.ManagerServiceAccount():        "build-manager",
		r.JobServiceAccount():            "build-job",
		r.Config():                       "build-config",
		r.Managers():                     "build-manager",
		r.Capacity():                     "rf-team-a.build",
		r.IAMRole("prod"):                "prod.team-a.build-job",
		r.ManagerServiceAccountSubject(): "system:serviceaccount:team-a:build-manager",
		r.JobsNamespace():                "team-a-build-j6",
		r.ServiceAccountSubject():        "system:serviceaccount:team-a-build-j6:build-job",
		r.WithJobs("ci-team-a").ServiceAccountSubject(): "system:serviceaccount:ci-team-a:build-job",
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

// derived lists every name derived from one RunnerSet, by the scope in
// which it must be unique: "cluster" names are shared by every namespace,
// the others only by the RunnerSets of one namespace.
func derived(r Runner) map[string]string {
	return map[string]string{
		"cluster/capacity/all":      r.Capacity(),
		"cluster/iam/prod":          r.IAMRole("runnerfleet-prod"),
		"cluster/iam/prod-eu":       r.IAMRole("runnerfleet-prod-eu"),
		"ns/serviceaccount/manager": r.ManagerServiceAccount(),
		"ns/serviceaccount/job":     r.JobServiceAccount(),
		"ns/role/manager":           r.ManagerRole(),
		"ns/rolebinding/executor":   r.ManagerExecutorBinding(),
		"ns/deployment/managers":    r.Managers(),
		"ns/secret/config":          r.Config(),
		"ns/secret/runner-token":    r.RunnerToken(),
		"cluster/subject/manager":   r.ManagerServiceAccountSubject(),
		"cluster/subject/job":       r.ServiceAccountSubject(),
		"cluster/namespace/jobs":    r.JobsNamespace(),
	}
}

// kindOf is the scope and kind of a derived key: two names of one kind
// (the two ServiceAccounts, the Secrets, the roles of two clusters of one
// account) must never be equal.
func kindOf(key string) string {
	parts := strings.Split(key, "/")
	return parts[0] + "/" + parts[1]
}

func checkDistinct(t *testing.T, a, b Runner) {
	t.Helper()
	if a == b {
		return
	}
	na, nb := derived(a), derived(b)
	for ka, va := range na {
		for kb, vb := range nb {
			if kindOf(ka) != kindOf(kb) || va != vb {
				continue
			}
			if strings.HasPrefix(ka, "ns/") && a.Namespace != b.Namespace {
				continue // namespaced names only meet in one namespace
			}
			t.Fatalf("%s/%s (%s) and %s/%s (%s) share the name %q", a.Namespace, a.Name, ka, b.Namespace, b.Name, kb, va)
		}
	}
	// Each name fits its limit and is valid where it is used.
	for _, r := range []Runner{a, b} {
		for k, v := range derived(r) {
			if strings.Contains(k, "subject") {
				continue
			}
			if len(v) > MaxLength {
				t.Fatalf("%s of %s/%s is %d characters: %q", k, r.Namespace, r.Name, len(v), v)
			}
			if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
				t.Fatalf("%s of %s/%s, %q, is not a DNS-1123 subdomain: %v", k, r.Namespace, r.Name, v, errs)
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Fatalf("%s of %s/%s, %q, is not a label value: %v", k, r.Namespace, r.Name, v, errs)
			}
		}
		if errs := validation.IsDNS1123Label(r.JobsNamespace()); len(errs) > 0 {
			t.Fatalf("jobs namespace of %s/%s, %q, is not a namespace name: %v", r.Namespace, r.Name, r.JobsNamespace(), errs)
		}
		if gcp := r.GCPServiceAccountID("c"); len(r.Namespace) <= MaxGCPNamespace && !strings.HasPrefix(gcp, r.Namespace+"-") {
			t.Fatalf("GCP account ID %q does not lead with namespace %q", gcp, r.Namespace)
		}
	}
	// Google account IDs are "<namespace>-<hash>": across namespaces they
	// differ by construction (within one, the stack config refuses clashes
	// of the hash).
	if a.Namespace != b.Namespace && a.GCPServiceAccountID("c") == b.GCPServiceAccountID("c") {
		t.Fatalf("%s/%s and %s/%s share the Google account ID %q", a.Namespace, a.Name, b.Namespace, b.Name, a.GCPServiceAccountID("c"))
	}
}

func TestAdversarialSplitsOfOneStringGetDistinctNames(t *testing.T) {
	// Every way of cutting one string into a namespace and a name at a '-'
	// is another RunnerSet; joined with '-' they would all be one name.
	for _, s := range []string{"team-a-b-c", "a-b-c-d-e-f-g", strings.Repeat("ab-", 40) + "z", "x-b-build", "team-" + strings.Repeat("q", 50) + "-build"} {
		var rs []Runner
		for i, c := range s {
			if c != '-' {
				continue
			}
			ns, name := s[:i], s[i+1:]
			if len(ns) > 63 || len(name) > 63 || len(validation.IsDNS1123Label(ns)) > 0 {
				continue
			}
			rs = append(rs, For(ns, name))
		}
		if len(rs) < 2 {
			t.Fatalf("%q gives fewer than two RunnerSets", s)
		}
		for _, a := range rs {
			for _, b := range rs {
				checkDistinct(t, a, b)
			}
		}
	}
	// The pair from the issue, and names that differ only past the cut.
	checkDistinct(t, For("team-a-b", "c"), For("team-a", "b-c"))
	long := strings.Repeat("n", 63)
	checkDistinct(t, For(long, long[:62]+"a"), For(long, long[:62]+"b"))
	checkDistinct(t, For(long[:30], "x."+long[:40]), For(long[:30]+"-x", long[:40]))
}

func TestPropertyNoTwoRunnerSetsShareADerivedName(t *testing.T) {
	// A tiny alphabet makes near-collisions (shared prefixes, '-' and '.'
	// at every place, names cut at the same length) the common case.
	rnd := rand.New(rand.NewPCG(11, 2))
	word := func(alphabet string, maxLen int) string {
		for {
			n := 1 + rnd.IntN(maxLen)
			b := make([]byte, n)
			for i := range b {
				b[i] = alphabet[rnd.IntN(len(alphabet))]
			}
			s := string(b)
			if len(validation.IsDNS1123Subdomain(s)) == 0 {
				return s
			}
		}
	}
	var rs []Runner
	seen := map[Runner]bool{}
	for len(rs) < 1500 {
		maxLen := 8
		if rnd.IntN(4) == 0 {
			maxLen = 63 // long enough to be cut
		}
		ns := word("ab-", maxLen)
		if len(validation.IsDNS1123Label(ns)) > 0 {
			continue
		}
		r := For(ns, word("ab-.", maxLen))
		if !seen[r] {
			seen[r] = true
			rs = append(rs, r)
		}
	}
	byName := map[string]Runner{}
	for _, r := range rs {
		for k, v := range derived(r) {
			if strings.HasPrefix(k, "ns/") {
				v = r.Namespace + "/" + v
			}
			key := kindOf(k) + "=" + v
			if other, ok := byName[key]; ok && other != r {
				checkDistinct(t, other, r) // fails with both names
				t.Fatalf("%s/%s and %s/%s share %s", other.Namespace, other.Name, r.Namespace, r.Name, key)
			}
			byName[key] = r
		}
	}
	for i := 0; i < 3000; i++ {
		checkDistinct(t, rs[rnd.IntN(len(rs))], rs[rnd.IntN(len(rs))])
	}
}

// The old scheme, for the negative control: joining with '-' collides.
func TestJoiningWithDashAloneWouldCollide(t *testing.T) {
	if Join("rf", "team-a-b", "c") != Join("rf", "team-a", "b-c") {
		t.Fatal("Join no longer shows the collision Scoped exists for")
	}
}

// The negative control of the jobs namespace's length marker: without it,
// team-a-b/c and team-a/b-c would share their jobs namespace, and one
// team's manager would create pods among the other's jobs.
func TestAJobsNamespaceWithoutTheLengthMarkerWouldCollide(t *testing.T) {
	a, b := For("team-a-b", "c"), For("team-a", "b-c")
	if a.Namespace+"-"+a.Name != b.Namespace+"-"+b.Name {
		t.Fatal("the pair no longer shows the collision the marker exists for")
	}
	if a.JobsNamespace() == b.JobsNamespace() {
		t.Fatalf("both get %q", a.JobsNamespace())
	}
}

// The length marker reads back: a jobs namespace names exactly one
// RunnerSet, which is what makes the derivation injective.
func TestADerivedJobsNamespaceReadsBackItsRunnerSet(t *testing.T) {
	for _, r := range []Runner{For("team-a", "build"), For("team-a-b", "c"), For("a", "b-j1"), For("x-j1", "y")} {
		jn := r.JobsNamespace()
		i := strings.LastIndex(jn, "-j")
		n, err := strconv.Atoi(jn[i+2:])
		if err != nil || jn[n] != '-' {
			t.Fatalf("%q: no length marker (%v)", jn, err)
		}
		if ns, name := jn[:n], jn[n+1:i]; ns != r.Namespace || name != r.Name {
			t.Errorf("%q reads back as %s/%s, want %s/%s", jn, ns, name, r.Namespace, r.Name)
		}
	}
	dotted := For("team-a", "build.v2").JobsNamespace()
	if errs := validation.IsDNS1123Label(dotted); len(errs) > 0 || strings.Contains(dotted, "-j") {
		t.Errorf("a RunnerSet name with '.' gives %q (%v), want a cut name with a hash", dotted, errs)
	}
}

// A class's node class name is a valid object name however long or dotted
// the class's name (up to a DNS subdomain's 253 characters), tells classes
// apart, and never is a tag's capacity name.
func TestClassCapacityNamesAreValidAndDistinct(t *testing.T) {
	long := strings.Repeat("a", 240)
	names := map[string]string{}
	for _, class := range []string{"ci", "ci.large", long + "-one", long + "-two", strings.Repeat("b.", 120) + "c"} {
		got := ClassCapacity(class)
		if len(got) > MaxLength {
			t.Errorf("ClassCapacity(%.20s…) = %q: %d characters, more than %d", class, got, len(got), MaxLength)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("ClassCapacity(%.20s…) = %q: %v", class, got, errs)
		}
		if strings.HasPrefix(got, "rf-") {
			t.Errorf("ClassCapacity(%.20s…) = %q could be a tag's capacity name", class, got)
		}
		if other, ok := names[got]; ok {
			t.Errorf("classes %.20s… and %.20s… share node class %q", class, other, got)
		}
		names[got] = class
	}
	if got := ClassCapacity("ci"); got != "rfclass-ci" {
		t.Errorf("ClassCapacity(ci) = %q, want the readable rfclass-ci", got)
	}
}
