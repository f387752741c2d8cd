package policy

import (
	"math/rand/v2"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		pattern, ns, value string
		want               bool
	}{
		{"arn:aws:iam::1:role/ci-{namespace}.*", "team-a", "arn:aws:iam::1:role/ci-team-a.build", true},
		{"arn:aws:iam::1:role/ci-{namespace}.*", "team-a", "arn:aws:iam::1:role/ci-team-b.build", false},
		{"arn:aws:iam::1:role/ci-{namespace}.*", "team-a", "arn:aws:iam::1:role/ci-team-a.x/../admin", false},
		{"arn:aws:iam::*:role/prod/{namespace}/*", "x", "arn:aws:iam::1:role/prod/x/build", true},
		{"arn:aws:iam::*:role/prod/{namespace}/*", "x", "arn:aws:iam::1:role/prod/x-b/build", false},
		// The pattern: namespace x could take x-b's roles, so it matches nothing.
		{"arn:aws:iam::1:role/ci-{namespace}-*", "x", "arn:aws:iam::1:role/ci-x-b-build", false},
		{"arn:aws:iam::1:role/ci-{namespace}-*", "x-b", "arn:aws:iam::1:role/ci-x-b-build", false},
		{"{namespace}-??????@p.iam.gserviceaccount.com", "x", "x-1a2b3c@p.iam.gserviceaccount.com", true},
		{"{namespace}-??????@p.iam.gserviceaccount.com", "x", "x-b-1a2b3c@p.iam.gserviceaccount.com", false},
		{"{namespace}-??????@p.iam.gserviceaccount.com", "x-b", "x-b-1a2b3c@p.iam.gserviceaccount.com", true},
		{"arn:aws:iam::1:role/ci-{namespace}", "team-a", "arn:aws:iam::1:role/ci-team-a", true},
		{"arn:aws:iam::1:role/ci-{namespace}", "team-a", "arn:aws:iam::1:role/ci-team-ab", false},
		{"{namespace}-ci@p.iam.gserviceaccount.com", "web", "web-ci@p.iam.gserviceaccount.com", true},
		{"{namespace}-*@p.iam.gserviceaccount.com", "web", "web-x@evil.com@p.iam.gserviceaccount.com", false},
		{"*@p.iam.gserviceaccount.com", "web", "web@p.iam.gserviceaccount.com", false}, // no {namespace}: never
		{"ci-{namespace}.*", "a", "ci-a.b", true},
		{"ci-{namespace}.x", "a", "ci-aZx", false}, // '.' is literal, not a regexp
	}
	for _, c := range cases {
		if got := Match(c.pattern, c.ns, c.value); got != c.want {
			t.Errorf("Match(%q, %q, %q) = %v, want %v", c.pattern, c.ns, c.value, got, c.want)
		}
	}
}

func TestAmbiguousPatternsAreRefusedWithTheFix(t *testing.T) {
	for _, p := range []string{
		"arn:aws:iam::1:role/ci-{namespace}-*",
		"{namespace}-*@p.iam.gserviceaccount.com",
		"*-{namespace}@p.iam.gserviceaccount.com",
		"arn:aws:iam::1:role/*.{namespace}.*",
		"arn:aws:iam::1:role/{namespace}{namespace}",
		"arn:aws:iam::1:role/ci",
	} {
		if err := ValidatePattern(p); err == nil {
			t.Errorf("%q was accepted", p)
		}
	}
	err := ValidatePattern("arn:aws:iam::1:role/ci-{namespace}-*")
	if err == nil || !strings.Contains(err.Error(), "ci-{namespace}.*") {
		t.Errorf("the message does not show a fix: %v", err)
	}
	for _, p := range []string{
		"arn:aws:iam::1:role/ci-{namespace}.*",
		"arn:aws:iam::*:role/runnerfleet-prod/{namespace}/*",
		"{namespace}-??????@p.iam.gserviceaccount.com",
		"ci-{namespace}@p.iam.gserviceaccount.com",
		"*.{namespace}@p.iam.gserviceaccount.com",
		"arn:aws:iam::1:role/ci-{namespace}",
	} {
		if err := ValidatePattern(p); err != nil {
			t.Errorf("%q was refused: %v", p, err)
		}
	}
}

// TestPropertyNoValueMatchesForTwoNamespaces instantiates random patterns
// that ValidatePattern accepts for one namespace, with every '*' and '?'
// filled at random, and checks that no other namespace's Match accepts the
// value, namespaces chosen to be prefixes, suffixes and '-'-extensions of
// each other. It also checks that the rule is not vacuous: some refused
// patterns do match one value for two namespaces.
func TestPropertyNoValueMatchesForTwoNamespaces(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 11))
	pieces := []string{"a", "b", "-", ".", "_", "/", ":", "@", "*", "?", "1"}
	namespaces := []string{"a", "b", "a-b", "b-a", "a-a", "ab", "a-b-a", "b-a-b", "1", "a1", "a-1"}
	fill := func(pattern, ns string) string {
		var b strings.Builder
		for i, part := range strings.Split(pattern, Placeholder) {
			if i > 0 {
				b.WriteString(ns)
			}
			for _, c := range part {
				switch c {
				case '*':
					for range rnd.IntN(5) {
						b.WriteByte("ab-._1"[rnd.IntN(6)])
					}
				case '?':
					b.WriteByte("ab1"[rnd.IntN(3)])
				default:
					b.WriteRune(c)
				}
			}
		}
		return b.String()
	}
	accepted, ambiguousSeen := 0, 0
	for range 3000 {
		var b strings.Builder
		n := rnd.IntN(6)
		at := rnd.IntN(n + 1)
		for i := 0; i <= n; i++ {
			if i == at {
				b.WriteString(Placeholder)
			}
			if i < n {
				b.WriteString(pieces[rnd.IntN(len(pieces))])
			}
		}
		pattern := b.String()
		valid := ValidatePattern(pattern) == nil
		if valid {
			accepted++
		}
		for range 4 {
			own := namespaces[rnd.IntN(len(namespaces))]
			value := fill(pattern, own)
			for _, other := range namespaces {
				if other == own {
					continue
				}
				if valid && Match(pattern, other, value) {
					t.Fatalf("pattern %q: %q matches for namespace %s and %s", pattern, value, own, other)
				}
				if !valid && plainMatch(pattern, other, value) && plainMatch(pattern, own, value) {
					ambiguousSeen++
				}
			}
		}
	}
	if accepted < 150 || ambiguousSeen == 0 {
		t.Fatalf("the property is too weak: %d patterns accepted, %d ambiguous values among the refused", accepted, ambiguousSeen)
	}
}

// plainMatch is Match without the pattern check: what the policy did before.
func plainMatch(pattern, namespace, value string) bool {
	return matchUnchecked(pattern, namespace, value)
}

func TestCheck(t *testing.T) {
	class := &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec: v1alpha1.RunnerClassSpec{Policy: v1alpha1.RunnerClassPolicy{
			MaxConcurrency:       ptr.To[int32](40),
			AllowedCapacityTypes: []v1alpha1.CapacityType{v1alpha1.CapacityTypeSpot, v1alpha1.CapacityTypeOnDemand},
			Identity: v1alpha1.IdentityPolicy{
				GCPServiceAccountPatterns: []string{"ci-{namespace}@p.iam.gserviceaccount.com"},
			},
		}},
	}
	ok := func() *v1alpha1.RunnerSet {
		return &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "r"}}
	}
	cases := []struct {
		name   string
		mutate func(*v1alpha1.RunnerSet)
		reason string
		says   string
	}{
		{"defaults pass", func(*v1alpha1.RunnerSet) {}, "", ""},
		{"on-demand allowed here", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeOnDemand}
		}, "", ""},
		{"own service account", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{GCPServiceAccount: "ci-web@p.iam.gserviceaccount.com"}
		}, "", ""},
		{"another team's service account", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{GCPServiceAccount: "ci-api@p.iam.gserviceaccount.com"}
		}, v1alpha1.ReasonIdentityForbidden, "use one matching ci-web@p.iam.gserviceaccount.com"},
		{"aws role where none allowed", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: "arn:aws:iam::123456789012:role/x"}
		}, v1alpha1.ReasonIdentityForbidden, "allows no awsRoleARN identities"},
		{"privileged", func(rs *v1alpha1.RunnerSet) { rs.Spec.Jobs.Privileged = true }, v1alpha1.ReasonPrivilegedForbidden, "policy.allowPrivileged"},
		{"exactly at the concurrency cap", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.Replicas, rs.Spec.Managers.Concurrent = ptr.To[int32](4), 10
		}, "", ""},
		{"over the concurrency cap", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.Replicas, rs.Spec.Managers.Concurrent = ptr.To[int32](5), 10
		}, v1alpha1.ReasonConcurrencyTooHigh, "replicas × concurrent is 50 but RunnerClass shared allows at most 40"},
		// Autoscaled, at its most managers, replicas ignored.
		{"autoscaled over the cap at maxReplicas", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.Replicas, rs.Spec.Managers.Concurrent = ptr.To[int32](1), 10
			rs.Spec.Managers.Autoscale = &v1alpha1.ManagerAutoscale{MinReplicas: 0, MaxReplicas: 5, TargetRunningJobs: 8}
		}, v1alpha1.ReasonConcurrencyTooHigh, "autoscale.maxReplicas × concurrent is 50 but RunnerClass shared allows at most 40; lower managers.autoscale.maxReplicas"},
		{"autoscaled within the cap, replicas ignored", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.Replicas, rs.Spec.Managers.Concurrent = ptr.To[int32](9), 10
			rs.Spec.Managers.Autoscale = &v1alpha1.ManagerAutoscale{MinReplicas: 0, MaxReplicas: 4, TargetRunningJobs: 8}
		}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := ok()
			c.mutate(rs)
			v := Check(rs, class)
			switch {
			case c.reason == "" && v != nil:
				t.Fatalf("refused: %v", v)
			case c.reason != "" && v == nil:
				t.Fatal("allowed")
			case v != nil && (v.Reason != c.reason || !strings.Contains(v.Message, c.says)):
				t.Fatalf("got %s: %q; want %s saying %q", v.Reason, v.Message, c.reason, c.says)
			}
		})
	}
}

func TestSpotOnlyIsTheDefaultPolicy(t *testing.T) {
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "r"}}
	rs.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeOnDemand}
	v := Check(rs, &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}})
	if v == nil || v.Reason != v1alpha1.ReasonCapacityTypeForbidden {
		t.Fatalf("on-demand under a class with no policy: %v", v)
	}
}

func TestAJobsNamespaceTheClassDoesNotAllowIsRefusedNamingTheFieldAndTheFix(t *testing.T) {
	class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "eks"}}
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
	if v := Check(rs, class); v != nil {
		t.Fatalf("the derived jobs namespace needs no pattern: %v", v)
	}
	cases := []struct {
		patterns []string
		jobs     string
		says     []string // nil: allowed
	}{
		{nil, "ci-team-a", []string{"spec.jobs.namespace", "allows none", "team-a-build-j6"}},
		{[]string{"ci-{namespace}"}, "ci-team-a", nil},
		{[]string{"ci-{namespace}"}, "ci-team-b", []string{"spec.jobs.namespace", `"ci-team-b"`, "matching ci-team-a"}},
		{[]string{"{namespace}-ci-??"}, "team-a-ci-01", nil},
		{[]string{"{namespace}-ci-??"}, "team-a-b-ci-01", []string{"matching team-a-ci-??"}},
		// A '*' would let team-a name team-a-b's namespaces: such a pattern
		// matches nothing (admission refuses it too).
		{[]string{"{namespace}-*"}, "team-a-b-ci", []string{"allows none"}},
		// The team's own namespace is never a jobs namespace, whatever the class says.
		{[]string{"{namespace}"}, "team-a", []string{"the RunnerSet's own namespace", "API token"}},
	}
	for _, c := range cases {
		class.Spec.Policy.JobNamespaces = c.patterns
		rs.Spec.Jobs.Namespace = c.jobs
		v := Check(rs, class)
		if c.says == nil {
			if v != nil {
				t.Errorf("%v, %q: refused: %v", c.patterns, c.jobs, v)
			}
			continue
		}
		if v == nil || v.Reason != v1alpha1.ReasonJobsNamespaceForbidden {
			t.Errorf("%v, %q: %v, want %s", c.patterns, c.jobs, v, v1alpha1.ReasonJobsNamespaceForbidden)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(v.Message, s) {
				t.Errorf("%v, %q: message %q does not say %q", c.patterns, c.jobs, v.Message, s)
			}
		}
	}
}

// Without '*', one pattern never matches one value for two namespaces; the
// negative control shows the '*' pattern would.
func TestPropertyAJobsNamespacePatternNamesOneNamespacesJobs(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 19))
	word := func() string {
		b := make([]byte, 1+rnd.IntN(6))
		for i := range b {
			b[i] = "ab-"[rnd.IntN(3)]
		}
		return "x" + strings.Trim(string(b), "-") + "z"
	}
	for _, p := range []string{"ci-{namespace}", "{namespace}-ci-??", "?{namespace}-jobs"} {
		if err := ValidateJobNamespacePattern(p); err != nil {
			t.Fatal(err)
		}
		for range 2000 {
			a, b := word(), word()
			value := strings.ReplaceAll(p, Placeholder, a)
			value = strings.ReplaceAll(value, "?", "7")
			if a != b && matchUnchecked(p, b, value) {
				t.Fatalf("%q matches %q for namespaces %q and %q", p, value, a, b)
			}
		}
	}
	if ValidateJobNamespacePattern("{namespace}-*") == nil {
		t.Fatal("a '*' pattern was accepted")
	}
	if !matchUnchecked("{namespace}-*", "a", "a-b-ci") || !matchUnchecked("{namespace}-*", "a-b", "a-b-ci") {
		t.Fatal("negative control: '{namespace}-*' no longer shows two namespaces reaching one name")
	}
}
