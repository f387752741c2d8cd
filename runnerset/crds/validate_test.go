package crds

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

func runnerSet(mutate func(*v1alpha1.RunnerSet)) *v1alpha1.RunnerSet {
	rs := &v1alpha1.RunnerSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RunnerSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"},
		Spec: v1alpha1.RunnerSetSpec{
			ClassName: "c", Tags: []string{"team-a"},
			GitLab: v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "t"}},
		},
	}
	if mutate != nil {
		mutate(rs)
	}
	return rs
}

func TestTheOfflineValidatorAppliesTheCRDsSchemaAndCELRules(t *testing.T) {
	v, err := ValidatorFor("runnersets.runnerfleet.dev")
	if err != nil {
		t.Fatal(err)
	}
	if errs := v.Validate(runnerSet(nil)); len(errs) > 0 {
		t.Fatalf("a good RunnerSet is refused: %v", errs)
	}
	errs := v.Validate(runnerSet(func(rs *v1alpha1.RunnerSet) {
		rs.Name = strings.Repeat("n", 64)                                 // root CEL rule on metadata.name
		rs.Spec.Tags = []string{"a", "a", " b", strings.Repeat("t", 256)} // set, CEL on items, maxLength
		rs.Spec.Managers.Image = "gitlab-runner:v19\n"                    // image rule
		rs.Spec.Managers.Replicas = new(int32)
		*rs.Spec.Managers.Replicas = 51 // maximum
		rs.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{"reserved"}
	}))
	got := errs.ToAggregate().Error()
	for _, want := range []string{
		"metadata.name", "at most 63 characters",
		`spec.tags[1]: Duplicate value: "a"`,
		"spec.tags[2]", "a tag cannot start or end with a space",
		"spec.tags[3]", "may not be more than 255",
		"spec.managers.image", "must be an image reference",
		"spec.managers.replicas", "less than or equal to 50",
		"spec.capacity.capacityTypes[0]", "Unsupported value",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the errors do not say %q:\n%s", want, got)
		}
	}
}
