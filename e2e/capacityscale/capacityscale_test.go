// Package capacityscale measures job capacity at scale with the real
// Karpenter (v1.15's kwok provider) on the local control plane.
// BenchmarkControllerCapacity (controller_test.go) runs the controller
// with it, a RunnerClass in spec.nodePools.mode perTag or shared.
// BenchmarkKarpenterCapacity, below, builds the capacity objects itself,
// without the controller, in the two designs it compared before the
// controller wrote the shared one:
//
//   - pool-per-tag: the controller's perTag mode, one NodePool per tag
//     on its RunnerClass's one KWOKNodeClass (runnerset/capacity.For, the
//     objects exactly as the controller writes them), each tainted and
//     labelled with its tag's capacity name, with the tag's limits on the
//     NodePool;
//   - shared-pool: one NodePool (and KWOKNodeClass) per RunnerClass whose
//     requirement on runnerset/capacity.LabelCapacity is Exists, so that
//     Karpenter stamps the value a job pod's nodeSelector asks for onto the
//     node it makes; every job node carries the class's taint (key only), and
//     each tag's limits are a ResourceQuota in its jobs namespace
//     (runnerset/capacity.Quota).
//
// BenchmarkKarpenterCapacity starts a control plane of its own per run
// (no real node: localcluster.Options.Node is false, so the machine's real
// node, its owner file and its bridge are never touched, and the benchmark
// checks that the node's owner is never one of its control planes),
// creates the capacity of N tags,
// lets Karpenter settle, measures Karpenter's CPU and memory idle with it,
// then creates a burst of job pods on distinct tags and measures each pod's
// time from its create to Running, and Karpenter's CPU over the burst. It
// fails when a job lands on a node of another tag, and, in the shared
// design, when the quota lets a tag ask for more than its limit.
//
//	RUNNERFLEET_BENCH_TAGS=10,100,500 RUNNERFLEET_BENCH_JOBS=20 RUNNERFLEET_BENCH_IDLE=60s \
//	  go test -run '^$' -bench KarpenterCapacity -benchtime 1x -timeout 90m ./e2e/capacityscale/
package capacityscale

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpapis "sigs.k8s.io/karpenter/pkg/apis"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/internal/checkout"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// tagCPULimit is every tag's spec.capacity.limits.cpu; a job asks for 2.
const tagCPULimit = "8"

// The two designs.
const (
	poolPerTag = "pool-per-tag"
	sharedPool = "shared-pool"
)

// settings of a benchmark run, from the environment.
type settings struct {
	tags []int
	jobs int
	idle time.Duration
}

func settingsFromEnv(b *testing.B, tags []int) settings {
	s := settings{tags: tags, jobs: 20, idle: time.Minute}
	if v := os.Getenv("RUNNERFLEET_BENCH_TAGS"); v != "" {
		s.tags = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 3 {
				b.Fatalf("RUNNERFLEET_BENCH_TAGS=%q: a comma-separated list of tag counts of at least 3, such as 10,100,500", v)
			}
			s.tags = append(s.tags, n)
		}
	}
	if v := os.Getenv("RUNNERFLEET_BENCH_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			b.Fatalf("RUNNERFLEET_BENCH_JOBS=%q: the number of job pods of the burst, at least 2", v)
		}
		s.jobs = n
	}
	if v := os.Getenv("RUNNERFLEET_BENCH_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 5*time.Second {
			b.Fatalf("RUNNERFLEET_BENCH_IDLE=%q: how long Karpenter's idle CPU is measured, such as 60s (at least 5s)", v)
		}
		s.idle = d
	}
	return s
}

func BenchmarkKarpenterCapacity(b *testing.B) {
	ctrllog.SetLogger(logr.Discard())
	s := settingsFromEnv(b, []int{10, 100, 500})
	root, err := checkout.Root()
	if err != nil {
		b.Fatalf("run from e2e/capacityscale of a runnerfleet checkout: %v", err)
	}
	guardRealNode(b)
	for _, n := range s.tags {
		for _, design := range []string{poolPerTag, sharedPool} {
			b.Run(fmt.Sprintf("design=%s/tags=%d", design, n), func(b *testing.B) {
				r := measure(b, root, design, n, min(s.jobs, n), s.idle)
				b.ReportMetric(r.ready.Seconds(), "s-capacity-ready")
				b.ReportMetric(r.idleCPU, "karpenter-idle-cpu-s/min")
				b.ReportMetric(r.idleRSS, "karpenter-idle-rss-MiB")
				b.ReportMetric(percentile(r.latency, 50).Seconds(), "s-pending-to-running-p50")
				b.ReportMetric(percentile(r.latency, 90).Seconds(), "s-pending-to-running-p90")
				b.ReportMetric(percentile(r.latency, 100).Seconds(), "s-pending-to-running-max")
				b.ReportMetric(r.burstCPU, "karpenter-burst-cpu-s")
				b.ReportMetric(r.peakRSS, "karpenter-peak-rss-MiB")
				b.ReportMetric(r.load, "load1")
				b.ReportMetric(float64(r.lost), "pods-lost-and-recreated")
				b.Logf("%s, %d tags, %d jobs: capacity Ready %.1fs; idle %.2f CPU s/min, RSS %.0f MiB; pending→Running p50 %.1fs p90 %.1fs max %.1fs (%d lost to taint eviction, created again); burst %.1f CPU s; peak RSS %.0f MiB; load %.1f–%.1f",
					design, n, len(r.latency), r.ready.Seconds(), r.idleCPU, r.idleRSS,
					percentile(r.latency, 50).Seconds(), percentile(r.latency, 90).Seconds(), percentile(r.latency, 100).Seconds(), r.lost,
					r.burstCPU, r.peakRSS, r.loadStart, r.load)
			})
		}
	}
}

// result is one run's figures.
type result struct {
	ready            time.Duration
	idleCPU, idleRSS float64
	latency          []time.Duration
	burstCPU         float64
	lost             int
	peakRSS          float64
	loadStart, load  float64
}

// tag is one team's RunnerSet, as far as capacity goes.
type tag struct {
	rs        *v1alpha1.RunnerSet
	jobsNS    string
	capacity  string
	placement runnerconfig.JobPlacement
}

// controlPlane starts a control plane of the benchmark's own in a new state
// directory: kwok and Karpenter's kwok provider, no real node, nodes fake
// manager nodes (0: localcluster's default), with Karpenter's and kwok's
// CRDs and extra; it is stopped when the benchmark ends. It returns the
// cluster and Karpenter's pid.
func controlPlane(b *testing.B, root string, nodes int, extra ...*apiextensionsv1.CustomResourceDefinition) (*localcluster.Cluster, int) {
	b.Helper()
	state := b.TempDir()
	stateDirs = append(stateDirs, state)
	list := slices.Clone(extra)
	for _, c := range append(append([]*apiextensionsv1.CustomResourceDefinition{}, karpapis.CRDs...), kwokapis.CRDs...) {
		list = append(list, c.DeepCopy())
	}
	cl, err := localcluster.Up(context.Background(), localcluster.Options{Dir: state, Name: "capbench", RepoRoot: root, CRDs: list, Karpenter: true, Node: false, Nodes: nodes})
	b.Cleanup(func() {
		if err := localcluster.DownWithTimeout(context.Background(), state, 20*time.Second, io.Discard); err != nil {
			b.Errorf("stopping the control plane: %v", err)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	checkRealNode(b)
	pid := cl.Running(localcluster.Karpenter)
	if pid == 0 {
		b.Fatal("Karpenter does not run")
	}
	return cl, pid
}

func measure(b *testing.B, root, design string, n, jobs int, idle time.Duration) result {
	ctx := context.Background()
	var r result
	r.loadStart = load1()
	cl, pid := controlPlane(b, root, 0)
	c := cl.Client

	class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "kwok-spot"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
	q := resource.MustParse
	tags := make([]tag, n)
	for i := range tags {
		rs := &v1alpha1.RunnerSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("team-%04d", i), Name: "build"},
			Spec: v1alpha1.RunnerSetSpec{
				ClassName: class.Name,
				Tags:      []string{fmt.Sprintf("team-%04d", i)},
				Jobs: v1alpha1.JobSpec{Resources: v1alpha1.JobResources{
					Build:  v1alpha1.ContainerResources{CPURequest: ptr.To(q("1500m")), MemoryRequest: ptr.To(q("1Gi"))},
					Helper: v1alpha1.ContainerResources{CPURequest: ptr.To(q("500m")), MemoryRequest: ptr.To(q("256Mi"))},
				}},
				// Four jobs' worth of CPU requests: every tag's limit. (A
				// NodePool's limit counts its nodes' capacity, a quota the
				// pods' requests; either way one job fits well within.)
				Capacity: v1alpha1.CapacitySpec{Limits: corev1.ResourceList{corev1.ResourceCPU: q(tagCPULimit)}},
			},
		}
		names := naming.For(rs.Namespace, rs.Name)
		tags[i] = tag{rs: rs, jobsNS: names.JobsNamespace(), capacity: names.Capacity()}
	}

	// The capacity of every tag, and its jobs namespace.
	var objs []client.Object
	for i := range tags {
		t := &tags[i]
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t.jobsNS}})
		cp, err := capacity.For(t.rs, class, v1alpha1.Effective(t.rs, class))
		if err != nil {
			b.Fatal(err)
		}
		t.placement = cp.Placement
		switch design {
		case poolPerTag:
			if i == 0 {
				// The class's node class, once; the class itself is not
				// in this cluster, so it cannot be its owner here.
				nc := cp.Objects[0]
				nc.SetOwnerReferences(nil)
				objs = append(objs, nc)
			}
			objs = append(objs, cp.Objects[1:]...)
		case sharedPool:
			t.placement = sharedPlacement(cp.Placement)
			objs = append(objs, capacity.Quota(t.rs, t.jobsNS))
		}
	}
	if design == sharedPool {
		nc, np := sharedCapacity(tags[0].rs, class)
		objs = append(objs, nc, np)
	}
	start := time.Now()
	createAll(b, c, objs)
	r.ready = waitNodePoolsReady(b, c, map[string]int{poolPerTag: n, sharedPool: 1}[design])
	b.Logf("%d objects created and every NodePool Ready in %.1fs", len(objs), time.Since(start).Seconds())

	// Karpenter idle with the capacity of n tags.
	cpu0 := cpuSeconds(b, pid)
	time.Sleep(idle)
	r.idleCPU = (cpuSeconds(b, pid) - cpu0) / idle.Minutes()
	r.idleRSS, _ = memory(b, pid)

	// A burst: one job on each of jobs tags spread over all of them.
	var pods []*corev1.Pod
	for j := range jobs {
		i := j * n / jobs
		pods = append(pods, jobPod(&tags[i], j))
	}
	cpu0 = cpuSeconds(b, pid)
	created := map[string]time.Time{}
	for _, p := range pods {
		if err := c.Create(ctx, p); err != nil {
			b.Fatalf("creating job pod %s/%s: %v", p.Namespace, p.Name, err)
		}
		created[p.Namespace+"/"+p.Name] = time.Now()
	}
	r.latency, r.lost = waitRunning(b, c, pods, created, 10*time.Minute)
	r.burstCPU = cpuSeconds(b, pid) - cpu0
	_, r.peakRSS = memory(b, pid)
	r.load = load1()

	for _, p := range isolation(b, c, pods, tags) {
		b.Error(p)
	}
	if design == sharedPool {
		// The first tag runs one job (2 CPU); three more reach its limit of
		// 8 and a fifth goes over: the quota refuses it at once (the
		// kubernetes executor then fails the job, where a NodePool's limit
		// leaves it Pending until capacity frees up).
		for j := range 3 {
			if err := c.Create(ctx, jobPod(&tags[0], jobs+j)); err != nil {
				b.Fatalf("a job within its tag's limit: %v", err)
			}
		}
		err := c.Create(ctx, jobPod(&tags[0], jobs+3))
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
			b.Errorf("a job over its tag's limit: %v, want the quota's refusal", err)
		}
	}
	// The negative control: a pod in the second tag's jobs namespace that
	// asks for the last tag's nodes (as a manager whose config.toml named
	// them would) is seen running on another tag's node.
	stray := jobPod(&tags[1], 999)
	stray.Spec = jobPod(&tags[n-1], 999).Spec
	if err := c.Create(ctx, stray); err != nil {
		b.Fatal(err)
	}
	_, _ = waitRunning(b, c, []*corev1.Pod{stray}, map[string]time.Time{stray.Namespace + "/" + stray.Name: time.Now()}, 5*time.Minute)
	if got := isolation(b, c, []*corev1.Pod{stray}, tags); len(got) != 1 {
		b.Errorf("a job on another tag's node: the isolation check says %q, want one problem", got)
	}
	return r
}

// sharedPlacement is what a job pod carries in the shared design: the
// node selector of its tag (Karpenter stamps its value on the node), and
// a toleration of the class's taint, whatever its tag.
func sharedPlacement(p runnerconfig.JobPlacement) runnerconfig.JobPlacement {
	p.NodeTolerations = map[string]string{capacity.LabelCapacity: string(corev1.TaintEffectNoSchedule)}
	return p
}

// sharedCapacity is the one NodePool and KWOKNodeClass of class in the
// shared design, from the controller's own builder for a tag of the class
// (rs): the same requirements, disruption and grace, but no tag's label,
// taint value or limits — the tag's label is required to exist and comes
// from the job pod, the taint is the class's, the limits are quotas.
func sharedCapacity(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass) (*kwokv1alpha1.KWOKNodeClass, *karpv1.NodePool) {
	name := "rf-class-" + class.Name
	nc := &kwokv1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np := capacity.NodePool(rs, class, karpv1.NodeClassReference{Group: capacity.KWOKGroupVersion.Group, Kind: "KWOKNodeClass", Name: name}, v1alpha1.Effective(rs, class))
	np.ObjectMeta = metav1.ObjectMeta{Name: name}
	np.Spec.Template.Labels = nil
	np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements,
		karpv1.NodeSelectorRequirementWithMinValues{Key: capacity.LabelCapacity, Operator: corev1.NodeSelectorOpExists})
	np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: capacity.LabelCapacity, Effect: corev1.TaintEffectNoSchedule}}
	np.Spec.Limits = nil
	return nc, np
}

// jobPod is a job pod as gitlab-runner's kubernetes executor builds it from
// the tag's placement: node selector, tolerations ("key=value" is Equal,
// "key" alone Exists), annotations, labels, and the build and helper
// containers' requests.
func jobPod(t *tag, j int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: t.jobsNS, Name: fmt.Sprintf("runner-job-%d", j),
			Labels: t.placement.PodLabels, Annotations: t.placement.PodAnnotations,
		},
		Spec: corev1.PodSpec{NodeSelector: t.placement.NodeSelector},
	}
	for kv, effect := range t.placement.NodeTolerations {
		tol := corev1.Toleration{Key: kv, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(effect)}
		if k, v, ok := strings.Cut(kv, "="); ok {
			tol = corev1.Toleration{Key: k, Operator: corev1.TolerationOpEqual, Value: v, Effect: corev1.TaintEffect(effect)}
		}
		p.Spec.Tolerations = append(p.Spec.Tolerations, tol)
	}
	r := t.rs.Spec.Jobs.Resources
	for _, c := range []struct {
		name string
		res  v1alpha1.ContainerResources
	}{{"build", r.Build}, {"helper", r.Helper}} {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c.name, Image: "alpine:3.22",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: *c.res.CPURequest, corev1.ResourceMemory: *c.res.MemoryRequest}}})
	}
	return p
}

// createAll creates objs with 8 clients at once.
func createAll(b *testing.B, c client.Client, objs []client.Object) {
	ctx := context.Background()
	errs := make(chan error, len(objs))
	work := make(chan client.Object)
	for range 8 {
		go func() {
			for o := range work {
				errs <- c.Create(ctx, o)
			}
		}()
	}
	// Namespaces and node classes first, as the controller orders them.
	sorted := slices.Clone(objs)
	sort.SliceStable(sorted, func(i, j int) bool { return rank(sorted[i]) < rank(sorted[j]) })
	for _, o := range sorted {
		work <- o
	}
	close(work)
	for range objs {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

func rank(o client.Object) int {
	switch o.(type) {
	case *corev1.Namespace:
		return 0
	case *kwokv1alpha1.KWOKNodeClass:
		return 1
	}
	return 2
}

// waitNodePoolsReady waits until want NodePools are Ready and says how long
// it took.
func waitNodePoolsReady(b *testing.B, c client.Client, want int) time.Duration {
	start := time.Now()
	var ready int
	for time.Since(start) < 10*time.Minute {
		list := &karpv1.NodePoolList{}
		if err := c.List(context.Background(), list); err != nil {
			b.Fatal(err)
		}
		ready = 0
		for _, np := range list.Items {
			if np.StatusConditions().Root().IsTrue() {
				ready++
			}
		}
		if ready == want {
			return time.Since(start)
		}
		time.Sleep(500 * time.Millisecond)
	}
	b.Fatalf("%d of %d NodePools Ready after 10 minutes", ready, want)
	return 0
}

// waitRunning polls until every pod runs and returns each one's time from
// its create to Running, as seen at a 250 ms poll, and how many pods were
// lost before they ran. On this machine a kwok node is now and then tainted
// not-ready for a moment under load and kube-controller-manager's taint
// eviction deletes the pod just placed on it; such a pod is created again,
// as the kubernetes executor's retry would, and its time counts from its
// first create.
func waitRunning(b *testing.B, c client.Client, pods []*corev1.Pod, created map[string]time.Time, timeout time.Duration) ([]time.Duration, int) {
	ctx := context.Background()
	running := map[string]time.Duration{}
	lost := 0
	deadline := time.Now().Add(timeout)
	for len(running) < len(pods) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d job pods Running after %s", len(running), len(pods), timeout)
		}
		time.Sleep(250 * time.Millisecond)
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.MatchingLabels{resources.LabelManagedBy: resources.ManagedBy}); err != nil {
			b.Fatal(err)
		}
		live := map[string]bool{}
		for _, p := range list.Items {
			key := p.Namespace + "/" + p.Name
			if _, ok := created[key]; !ok || p.DeletionTimestamp != nil {
				continue
			}
			live[key] = true
			if _, seen := running[key]; !seen && p.Status.Phase == corev1.PodRunning {
				running[key] = time.Since(created[key])
			}
		}
		for _, p := range pods {
			key := p.Namespace + "/" + p.Name
			if _, seen := running[key]; seen || live[key] {
				continue
			}
			again := p.DeepCopy()
			again.ResourceVersion, again.UID, again.CreationTimestamp = "", "", metav1.Time{}
			if err := c.Create(ctx, again); err == nil {
				lost++
			} else if !apierrors.IsAlreadyExists(err) {
				b.Fatalf("creating lost job pod %s again: %v", key, err)
			}
		}
	}
	out := make([]time.Duration, 0, len(running))
	for _, d := range running {
		out = append(out, d)
	}
	slices.Sort(out)
	return out, lost
}

// isolation returns a problem for each job that runs on a node that is not
// its tag's (a node whose capacity label names another tag, or none), and
// for each node that runs jobs of two tags.
func isolation(b *testing.B, c client.Client, pods []*corev1.Pod, tags []tag) []string {
	owner := map[string]string{}
	for _, t := range tags {
		owner[t.jobsNS] = t.capacity
	}
	return isolationBy(b, c, pods, owner)
}

// isolationBy is isolation with each jobs namespace's tag (its capacity
// name) in owner.
func isolationBy(b *testing.B, c client.Client, pods []*corev1.Pod, owner map[string]string) []string {
	ctx := context.Background()
	nodes := map[string]string{}
	var problems []string
	for _, p := range pods {
		cur := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
			b.Fatal(err)
		}
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: cur.Spec.NodeName}, n); err != nil {
			b.Fatalf("job %s/%s's node %q: %v", p.Namespace, p.Name, cur.Spec.NodeName, err)
		}
		want, got := owner[p.Namespace], n.Labels[capacity.LabelCapacity]
		if got != want {
			problems = append(problems, fmt.Sprintf("job %s/%s of tag %s runs on node %s labelled %s=%q", p.Namespace, p.Name, want, n.Name, capacity.LabelCapacity, got))
		}
		if prev, ok := nodes[n.Name]; ok && prev != want {
			problems = append(problems, fmt.Sprintf("node %s runs jobs of %s and %s", n.Name, prev, want))
		}
		nodes[n.Name] = want
	}
	b.Logf("isolation: %d jobs on %d nodes, %d problems", len(pods), len(nodes), len(problems))
	return problems
}

// cpuSeconds is pid's user and system CPU time (/proc/<pid>/stat, clock
// ticks of 1/100 s).
func cpuSeconds(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name may hold spaces; the fields after it do not.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatal(err)
	}
	return (utime + stime) / 100
}

// memory is pid's resident set and its peak, in MiB (/proc/<pid>/status).
func memory(b *testing.B, pid int) (rss, peak float64) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[0], 64)
		switch k {
		case "VmRSS":
			rss = kb / 1024
		case "VmHWM":
			peak = kb / 1024
		}
	}
	return rss, peak
}

// load1 is the machine's one-minute load average.
func load1() float64 {
	raw, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// realNodeOwner is the file that names the state directory of the control
// plane that holds the machine's one real node.
const realNodeOwner = "/run/runnerfleet-node.owner"

// realNodeState is what the benchmark must leave alone: the real node's
// owner file and its bridge.
func realNodeState() string {
	owner, err := os.ReadFile(realNodeOwner)
	if err != nil {
		owner = []byte("(none: " + err.Error() + ")")
	}
	_, bridge := os.Stat("/sys/class/net/rf0")
	return fmt.Sprintf("owner %s; bridge rf0 present %t", bytes.TrimSpace(owner), bridge == nil)
}

// stateDirs are the state directories of the control planes this
// benchmark started.
var stateDirs []string

// guardRealNode fails the benchmark if the real node's owner file names a
// control plane the benchmark started, checked after each control plane
// is up (checkRealNode) and at the end. Other sessions' e2e tests may take
// and release the real node meanwhile (the machine runs them under
// /tmp/runnerfleet-e2e.lock, which the benchmark does not take, as it
// needs no real node): such a change is logged, not failed.
func guardRealNode(b *testing.B) {
	before := realNodeState()
	b.Cleanup(func() {
		checkRealNode(b)
		if now := realNodeState(); now != before {
			b.Logf("the real node changed hands during the benchmark (another session's tests; none of this benchmark's control planes): before %q, after %q", before, now)
		}
	})
}

// checkRealNode fails b if the real node's owner is a control plane of
// this benchmark.
func checkRealNode(b *testing.B) {
	owner, err := os.ReadFile(realNodeOwner)
	if err != nil {
		return
	}
	if d := heldBy(string(owner), stateDirs); d != "" {
		b.Errorf("the machine's real node is held by this benchmark's control plane %s", d)
	}
}

// heldBy is the state directory of dirs that owner (the owner file's
// content) names, or "".
func heldBy(owner string, dirs []string) string {
	o := strings.TrimSpace(owner)
	for _, d := range dirs {
		if o == d || strings.HasPrefix(o, d+"/") {
			return d
		}
	}
	return ""
}

// The guard tells this benchmark's control planes from other sessions'.
func TestTheRealNodeGuardNamesOnlyThisBenchmarksControlPlanes(t *testing.T) {
	dirs := []string{"/tmp/BenchmarkControllerCapacitymode=shared1/001", "/tmp/BenchmarkControllerCapacitymode=perTag2/001"}
	for owner, want := range map[string]string{
		"/tmp/BenchmarkControllerCapacitymode=perTag2/001\n":     dirs[1],
		"/tmp/BenchmarkControllerCapacitymode=shared1/001/state": dirs[0],
		"/tmp/TestSharedFleetChangeWhileAJobRuns2609724559/001":  "",
		"/tmp/BenchmarkControllerCapacitymode=shared1/0010":      "",
		"": "",
	} {
		if got := heldBy(owner, dirs); got != want {
			t.Errorf("owner %q: held by %q, want %q", owner, got, want)
		}
	}
}

func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(min(i, len(sorted))-1, 0)]
}
