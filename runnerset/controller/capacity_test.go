package controller_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

func eksClass(t *testing.T, mutate func(*v1alpha1.KarpenterSettings)) *v1alpha1.RunnerClass {
	return newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Provider = v1alpha1.CapacityProviderKarpenter
		c.Spec.Karpenter = &v1alpha1.KarpenterSettings{ClusterName: "prod", NodeRole: "prod-nodes"}
		if mutate != nil {
			mutate(c.Spec.Karpenter)
		}
	})
}

func absent(t *testing.T, obj client.Object, name string) {
	t.Helper()
	err := k8s.Get(ctx, client.ObjectKey{Name: name}, obj)
	if !apierrors.IsNotFound(err) {
		t.Errorf("%T %s exists (err=%v): a refused tag must not be half created", obj, name, err)
	}
}

func TestEKSCapacityIsAcceptedByKarpentersOwnSchemaAndMatchesTheJobs(t *testing.T) {
	ns := newNamespace(t)
	class := eksClass(t, nil)
	newSecret(t, ns, "eks-token", token)
	rs := runnerSet(ns, "eks", class.Name)
	rs.Spec.Capacity.InstanceFamilies = []string{"c7i", "m7i"}
	rs.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100"), corev1.ResourceMemory: resource.MustParse("400Gi")}
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)

	name := naming.For(ns, "eks").Capacity()
	if cur.Status.Capacity != name {
		t.Errorf("status.capacity %q, want %q", cur.Status.Capacity, name)
	}
	np := get(t, "", name, &karpv1.NodePool{})
	// The node class is the RunnerClass's, which controls it.
	nc := get(t, "", naming.ClassCapacity(class.Name), &awsv1.EC2NodeClass{})
	if np.Spec.Template.Spec.NodeClassRef.Name != nc.Name || np.Spec.Template.Spec.NodeClassRef.Kind != "EC2NodeClass" {
		t.Errorf("NodePool refers to %+v", np.Spec.Template.Spec.NodeClassRef)
	}
	if ref := metav1.GetControllerOf(nc); ref == nil || ref.UID != class.UID || ref.Kind != "RunnerClass" {
		t.Errorf("EC2NodeClass %s is controlled by %+v, want RunnerClass %s", nc.Name, ref, class.Name)
	}
	if nc.Spec.Tags[capacity.TagRunnerClass] != class.Name {
		t.Errorf("EC2NodeClass tags %v: instances do not name their RunnerClass", nc.Spec.Tags)
	}
	if np.Labels[capacity.LabelOwnerNamespace] != ns || np.Labels[capacity.LabelOwnerName] != "eks" {
		t.Errorf("NodePool is not tied to its RunnerSet: %v", np.Labels)
	}
	cfg := get(t, ns, naming.For(ns, "eks").Config(), &corev1.Secret{})
	toml := string(cfg.Data[resources.ConfigKey])
	for _, want := range []string{
		fmt.Sprintf(`"%s" = "%s"`, capacity.LabelCapacity, name),
		fmt.Sprintf(`"%s=%s" = "NoSchedule"`, capacity.LabelCapacity, name),
		`"karpenter.sh/do-not-disrupt" = "true"`,
	} {
		if !strings.Contains(toml, want) {
			t.Errorf("config.toml lacks %s:\n%s", want, toml)
		}
	}

	// A second tag of the class gets a NodePool of its own on the same
	// node class.
	newSecret(t, ns, "eks2-token", token)
	rs2 := runnerSet(ns, "eks2", class.Name)
	must(t, k8s.Create(ctx, rs2))
	waitReady(t, rs2)
	np2 := get(t, "", naming.For(ns, "eks2").Capacity(), &karpv1.NodePool{})
	if np2.Name == np.Name || np2.Spec.Template.Spec.NodeClassRef.Name != nc.Name {
		t.Errorf("the second tag's NodePool %s refers to %+v, want its own NodePool on %s", np2.Name, np2.Spec.Template.Spec.NodeClassRef, nc.Name)
	}

	// Deleting the RunnerSet removes its capacity, after the managers
	// drained; the class's node class stays for its other tags (the
	// garbage collector removes it with the class).
	must(t, k8s.Delete(ctx, rs))
	eventually(t, "capacity removed with the RunnerSet", func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &karpv1.NodePool{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("NodePool still there (%v)", err)
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), &v1alpha1.RunnerSet{}); !apierrors.IsNotFound(err) {
			return errors.New("RunnerSet still there")
		}
		return nil
	})
	get(t, "", nc.Name, &awsv1.EC2NodeClass{})
	get(t, "", np2.Name, &karpv1.NodePool{})
}

// A tag of an earlier version has a node class of its own, named as its
// NodePool. Its NodePool is moved to the class's node class, and only then
// is its own deleted; one of that name that is not the tag's stays.
func TestATagsOwnNodeClassOfEarlierVersionsGoesForItsClasss(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "old-token", token)
	rs := runnerSet(ns, "old", class.Name)
	name := naming.For(ns, "old").Capacity()
	earlier := &kwokv1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		resources.LabelManagedBy: resources.ManagedBy, capacity.LabelOwnerNamespace: ns, capacity.LabelOwnerName: "old",
	}}}
	must(t, k8s.Create(ctx, earlier))
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	eventually(t, "the tag's own node class deleted", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(earlier), &kwokv1alpha1.KWOKNodeClass{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	if ref := get(t, "", name, &karpv1.NodePool{}).Spec.Template.Spec.NodeClassRef; ref.Name != naming.ClassCapacity(class.Name) {
		t.Errorf("NodePool refers to %+v, want the class's node class", ref)
	}

	// Someone else's node class under a tag's name is left alone.
	newSecret(t, ns, "other-token", token)
	theirs := &kwokv1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: naming.For(ns, "other").Capacity()}}
	must(t, k8s.Create(ctx, theirs))
	other := runnerSet(ns, "other", class.Name)
	must(t, k8s.Create(ctx, other))
	waitReady(t, other)
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(theirs), &kwokv1alpha1.KWOKNodeClass{}))
}

// A node class of the class's name that the class does not control is in
// the way: the tag's capacity waits, and its condition names it.
func TestANodeClassNotTheClasssIsInTheWay(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	theirs := &kwokv1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: naming.ClassCapacity(class.Name)}}
	must(t, k8s.Create(ctx, theirs))
	t.Cleanup(func() { _ = k8s.Delete(ctx, theirs) })
	newSecret(t, ns, "blocked-token", token)
	rs := runnerSet(ns, "blocked", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitCondition(t, rs, v1alpha1.ConditionCapacityReady, metav1.ConditionFalse, v1alpha1.ReasonObjectInTheWay)
	if msg := condition(cur, v1alpha1.ConditionCapacityReady).Message; !strings.Contains(msg, theirs.Name) {
		t.Errorf("message %q does not name %s", msg, theirs.Name)
	}
}

func TestCapacityThatKarpenterRejectsIsRefusedWholeWithItsMessage(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		mutate func(*v1alpha1.KarpenterSettings)
		says   string
	}{
		{"an AMI family Karpenter does not know", func(k *v1alpha1.KarpenterSettings) { k.AMIAlias = "ubuntu@latest" }, "spec.karpenter.amiAlias of RunnerClass"},
		{"a tag Karpenter reserves", func(k *v1alpha1.KarpenterSettings) { k.Tags = map[string]string{"karpenter.sh/nodepool": "x"} }, "spec.karpenter.tags of RunnerClass"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			class := eksClass(t, tc.mutate)
			name := fmt.Sprintf("rej-%d", i)
			newSecret(t, ns, name+"-token", token)
			rs := runnerSet(ns, name, class.Name)
			must(t, k8s.Create(ctx, rs))
			cur := waitCondition(t, rs, v1alpha1.ConditionCapacityReady, metav1.ConditionFalse, v1alpha1.ReasonCapacityRejected)
			msg := condition(cur, v1alpha1.ConditionCapacityReady).Message
			// The class's settings are at fault, not the RunnerSet's.
			if !strings.Contains(msg, tc.says) || !strings.Contains(msg, "EC2NodeClass") || !strings.Contains(msg, "rejected") || strings.Contains(msg, "spec.capacity") {
				t.Errorf("message %q does not blame %s", msg, tc.says)
			}
			capName := naming.For(ns, name).Capacity()
			absent(t, &karpv1.NodePool{}, capName)
			absent(t, &awsv1.EC2NodeClass{}, naming.ClassCapacity(class.Name))
		})
	}
}

func TestLimitsBelowOneJobCreateNothing(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "tight-token", token)
	rs := runnerSet(ns, "tight", class.Name)
	rs.Spec.Jobs.Resources.Build.CPURequest = ptr.To(resource.MustParse("4"))
	rs.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	must(t, k8s.Create(ctx, rs))
	cur := waitCondition(t, rs, v1alpha1.ConditionCapacityReady, metav1.ConditionFalse, v1alpha1.ReasonLimitsBelowOneJob)
	if msg := condition(cur, v1alpha1.ConditionCapacityReady).Message; !strings.Contains(msg, "spec.capacity.limits.cpu") {
		t.Errorf("message %q", msg)
	}
	capName := naming.For(ns, "tight").Capacity()
	absent(t, &karpv1.NodePool{}, capName)
	absent(t, &kwokv1alpha1.KWOKNodeClass{}, naming.ClassCapacity(class.Name))
}

func TestGKECapacityIsAComputeClass(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Provider = v1alpha1.CapacityProviderComputeClass
		c.Spec.ComputeClass = &v1alpha1.ComputeClassSettings{MachineFamilies: []string{"n2d"}}
		c.Spec.Policy.Identity = v1alpha1.IdentityPolicy{}
	})
	newSecret(t, ns, "gke-token", token)
	rs := runnerSet(ns, "gke", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	cc := &unstructured.Unstructured{}
	cc.SetAPIVersion("cloud.google.com/v1")
	cc.SetKind("ComputeClass")
	must(t, k8s.Get(ctx, client.ObjectKey{Name: naming.For(ns, "gke").Capacity()}, cc))
	if cc.GetLabels()[capacity.LabelOwnerName] != "gke" {
		t.Errorf("ComputeClass labels %v", cc.GetLabels())
	}
}

func TestAClassWithoutItsProviderSettingsIsRefusedAtAdmission(t *testing.T) {
	c := &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "half-eks"},
		Spec:       v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKarpenter},
	}
	err := k8s.Create(ctx, c)
	if err == nil {
		_ = k8s.Delete(ctx, c)
		t.Fatal("accepted")
	}
	if !strings.Contains(err.Error(), "provider karpenter needs spec.karpenter") {
		t.Errorf("error %v", err)
	}
}

func TestGKELimitsAreAResourceQuotaInTheJobsNamespace(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Provider = v1alpha1.CapacityProviderComputeClass
		c.Spec.ComputeClass = &v1alpha1.ComputeClassSettings{MachineFamilies: []string{"n2d"}}
		c.Spec.Policy.Identity = v1alpha1.IdentityPolicy{}
	})
	newSecret(t, ns, "quota-token", token)
	rs := runnerSet(ns, "quota", class.Name)
	rs.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("128")}
	one := resource.MustParse("1")
	rs.Spec.Jobs.Resources.Build.CPURequest = &one
	rs.Spec.Jobs.Resources.Helper.CPURequest = &one
	rs.Spec.Jobs.Resources.Service.CPURequest = &one
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	jobs := cur.Status.JobsNamespace
	q := get(t, jobs, naming.For(ns, "quota").Capacity(), &corev1.ResourceQuota{})
	if got := q.Spec.Hard[corev1.ResourceRequestsCPU]; !got.Equal(resource.MustParse("128")) || len(q.Spec.Hard) != 1 {
		t.Errorf("quota %v, want requests.cpu 128", q.Spec.Hard)
	}
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Capacity.Limits = nil })
	eventually(t, "the quota gone with the limits", func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: jobs, Name: q.Name}, &corev1.ResourceQuota{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// A NodePool an earlier version put on the tag's own node class keeps it
// while Karpenter counts nodes in the pool: moving its nodeClassRef would
// drift every node, and Karpenter replaces drifted nodes under running jobs
// once the grace period is up. It moves, and the earlier node class goes,
// once the pool has no node.
func TestATagsNodePoolWithNodesKeepsItsEarlierNodeClassUntilItIsEmpty(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "busy-token", token)
	rs := runnerSet(ns, "busy", class.Name)
	name := naming.For(ns, "busy").Capacity()
	owned := map[string]string{resources.LabelManagedBy: resources.ManagedBy, capacity.LabelOwnerNamespace: ns, capacity.LabelOwnerName: "busy"}
	earlier := &kwokv1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: owned}}
	must(t, k8s.Create(ctx, earlier))
	// The NodePool as an earlier version wrote it: on the tag's node class,
	// with one node counted by Karpenter.
	old := capacity.NodePool(rs, class, karpv1.NodeClassReference{Group: capacity.KWOKGroupVersion.Group, Kind: "KWOKNodeClass", Name: name}, v1alpha1.Effective(rs, class))
	must(t, k8s.Create(ctx, old))
	t.Cleanup(func() { _ = k8s.Delete(ctx, old) })
	setNodes := func(n int64) {
		t.Helper()
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := get(t, "", name, &karpv1.NodePool{})
			cur.Status.Nodes = &n
			return k8s.Status().Update(ctx, cur)
		}))
	}
	setNodes(1)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	if ref := get(t, "", name, &karpv1.NodePool{}).Spec.Template.Spec.NodeClassRef; ref.Name != name {
		t.Fatalf("a NodePool with a node was moved to %s: its nodes drift and are replaced under running jobs", ref.Name)
	}
	get(t, "", name, &kwokv1alpha1.KWOKNodeClass{})

	setNodes(0)
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Managers.Concurrent = 5 }) // a pass
	eventually(t, "the empty NodePool on its class's node class and the tag's own gone", func() error {
		if ref := get(t, "", name, &karpv1.NodePool{}).Spec.Template.Spec.NodeClassRef; ref.Name != naming.ClassCapacity(class.Name) {
			return fmt.Errorf("NodePool still refers to %s", ref.Name)
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(earlier), &kwokv1alpha1.KWOKNodeClass{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the tag's own node class is still there (%v)", err)
		}
		return nil
	})
}

// A job timeout longer than a Karpenter job node keeps a running job for
// turns ClassAccepted False naming the field and the limit, and touches
// nothing that runs: GitLab's runner, the tag's NodePool and its managers
// stay as they were (the managers keep taking jobs under the last good
// settings).
func TestAJobTimeoutNoJobNodeKeepsIsRefusedAndNothingRunningIsTouched(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "long", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	n := naming.For(ns, "long")
	pool := get(t, "", n.Capacity(), &karpv1.NodePool{})
	if got := pool.Spec.Template.Spec.TerminationGracePeriod.Duration; got != time.Hour+capacity.JobNodeDrainMargin {
		t.Errorf("terminationGracePeriod %s, want the runner's 1h maximum timeout plus %s", got, capacity.JobNodeDrainMargin)
	}
	managers := get(t, ns, n.Managers(), &appsv1.Deployment{})

	update(t, cur, func(r *v1alpha1.RunnerSet) {
		r.Spec.GitLab.Runner.MaximumTimeout = &metav1.Duration{Duration: capacity.MaxKarpenterJobTimeout + time.Hour}
	})
	refused := waitCondition(t, rs, v1alpha1.ConditionClassAccepted, metav1.ConditionFalse, v1alpha1.ReasonJobTimeoutTooLong)
	msg := condition(refused, v1alpha1.ConditionClassAccepted).Message
	for _, want := range []string{"spec.gitlab.runner.maximumTimeout", capacity.MaxKarpenterJobTimeout.String()} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not name %q", msg, want)
		}
	}
	if now := get(t, "", n.Capacity(), &karpv1.NodePool{}); now.ResourceVersion != pool.ResourceVersion {
		t.Errorf("the NodePool was rewritten (resourceVersion %s → %s): terminationGracePeriod %s", pool.ResourceVersion, now.ResourceVersion, now.Spec.Template.Spec.TerminationGracePeriod.Duration)
	}
	if now := get(t, ns, n.Managers(), &appsv1.Deployment{}); now.ResourceVersion != managers.ResourceVersion {
		t.Errorf("the managers' Deployment was rewritten (resourceVersion %s → %s)", managers.ResourceVersion, now.ResourceVersion)
	}
	if runners := runnersOf(srv, string(cur.UID)); len(runners) != 1 || runners[0].MaximumTimeout != 3600 {
		t.Errorf("GitLab's runner changed: %+v", runners)
	}
}
