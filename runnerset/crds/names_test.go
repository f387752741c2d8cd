package crds

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// Tags reach GitLab, which matches them to jobs' tags: a tag with a control
// character in it could never be asked for (and GitLab's database refuses a
// NUL byte). Spaces inside a tag are GitLab's to keep.
func TestTagsWithControlCharactersAreRefused(t *testing.T) {
	v, err := ValidatorFor("runnersets.runnerfleet.dev")
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"team-a\nprod", "team\x00a", "team\ta", "team-a\r", "a\u0085b", "a\u2028b", "\x7f"} {
		errs := v.Validate(runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = []string{"ok", tag} }))
		got := errs.ToAggregate()
		if got == nil || !strings.Contains(got.Error(), "spec.tags[1]") || !strings.Contains(got.Error(), "a tag cannot hold a newline, tab, NUL or other control character") {
			t.Errorf("tag %q: %v, want refused naming spec.tags[1]", tag, got)
		}
	}
	// The negative control: what GitLab keeps as one tag is admitted.
	for _, tag := range []string{"team a", "linux amd64 large", "docker:dind", "ünïcode", "a.b_c/d"} {
		if errs := v.Validate(runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = []string{tag} })); len(errs) > 0 {
			t.Errorf("tag %q refused: %v", tag, errs)
		}
	}
}

// Every field that names a Kubernetes object is judged as the API server
// judges that object's name (apimachinery's IsDNS1123Subdomain or
// IsDNS1123Label, IsConfigMapKey for a Secret's key): the CRD admits
// exactly what those functions do, so that a name that could never be
// found is refused where it is written.
func TestObjectNamesAreJudgedAsTheAPIServerJudgesThem(t *testing.T) {
	v, err := ValidatorFor("runnersets.runnerfleet.dev")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{
		"t", "team-a-token", "gitlab.token", "a.b.c", "0abc", strings.Repeat("a", 63), strings.Repeat("a", 64),
		"Bad_Name/../x", "Bad", "a_b", "-a", "a-", ".a", "a.", "a..b", "a/b", "a b", " a", "a\n", "..", ".",
	}
	fields := []struct {
		path  string
		judge func(string) []string
		set   func(*v1alpha1.RunnerSet, string)
	}{
		{"spec.gitlab.tokenSecretRef.name", validation.IsDNS1123Subdomain, func(rs *v1alpha1.RunnerSet, s string) { rs.Spec.GitLab.TokenSecretRef.Name = s }},
		{"spec.gitlab.tokenSecretRef.key", validation.IsConfigMapKey, func(rs *v1alpha1.RunnerSet, s string) { rs.Spec.GitLab.TokenSecretRef.Key = s }},
		{"spec.gitlab.runner.apiTokenSecretRef.name", validation.IsDNS1123Subdomain, func(rs *v1alpha1.RunnerSet, s string) {
			rs.Spec.GitLab.TokenSecretRef = nil
			rs.Spec.GitLab.Runner = &v1alpha1.RunnerRegistration{Type: v1alpha1.RunnerTypeInstance, APITokenSecretRef: v1alpha1.SecretKeyRef{Name: s}}
		}},
		{"spec.className", validation.IsDNS1123Subdomain, func(rs *v1alpha1.RunnerSet, s string) { rs.Spec.ClassName = s }},
		{"spec.jobs.namespace", validation.IsDNS1123Label, func(rs *v1alpha1.RunnerSet, s string) { rs.Spec.Jobs.Namespace = s }},
		{"spec.jobs.imagePullSecrets[0]", validation.IsDNS1123Subdomain, func(rs *v1alpha1.RunnerSet, s string) { rs.Spec.Jobs.ImagePullSecrets = []string{s} }},
		{"spec.jobs.volumes.secrets[0].name", validation.IsDNS1123Label, func(rs *v1alpha1.RunnerSet, s string) {
			rs.Spec.Jobs.Volumes.Secrets = []v1alpha1.ObjectVolume{{Name: s, VolumeMount: v1alpha1.VolumeMount{MountPath: "/x"}}}
		}},
		{"spec.jobs.volumes.configMaps[0].name", validation.IsDNS1123Label, func(rs *v1alpha1.RunnerSet, s string) {
			rs.Spec.Jobs.Volumes.ConfigMaps = []v1alpha1.ObjectVolume{{Name: s, VolumeMount: v1alpha1.VolumeMount{MountPath: "/x"}}}
		}},
		{"spec.jobs.volumes.pvcs[0].name", validation.IsDNS1123Label, func(rs *v1alpha1.RunnerSet, s string) {
			rs.Spec.Jobs.Volumes.PVCs = []v1alpha1.ObjectVolume{{Name: s, VolumeMount: v1alpha1.VolumeMount{MountPath: "/x"}}}
		}},
	}
	for _, f := range fields {
		for _, name := range names {
			if name == "" {
				continue
			}
			errs := v.Validate(runnerSet(func(rs *v1alpha1.RunnerSet) { f.set(rs, name) }))
			want := len(f.judge(name)) == 0
			if got := len(errs) == 0; got != want {
				t.Errorf("%s %q: admitted=%v, apimachinery says valid=%v (%v)", f.path, name, got, want, errs)
				continue
			}
			if len(errs) > 0 {
				if msg := errs.ToAggregate().Error(); !strings.Contains(msg, f.path) || !strings.Contains(msg, "for example") && !strings.Contains(msg, "Too long") {
					t.Errorf("%s %q: the refusal does not name the field and an example of a good value: %v", f.path, name, msg)
				}
			}
		}
	}
}
