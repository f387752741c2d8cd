package controller_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/distribution/reference"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	"github.com/runnerfleet/runnerfleet/runnerset/policy"
)

// The API server itself refuses bad specs, naming the field and the fix.
func TestAdmissionRefusesBadRunnerSetsNamingTheField(t *testing.T) {
	ns := newNamespace(t)
	q := resource.MustParse
	cases := []struct {
		name   string
		mutate func(*v1alpha1.RunnerSet)
		want   []string
	}{
		{"no tags", func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = nil }, []string{"spec.tags"}},
		{"tag with a comma", func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = []string{"a,b"} }, []string{"spec.tags[0]", "list each tag as its own item"}},
		{"no token source", func(rs *v1alpha1.RunnerSet) { rs.Spec.GitLab.TokenSecretRef = nil }, []string{"spec.gitlab", "exactly one of tokenSecretRef"}},
		{"two token sources", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.GitLab.Runner = &v1alpha1.RunnerRegistration{Type: v1alpha1.RunnerTypeInstance, APITokenSecretRef: v1alpha1.SecretKeyRef{Name: "pat"}}
		}, []string{"spec.gitlab", "exactly one of tokenSecretRef"}},
		{"a read token beside a created runner", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.GitLab.TokenSecretRef = nil
			rs.Spec.GitLab.Runner = &v1alpha1.RunnerRegistration{Type: v1alpha1.RunnerTypeGroup, GroupID: ptr.To[int64](7), APITokenSecretRef: v1alpha1.SecretKeyRef{Name: "pat"}}
			rs.Spec.GitLab.ReadTokenSecretRef = &v1alpha1.SecretKeyRef{Name: "read"}
		}, []string{"spec.gitlab", "readTokenSecretRef is for a runner whose glrt- token you bring"}},
		{"group runner without a group", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.GitLab.TokenSecretRef = nil
			rs.Spec.GitLab.Runner = &v1alpha1.RunnerRegistration{Type: v1alpha1.RunnerTypeGroup, APITokenSecretRef: v1alpha1.SecretKeyRef{Name: "pat"}}
		}, []string{"spec.gitlab.runner", "runner.type group needs runner.groupID"}},
		{"instance runner with a project", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.GitLab.TokenSecretRef = nil
			rs.Spec.GitLab.Runner = &v1alpha1.RunnerRegistration{Type: v1alpha1.RunnerTypeInstance, ProjectID: ptr.To[int64](7), APITokenSecretRef: v1alpha1.SecretKeyRef{Name: "pat"}}
		}, []string{"spec.gitlab.runner", "an instance runner takes neither groupID nor projectID"}},
		{"maximum timeout below GitLab's minimum", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.GitLab.TokenSecretRef = nil
			rs.Spec.GitLab.Runner = &v1alpha1.RunnerRegistration{Type: v1alpha1.RunnerTypeGroup, GroupID: ptr.To[int64](7),
				APITokenSecretRef: v1alpha1.SecretKeyRef{Name: "pat"}, MaximumTimeout: &metav1.Duration{Duration: 5 * 60e9}}
		}, []string{"spec.gitlab.runner.maximumTimeout", "at least 10m"}},
		{"ftp gitlab url", func(rs *v1alpha1.RunnerSet) { rs.Spec.GitLab.URL = "ftp://gitlab" }, []string{"spec.gitlab.url", "http(s) URL"}},
		{"shutdown timeout too short", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.ShutdownTimeout = &metav1.Duration{Duration: 10e9}
		}, []string{"spec.managers.shutdownTimeout", "no shorter than your longest job"}},
		{"orphaned job grace period too long", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.OrphanedJobGracePeriod = &metav1.Duration{Duration: 49 * 3600e9}
		}, []string{"spec.managers.orphanedJobGracePeriod", "between 0s and 48h"}},
		{"orphaned job grace period negative", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.OrphanedJobGracePeriod = &metav1.Duration{Duration: -1e9}
		}, []string{"spec.managers.orphanedJobGracePeriod", "between 0s and 48h"}},
		{"check interval zero", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.CheckInterval = &metav1.Duration{}
		}, []string{"spec.managers.checkInterval", "between 1s and 1h"}},
		{"negative replicas", func(rs *v1alpha1.RunnerSet) { rs.Spec.Managers.Replicas = ptr.To[int32](-1) }, []string{"spec.managers.replicas"}},
		{"two identities", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: "arn:aws:iam::123456789012:role/x", GCPServiceAccount: "x@p.iam.gserviceaccount.com"}
		}, []string{"spec.jobs.identity", "exactly one of awsRoleARN or gcpServiceAccount"}},
		{"malformed role ARN", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: "role/ci"}
		}, []string{"spec.jobs.identity.awsRoleARN"}},
		{"request above limit", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Jobs.Resources.Build = v1alpha1.ContainerResources{CPURequest: ptr.To(q("2")), CPULimit: ptr.To(q("500m"))}
		}, []string{"spec.jobs.resources.build", "cpuRequest must not exceed cpuLimit"}},
		{"gpu limit", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Capacity.Limits = corev1.ResourceList{"nvidia.com/gpu": q("1")}
		}, []string{"spec.capacity.limits", "takes only cpu and memory"}},
		{"unknown capacity type", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{"reserved"}
		}, []string{"spec.capacity.capacityTypes[0]", `"spot", "on-demand"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := runnerSet(ns, "bad", "any")
			tc.mutate(rs)
			err := k8s.Create(ctx, rs)
			if err == nil {
				_ = k8s.Delete(ctx, rs)
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestClassNameIsImmutable(t *testing.T) {
	ns := newNamespace(t)
	rs := runnerSet(ns, "fixed", "one")
	must(t, k8s.Create(ctx, rs))
	// The controller adds its finalizer meanwhile: retry on conflicts.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := get(t, ns, "fixed", &v1alpha1.RunnerSet{})
		cur.Spec.ClassName = "two"
		return k8s.Update(ctx, cur)
	})
	if err == nil || !strings.Contains(err.Error(), "spec.className") || !strings.Contains(err.Error(), "immutable") {
		t.Fatalf("changing className: %v", err)
	}
}

func TestAdmissionRefusesIdentityPatternsWithoutNamespace(t *testing.T) {
	c := &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "open-door"},
		Spec: v1alpha1.RunnerClassSpec{
			Provider: v1alpha1.CapacityProviderKarpenter,
			Policy: v1alpha1.RunnerClassPolicy{Identity: v1alpha1.IdentityPolicy{
				AWSRoleARNPatterns: []string{"arn:aws:iam::123456789012:role/*"},
			}},
		},
	}
	err := k8s.Create(ctx, c)
	if err == nil {
		_ = k8s.Delete(ctx, c)
		t.Fatal("a pattern without {namespace} was accepted")
	}
	for _, w := range []string{"spec.policy.identity.awsRoleARNPatterns[0]", "must contain {namespace}"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not say %q: %v", w, err)
		}
	}
}

func TestDefaultsAreAppliedByTheAPIServer(t *testing.T) {
	ns := newNamespace(t)
	rs := runnerSet(ns, "defaults", "any")
	must(t, k8s.Create(ctx, rs))
	got := get(t, ns, "defaults", &v1alpha1.RunnerSet{})
	m := got.Spec.Managers
	if m.Replicas == nil || *m.Replicas != 1 || m.Concurrent != 10 || m.ShutdownTimeout.Duration.String() != "3h0m0s" || m.CheckInterval.Duration.String() != "3s" {
		t.Errorf("manager defaults: %+v", m)
	}
	if got.Spec.GitLab.TokenSecretRef.Key != "token" {
		t.Errorf("token key default %q", got.Spec.GitLab.TokenSecretRef.Key)
	}
	if len(got.Spec.Capacity.CapacityTypes) != 1 || got.Spec.Capacity.CapacityTypes[0] != v1alpha1.CapacityTypeSpot {
		t.Errorf("capacity type default %v", got.Spec.Capacity.CapacityTypes)
	}
}

// 11.7: names that could never work are refused at admission.
func TestAdmissionRefusesWhatCanNeverWork(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		mutate func(*v1alpha1.RunnerSet)
		want   []string
	}{
		{"a name longer than a label value", func(rs *v1alpha1.RunnerSet) { rs.Name = strings.Repeat("n", 64) },
			[]string{"metadata.name", "at most 63 characters"}},
		{"a manager image with a leading space", func(rs *v1alpha1.RunnerSet) { rs.Spec.Managers.Image = " gitlab-runner:v19" },
			[]string{"spec.managers.image", "must be an image reference"}},
		{"a job image with a trailing newline", func(rs *v1alpha1.RunnerSet) { rs.Spec.Jobs.Image = "alpine:3.22\n" },
			[]string{"spec.jobs.image", "must be an image reference"}},
		{"an upper-case repository", func(rs *v1alpha1.RunnerSet) { rs.Spec.Jobs.Image = "Alpine" },
			[]string{"spec.jobs.image"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := runnerSet(ns, "bad", "any")
			tc.mutate(rs)
			err := k8s.Create(ctx, rs)
			if err == nil {
				_ = k8s.Delete(ctx, rs)
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
	ok := runnerSet(ns, strings.Repeat("n", 63), "any")
	ok.Spec.Managers.Image = v1alpha1.ImageReference("registry.example.com:5000/ci/gitlab-runner:alpine-v19.4.0@sha256:" + strings.Repeat("a", 64))
	must(t, k8s.Create(ctx, ok))
}

// The image rule is the container runtimes' own parser: the API server
// accepts exactly the references github.com/distribution/reference does.
func TestAdmissionJudgesImagesAsTheReferenceParserDoes(t *testing.T) {
	var rule string
	for _, c := range mustCRD(t, "runnersets.runnerfleet.dev").Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["jobs"].Properties["image"].XValidations {
		rule = c.Rule
	}
	if want := "self.matches(r'" + reference.ReferenceRegexp.String() + "')"; rule != want {
		t.Fatalf("the CRD's image rule is not the parser's grammar:\n got %s\nwant %s", rule, want)
	}
	ns := newNamespace(t)
	for i, image := range []string{
		"alpine", "alpine:3.22", "library/alpine:latest", "registry.gitlab.com/gitlab-org/gitlab-runner:alpine-v19.4.0",
		"localhost:5000/a/b", "[::1]:5000/x:y", "a/b@sha256:" + strings.Repeat("0", 64),
		" alpine", "alpine ", "alpine\n", "Alpine", "alpine:", ":tag", "a//b", "a:b:c", "-a", "a@sha256:xyz",
		"a/b:" + strings.Repeat("t", 129), "ex ample.com/a", "example.com/A/b", "registry:5000/x:tag\t",
	} {
		rs := runnerSet(ns, fmt.Sprintf("img-%d", i), "any")
		rs.Spec.Jobs.Image = v1alpha1.ImageReference(image)
		err := k8s.Create(ctx, rs)
		_, perr := reference.ParseNormalizedNamed(image)
		if (err == nil) != (perr == nil) {
			t.Errorf("%q: the API server says %v, the reference parser %v", image, err, perr)
		}
	}
}

// 11.3: identity patterns that cannot tell namespace x from x-b are
// refused at admission, with the same rule the controller and the Pulumi
// program use.
func TestAdmissionRefusesAmbiguousIdentityPatterns(t *testing.T) {
	for _, field := range []string{"awsRoleARNPatterns", "gcpServiceAccountPatterns"} {
		rules := ""
		for _, c := range mustCRD(t, "runnerclasses.runnerfleet.dev").Spec.Versions[0].Schema.OpenAPIV3Schema.
			Properties["spec"].Properties["policy"].Properties["identity"].Properties[field].Items.Schema.XValidations {
			rules += c.Rule + "\n"
		}
		for _, re := range []string{policy.PatternPinnedLeft, policy.PatternPinnedRight} {
			if !strings.Contains(rules, "self.matches('"+re+"')") {
				t.Errorf("%s: the CRD does not use policy's rule %s", field, re)
			}
		}
	}
	for i, tc := range []struct {
		aws, gcp string
		ok       bool
	}{
		{aws: "arn:aws:iam::123456789012:role/ci-{namespace}-*"},
		{aws: "arn:aws:iam::123456789012:role/*-{namespace}"},
		{gcp: "{namespace}-*@p.iam.gserviceaccount.com"},
		{aws: "arn:aws:iam::123456789012:role/ci-{namespace}.*", ok: true},
		{aws: "arn:aws:iam::*:role/runnerfleet-prod/{namespace}/*", ok: true},
		{gcp: "{namespace}-??????@p.iam.gserviceaccount.com", ok: true},
	} {
		c := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pattern-%d", i)},
			Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
		pattern := tc.aws
		if tc.aws != "" {
			c.Spec.Policy.Identity.AWSRoleARNPatterns = []string{tc.aws}
		} else {
			pattern = tc.gcp
			c.Spec.Policy.Identity.GCPServiceAccountPatterns = []string{tc.gcp}
		}
		err := k8s.Create(ctx, c)
		if err == nil {
			_ = k8s.Delete(ctx, c)
		}
		if (err == nil) != tc.ok || (policy.ValidatePattern(pattern) == nil) != tc.ok {
			t.Errorf("%q: API server %v, policy %v; want accepted=%v", pattern, err, policy.ValidatePattern(pattern), tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "cannot tell namespace x from x-b") {
			t.Errorf("%q: the message does not say why: %v", pattern, err)
		}
	}
}

func mustCRD(t *testing.T, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	all, err := crds.CRDs()
	must(t, err)
	for _, c := range all {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no CRD %s", name)
	return nil
}

// Admission keeps a jobs namespace where it is (moving it would strand
// running jobs) and refuses class patterns that could reach another
// team's names, with the rule policy applies, verbatim.
func TestAdmissionKeepsJobsNamespacesPinned(t *testing.T) {
	rules := ""
	for _, c := range mustCRD(t, "runnerclasses.runnerfleet.dev").Spec.Versions[0].Schema.OpenAPIV3Schema.
		Properties["spec"].Properties["policy"].Properties["jobNamespaces"].Items.Schema.XValidations {
		rules += c.Rule + "\n"
	}
	if !strings.Contains(rules, "self.matches('"+policy.JobNamespacePattern+"')") {
		t.Errorf("the CRD does not use policy's rule %s:\n%s", policy.JobNamespacePattern, rules)
	}
	for i, tc := range []struct {
		pattern string
		ok      bool
	}{
		{"{namespace}-*", false}, {"ci-*", false}, {"{namespace}.ci", false}, {"{namespace}{namespace}", false},
		{"ci-{namespace}", true}, {"{namespace}-ci-??", true},
	} {
		c := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("jobs-pattern-%d", i)},
			Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK, Policy: v1alpha1.RunnerClassPolicy{JobNamespaces: []string{tc.pattern}}}}
		err := k8s.Create(ctx, c)
		if err == nil {
			_ = k8s.Delete(ctx, c)
		}
		if (err == nil) != tc.ok || (policy.ValidateJobNamespacePattern(tc.pattern) == nil) != tc.ok {
			t.Errorf("%q: API server %v, policy %v; want accepted=%v", tc.pattern, err, policy.ValidateJobNamespacePattern(tc.pattern), tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "no '*'") {
			t.Errorf("%q: the message does not say why: %v", tc.pattern, err)
		}
	}

	ns := newNamespace(t)
	for _, tc := range []struct {
		name, from, to string
	}{
		{"moved", "ci-" + ns, "ci-" + ns + "-b"},
		{"added", "", "ci-" + ns},
		{"removed", "ci-" + ns, ""},
	} {
		rs := runnerSet(ns, "pinned-"+tc.name, "no-class")
		rs.Spec.Jobs.Namespace = tc.from
		must(t, k8s.Create(ctx, rs))
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := get(t, ns, rs.Name, &v1alpha1.RunnerSet{})
			cur.Spec.Jobs.Namespace = tc.to
			return k8s.Update(ctx, cur)
		})
		if err == nil || !strings.Contains(err.Error(), "jobs.namespace is immutable") {
			t.Errorf("%s: %v, want refused as immutable", tc.name, err)
		}
	}
}

// Issue 32: what a careless hand writes is refused by the API server
// itself, naming the field and the fix: control characters in a tag, and
// names no Secret, RunnerClass, namespace or volume could have.
func TestAdmissionRefusesControlCharactersAndImpossibleNames(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		mutate func(*v1alpha1.RunnerSet)
		want   []string
	}{
		{"a tag with a newline", func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = []string{"team-a\nprod"} },
			[]string{"spec.tags[0]", "a tag cannot hold a newline, tab, NUL or other control character", "write the tag on one line"}},
		{"a tag with a NUL byte", func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = []string{"ok", "team\x00a"} },
			[]string{"spec.tags[1]", "a tag cannot hold a newline, tab, NUL or other control character"}},
		{"a tag with a tab", func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = []string{"team\ta"} }, []string{"spec.tags[0]", "control character"}},
		{"a tag list in one tag", func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = []string{"linux,docker"} }, []string{"spec.tags[0]", "list each tag as its own item"}},
		{"a tag with a trailing space", func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = []string{"linux "} }, []string{"spec.tags[0]", "cannot start or end with a space"}},
		{"a token Secret name with a path", func(rs *v1alpha1.RunnerSet) { rs.Spec.GitLab.TokenSecretRef.Name = "Bad_Name/../x" },
			[]string{"spec.gitlab.tokenSecretRef.name", "name must be a Secret's name", "for example team-a-gitlab-token"}},
		{"a token Secret key with a slash", func(rs *v1alpha1.RunnerSet) { rs.Spec.GitLab.TokenSecretRef.Key = "../token" },
			[]string{"spec.gitlab.tokenSecretRef.key", "key must be a key of the Secret's data"}},
		{"an API token Secret name in capitals", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.GitLab.TokenSecretRef = nil
			rs.Spec.GitLab.Runner = &v1alpha1.RunnerRegistration{Type: v1alpha1.RunnerTypeInstance, APITokenSecretRef: v1alpha1.SecretKeyRef{Name: "GitLab-PAT"}}
		}, []string{"spec.gitlab.runner.apiTokenSecretRef.name", "name must be a Secret's name"}},
		{"a class name with an underscore", func(rs *v1alpha1.RunnerSet) { rs.Spec.ClassName = "eks_spot" },
			[]string{"spec.className", "className must be the name of a RunnerClass"}},
		{"a jobs namespace with a dot", func(rs *v1alpha1.RunnerSet) { rs.Spec.Jobs.Namespace = "ci.team-a" },
			[]string{"spec.jobs.namespace", "jobs.namespace must be a namespace name"}},
		{"an image pull secret in capitals", func(rs *v1alpha1.RunnerSet) { rs.Spec.Jobs.ImagePullSecrets = []string{"Registry"} },
			[]string{"spec.jobs.imagePullSecrets[0]", "an image pull secret is a Secret's name"}},
		{"a secret volume with a path", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Jobs.Volumes.Secrets = []v1alpha1.ObjectVolume{{Name: "../etc", VolumeMount: v1alpha1.VolumeMount{MountPath: "/etc/x"}}}
		}, []string{"spec.jobs.volumes.secrets[0].name", "the name of a ConfigMap, Secret or PersistentVolumeClaim"}},
		{"a bucket with a space", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Cache = &v1alpha1.CacheSpec{Type: v1alpha1.CacheTypeS3, Bucket: "ci cache"}
		},
			[]string{"spec.cache.bucket", "cache.bucket must be a bucket's name"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := runnerSet(ns, "bad", "any")
			tc.mutate(rs)
			err := k8s.Create(ctx, rs)
			if err == nil {
				_ = k8s.Delete(ctx, rs)
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
	// The negative controls: spaces inside a tag, dotted Secret and class
	// names, a dotted image pull secret and a key with dots and dashes are
	// what GitLab and the API server keep, and are admitted.
	ok := runnerSet(ns, "good", "eks.spot-1")
	ok.Spec.Tags = []string{"linux amd64 large", "docker:dind"}
	ok.Spec.GitLab.TokenSecretRef = &v1alpha1.SecretKeyRef{Name: "team-a.gitlab-token", Key: "runner.token-1_a"}
	ok.Spec.Jobs.ImagePullSecrets = []string{"registry.example.com"}
	ok.Spec.Cache = &v1alpha1.CacheSpec{Type: v1alpha1.CacheTypeGCS, Bucket: "ci.runner-cache_1"}
	must(t, k8s.Create(ctx, ok))
}

// A RunnerClass names an EKS cluster and an IAM role by their names, in
// their clouds' alphabets; an ARN where a name belongs is refused.
func TestAdmissionRefusesKarpenterNamesTheCloudRefuses(t *testing.T) {
	for i, tc := range []struct {
		cluster, role string
		want          []string
	}{
		{"ci prod", "KarpenterNodeRole", []string{"spec.karpenter.clusterName", "an EKS cluster's name"}},
		{"ci-prod", "arn:aws:iam::123456789012:role/KarpenterNodeRole", []string{"spec.karpenter.nodeRole", "an IAM role's name, not its ARN"}},
		{"ci_prod-1", "KarpenterNodeRole-ci+prod@x", nil},
	} {
		c := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("karpenter-names-%d", i)},
			Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKarpenter,
				Karpenter: &v1alpha1.KarpenterSettings{ClusterName: tc.cluster, NodeRole: tc.role}}}
		err := k8s.Create(ctx, c)
		if err == nil {
			_ = k8s.Delete(ctx, c)
		}
		if (err == nil) != (tc.want == nil) {
			t.Errorf("%q, %q: %v, want accepted=%v", tc.cluster, tc.role, err, tc.want == nil)
		}
		for _, w := range tc.want {
			if err != nil && !strings.Contains(err.Error(), w) {
				t.Errorf("%q, %q: error does not say %q: %v", tc.cluster, tc.role, w, err)
			}
		}
	}
}
