package capacity

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/internal/schedtest"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

func kwokClass() *v1alpha1.RunnerClass {
	return &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
}

func shared(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass) (*Capacity, error) {
	return Shared(rs, class, v1alpha1.Effective(rs, class))
}

// sharedNode is a node Karpenter makes from np for a job pod that selects
// capacity tag and wants capacity type ct: the NodePool's taints, the tag's
// label stamped from the pod, the NodePool's name, and the instance's.
func sharedNode(np *karpv1.NodePool, tag, ct, arch, family string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "job-" + tag, Labels: map[string]string{
			LabelCapacity: tag, karpv1.NodePoolLabelKey: np.Name, karpv1.CapacityTypeLabelKey: ct,
			corev1.LabelArchStable: arch, familyKey(kwokClass()): family, corev1.LabelOSStable: "linux",
		}},
		Spec: corev1.NodeSpec{Taints: np.Spec.Template.Spec.Taints},
	}
}

// jobPodOf is jobPodSpec with the placement's node requirements as the
// required node affinity config.toml gives the job pods.
func jobPodOf(c *Capacity) corev1.PodSpec {
	spec := jobPodSpec(c)
	if len(c.Placement.NodeRequirements) == 0 {
		return spec
	}
	var term corev1.NodeSelectorTerm
	for _, r := range c.Placement.NodeRequirements {
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: r.Key, Operator: corev1.NodeSelectorOperator(r.Operator), Values: r.Values})
	}
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}}}
	return spec
}

// Two tags of a class share one NodePool and node class, named from the
// class, yet never a node: each job pod lands only on a node stamped with
// its own tag, of the capacity type, architecture and family it asked for;
// no pod of another class, no manager and no tag of its own NodePool lands
// on a shared node; and a moved tag's jobs stay off its own NodePool of
// before, which empties.
func TestSharedTagsShareANodePoolButNeverANode(t *testing.T) {
	class := kwokClass()
	class.Spec.Policy.AllowedCapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeOnDemand, v1alpha1.CapacityTypeSpot}
	a, b := rs(), &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "build"}}
	a.Spec.Capacity.InstanceFamilies = []string{"c", "m"}
	b.Spec.Capacity.Architectures = []v1alpha1.Architecture{v1alpha1.ArchitectureARM64}
	b.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeOnDemand}
	ca, err := shared(a, class)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := shared(b, class)
	if err != nil {
		t.Fatal(err)
	}
	np := ca.Objects[1].(*karpv1.NodePool)
	if np.Name != naming.ClassCapacity(class.Name) || ca.Pool != np.Name || cb.Pool != np.Name || ca.Objects[0].GetName() != np.Name {
		t.Fatalf("NodePool %s, pools %s and %s, node class %s: want all %s", np.Name, ca.Pool, cb.Pool, ca.Objects[0].GetName(), naming.ClassCapacity(class.Name))
	}
	if resources.SpecHash(ca.Objects[1]) != resources.SpecHash(cb.Objects[1]) {
		t.Error("two tags build different shared NodePools: each would rewrite it")
	}
	if ca.Name == cb.Name || ca.Name != naming.For("team-a", "build").Capacity() {
		t.Errorf("capacity names %s and %s", ca.Name, cb.Name)
	}
	if len(np.Spec.Limits) != 0 || len(np.Spec.Template.Labels) != 0 {
		t.Errorf("shared NodePool has limits %v or labels %v of a tag", np.Spec.Limits, np.Spec.Template.Labels)
	}
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if errs, err := Validate(np, scheme); err != nil || len(errs) > 0 {
		t.Errorf("Karpenter's CRD refuses the shared NodePool: %v %v", errs, err)
	}

	podA, podB := jobPodOf(ca), jobPodOf(cb)
	nodeA := sharedNode(np, ca.Name, "spot", "amd64", "c")
	nodeB := sharedNode(np, cb.Name, "on-demand", "arm64", "m")
	for _, c := range []struct {
		what string
		pod  corev1.PodSpec
		node *corev1.Node
		fits bool
	}{
		{"tag a's job on tag a's node", podA, nodeA, true},
		{"tag b's job on tag b's node", podB, nodeB, true},
		{"tag a's job on tag b's node", podA, nodeB, false},
		{"tag b's job on tag a's node", podB, nodeA, false},
		{"tag a's job on its node of family r", podA, sharedNode(np, ca.Name, "spot", "amd64", "r"), false},
		{"tag b's job on its spot node", podB, sharedNode(np, cb.Name, "spot", "arm64", "m"), false},
		{"tag b's job on its amd64 node", podB, sharedNode(np, cb.Name, "on-demand", "amd64", "m"), false},
	} {
		err := schedtest.Fits(c.pod, c.node)
		if (err == nil) != c.fits {
			t.Errorf("%s: fits=%v, want %v (%v)", c.what, err == nil, c.fits, err)
		}
	}
	// The NodePool's requirements admit what each tag asks: Karpenter
	// makes a node only within both.
	for _, want := range []struct{ key, value string }{
		{karpv1.CapacityTypeLabelKey, "spot"}, {karpv1.CapacityTypeLabelKey, "on-demand"},
		{corev1.LabelArchStable, "amd64"}, {corev1.LabelArchStable, "arm64"},
	} {
		if !strings.Contains(strings.Join(requirement(np, want.key), ","), want.value) {
			t.Errorf("shared NodePool does not allow %s=%s: %v", want.key, want.value, np.Spec.Template.Spec.Requirements)
		}
	}

	// A tag of its own NodePool (perTag, or of another class) never lands
	// on a shared node, nor a manager.
	own, err := build(rs(), class)
	if err != nil {
		t.Fatal(err)
	}
	if err := schedtest.Fits(jobPodSpec(own), nodeA); err == nil {
		t.Error("a perTag job pod of the same tag fits a shared node: the shared taint is tolerated by a tag's own toleration")
	}
	manager := resources.Deployment(a, "gitlab-runner:v19.4.0", "h", "team-a-build-j1").Spec.Template.Spec
	if err := schedtest.Fits(manager, nodeA); err == nil {
		t.Error("a manager pod fits a shared job node")
	}
	// A moved tag's jobs stay off its own NodePool of before (same label,
	// tolerated taint), so that one empties.
	ownNode := jobNode(own.Objects[1].(*karpv1.NodePool))
	ownNode.Labels[karpv1.NodePoolLabelKey] = own.Name
	if err := schedtest.Fits(podA, ownNode); err == nil {
		t.Error("a shared job pod fits a node of its tag's own NodePool of before: that NodePool would never empty")
	}
	// Negative control: without the NodePool requirement it would fit.
	noPool := *podA.DeepCopy()
	noPool.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions = noPool.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[1:]
	ownNode.Labels[corev1.LabelArchStable] = "amd64"
	ownNode.Labels[familyKey(class)] = "c"
	if err := schedtest.Fits(noPool, ownNode); err != nil {
		t.Errorf("the control does not fit either, so the test proves nothing: %v", err)
	}
}

// A tag asks for what only a NodePool of its own gives: a job timeout
// longer than the shared NodePool's nodes drain for. Shared refuses it
// naming the field; GKE's per-tag ComputeClass cannot share. A limit is
// no longer such a wish: the managers' [[runners]] limit holds the tag's
// jobs in GitLab's queue, so a limited tag shares, and the shared NodePool
// gets no limit (it would be every tag's).
func TestSharedRefusesWhatOnlyANodePoolOfItsOwnGives(t *testing.T) {
	limited := rs()
	limited.Spec.Jobs.Resources.Build.CPURequest = ptrQ("2")
	limited.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
	if field, why := NeedsOwnPool(limited, v1alpha1.Effective(limited, kwokClass())); field != "" {
		t.Errorf("a tag with a limit needs its own NodePool for %s: %s", field, why)
	}
	c, err := shared(limited, kwokClass())
	if err != nil {
		t.Fatalf("a tag with a limit on the shared NodePool: %v", err)
	}
	if c.Placement.JobsPerManager != 10 { // 32 jobs fit, concurrent 10
		t.Errorf("JobsPerManager %d, want 10", c.Placement.JobsPerManager)
	}
	if np := c.Objects[1].(*karpv1.NodePool); len(np.Spec.Limits) != 0 {
		t.Errorf("the shared NodePool got limits %v: they would be every tag's", np.Spec.Limits)
	}
	long := rs()
	long.Spec.Managers.ShutdownTimeout = &metav1.Duration{Duration: SharedJobTimeout + time.Hour}
	below := rs()
	below.Spec.Jobs.Resources.Build.CPURequest = ptrQ("4")
	below.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	gke := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "gke"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderComputeClass}}
	for _, c := range []struct {
		what   string
		rs     *v1alpha1.RunnerSet
		class  *v1alpha1.RunnerClass
		reason string
		field  string
	}{
		{"a longer drain", long, kwokClass(), v1alpha1.ReasonNeedsOwnNodePool, "spec.managers.shutdownTimeout"},
		{"a limit below one job", below, kwokClass(), v1alpha1.ReasonLimitsBelowOneJob, "spec.capacity.limits.cpu"},
		{"GKE", rs(), gke, v1alpha1.ReasonCapacityRejected, "spec.nodePools.mode"},
	} {
		t.Run(c.what, func(t *testing.T) {
			_, err := shared(c.rs, c.class)
			var f *v1alpha1.Failure
			if !errors.As(err, &f) || f.Reason != c.reason || !strings.Contains(f.Message, c.field) {
				t.Errorf("got %v, want a %s failure naming %s", err, c.reason, c.field)
			}
		})
	}
	if field, _ := NeedsOwnPool(rs(), v1alpha1.Effective(rs(), kwokClass())); field != "" {
		t.Errorf("a tag of defaults needs its own NodePool for %s", field)
	}
}

func ptrQ(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
