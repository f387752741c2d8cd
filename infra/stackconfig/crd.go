package stackconfig

import (
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// RunnerSet is the team's RunnerSet in the class className, without what
// is known only at deploy time (the job identity) and with the token
// Secrets the program writes named by tokenSecret and apiTokenSecret.
func (t Team) RunnerSet(className, tokenSecret, apiTokenSecret string) *v1alpha1.RunnerSet {
	rs := &v1alpha1.RunnerSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RunnerSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: t.Name},
		Spec: v1alpha1.RunnerSetSpec{
			ClassName: className,
			Tags:      t.Tags,
			Managers:  t.Managers,
			Jobs:      v1alpha1.JobSpec{Image: t.Jobs.Image, Privileged: t.Jobs.Privileged, Resources: t.Jobs.Resources},
			Capacity:  t.Capacity,
			Overflow:  t.Overflow.DeepCopy(),
		},
	}
	if t.Region != "" {
		rs.Labels = map[string]string{naming.LabelRegion: t.Region}
	}
	switch {
	case t.TokenConfigKey != "":
		rs.Spec.GitLab.TokenSecretRef = &v1alpha1.SecretKeyRef{Name: tokenSecret, Key: "token"}
	case t.TokenSecretRef != nil:
		rs.Spec.GitLab.TokenSecretRef = t.TokenSecretRef
	case t.Runner != nil:
		r := *t.Runner
		if t.APITokenConfigKey != "" {
			r.APITokenSecretRef = v1alpha1.SecretKeyRef{Name: apiTokenSecret, Key: "token"}
		}
		rs.Spec.GitLab.Runner = &r
	}
	return rs
}

// RunnerClass is the part of the fleet's RunnerClass the stack config
// gives: the GitLab URL, the defaults and the identity patterns (the
// platform adds its provider, capacity settings and its own patterns).
func (f *Fleet) RunnerClass() *v1alpha1.RunnerClass {
	return &v1alpha1.RunnerClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RunnerClass"},
		ObjectMeta: metav1.ObjectMeta{Name: f.ClusterName},
		Spec: v1alpha1.RunnerClassSpec{
			Provider:  v1alpha1.CapacityProviderKWOK,
			GitLabURL: f.GitLabURL,
			Defaults: v1alpha1.RunnerClassDefaults{
				ManagerImage: f.Defaults.ManagerImage,
				HelperImage:  f.Defaults.HelperImage,
				JobImage:     f.Defaults.JobImage,
			},
			Policy:    v1alpha1.RunnerClassPolicy{Identity: f.Identity},
			NodePools: f.Capacity.NodePools.DeepCopy(),
		},
	}
}

// A field of the objects the stack config embeds, and the key of the
// stack config it comes from (relative to the team, or to the fleet).
type keyMap struct{ object, key string }

var (
	teamKeys = []keyMap{
		{"metadata.name", "name"},
		{"metadata.namespace", "namespace"},
		{"spec.tags", "tags"},
		{"spec.managers", "managers"},
		{"spec.jobs", "jobs"},
		{"spec.capacity", "capacity"},
		{"spec.overflow", "overflow"},
		{"spec.gitlab.runner", "runner"},
		{"spec.gitlab.tokenSecretRef", "tokenSecretRef"},
		{"spec.gitlab", ""},
		{"spec", ""},
	}
	classKeys = []keyMap{
		{"spec.gitlabURL", "gitlabURL"},
		{"spec.defaults", "defaults"},
		{"spec.policy.identity", "identity"},
		{"spec.nodePools", "capacity.nodePools"},
	}
)

// validator judges an object as admission will: a crds.Validator, or a
// crds.Batch that judges what many teams share once.
type validator interface {
	Validate(runtime.Object) field.ErrorList
}

// embeddedErrors judges obj with v (its CRD's validator) exactly as admission
// will (schema, list types, CEL rules) and returns its problems under base,
// renamed from the object's fields to the stack config's keys; a problem
// under a key another check reported already is left out.
func embeddedErrors(v validator, obj runtime.Object, base *field.Path, keys []keyMap, reported field.ErrorList) field.ErrorList {
	var out field.ErrorList
	for _, e := range v.Validate(obj) {
		key, ok := rename(e.Field, keys)
		if !ok {
			continue
		}
		path := base.String()
		if key != "" {
			path += "." + key
		}
		if covered(path, reported) || covered(path, out) && e.Type == field.ErrorTypeRequired {
			continue
		}
		renamed := *e
		renamed.Field = path
		renamed.Detail = strings.ReplaceAll(e.Detail, e.Field+" in body", "the value")
		out = append(out, &renamed)
	}
	return out
}

// rename turns an object field (spec.tags[0]) into a stack config key
// (tags[0]).
func rename(f string, keys []keyMap) (string, bool) {
	for _, k := range keys {
		if f == k.object || strings.HasPrefix(f, k.object+".") || strings.HasPrefix(f, k.object+"[") {
			rest := strings.TrimPrefix(f, k.object)
			switch {
			case k.key == "":
				return strings.TrimPrefix(rest, "."), true
			default:
				return k.key + rest, true
			}
		}
	}
	return "", false
}

// covered reports whether path, or a key under it, has a problem already.
func covered(path string, reported field.ErrorList) bool {
	for _, r := range reported {
		if r.Field == path || strings.HasPrefix(r.Field, path+".") || strings.HasPrefix(r.Field, path+"[") ||
			strings.HasPrefix(path, r.Field+".") || strings.HasPrefix(path, r.Field+"[") {
			return true
		}
	}
	return false
}

// validateURL refuses a GitLab URL that has no host or holds a space or a
// control character.
func validateURL(p *field.Path, s string) *field.Error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return field.Invalid(p, s, "not a URL ("+err.Error()+"); the GitLab instance's URL, for example https://gitlab.example.com")
	case u.Scheme != "https" && u.Scheme != "http":
		return field.Invalid(p, s, "the GitLab instance's http(s) URL, for example https://gitlab.example.com")
	case u.Host == "" || strings.ContainsAny(s, " \t\r\n"):
		return field.Invalid(p, s, "the GitLab instance's URL needs a host and no spaces, for example https://gitlab.example.com")
	}
	return nil
}
