//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// disruptionPool is one job NodePool of TestKarpenterLeavesARunningJobsNodeAlone
// and the job pod on it: built by runnerset/capacity and
// runnerset/runnerconfig exactly as the controller builds a tag's, the pod
// as gitlab-runner's kubernetes executor creates it from that config.toml.
type disruptionPool struct {
	np  *karpv1.NodePool
	job *corev1.Pod
	// filler sits beside the job until the node is up (the consolidation
	// proof only), so that the job's node is larger than it needs.
	filler *corev1.Pod

	uid   types.UID // the job pod's, once Running
	node  string
	claim string
}

// TestKarpenterLeavesARunningJobsNodeAlone proves, with the real
// Karpenter (kwok provider), that a job node carrying a running job is not
// consolidated, drifted or expired away until the job ends, and that the
// job pod's karpenter.sh/do-not-disrupt is what keeps it: each proof runs
// two pools side by side, one whose job pod carries the annotations the
// rendered config.toml gives it, and one whose job pod has do-not-disrupt
// removed (the negative control), which Karpenter must disrupt.
func TestKarpenterLeavesARunningJobsNodeAlone(t *testing.T) {
	onKWOKCluster(t)
	cl := startCluster(t, localcluster.Options{Name: "disruption", RepoRoot: repoRoot(t), Karpenter: true})
	cl.needsKarpenterKWOK(t)
	c := cl.Client
	class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "disruption"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
	// The class's node class, shared by every pool of the proofs.
	nodeClass := capacity.KWOKNodeClass(class)
	nodeClass.OwnerReferences = nil // the class is not in the cluster
	create(t, c, nodeClass)
	t.Cleanup(func() { _ = client.IgnoreNotFound(c.Delete(context.Background(), nodeClass)) })

	proofs := []struct {
		name string
		// filler: a pod beside the job until it runs (see consolidation).
		filler bool
		// shape changes the tag's NodePool for the proof.
		shape func(rs *v1alpha1.RunnerSet, np *karpv1.NodePool)
		// disrupt makes Karpenter want the node away once the job runs.
		disrupt func(t *testing.T, p *disruptionPool)
		// eventual: Karpenter deletes the NodeClaim at once, its node's
		// terminationGracePeriod bounding the drain, and only the drain
		// waits for the job (expiry is forceful; drift is "eventual", and
		// with a terminationGracePeriod do-not-disrupt does not keep a
		// drifted node from being chosen, only its job from being evicted).
		eventual bool
	}{
		{
			// A tag's pools consolidate WhenEmpty, which never looks at a
			// node with a running pod. Once the job runs, beside a filler
			// that made Karpenter pick a larger node, the pool switches to
			// WhenEmptyOrUnderutilized and the filler goes: the job's
			// oversized node is now a candidate for a cheaper replacement
			// (on-demand: spot-to-spot replacement is behind a feature
			// gate). Switched only then, so that nothing is consolidated
			// while the pods start.
			name:   "consolidation",
			filler: true,
			shape: func(rs *v1alpha1.RunnerSet, np *karpv1.NodePool) {
				np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("5s")
			},
			disrupt: func(t *testing.T, p *disruptionPool) {
				ctx := context.Background()
				np := &karpv1.NodePool{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(p.np), np); err != nil {
					t.Fatal(err)
				}
				patch := client.MergeFrom(np.DeepCopy())
				np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
				if err := c.Patch(ctx, np, patch); err != nil {
					t.Fatal(err)
				}
				if err := c.Delete(ctx, p.filler, client.GracePeriodSeconds(0)); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			// A changed node template (a new AMI, a new label) drifts every
			// node of the pool.
			name: "drift",
			disrupt: func(t *testing.T, p *disruptionPool) {
				np := &karpv1.NodePool{}
				if err := c.Get(context.Background(), client.ObjectKeyFromObject(p.np), np); err != nil {
					t.Fatal(err)
				}
				patch := client.MergeFrom(np.DeepCopy())
				np.Spec.Template.Labels["runnerfleet.dev/e2e-template"] = "changed"
				if err := c.Patch(context.Background(), np, patch); err != nil {
					t.Fatal(err)
				}
			},
			eventual: true,
		},
		{
			// The tag's own terminationGracePeriod (job timeout + margin),
			// with an expireAfter short enough to pass while the job runs.
			name: "expiry",
			shape: func(rs *v1alpha1.RunnerSet, np *karpv1.NodePool) {
				np.Spec.Template.Spec.ExpireAfter = karpv1.MustParseNillableDuration("40s")
			},
			eventual: true,
		},
	}
	for _, proof := range proofs {
		t.Run(proof.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			protected := newDisruptionPool(t, c, class, proof.name+"-protected", true, proof.filler, proof.shape)
			bare := newDisruptionPool(t, c, class, proof.name+"-bare", false, proof.filler, proof.shape)
			pools := []*disruptionPool{protected, bare}
			for _, p := range pools {
				create(t, c, p.np)
				for _, pod := range []*corev1.Pod{p.filler, p.job} {
					if pod != nil {
						create(t, c, pod)
					}
				}
			}
			for _, p := range pools {
				p.waitRunning(t, c)
			}
			start := time.Now()
			if proof.disrupt != nil {
				for _, p := range pools {
					proof.disrupt(t, p)
				}
			}

			// The negative control: without do-not-disrupt Karpenter takes
			// the job's node and evicts the job.
			waitFor(t, 4*time.Minute, proof.name+" of the node whose job lacks do-not-disrupt", func() error {
				if !bare.jobGone(ctx, c) {
					return fmt.Errorf("job %s still runs on node %s", bare.job.Name, bare.node)
				}
				return nil
			})
			took := time.Since(start)
			// Give Karpenter three more passes of its disruption loop (10 s
			// each) at the protected node.
			time.Sleep(30 * time.Second)
			if err := protected.untouched(ctx, c, proof.eventual); err != nil {
				t.Fatalf("%s: the node of a running job with do-not-disrupt was disrupted: %v", proof.name, err)
			}
			t.Logf("%s: the job without do-not-disrupt was evicted after %.0f s; the one with it still runs on %s %.0f s later",
				proof.name, took.Seconds(), protected.node, time.Since(start).Seconds()-took.Seconds())

			// The job ends (the executor deletes its pod): now its node goes.
			if err := c.Delete(ctx, protected.job, client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
			ended := time.Now()
			waitFor(t, 4*time.Minute, "the protected node gone once its job ended", func() error {
				err := c.Get(ctx, client.ObjectKey{Name: protected.node}, &corev1.Node{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return fmt.Errorf("node %s still there (%v)", protected.node, err)
			})
			t.Logf("%s: the node went %.0f s after its job ended", proof.name, time.Since(ended).Seconds())
		})
	}
}

// newDisruptionPool builds a tag's NodePool and one job pod as the
// controller and the executor would, shaped for the proof; withAnnotation
// false removes do-not-disrupt from the job pod (and only that).
func newDisruptionPool(t *testing.T, c client.Client, class *v1alpha1.RunnerClass, name string, withAnnotation, filler bool, shape func(*v1alpha1.RunnerSet, *karpv1.NodePool)) *disruptionPool {
	t.Helper()
	rs := &v1alpha1.RunnerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "disruption", Name: name},
		Spec:       v1alpha1.RunnerSetSpec{ClassName: class.Name, Tags: []string{name}},
	}
	if filler {
		rs.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeOnDemand}
	}
	eff := v1alpha1.Effective(rs, class)
	capa, err := capacity.For(rs, class, eff)
	if err != nil {
		t.Fatal(err)
	}
	var np *karpv1.NodePool
	for _, o := range capa.Objects {
		if o, ok := o.(*karpv1.NodePool); ok {
			np = o
		}
	}
	if shape != nil {
		shape(rs, np)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(c.Delete(context.Background(), np)) })

	cfg := runnerconfig.ForSettings(rs, eff, capa.Placement)
	job := executorPod(cfg, 0)
	if job.Annotations[karpv1.DoNotDisruptAnnotationKey] != "true" {
		t.Fatalf("the config.toml of %s gives job pods the annotations %v, without %s=true", name, job.Annotations, karpv1.DoNotDisruptAnnotationKey)
	}
	if !withAnnotation {
		delete(job.Annotations, karpv1.DoNotDisruptAnnotationKey)
	}
	// The jobs namespace and its ServiceAccount are the controller's;
	// here the pod runs as the namespace's default one.
	job.Spec.ServiceAccountName = ""
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: job.Namespace}}
	create(t, c, ns)
	t.Cleanup(func() { _ = client.IgnoreNotFound(c.Delete(context.Background(), ns)) })
	p := &disruptionPool{np: np, job: job}
	if filler {
		f := job.DeepCopy()
		f.Name, f.Annotations = "filler", nil
		f.Spec.Containers = f.Spec.Containers[:1]
		f.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("6"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		}}
		p.filler = f
	}
	return p
}

// waitRunning waits until the job (and its filler, on the same node) runs
// and notes its node and NodeClaim.
func (p *disruptionPool) waitRunning(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 3*time.Minute, "job "+p.job.Namespace+"/"+p.job.Name+" Running on a node of "+p.np.Name, func() error {
		pod := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p.job), pod); err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", pod.Status.Phase)
		}
		if p.filler != nil {
			f := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(p.filler), f); err != nil {
				return err
			}
			if f.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("filler phase %s", f.Status.Phase)
			}
			if f.Spec.NodeName != pod.Spec.NodeName {
				t.Fatalf("Karpenter put the job (node %s) and its filler (node %s) on different nodes: the job's node is not oversized", pod.Spec.NodeName, f.Spec.NodeName)
			}
		}
		claims := &karpv1.NodeClaimList{}
		if err := c.List(ctx, claims, client.MatchingLabels{karpv1.NodePoolLabelKey: p.np.Name}); err != nil {
			return err
		}
		for _, nc := range claims.Items {
			if nc.Status.NodeName == pod.Spec.NodeName {
				p.uid, p.node, p.claim = pod.UID, pod.Spec.NodeName, nc.Name
				return nil
			}
		}
		return fmt.Errorf("no NodeClaim of %s for node %s", p.np.Name, pod.Spec.NodeName)
	})
}

// jobGone: the job pod is gone or going.
func (p *disruptionPool) jobGone(ctx context.Context, c client.Client) bool {
	pod := &corev1.Pod{}
	err := c.Get(ctx, client.ObjectKeyFromObject(p.job), pod)
	return apierrors.IsNotFound(err) || (err == nil && (pod.UID != p.uid || pod.DeletionTimestamp != nil))
}

// untouched: the job still runs, unevicted, on its node, and its
// NodeClaim is not being deleted; or, for an eventual disruption, is
// being deleted (else the proof proved nothing) while the drain waits.
func (p *disruptionPool) untouched(ctx context.Context, c client.Client, eventual bool) error {
	pod := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p.job), pod); err != nil {
		return fmt.Errorf("job: %w", err)
	}
	if pod.UID != p.uid || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName != p.node {
		return fmt.Errorf("job %s: uid %s (was %s), deleting %v, phase %s, node %s (was %s)",
			pod.Name, pod.UID, p.uid, pod.DeletionTimestamp != nil, pod.Status.Phase, pod.Spec.NodeName, p.node)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: p.node}, &corev1.Node{}); err != nil {
		return fmt.Errorf("node %s: %w", p.node, err)
	}
	nc := &karpv1.NodeClaim{}
	if err := c.Get(ctx, client.ObjectKey{Name: p.claim}, nc); err != nil {
		return fmt.Errorf("NodeClaim %s: %w", p.claim, err)
	}
	if eventual {
		if nc.DeletionTimestamp == nil {
			return errors.New("NodeClaim " + p.claim + " was not chosen for disruption: the proof proved nothing")
		}
		return nil
	}
	if nc.DeletionTimestamp != nil {
		return fmt.Errorf("NodeClaim %s is being deleted", p.claim)
	}
	return nil
}
