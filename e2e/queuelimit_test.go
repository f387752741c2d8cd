//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/localstack/standin"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// EnvQueueLimitControl, set to "nolimit", runs
// TestJobsOverATagsLimitWaitInGitLabAndThenRun as its negative control:
// the managers run the controller's config.toml with its [[runners]]
// limit rendered as 0 (no limit to gitlab-runner), and the test must fail.
const EnvQueueLimitControl = "RUNNERFLEET_E2E_QUEUE_LIMIT_CONTROL"

// TestJobsOverATagsLimitWaitInGitLabAndThenRun queues 2N+1 jobs for a tag
// whose spec.capacity.limits fit N jobs, with the real Karpenter (kwok
// provider), on a class in spec.nodePools.mode shared and then on one in
// perTag (the tag's own NodePool, whose limit is the backstop): the tag's
// managers (the stand-in gitlab-runner, run here with the config.toml the
// controller wrote, as the manager ServiceAccount) take at most N at once,
// so never more than N job pods of the tag exist, the others wait in the
// loopback GitLab's queue with no pod, and every job succeeds. Another tag
// of the class runs jobs meanwhile; no job pod of the limited tag lands on
// its node. It reports how long the last job waited and how long each job
// pod was Pending, against the other tag's.
func TestJobsOverATagsLimitWaitInGitLabAndThenRun(t *testing.T) {
	onKWOKCluster(t)
	root := repoRoot(t)
	bin := buildBinaries(t, root)
	ctx := context.Background()
	cl := startCluster(t, localcluster.Options{Name: "queuelimit", RepoRoot: root, Karpenter: true})
	cl.needsKarpenterKWOK(t)
	if cl.RunsContainers {
		t.Skip("the managers of this test run on this machine against a loopback GitLab that a controller in a pod cannot reach; it runs on the local control plane (make e2e)")
	}
	applyDocs(ctx, t, cl.Client, charts.InstallYAML())
	startControllerAsServiceAccount(ctx, t, cl, bin, install.Defaults().Namespace)
	gl := gitlabserver.New()
	t.Cleanup(gl.Close)
	// One after the other: on the class's shared NodePool (no NodePool
	// limit: the queue alone holds the tag), and on a NodePool of the
	// tag's own (its NodePool limit the backstop).
	for _, mode := range []v1alpha1.NodePoolMode{v1alpha1.NodePoolModeShared, v1alpha1.NodePoolModePerTag} {
		t.Run(string(mode), func(t *testing.T) {
			queueOverTheLimit(t, cl, gl, mode, exampleManagerImage(t, root))
		})
	}
}

func queueOverTheLimit(t *testing.T, cl *cluster, gl *gitlabserver.Server, mode v1alpha1.NodePoolMode, managerImage string) {
	ctx := context.Background()
	c := cl.Client
	class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "kwok-queue-" + strings.ToLower(string(mode))}, Spec: v1alpha1.RunnerClassSpec{
		Provider:  v1alpha1.CapacityProviderKWOK,
		GitLabURL: gl.URL(),
		NodePools: &v1alpha1.NodePoolSettings{Mode: mode},
		Defaults:  v1alpha1.RunnerClassDefaults{ManagerImage: v1alpha1.ImageReference(managerImage)},
	}}
	create(t, c, class)
	if cl.Existing {
		// The class controls its shared NodePool and node class; the
		// tags' own go with their RunnerSets, deleted with the namespaces.
		t.Cleanup(func() {
			for _, ns := range []string{"qs-a", "qs-b", "qp-a", "qp-b"} {
				_ = client.IgnoreNotFound(c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
			}
			_ = client.IgnoreNotFound(c.Delete(ctx, class))
		})
	}
	// N jobs fit the limited tag: 2 CPU of limits, 1 CPU a job, on two
	// managers, so each manager's [[runners]] limit is 1.
	const (
		fit      = 2
		replicas = 2
		jobTime  = 20 * time.Second
	)
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	type tag struct {
		ns    string
		rs    *v1alpha1.RunnerSet
		token string
		jobs  int
	}
	prefix := "qs"
	if mode == v1alpha1.NodePoolModePerTag {
		prefix = "qp"
	}
	limited, other := &tag{ns: prefix + "-a", jobs: 2*fit + 1}, &tag{ns: prefix + "-b", jobs: 2}
	for _, tg := range []*tag{limited, other} {
		rn := gl.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{tg.ns}})
		tg.token = rn.Token
		create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tg.ns}})
		create(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tg.ns, Name: "runner-token"}, Data: map[string][]byte{"token": []byte(rn.Token)}})
		tg.rs = &v1alpha1.RunnerSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: tg.ns, Name: "build"},
			Spec: v1alpha1.RunnerSetSpec{
				ClassName: class.Name,
				Tags:      []string{tg.ns},
				Managers:  v1alpha1.ManagerSpec{Replicas: ptr.To[int32](replicas), ShutdownTimeout: &metav1.Duration{Duration: time.Minute}},
				GitLab:    v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "runner-token"}},
				Jobs: v1alpha1.JobSpec{Resources: v1alpha1.JobResources{
					Build: v1alpha1.ContainerResources{CPURequest: q("1"), MemoryRequest: q("512Mi")},
				}},
			},
		}
		if tg == limited {
			tg.rs.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
		}
		create(t, c, tg.rs)
	}
	// The NodePool the limited tag's jobs must run on.
	pool := naming.ClassCapacity(class.Name)
	if mode == v1alpha1.NodePoolModePerTag {
		pool = naming.For(limited.ns, "build").Capacity()
	}
	for _, tg := range []*tag{limited, other} {
		waitFor(t, 3*time.Minute, "RunnerSet "+tg.ns+"/build's capacity and config in place", func() error {
			cur := &v1alpha1.RunnerSet{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(tg.rs), cur); err != nil {
				return err
			}
			for _, typ := range []string{v1alpha1.ConditionCapacityReady, v1alpha1.ConditionConfigReady} {
				if cond := meta.FindStatusCondition(cur.Status.Conditions, typ); cond == nil || cond.Status != metav1.ConditionTrue {
					return fmt.Errorf("%s: %+v", typ, cond)
				}
			}
			return nil
		})
	}

	// The managers: the stand-in with the controller's config.toml, as
	// each tag's manager ServiceAccount, one per replica.
	control := os.Getenv(EnvQueueLimitControl) == "nolimit"
	restCfg, err := clientcmd.BuildConfigFromFlags("", cl.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var logMu sync.Mutex
	logs := &strings.Builder{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("managers' log:\n%s", logs.String())
		}
	})
	jobsNS := map[string]string{}
	for _, tg := range []*tag{limited, other} {
		sec := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: tg.ns, Name: naming.For(tg.ns, "build").Config()}, sec); err != nil {
			t.Fatal(err)
		}
		cfg := &standin.Config{}
		if _, err := toml.Decode(string(sec.Data[resources.ConfigKey]), cfg); err != nil {
			t.Fatal(err)
		}
		r := &cfg.Runners[0]
		if tg == limited {
			if r.Limit != fit/replicas {
				t.Fatalf("config.toml of a tag whose limits fit %d jobs on %d managers has limit = %d, want %d", fit, replicas, r.Limit, fit/replicas)
			}
			if control {
				t.Logf("negative control (%s=nolimit): the managers run with limit = 0", EnvQueueLimitControl)
				r.Limit = 0
			}
		}
		r.Token, r.URL = tg.token, gl.URL()
		jobsNS[tg.ns] = r.Kubernetes.Namespace
		as := rest.CopyConfig(restCfg)
		as.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + tg.ns + ":" + naming.For(tg.ns, "build").ManagerServiceAccount(),
			Groups:   []string{"system:serviceaccounts", "system:authenticated"},
		}
		hc, err := rest.HTTPClientFor(as)
		if err != nil {
			t.Fatal(err)
		}
		for i := range replicas {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			sigs := make(chan os.Signal, 1)
			done := make(chan struct{})
			go func() {
				defer close(done)
				standin.Run(context.Background(), standin.Options{
					Config: cfg, SystemID: fmt.Sprintf("s_%s_%d", tg.ns, i), Signals: sigs, Listener: ln,
					Log:  lockedWriter{&logMu, logs},
					Kube: &standin.Kube{Server: as.Host, HTTP: hc},
				})
			}()
			t.Cleanup(func() { sigs <- syscall.SIGTERM; <-done })
		}
	}

	// Every job pod of both tags, watched from before the first job.
	w := watchJobPods(t, restCfg, jobsNS[limited.ns])
	// The other tag's, whose jobs never wait: Karpenter's normal
	// provisioning, to hold the limited tag's Pending times against.
	wo := watchJobPods(t, restCfg, jobsNS[other.ns])
	start := time.Now()
	var ids []int64
	for range limited.jobs {
		ids = append(ids, gl.QueueJob([]string{limited.ns}, jobTime))
	}
	for range other.jobs {
		gl.QueueJob([]string{other.ns}, jobTime)
	}
	waitFor(t, time.Duration(limited.jobs)*jobTime+5*time.Minute, "every job of both tags ended", func() error {
		w.labelNodes(ctx, c)
		open := 0
		for _, j := range gl.Jobs() {
			if !slices.Contains(j.Tags, limited.ns) && !slices.Contains(j.Tags, other.ns) {
				continue
			}
			if j.State == gitlabserver.JobPending || j.State == gitlabserver.JobRunning {
				open++
			}
		}
		if open > 0 {
			return fmt.Errorf("%d jobs pending or running", open)
		}
		return nil
	})
	elapsed := time.Since(start)
	w.stop()
	wo.stop()

	// Every job succeeded; the last of the limited tag's waited in
	// GitLab's queue, not in a pod.
	var lastWait time.Duration
	for _, j := range gl.Jobs() {
		if !slices.Contains(j.Tags, limited.ns) && !slices.Contains(j.Tags, other.ns) {
			continue
		}
		if j.State != gitlabserver.JobSuccess {
			t.Errorf("job %d of %v is %s (%s): %s", j.ID, j.Tags, j.State, j.FailureReason, j.Trace)
		}
		if slices.Contains(ids, j.ID) {
			lastWait = max(lastWait, j.PickedAt.Sub(j.QueuedAt))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.most > fit {
		t.Errorf("%d job pods of the limited tag existed at once (%v), but its limits fit %d", w.most, w.mostAt, fit)
	}
	if len(w.pods) != limited.jobs {
		t.Errorf("%d job pods of the limited tag were made, want %d (one per job)", len(w.pods), limited.jobs)
	}
	// No job pod of the limited tag on another tag's node: each ran on a
	// node of the shared NodePool labelled with its own tag.
	own := naming.For(limited.ns, "build").Capacity()
	var pending []time.Duration
	nodes := map[string]string{} // node → its instance type and cpu
	for name, p := range w.pods {
		if p.node == "" || p.nodeLabels == nil {
			t.Errorf("job pod %s never ran, or its node %q was never seen", name, p.node)
			continue
		}
		if p.nodeLabels[capacity.LabelCapacity] != own || p.nodeLabels[karpv1.NodePoolLabelKey] != pool {
			t.Errorf("job pod %s ran on node %s of tag %q, NodePool %q: want tag %s on %s", name, p.node, p.nodeLabels[capacity.LabelCapacity], p.nodeLabels[karpv1.NodePoolLabelKey], own, pool)
		}
		pending = append(pending, p.running.Sub(p.created))
		nodes[p.node] = p.nodeLabels[corev1.LabelInstanceTypeStable] + " (" + p.nodeCPU + " cpu)"
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i] < pending[j] })
	wo.mu.Lock()
	var otherPending []time.Duration
	for _, p := range wo.pods {
		if !p.running.IsZero() {
			otherPending = append(otherPending, p.running.Sub(p.created))
		}
	}
	wo.mu.Unlock()
	sort.Slice(otherPending, func(i, j int) bool { return otherPending[i] < otherPending[j] })
	t.Logf("mode %s: %d jobs of a tag whose limits fit %d (%d managers, limit %d each; control=%v) and %d of another tag ended in %s: at most %d job pods of the tag at once, %d of them Running; the last job waited %s in GitLab's queue; its job pods were Pending %v (created → Running, Karpenter's kwok node provisioning included), the other tag's %v; the tag's nodes %v",
		mode, limited.jobs, fit, replicas, fit/replicas, control, other.jobs, elapsed.Round(time.Second), w.most, w.mostRunning, lastWait.Round(100*time.Millisecond), roundAll(pending), roundAll(otherPending), nodes)
}

func roundAll(ds []time.Duration) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Round(100*time.Millisecond).String())
	}
	return out
}

// jobPodWatch counts the live job pods of one jobs namespace (made and not
// being deleted) from a watch, so that no moment between two polls is
// missed, and keeps each pod's life.
type jobPodWatch struct {
	mu   sync.Mutex
	live map[string]bool
	most int
	// running are the live pods that run; mostRunning the most at once.
	running     map[string]bool
	mostRunning int
	mostAt      []string
	pods        map[string]*jobPodLife
	stop        func()
}

type jobPodLife struct {
	created, running time.Time
	node             string
	nodeLabels       map[string]string
	nodeCPU          string // the node's cpu capacity
}

func watchJobPods(t *testing.T, cfg *rest.Config, ns string) *jobPodWatch {
	t.Helper()
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: localcluster.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &jobPodWatch{live: map[string]bool{}, running: map[string]bool{}, pods: map[string]*jobPodLife{}}
	done := make(chan struct{})
	w.stop = func() { cancel(); <-done }
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			w.stop()
		}
	})
	list := &corev1.PodList{}
	if err := wc.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) > 0 {
		t.Fatalf("%d pods in the jobs namespace %s before any job", len(list.Items), ns)
	}
	rv := list.ResourceVersion
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			wi, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = p.ResourceVersion
				if ev.Type != watch.Bookmark {
					w.see(ev.Type, p)
				}
			}
			wi.Stop()
		}
	}()
	return w
}

// labelNodes reads the labels of the nodes the job pods run on, while
// the nodes exist (consolidation removes them once empty).
func (w *jobPodWatch) labelNodes(ctx context.Context, c client.Client) {
	w.mu.Lock()
	var want []*jobPodLife
	for _, p := range w.pods {
		if p.node != "" && p.nodeLabels == nil {
			want = append(want, p)
		}
	}
	w.mu.Unlock()
	for _, p := range want {
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: p.node}, node); err == nil {
			w.mu.Lock()
			p.nodeLabels = node.Labels
			p.nodeCPU = node.Status.Capacity.Cpu().String()
			w.mu.Unlock()
		}
	}
}

func (w *jobPodWatch) see(typ watch.EventType, p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	life := w.pods[p.Name]
	if life == nil {
		// When the watch first saw it: creationTimestamp has whole
		// seconds only.
		life = &jobPodLife{created: time.Now()}
		w.pods[p.Name] = life
	}
	if p.Status.Phase == corev1.PodRunning && life.running.IsZero() {
		life.running, life.node = time.Now(), p.Spec.NodeName
	}
	if typ == watch.Deleted || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		delete(w.live, p.Name)
		delete(w.running, p.Name)
		return
	}
	w.live[p.Name] = true
	if p.Status.Phase == corev1.PodRunning {
		w.running[p.Name] = true
		w.mostRunning = max(w.mostRunning, len(w.running))
	}
	if len(w.live) > w.most {
		w.most = len(w.live)
		w.mostAt = slices.Sorted(func(yield func(string) bool) {
			for n := range w.live {
				if !yield(n) {
					return
				}
			}
		})
	}
}
