//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// TestTwoTagsShareTheirClasssNodePoolButNeverANode runs a RunnerClass in
// spec.nodePools.mode shared with the real Karpenter (kwok provider): two
// teams' job pods, shaped as gitlab-runner's kubernetes executor creates
// them from the config.toml the controller wrote (node selector,
// tolerations, node affinity), get nodes from the class's one NodePool,
// each stamped with its own tag's capacity label and of the family and
// architecture its RunnerSet asks for; no node runs both teams' jobs, no
// tag has a NodePool of its own, and the nodes go once the jobs end.
func TestTwoTagsShareTheirClasssNodePoolButNeverANode(t *testing.T) {
	onKWOKCluster(t)
	root := repoRoot(t)
	bin := buildBinaries(t, root)
	ctx := context.Background()
	cl := startCluster(t, localcluster.Options{Name: "sharedpool", RepoRoot: root, Karpenter: true})
	cl.needsKarpenterKWOK(t)
	applyDocs(ctx, t, cl.Client, charts.InstallYAML())
	if cl.RunsContainers {
		waitControllerPod(ctx, t, cl, install.Defaults().Namespace)
	} else {
		startControllerAsServiceAccount(ctx, t, cl, bin, install.Defaults().Namespace)
	}
	kubeconfig, c := cl.Kubeconfig, cl.Client

	class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "kwok-shared"}, Spec: v1alpha1.RunnerClassSpec{
		Provider:  v1alpha1.CapacityProviderKWOK,
		NodePools: &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeShared},
		Defaults:  v1alpha1.RunnerClassDefaults{ManagerImage: v1alpha1.ImageReference(exampleManagerImage(t, root))},
	}}
	create(t, c, class)
	shared := naming.ClassCapacity(class.Name)
	if cl.Existing {
		t.Cleanup(func() {
			_ = client.IgnoreNotFound(c.Delete(ctx, class))
		})
	}
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	type team struct {
		ns, family, arch string
		rs               *v1alpha1.RunnerSet
		pods             []*corev1.Pod
		as               client.Client
	}
	teams := []*team{{ns: "shared-a", family: "c", arch: "amd64"}, {ns: "shared-b", family: "m", arch: "arm64"}}
	for _, tm := range teams {
		create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tm.ns}})
		create(t, c, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: "runner-token"},
			Data:       map[string][]byte{"token": []byte("glrt-e2e-placeholder-token")},
		})
		tm.rs = &v1alpha1.RunnerSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: "build"},
			Spec: v1alpha1.RunnerSetSpec{
				ClassName: class.Name,
				Tags:      []string{tm.ns},
				Managers:  v1alpha1.ManagerSpec{ShutdownTimeout: &metav1.Duration{Duration: time.Minute}},
				GitLab:    v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "runner-token"}},
				Capacity: v1alpha1.CapacitySpec{
					InstanceFamilies: []string{tm.family},
					Architectures:    []v1alpha1.Architecture{v1alpha1.Architecture(tm.arch)},
				},
				Jobs: v1alpha1.JobSpec{Resources: v1alpha1.JobResources{
					Build:  v1alpha1.ContainerResources{CPURequest: q("1500m"), MemoryRequest: q("1Gi")},
					Helper: v1alpha1.ContainerResources{CPURequest: q("500m"), MemoryRequest: q("256Mi")},
				}},
			},
		}
		create(t, c, tm.rs)
	}
	for _, tm := range teams {
		waitFor(t, 3*time.Minute, "RunnerSet "+tm.ns+"/build Ready", func() error {
			cur := &v1alpha1.RunnerSet{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(tm.rs), cur); err != nil {
				return err
			}
			if !cur.IsReady() {
				return fmt.Errorf("%+v", cur.Status.Conditions)
			}
			return nil
		})
		own := naming.For(tm.ns, "build").Capacity()
		if err := c.Get(ctx, client.ObjectKey{Name: own}, &karpv1.NodePool{}); !apierrors.IsNotFound(err) {
			t.Errorf("tag %s has a NodePool of its own %s (err=%v) in mode shared", tm.ns, own, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKey{Name: shared}, &karpv1.NodePool{}); err != nil {
		t.Fatalf("the class's shared NodePool %s: %v", shared, err)
	}
	if cl.Existing {
		t.Cleanup(func() {
			_ = client.IgnoreNotFound(c.Delete(ctx, &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: shared}}))
			_ = client.IgnoreNotFound(c.Delete(ctx, &kwokv1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: shared}}))
		})
	}

	// Two jobs per team at once, created by each team's manager
	// ServiceAccount as the executor would.
	for _, tm := range teams {
		cfg := configOf(t, c, tm.rs)
		tm.as = clientAs(t, kubeconfig, "system:serviceaccount:"+tm.ns+":"+naming.For(tm.ns, "build").ManagerServiceAccount())
		for i := range 2 {
			pod := executorPod(cfg, i)
			if pod.Spec.Affinity == nil {
				t.Fatalf("%s: config.toml gives its job pods no node affinity: %+v", tm.ns, cfg.Runners[0].Kubernetes)
			}
			create(t, tm.as, pod)
			tm.pods = append(tm.pods, pod)
		}
	}
	nodeOf := map[string]*corev1.Node{} // pod key → its node
	waitFor(t, 3*time.Minute, "every job Running", func() error {
		for _, tm := range teams {
			for _, pod := range tm.pods {
				cur := &corev1.Pod{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
					return err
				}
				if cur.Status.Phase != corev1.PodRunning {
					return fmt.Errorf("%s/%s is %s", cur.Namespace, cur.Name, cur.Status.Phase)
				}
				node := &corev1.Node{}
				if err := c.Get(ctx, client.ObjectKey{Name: cur.Spec.NodeName}, node); err != nil {
					return err
				}
				nodeOf[pod.Namespace+"/"+pod.Name] = node
			}
		}
		return nil
	})
	teamOfNode := map[string]string{}
	for _, tm := range teams {
		tag := naming.For(tm.ns, "build").Capacity()
		for _, pod := range tm.pods {
			node := nodeOf[pod.Namespace+"/"+pod.Name]
			l := node.Labels
			if l[karpv1.NodePoolLabelKey] != shared || l[capacity.LabelCapacity] != tag ||
				l[kwokv1alpha1.InstanceFamilyLabelKey] != tm.family || l[corev1.LabelArchStable] != tm.arch {
				t.Errorf("job %s/%s runs on node %s of NodePool %q, tag %q, family %q, arch %q: want %s, %s, %s, %s",
					pod.Namespace, pod.Name, node.Name, l[karpv1.NodePoolLabelKey], l[capacity.LabelCapacity],
					l[kwokv1alpha1.InstanceFamilyLabelKey], l[corev1.LabelArchStable], shared, tag, tm.family, tm.arch)
			}
			if other, ok := teamOfNode[node.Name]; ok && other != tm.ns {
				t.Errorf("node %s runs jobs of %s and %s", node.Name, other, tm.ns)
			}
			teamOfNode[node.Name] = tm.ns
		}
	}
	t.Logf("%d jobs of 2 tags on %d nodes of the shared NodePool %s: %v", 4, len(teamOfNode), shared, teamOfNode)
	for _, tm := range teams {
		own := naming.For(tm.ns, "build").Capacity()
		if err := c.Get(ctx, client.ObjectKey{Name: own}, &karpv1.NodePool{}); !apierrors.IsNotFound(err) {
			t.Errorf("tag %s got a NodePool of its own %s (err=%v) in mode shared", tm.ns, own, err)
		}
	}

	// The jobs end; the shared NodePool's nodes go.
	for _, tm := range teams {
		for _, pod := range tm.pods {
			if err := tm.as.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 4*time.Minute, "the shared NodePool back to zero nodes", func() error {
		if n := nodeClaims(ctx, c, shared); n != 0 {
			return errors.New(fmt.Sprint(n, " NodeClaims"))
		}
		return nil
	})
}

// TestAMoveToTheSharedNodePoolLeavesARunningJobsNodeAlone moves a tag,
// with the real Karpenter (kwok), from a NodePool of its own to its
// class's shared one while a job runs on its own NodePool's node: the new
// jobs land on the shared NodePool, the running job and its node stay
// (past consolidateAfter), the tag's own NodePool stays while Karpenter
// counts a node in it, and goes once the job has ended and its node is
// gone.
func TestAMoveToTheSharedNodePoolLeavesARunningJobsNodeAlone(t *testing.T) {
	onKWOKCluster(t)
	root := repoRoot(t)
	bin := buildBinaries(t, root)
	ctx := context.Background()
	cl := startCluster(t, localcluster.Options{Name: "poolmove", RepoRoot: root, Karpenter: true})
	cl.needsKarpenterKWOK(t)
	applyDocs(ctx, t, cl.Client, charts.InstallYAML())
	if cl.RunsContainers {
		waitControllerPod(ctx, t, cl, install.Defaults().Namespace)
	} else {
		startControllerAsServiceAccount(ctx, t, cl, bin, install.Defaults().Namespace)
	}
	kubeconfig, c := cl.Kubeconfig, cl.Client
	class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "kwok-moving"}, Spec: v1alpha1.RunnerClassSpec{
		Provider: v1alpha1.CapacityProviderKWOK,
		Defaults: v1alpha1.RunnerClassDefaults{ManagerImage: v1alpha1.ImageReference(exampleManagerImage(t, root))},
	}}
	create(t, c, class)
	shared := naming.ClassCapacity(class.Name)
	if cl.Existing {
		t.Cleanup(func() { _ = client.IgnoreNotFound(c.Delete(ctx, class)) })
	}
	const ns = "move-a"
	create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	create(t, c, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runner-token"},
		Data:       map[string][]byte{"token": []byte("glrt-e2e-placeholder-token")},
	})
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	rs := &v1alpha1.RunnerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "build"},
		Spec: v1alpha1.RunnerSetSpec{
			ClassName: class.Name,
			Tags:      []string{ns},
			Managers:  v1alpha1.ManagerSpec{ShutdownTimeout: &metav1.Duration{Duration: time.Minute}},
			GitLab:    v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "runner-token"}},
			Jobs: v1alpha1.JobSpec{Resources: v1alpha1.JobResources{
				Build:  v1alpha1.ContainerResources{CPURequest: q("1500m"), MemoryRequest: q("1Gi")},
				Helper: v1alpha1.ContainerResources{CPURequest: q("500m"), MemoryRequest: q("256Mi")},
			}},
		},
	}
	create(t, c, rs)
	capacityReady := func() (*metav1.Condition, error) {
		cur := &v1alpha1.RunnerSet{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(rs), cur); err != nil {
			return nil, err
		}
		for i := range cur.Status.Conditions {
			if cur.Status.Conditions[i].Type == v1alpha1.ConditionCapacityReady {
				return &cur.Status.Conditions[i], nil
			}
		}
		return nil, errors.New("no CapacityReady")
	}
	waitFor(t, 3*time.Minute, "RunnerSet Ready on its own NodePool", func() error {
		cur := &v1alpha1.RunnerSet{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(rs), cur); err != nil {
			return err
		}
		if !cur.IsReady() {
			return fmt.Errorf("%+v", cur.Status.Conditions)
		}
		return nil
	})
	own := naming.For(ns, "build").Capacity()
	manager := clientAs(t, kubeconfig, "system:serviceaccount:"+ns+":"+naming.For(ns, "build").ManagerServiceAccount())
	running := executorPod(configOf(t, c, rs), 0)
	create(t, manager, running)
	runningOn := func(pod *corev1.Pod) (*corev1.Pod, *corev1.Node, error) {
		cur := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return nil, nil, err
		}
		if cur.Status.Phase != corev1.PodRunning || cur.DeletionTimestamp != nil {
			return cur, nil, fmt.Errorf("%s is %s", cur.Name, cur.Status.Phase)
		}
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: cur.Spec.NodeName}, node); err != nil {
			return cur, nil, err
		}
		return cur, node, nil
	}
	var job *corev1.Pod
	var jobNode *corev1.Node
	waitFor(t, 3*time.Minute, "the first job Running on the tag's own NodePool", func() (err error) {
		job, jobNode, err = runningOn(running)
		return err
	})
	if got := jobNode.Labels[karpv1.NodePoolLabelKey]; got != own {
		t.Fatalf("the first job runs on a node of NodePool %q, want the tag's own %s", got, own)
	}

	// The platform moves the class to shared while the job runs.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &v1alpha1.RunnerClass{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(class), cur); err != nil {
			return err
		}
		cur.Spec.NodePools = &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeShared}
		return c.Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "config.toml on the shared NodePool", func() error {
		if configOf(t, c, rs).Runners[0].Kubernetes.Affinity == nil {
			return errors.New("config.toml has no node affinity yet")
		}
		return nil
	})
	next := executorPod(configOf(t, c, rs), 1)
	create(t, manager, next)
	waitFor(t, 3*time.Minute, "the next job Running on the shared NodePool", func() error {
		_, node, err := runningOn(next)
		if err != nil {
			return err
		}
		if node.Labels[karpv1.NodePoolLabelKey] != shared || node.Labels[capacity.LabelCapacity] != own {
			return fmt.Errorf("the next job runs on node %s of NodePool %q, tag %q", node.Name, node.Labels[karpv1.NodePoolLabelKey], node.Labels[capacity.LabelCapacity])
		}
		return nil
	})

	// Past consolidateAfter the running job, its node (not being drained)
	// and the tag's own NodePool are as they were.
	time.Sleep(capacity.DefaultConsolidateAfter + 10*time.Second)
	cur, node, err := runningOn(running)
	if err != nil || cur.UID != job.UID || node.UID != jobNode.UID {
		t.Fatalf("the job that ran during the move was disrupted or moved (err=%v)", err)
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == karpv1.DisruptedTaintKey {
			t.Errorf("the running job's node %s is being drained (taint %s)", node.Name, taint.ToString())
		}
	}
	claims := &karpv1.NodeClaimList{}
	if err := c.List(ctx, claims, client.MatchingLabels{karpv1.NodePoolLabelKey: own}); err != nil {
		t.Fatal(err)
	}
	for _, nc := range claims.Items {
		if nc.DeletionTimestamp != nil {
			t.Errorf("NodeClaim %s of the running job's NodePool is being deleted: its node is drained under the job", nc.Name)
		}
	}
	pool := &karpv1.NodePool{}
	if err := c.Get(ctx, client.ObjectKey{Name: own}, pool); err != nil || pool.DeletionTimestamp != nil {
		t.Fatalf("the tag's own NodePool with a running job's node is gone or going (err=%v)", err)
	}
	cond, err := capacityReady()
	if err != nil || cond.Reason != v1alpha1.ReasonMovingNodePool || !strings.Contains(cond.Message, "spec.nodePools.mode") {
		t.Errorf("CapacityReady does not say the tag is moving, naming spec.nodePools.mode: %+v (%v)", cond, err)
	} else {
		t.Logf("CapacityReady %s: %s", cond.Reason, cond.Message)
	}

	// The job ends: the node empties and goes, then the NodePool (Karpenter's
	// status write of its count brings a pass of the RunnerSet).
	if err := manager.Delete(ctx, running, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	// Normally 23-55 s; one loaded CI-like run still had the pool after
	// 4 min (cause not found then: the message now names the count and
	// the pool's NodeClaims), so the wait allows 8.
	waitFor(t, 8*time.Minute, "the tag's own NodePool deleted once empty", func() error {
		p := &karpv1.NodePool{}
		if err := c.Get(ctx, client.ObjectKey{Name: own}, p); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		nodes := "unset"
		if p.Status.Nodes != nil {
			nodes = fmt.Sprint(*p.Status.Nodes)
		}
		claims := &karpv1.NodeClaimList{}
		var names []string
		if err := c.List(ctx, claims, client.MatchingLabels{karpv1.NodePoolLabelKey: own}); err == nil {
			for _, nc := range claims.Items {
				names = append(names, fmt.Sprintf("%s (deleting %v, node %s)", nc.Name, nc.DeletionTimestamp != nil, nc.Status.NodeName))
			}
		}
		return fmt.Errorf("still there, status.nodes %s, its NodeClaims %v", nodes, names)
	})
	t.Logf("the tag's own NodePool went %.0f s after its last job ended", time.Since(ended).Seconds())
	if _, _, err := runningOn(next); err != nil {
		t.Errorf("the job on the shared NodePool: %v", err)
	}
	_ = manager.Delete(ctx, next, client.GracePeriodSeconds(0))
}
