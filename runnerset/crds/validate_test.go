package crds

import (
	"strings"
	"testing"
	"time"

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

// TestAdmissionRefusesMachineFamiliesGKERefuses: RunnerSets and
// RunnerClasses are admitted only with machine families and types GKE's
// ComputeClass accepts (at most 10 characters, not ek or e4a).
func TestAdmissionRefusesMachineFamiliesGKERefuses(t *testing.T) {
	rsv, err := ValidatorFor("runnersets.runnerfleet.dev")
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range []string{"n2d-highmem", "ek", "e4a"} {
		errs := rsv.Validate(runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Spec.Capacity.InstanceFamilies = []string{fam} }))
		if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "spec.capacity.instanceFamilies") {
			t.Errorf("RunnerSet family %q admitted: %v", fam, errs)
		}
	}
	if errs := rsv.Validate(runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Spec.Capacity.InstanceTypes = []string{"e4a-standard-4"} })); len(errs) == 0 {
		t.Error("RunnerSet machine type e4a-standard-4 admitted")
	}
	if errs := rsv.Validate(runnerSet(func(rs *v1alpha1.RunnerSet) {
		rs.Spec.Capacity.InstanceFamilies = []string{"c7i-flex", "n2d", "c4a", "u7in-16tb"}
		rs.Spec.Capacity.InstanceTypes = []string{"c7i.2xlarge", "n2d-standard-8"}
	})); len(errs) > 0 {
		t.Errorf("families and types of EC2 and GCE refused: %v", errs)
	}
	rcv, err := ValidatorFor("runnerclasses.runnerfleet.dev")
	if err != nil {
		t.Fatal(err)
	}
	class := func(fams ...string) *v1alpha1.RunnerClass {
		return &v1alpha1.RunnerClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RunnerClass"},
			ObjectMeta: metav1.ObjectMeta{Name: "gke"},
			Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderComputeClass,
				ComputeClass: &v1alpha1.ComputeClassSettings{MachineFamilies: fams}},
		}
	}
	if errs := rcv.Validate(class("n2d", "c4a")); len(errs) > 0 {
		t.Fatalf("a good class is refused: %v", errs)
	}
	for _, fam := range []string{"n2dhighmem1", "ek", "e4a"} {
		if errs := rcv.Validate(class(fam)); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "spec.computeClass.machineFamilies") {
			t.Errorf("RunnerClass family %q admitted: %v", fam, errs)
		}
	}
}

// TestMaxShutdownTimeoutIsWhatAdmissionAllows: the GKE managers' pool's
// upgrades are sized from v1alpha1.MaxShutdownTimeout, so it must be the
// CRD's own bound on spec.managers.shutdownTimeout, no less.
func TestMaxShutdownTimeoutIsWhatAdmissionAllows(t *testing.T) {
	v, err := ValidatorFor("runnersets.runnerfleet.dev")
	if err != nil {
		t.Fatal(err)
	}
	with := func(d time.Duration) *v1alpha1.RunnerSet {
		return runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Spec.Managers.ShutdownTimeout = &metav1.Duration{Duration: d} })
	}
	if errs := v.Validate(with(v1alpha1.MaxShutdownTimeout)); len(errs) > 0 {
		t.Errorf("shutdownTimeout %s refused: %v", v1alpha1.MaxShutdownTimeout, errs)
	}
	if errs := v.Validate(with(v1alpha1.MaxShutdownTimeout + time.Second)); len(errs) == 0 {
		t.Errorf("shutdownTimeout %s admitted: MaxShutdownTimeout is below the CRD's bound", v1alpha1.MaxShutdownTimeout+time.Second)
	}
}
