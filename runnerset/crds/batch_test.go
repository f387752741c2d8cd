package crds

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

func sorted(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	slices.Sort(out)
	return out
}

// A Batch finds exactly what Validate finds, for objects it has judged
// parts of before and for new ones, good and bad in every subtree it
// judges apart and in the rest.
func TestABatchFindsWhatValidateFinds(t *testing.T) {
	v, err := ValidatorFor("runnersets.runnerfleet.dev")
	if err != nil {
		t.Fatal(err)
	}
	b := v.Batch()
	var cuts []string
	for _, c := range v.cuts {
		cuts = append(cuts, c.property)
	}
	// managers is judged with the trunk: spec's rule that an overflow
	// needs managers.autoscale names it.
	if want := []string{"cache", "capacity", "className", "gitlab", "jobs", "runUntagged", "tags"}; !slices.Equal(cuts, want) {
		t.Errorf("judged apart: %v, want %v", cuts, want)
	}
	q := resource.MustParse
	objs := []*v1alpha1.RunnerSet{
		runnerSet(nil),
		runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Name = "other"; rs.Spec.Tags = []string{"b"} }),
		runnerSet(func(rs *v1alpha1.RunnerSet) {
			rs.Name = strings.Repeat("n", 64)
			rs.Spec.Tags = []string{"a", "a", "x\ny"}
			rs.Spec.Managers.Replicas = ptr.To[int32](51)
			rs.Spec.Managers.ShutdownTimeout = &metav1.Duration{Duration: 1}
		}),
		runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Spec.Managers.Replicas = ptr.To[int32](51) }),
		runnerSet(func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Jobs.Image = "Alpine"
			rs.Spec.Jobs.Namespace = "Bad_Name"
			rs.Spec.Jobs.Resources.Build = v1alpha1.ContainerResources{CPURequest: ptr.To(q("2")), CPULimit: ptr.To(q("1"))}
			rs.Spec.Jobs.Volumes.Secrets = []v1alpha1.ObjectVolume{{Name: "a", VolumeMount: v1alpha1.VolumeMount{MountPath: "/a"}}, {Name: "a", VolumeMount: v1alpha1.VolumeMount{MountPath: "/b"}}}
		}),
		runnerSet(func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Capacity.Limits = corev1.ResourceList{"nvidia.com/gpu": q("1")}
			rs.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{"spot", "spot"}
		}),
		runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Spec.Cache = &v1alpha1.CacheSpec{Type: "s4", Bucket: "Bad_Bucket"} }),
		runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Spec.GitLab.TokenSecretRef.Name = "Bad_Name/../x" }),
		runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = nil; rs.Spec.ClassName = "Bad" }),
		runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Spec.GitLab = v1alpha1.GitLabSpec{URL: "ftp://x"} }),
	}
	for round := range 2 {
		for i, obj := range objs {
			want := sorted(v.Validate(obj.DeepCopy()))
			got := sorted(b.Validate(obj.DeepCopy()))
			if !slices.Equal(got, want) {
				t.Errorf("round %d, object %d: the batch found\n%s\nValidate found\n%s", round, i, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if i >= 2 && len(want) == 0 {
				t.Errorf("object %d: nothing found; the case tests nothing", i)
			}
		}
	}
	if len(b.memo) == 0 || len(b.memo) >= 2*len(objs)*len(v.cuts) {
		t.Errorf("the batch remembers %d subtrees", len(b.memo))
	}
}

// A field of spec the schema does not know is reported by a Batch as by
// Validate, though no cut holds it.
func TestABatchReportsUnknownFieldsOfSpec(t *testing.T) {
	v, err := ValidatorFor("runnersets.runnerfleet.dev")
	if err != nil {
		t.Fatal(err)
	}
	obj := &unknownSpec{RunnerSet: *runnerSet(nil)}
	obj.Spec.RunnerSetSpec = obj.RunnerSet.Spec
	obj.Spec.Extra = "x"
	want := sorted(v.Validate(obj))
	got := sorted(v.Batch().Validate(obj))
	if !slices.Equal(got, want) || len(got) != 1 || !strings.Contains(got[0], "spec.replica") {
		t.Errorf("the batch found %v, Validate %v; want spec.replica reported as unknown by both", got, want)
	}
}

// unknownSpec is a RunnerSet whose spec has a field the CRD does not know.
type unknownSpec struct {
	v1alpha1.RunnerSet `json:",inline"`
	Spec               struct {
		v1alpha1.RunnerSetSpec `json:",inline"`
		Extra                  string `json:"replica"`
	} `json:"spec"`
}

// What is left of an object besides the properties of spec judged apart
// (its apiVersion, kind, metadata) is judged once per distinct name: the
// CRD can see no other field of metadata. A name the root rule refuses is
// still refused after a thousand good objects in one namespace, and a
// thousand objects that differ only in their namespaces and labels share
// one verdict.
func TestABatchJudgesTheRestOncePerNameNotPerNamespace(t *testing.T) {
	v, err := ValidatorFor("runnersets.runnerfleet.dev")
	if err != nil {
		t.Fatal(err)
	}
	b := v.Batch()
	if !v.bareMetadata {
		t.Fatal("the RunnerSet CRD's metadata schema is not {type: object}; the rest is judged once per object")
	}
	for i := range 1000 {
		obj := runnerSet(func(rs *v1alpha1.RunnerSet) {
			rs.Namespace = fmt.Sprintf("team-%d", i)
			rs.Labels = map[string]string{"team": fmt.Sprint(i)}
		})
		if errs := b.Validate(obj); len(errs) > 0 {
			t.Fatalf("object %d: %v", i, errs)
		}
	}
	if len(b.memo) > len(v.cuts)+1 {
		t.Errorf("the batch remembers %d verdicts for objects that differ in namespace and labels, want at most %d", len(b.memo), len(v.cuts)+1)
	}
	long := runnerSet(func(rs *v1alpha1.RunnerSet) { rs.Name = strings.Repeat("n", 64) })
	want := sorted(v.Validate(long.DeepCopy()))
	got := sorted(b.Validate(long))
	if len(want) == 0 || !slices.Equal(got, want) || !strings.Contains(strings.Join(got, "\n"), "at most 63 characters") {
		t.Errorf("a 64-character name after a thousand good objects: the batch found %v, Validate %v", got, want)
	}
}
