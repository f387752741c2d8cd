package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
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

// updateClass re-reads class, applies change and writes it, retrying on
// conflicts with the RunnerClass controller.
func updateClass(t *testing.T, class *v1alpha1.RunnerClass, change func(*v1alpha1.RunnerClass)) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), class); err != nil {
			return err
		}
		change(class)
		return k8s.Update(ctx, class)
	}))
}

// setPoolNodes writes the node count Karpenter keeps in a NodePool's status.
func setPoolNodes(t *testing.T, name string, n int64) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := get(t, "", name, &karpv1.NodePool{})
		cur.Status.Nodes = &n
		return k8s.Status().Update(ctx, cur)
	}))
}

func configOf(t *testing.T, ns, name string) string {
	t.Helper()
	return string(get(t, ns, naming.For(ns, name).Config(), &corev1.Secret{}).Data[resources.ConfigKey])
}

// In mode shared, two tags of a class get no NodePool of their own: the
// class's one NodePool (and its node class, both named from the class and
// controlled by it) serve both, and each tag's config.toml selects its own
// capacity label and the shared NodePool, tolerates the class's taint and
// carries its capacity wishes as node affinity.
func TestSharedModeTagsUseTheClasssOneNodePool(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeShared}
	})
	for _, name := range []string{"one", "two"} {
		newSecret(t, ns, name+"-token", token)
		rs := runnerSet(ns, name, class.Name)
		if name == "two" {
			rs.Spec.Capacity.Architectures = []v1alpha1.Architecture{v1alpha1.ArchitectureARM64}
		}
		must(t, k8s.Create(ctx, rs))
		cur := waitReady(t, rs)
		if msg := condition(cur, v1alpha1.ConditionCapacityReady).Message; !strings.Contains(msg, "shared NodePool "+naming.ClassCapacity(class.Name)) {
			t.Errorf("CapacityReady says %q", msg)
		}
		absent(t, &karpv1.NodePool{}, naming.For(ns, name).Capacity())
	}
	shared := get(t, "", naming.ClassCapacity(class.Name), &karpv1.NodePool{})
	if ref := metav1.GetControllerOf(shared); ref == nil || ref.UID != class.UID {
		t.Errorf("the shared NodePool is controlled by %+v, want RunnerClass %s", ref, class.Name)
	}
	if shared.Spec.Template.Spec.NodeClassRef.Name != naming.ClassCapacity(class.Name) {
		t.Errorf("the shared NodePool refers to %+v", shared.Spec.Template.Spec.NodeClassRef)
	}
	get(t, "", naming.ClassCapacity(class.Name), &kwokv1alpha1.KWOKNodeClass{})
	two := configOf(t, ns, "two")
	for _, want := range []string{
		fmt.Sprintf(`"%s" = "%s"`, capacity.LabelCapacity, naming.For(ns, "two").Capacity()),
		fmt.Sprintf(`"%s" = "NoSchedule"`, capacity.LabelCapacity),
		"required_during_scheduling_ignored_during_execution",
		`values = ["` + naming.ClassCapacity(class.Name) + `"]`,
		`values = ["arm64"]`,
	} {
		if !strings.Contains(two, want) {
			t.Errorf("config.toml lacks %s:\n%s", want, two)
		}
	}
}

// A class moved from perTag to shared while a tag's own NodePool has a
// node: the tag's new jobs go to the shared NodePool, its own NodePool
// stays as it is (CapacityReady names spec.nodePools.mode and says so)
// until Karpenter counts no node in it, and then goes. Moved back to
// perTag, the tag gets its own NodePool again, and the shared one goes
// once it has no node either.
func TestAModeMoveNeverDeletesANodePoolWithANode(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "mover-token", token)
	rs := runnerSet(ns, "mover", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	own := naming.For(ns, "mover").Capacity()
	pool := get(t, "", own, &karpv1.NodePool{})
	setPoolNodes(t, own, 1)

	updateClass(t, class, func(c *v1alpha1.RunnerClass) {
		c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeShared}
	})
	moving := waitCondition(t, rs, v1alpha1.ConditionCapacityReady, metav1.ConditionTrue, v1alpha1.ReasonMovingNodePool)
	msg := condition(moving, v1alpha1.ConditionCapacityReady).Message
	for _, want := range []string{"spec.nodePools.mode", own, naming.ClassCapacity(class.Name)} {
		if !strings.Contains(msg, want) {
			t.Errorf("CapacityReady %q does not name %s", msg, want)
		}
	}
	get(t, "", naming.ClassCapacity(class.Name), &karpv1.NodePool{})
	if !strings.Contains(configOf(t, ns, "mover"), naming.ClassCapacity(class.Name)) {
		t.Error("config.toml does not send new jobs to the shared NodePool")
	}
	// More passes leave the tag's own NodePool with its node alone.
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Managers.Concurrent = 5 })
	waitCondition(t, rs, v1alpha1.ConditionCapacityReady, metav1.ConditionTrue, v1alpha1.ReasonMovingNodePool)
	time.Sleep(time.Second)
	if now := get(t, "", own, &karpv1.NodePool{}); !now.DeletionTimestamp.IsZero() || now.UID != pool.UID || now.Generation != pool.Generation {
		t.Fatalf("the tag's own NodePool with a node was deleted or changed (deletion %v, generation %d → %d): Karpenter drains its nodes under running jobs", now.DeletionTimestamp, pool.Generation, now.Generation)
	}

	setPoolNodes(t, own, 0)
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Managers.Concurrent = 6 }) // a pass
	eventually(t, "the tag's empty NodePool deleted", func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Name: own}, &karpv1.NodePool{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	waitCondition(t, rs, v1alpha1.ConditionCapacityReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled)

	// Back to perTag while the shared NodePool has a node.
	sharedName := naming.ClassCapacity(class.Name)
	setPoolNodes(t, sharedName, 1)
	updateClass(t, class, func(c *v1alpha1.RunnerClass) { c.Spec.NodePools.Mode = v1alpha1.NodePoolModePerTag })
	eventually(t, "the tag's own NodePool again", func() error {
		return k8s.Get(ctx, client.ObjectKey{Name: own}, &karpv1.NodePool{})
	})
	updateClass(t, class, func(c *v1alpha1.RunnerClass) { c.Spec.Policy.MaxConcurrency = ptr.To[int32](1000) }) // a class pass
	time.Sleep(time.Second)
	if sh := get(t, "", sharedName, &karpv1.NodePool{}); !sh.DeletionTimestamp.IsZero() {
		t.Fatal("the shared NodePool with a node was deleted")
	}
	setPoolNodes(t, sharedName, 0)
	updateClass(t, class, func(c *v1alpha1.RunnerClass) { c.Spec.Policy.MaxConcurrency = ptr.To[int32](999) })
	eventually(t, "the unused empty shared NodePool deleted", func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Name: sharedName}, &karpv1.NodePool{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	waitReady(t, rs)
}

// Bad input in mode shared: a tag whose job timeout outlasts the shared
// NodePool's drain (which only a NodePool of its own gives) is refused
// naming spec.managers.shutdownTimeout and gets no capacity; one already
// running on its own NodePool when the class switches to shared keeps
// that NodePool untouched. A limit below one job's requests is refused as
// ever, whatever the mode; a tag with a limit that fits shares the
// class's NodePool, its limit held by its managers' [[runners]] limit.
func TestSharedModeRefusesATagThatNeedsItsOwnNodePool(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	long := &metav1.Duration{Duration: capacity.SharedJobTimeout + time.Hour}
	newSecret(t, ns, "running-token", token)
	running := runnerSet(ns, "running", class.Name)
	running.Spec.Managers.ShutdownTimeout = long
	must(t, k8s.Create(ctx, running))
	waitReady(t, running)
	pool := get(t, "", naming.For(ns, "running").Capacity(), &karpv1.NodePool{})
	setPoolNodes(t, pool.Name, 1)

	updateClass(t, class, func(c *v1alpha1.RunnerClass) {
		c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeShared}
	})
	refused := waitCondition(t, running, v1alpha1.ConditionCapacityReady, metav1.ConditionFalse, v1alpha1.ReasonNeedsOwnNodePool)
	msg := condition(refused, v1alpha1.ConditionCapacityReady).Message
	for _, want := range []string{"spec.managers.shutdownTimeout", "spec.nodePools.mode shared", "no running job's node is touched"} {
		if !strings.Contains(msg, want) {
			t.Errorf("CapacityReady %q does not say %q", msg, want)
		}
	}
	if now := get(t, "", pool.Name, &karpv1.NodePool{}); !now.DeletionTimestamp.IsZero() || now.Generation != pool.Generation {
		t.Errorf("the refused tag's own NodePool was deleted or changed")
	}

	newSecret(t, ns, "fresh-token", token)
	fresh := runnerSet(ns, "fresh", class.Name)
	fresh.Spec.Managers.ShutdownTimeout = long
	must(t, k8s.Create(ctx, fresh))
	waitCondition(t, fresh, v1alpha1.ConditionCapacityReady, metav1.ConditionFalse, v1alpha1.ReasonNeedsOwnNodePool)
	absent(t, &karpv1.NodePool{}, naming.For(ns, "fresh").Capacity())

	newSecret(t, ns, "tiny-token", token)
	tiny := runnerSet(ns, "tiny", class.Name)
	tiny.Spec.Jobs.Resources.Build.CPURequest = ptr.To(resource.MustParse("4"))
	tiny.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	must(t, k8s.Create(ctx, tiny))
	below := waitCondition(t, tiny, v1alpha1.ConditionCapacityReady, metav1.ConditionFalse, v1alpha1.ReasonLimitsBelowOneJob)
	if msg := condition(below, v1alpha1.ConditionCapacityReady).Message; !strings.Contains(msg, "spec.capacity.limits.cpu") {
		t.Errorf("CapacityReady %q does not name spec.capacity.limits.cpu", msg)
	}

	newSecret(t, ns, "capped-token", token)
	capped := runnerSet(ns, "capped", class.Name)
	capped.Spec.Jobs.Resources.Build.CPURequest = ptr.To(resource.MustParse("2"))
	capped.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("6")}
	must(t, k8s.Create(ctx, capped))
	cur := waitReady(t, capped)
	if c := condition(cur, v1alpha1.ConditionCapacityReady); !strings.Contains(c.Message, naming.ClassCapacity(class.Name)) {
		t.Errorf("the tag with a limit is not on the shared NodePool: %s", c.Message)
	}
	absent(t, &karpv1.NodePool{}, naming.For(ns, "capped").Capacity())
	if cfg := configOf(t, ns, "capped"); !strings.Contains(cfg, "limit = 3\n") {
		t.Errorf("config.toml of a tag whose limit fits 3 jobs has no limit = 3:\n%s", cfg)
	}
}

// Limits that fit fewer jobs than spec.managers.replicas (each manager runs
// at least one; a [[runners]] limit of 0 is none) are a CapacityReady
// condition naming both fields and the fix, and change nothing that runs:
// the config.toml the managers run keeps its limit, and the Deployment
// its replicas. Fixed, the limit follows.
func TestLimitsBelowTheManagersAreAConditionAndChangeNothingThatRuns(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "team-token", token)
	rs := runnerSet(ns, "team", class.Name)
	rs.Spec.Managers.Replicas = ptr.To[int32](2)
	rs.Spec.Jobs.Resources.Build.CPURequest = ptr.To(resource.MustParse("1"))
	rs.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	before := configOf(t, ns, "team")
	if !strings.Contains(before, "limit = 2\n") {
		t.Fatalf("4 jobs on 2 managers: want limit = 2 in\n%s", before)
	}
	update(t, rs, func(r *v1alpha1.RunnerSet) { r.Spec.Managers.Replicas = ptr.To[int32](5) })
	bad := waitCondition(t, rs, v1alpha1.ConditionCapacityReady, metav1.ConditionFalse, v1alpha1.ReasonLimitsBelowManagers)
	msg := condition(bad, v1alpha1.ConditionCapacityReady).Message
	for _, want := range []string{"spec.capacity.limits fit 4 job(s)", "spec.managers.replicas is 5", "nothing was changed", "lower spec.managers.replicas to 4"} {
		if !strings.Contains(msg, want) {
			t.Errorf("CapacityReady %q does not say %q", msg, want)
		}
	}
	if after := configOf(t, ns, "team"); after != before {
		t.Errorf("config.toml changed under the refused spec:\n%s", after)
	}
	if d := get(t, ns, naming.For(ns, "team").Managers(), &appsv1.Deployment{}); *d.Spec.Replicas != 2 {
		t.Errorf("the managers' Deployment went to %d replicas under the refused spec", *d.Spec.Replicas)
	}
	update(t, rs, func(r *v1alpha1.RunnerSet) { r.Spec.Managers.Replicas = ptr.To[int32](4) })
	waitReady(t, rs)
	eventually(t, "limit = 1 for 4 jobs on 4 managers", func() error {
		if cfg := configOf(t, ns, "team"); !strings.Contains(cfg, "limit = 1\n") {
			return fmt.Errorf("%s", cfg)
		}
		return nil
	})
}

// In mode auto, beyond sharedAbove RunnerSets the class's tags share its
// NodePool, but a tag with a longer drain keeps a NodePool of its own.
func TestAutoModeSharesAboveTheThresholdButATagWithALongerDrainKeepsItsOwn(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeAuto, SharedAbove: ptr.To[int32](1)}
	})
	newSecret(t, ns, "plain-token", token)
	plain := runnerSet(ns, "plain", class.Name)
	must(t, k8s.Create(ctx, plain))
	waitReady(t, plain)
	// One RunnerSet, not above 1: a NodePool of its own.
	get(t, "", naming.For(ns, "plain").Capacity(), &karpv1.NodePool{})

	newSecret(t, ns, "capped-token", token)
	capped := runnerSet(ns, "capped", class.Name)
	capped.Spec.Managers.ShutdownTimeout = &metav1.Duration{Duration: capacity.SharedJobTimeout + time.Hour}
	must(t, k8s.Create(ctx, capped))
	waitReady(t, capped)
	// The class counts two (a spec change brings its count at once).
	updateClass(t, class, func(c *v1alpha1.RunnerClass) { c.Spec.Policy.MaxConcurrency = ptr.To[int32](1000) })
	eventually(t, "the class counts two RunnerSets", func() error {
		if n := get(t, "", class.Name, &v1alpha1.RunnerClass{}).Status.RunnerSets; n != 2 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	for i, r := range []*v1alpha1.RunnerSet{plain, capped} {
		update(t, r, func(r *v1alpha1.RunnerSet) { r.Spec.Managers.Concurrent = int32(5 + i) }) // a pass
	}
	eventually(t, "plain on the shared NodePool", func() error {
		cur := get(t, ns, "plain", &v1alpha1.RunnerSet{})
		if c := condition(cur, v1alpha1.ConditionCapacityReady); c == nil || !strings.Contains(c.Message, naming.ClassCapacity(class.Name)) {
			return fmt.Errorf("CapacityReady %+v", c)
		}
		return nil
	})
	get(t, "", naming.ClassCapacity(class.Name), &karpv1.NodePool{})
	cur := waitReady(t, capped)
	if c := condition(cur, v1alpha1.ConditionCapacityReady); strings.Contains(c.Message, "shared") {
		t.Errorf("the tag with a longer drain went to the shared NodePool: %s", c.Message)
	}
	get(t, "", naming.For(ns, "capped").Capacity(), &karpv1.NodePool{})
}
