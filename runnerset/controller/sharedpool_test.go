package controller_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// spec.nodePools is refused where it could never work, naming the field
// and the fix; a class without it is perTag, as before the field existed.
func TestAdmissionRefusesNodePoolSettingsThatCannotWork(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*v1alpha1.RunnerClass)
		want   []string
	}{
		{"shared on GKE", func(c *v1alpha1.RunnerClass) {
			c.Spec.Provider = v1alpha1.CapacityProviderComputeClass
			c.Spec.ComputeClass = &v1alpha1.ComputeClassSettings{MachineFamilies: []string{"n2d"}}
			c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeShared}
		}, []string{"spec.nodePools.mode", "perTag"}},
		{"auto on GKE", func(c *v1alpha1.RunnerClass) {
			c.Spec.Provider = v1alpha1.CapacityProviderComputeClass
			c.Spec.ComputeClass = &v1alpha1.ComputeClassSettings{MachineFamilies: []string{"n2d"}}
			c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeAuto}
		}, []string{"spec.nodePools.mode", "computeclass"}},
		{"sharedAbove without auto", func(c *v1alpha1.RunnerClass) {
			c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeShared, SharedAbove: ptr.To[int32](10)}
		}, []string{"spec.nodePools.sharedAbove applies only to mode auto"}},
		{"sharedAbove zero", func(c *v1alpha1.RunnerClass) {
			c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeAuto, SharedAbove: ptr.To[int32](0)}
		}, []string{"spec.nodePools.sharedAbove"}},
		{"an unknown mode", func(c *v1alpha1.RunnerClass) {
			c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: "pertag"}
		}, []string{"spec.nodePools.mode", "perTag"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "bad-nodepools"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
			tc.mutate(c)
			err := k8s.Create(ctx, c)
			if err == nil {
				_ = k8s.Delete(ctx, c)
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
	// What works is accepted, and the default is perTag.
	auto := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeAuto, SharedAbove: ptr.To[int32](3)}
	})
	if !auto.Spec.NodePools.Shares(4) || auto.Spec.NodePools.Shares(3) {
		t.Errorf("auto above 3 shares at 4 and not at 3: got %v, %v", auto.Spec.NodePools.Shares(4), auto.Spec.NodePools.Shares(3))
	}
	empty := newClass(t, func(c *v1alpha1.RunnerClass) { c.Spec.NodePools = &v1alpha1.NodePoolSettings{} })
	if empty.Spec.NodePools.Mode != v1alpha1.NodePoolModePerTag {
		t.Errorf("an empty spec.nodePools has mode %q, want perTag by default", empty.Spec.NodePools.Mode)
	}
	gke := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Provider = v1alpha1.CapacityProviderComputeClass
		c.Spec.ComputeClass = &v1alpha1.ComputeClassSettings{MachineFamilies: []string{"n2d"}}
		c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModePerTag}
	})
	if gke.Spec.NodePools.Shares(1000) {
		t.Error("perTag shares")
	}
}
