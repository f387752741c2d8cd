package policy

import (
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
		{"arn:aws:iam::1:role/ci-{namespace}-*", "team-a", "arn:aws:iam::1:role/ci-team-a-build", true},
		{"arn:aws:iam::1:role/ci-{namespace}-*", "team-a", "arn:aws:iam::1:role/ci-team-b-build", false},
		{"arn:aws:iam::1:role/ci-{namespace}-*", "team-a", "arn:aws:iam::1:role/ci-team-a-x/../admin", false},
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
