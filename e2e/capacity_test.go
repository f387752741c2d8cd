//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/e2e/internal/executorpod"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// pool is one set of job capacity the test drives: a team's RunnerSet, or
// the hand-written NodePool it is compared with.
type pool struct {
	name     string // NodePool name
	jobs     int
	template func(i int) *corev1.Pod
	pods     []*corev1.Pod
	// as creates and deletes the pods: a team's manager ServiceAccount,
	// as the kubernetes executor does, or the admin.
	as client.Client

	mu      sync.Mutex
	created map[string]time.Time
	running map[string]time.Duration
}

// TestTwoTeamsScaleFromZeroOnTheirOwnCapacityAndBack runs the whole capacity
// story on the local control plane with the real Karpenter (kwok provider):
// two teams' RunnerSets, job pods shaped exactly as gitlab-runner's
// kubernetes executor creates them from the config.toml the controller wrote,
// nodes from each tag's own NodePool only, limits honoured, no running job
// disrupted, and consolidation back to zero — beside a plain hand-written
// NodePool, to show that runnerfleet's wrapping adds no latency.
func TestTwoTeamsScaleFromZeroOnTheirOwnCapacityAndBack(t *testing.T) {
	onKWOKCluster(t)
	root := repoRoot(t)
	bin := buildBinaries(t, root)
	ctx := context.Background()
	// A control plane with Karpenter's kwok provider and kwok nodes only
	// (or the user's cluster), the controller as the manifests install it:
	// the test itself creates the job pods a manager would, so no manager
	// has to run a job and the real node is left to the other lane.
	cl := startCluster(t, localcluster.Options{Name: "capacity", RepoRoot: root, Karpenter: true})
	cl.needsKarpenterKWOK(t)
	applyDocs(ctx, t, cl.Client, charts.InstallYAML())
	if cl.RunsContainers {
		waitControllerPod(ctx, t, cl, install.Defaults().Namespace)
	} else {
		startControllerAsServiceAccount(ctx, t, cl, bin, install.Defaults().Namespace)
	}
	kubeconfig, c, managerImage := cl.Kubeconfig, cl.Client, exampleManagerImage(t, root)
	if cl.Existing {
		t.Cleanup(func() {
			_ = client.IgnoreNotFound(c.Delete(ctx, &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}))
			_ = client.IgnoreNotFound(c.Delete(ctx, &kwokv1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}))
		})
	}

	// The platform's class and two teams.
	class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "kwok-spot"}, Spec: v1alpha1.RunnerClassSpec{
		Provider: v1alpha1.CapacityProviderKWOK,
		Defaults: v1alpha1.RunnerClassDefaults{ManagerImage: v1alpha1.ImageReference(managerImage)},
	}}
	create(t, c, class)
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	teams := map[string]*v1alpha1.RunnerSet{}
	for _, team := range []string{"team-a", "team-b"} {
		create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}})
		create(t, c, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "runner-token"},
			Data:       map[string][]byte{"token": []byte("glrt-e2e-placeholder-token")},
		})
		rs := &v1alpha1.RunnerSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "build"},
			Spec: v1alpha1.RunnerSetSpec{
				ClassName: class.Name,
				Tags:      []string{team},
				Managers:  v1alpha1.ManagerSpec{ShutdownTimeout: &metav1.Duration{Duration: time.Minute}},
				GitLab:    v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "runner-token"}},
				Jobs: v1alpha1.JobSpec{Resources: v1alpha1.JobResources{
					Build:  v1alpha1.ContainerResources{CPURequest: q("1500m"), MemoryRequest: q("1Gi")},
					Helper: v1alpha1.ContainerResources{CPURequest: q("500m"), MemoryRequest: q("256Mi")},
				}},
			},
		}
		if team == "team-b" {
			// Six jobs of 2 CPU each against a limit of 8: the burst must wait.
			rs.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
		}
		create(t, c, rs)
		teams[team] = rs
	}
	// The baseline: a NodePool and KWOKNodeClass as one would write them by
	// hand, with the same requirements, taint and consolidation.
	plainRS := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: "plain"}}
	plain := capacity.NodePool(plainRS, class,
		karpv1.NodeClassReference{Group: "karpenter.kwok.sh", Kind: "KWOKNodeClass", Name: "plain"}, v1alpha1.Effective(plainRS, class))
	plain.ObjectMeta = metav1.ObjectMeta{Name: "plain"}
	plain.Spec.Template.Labels = map[string]string{"pool": "plain"}
	plain.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "pool", Value: "plain", Effect: corev1.TaintEffectNoSchedule}}
	create(t, c, &kwokv1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "plain"}})
	create(t, c, plain)

	for _, rs := range teams {
		waitFor(t, 3*time.Minute, fmt.Sprintf("RunnerSet %s/%s Ready", rs.Namespace, rs.Name), func() error {
			cur := &v1alpha1.RunnerSet{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(rs), cur); err != nil {
				return err
			}
			if !cur.IsReady() {
				return fmt.Errorf("%+v", cur.Status.Conditions)
			}
			return nil
		})
	}

	pools := []*pool{}
	for _, team := range []string{"team-a", "team-b"} {
		cfg := configOf(t, c, teams[team])
		// Jobs run in the RunnerSet's own jobs namespace, never the team's:
		// the pods below are created where config.toml sends them.
		jobsNS := naming.For(team, "build").JobsNamespace()
		if got := cfg.Runners[0].Kubernetes.Namespace; got != jobsNS {
			t.Fatalf("%s: config.toml runs jobs in namespace %q, want its jobs namespace %s", team, got, jobsNS)
		}
		jobs := map[string]int{"team-a": 2, "team-b": 6}[team]
		// The team's managers create the job pods, with the rights the
		// controller gave them in the jobs namespace and nothing more.
		manager := clientAs(t, kubeconfig, "system:serviceaccount:"+team+":"+naming.For(team, "build").ManagerServiceAccount())
		if err := manager.List(ctx, &corev1.SecretList{}, client.InNamespace(team)); !apierrors.IsForbidden(err) {
			t.Fatalf("%s's manager lists the team's Secrets (%v): it must hold nothing there but its config Secret", team, err)
		}
		pools = append(pools, &pool{name: naming.For(team, "build").Capacity(), jobs: jobs, as: manager,
			template: func(i int) *corev1.Pod { return executorPod(cfg, i) }})
	}
	pools = append(pools, &pool{name: "plain", jobs: 2, as: c, template: func(i int) *corev1.Pod {
		p := executorPod(configOf(t, c, teams["team-a"]), i)
		p.Namespace, p.Name = "default", fmt.Sprintf("plain-job-%d", i)
		p.Spec.ServiceAccountName = ""
		p.Spec.NodeSelector = map[string]string{"pool": "plain"}
		p.Spec.Tolerations = []corev1.Toleration{{Key: "pool", Operator: corev1.TolerationOpEqual, Value: "plain", Effect: corev1.TaintEffectNoSchedule}}
		return p
	}})

	// Every job of every pool at once, as a burst of pipelines would.
	for _, p := range pools {
		p.created, p.running = map[string]time.Time{}, map[string]time.Duration{}
		for i := range p.jobs {
			pod := p.template(i)
			create(t, p.as, pod)
			p.created[pod.Namespace+"/"+pod.Name] = time.Now()
			p.pods = append(p.pods, pod)
		}
	}
	var watchErr error
	stop := make(chan struct{})
	var watching sync.WaitGroup
	watching.Add(1)
	go func() { // follows pods and team-b's nodes until stopped
		defer watching.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			for _, p := range pools {
				for _, pod := range p.pods {
					cur := &corev1.Pod{}
					if err := c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
						continue
					}
					key := pod.Namespace + "/" + pod.Name
					p.mu.Lock()
					if _, seen := p.running[key]; !seen && cur.Status.Phase == corev1.PodRunning {
						p.running[key] = time.Since(p.created[key])
					}
					p.mu.Unlock()
				}
			}
			if cpu := nodeClaimCPU(ctx, c, pools[1].name); cpu.Cmp(resource.MustParse("8")) > 0 && watchErr == nil {
				watchErr = fmt.Errorf("team-b's NodeClaims hold %s CPU, over its limit of 8", cpu.String())
			}
		}
	}()
	defer func() { close(stop); watching.Wait() }()

	waitFor(t, 3*time.Minute, "team-a and the plain pool Running, team-b at its limit", func() error {
		for _, p := range []*pool{pools[0], pools[2]} {
			if n := p.countRunning(); n < p.jobs {
				return fmt.Errorf("%s: %d of %d jobs Running", p.name, n, p.jobs)
			}
		}
		if n := pools[1].countRunning(); n == 0 {
			return errors.New("team-b: no job Running")
		}
		return nil
	})
	// Let team-b's burst settle, then check it waits instead of overflowing.
	time.Sleep(15 * time.Second)
	if n := pools[1].countRunning(); n >= pools[1].jobs {
		t.Errorf("team-b runs all %d jobs of 2 CPU under a limit of 8 CPU", n)
	} else {
		t.Logf("team-b: %d of %d jobs Running within its 8 CPU limit, the rest wait", n, pools[1].jobs)
	}

	// Each team's jobs run only on nodes of its own NodePool.
	for _, p := range pools {
		for _, pod := range p.pods {
			cur := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil || cur.Spec.NodeName == "" {
				continue
			}
			node := &corev1.Node{}
			if err := c.Get(ctx, client.ObjectKey{Name: cur.Spec.NodeName}, node); err != nil {
				t.Fatal(err)
			}
			if got := node.Labels[karpv1.NodePoolLabelKey]; got != p.name {
				t.Errorf("job %s/%s of %s runs on node %s of NodePool %q", cur.Namespace, cur.Name, p.name, node.Name, got)
			}
		}
	}

	// Past consolidateAfter, no running job is disrupted and no node of a
	// running job goes away.
	before := runningPods(ctx, t, c, pools)
	time.Sleep(capacity.DefaultConsolidateAfter + 5*time.Second)
	for key, uid := range before {
		ns, name, _ := strings.Cut(key, "/")
		cur := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cur); err != nil || cur.UID != uid ||
			cur.DeletionTimestamp != nil || cur.Status.Phase != corev1.PodRunning {
			t.Errorf("running job %s was disrupted (err=%v)", key, err)
		}
	}
	if watchErr != nil {
		t.Error(watchErr)
	}

	// The jobs end: the executor deletes its pods. Each pool goes back to zero.
	lastJob := time.Now()
	for _, p := range pools {
		for _, pod := range p.pods {
			if err := p.as.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	zero := map[string]time.Duration{}
	waitFor(t, 4*time.Minute, "every pool back to zero nodes", func() error {
		var left []string
		for _, p := range pools {
			if _, done := zero[p.name]; done {
				continue
			}
			if n := nodeClaims(ctx, c, p.name); n > 0 {
				left = append(left, fmt.Sprintf("%s: %d", p.name, n))
				continue
			}
			zero[p.name] = time.Since(lastJob)
		}
		if len(left) > 0 {
			return errors.New(strings.Join(left, ", "))
		}
		return nil
	})

	// Figures for BENCHMARKS.md: runnerfleet's pools beside the plain one.
	report := []string{"| pool | jobs | pending → Running (median, max) | last job → zero nodes |", "| --- | ---: | ---: | ---: |"}
	for _, p := range pools {
		med, mx := p.stats()
		report = append(report, fmt.Sprintf("| %s | %d (%d ran at once) | %.1f s, %.1f s | %.1f s |", p.name, p.jobs, p.countRunning(), med.Seconds(), mx.Seconds(), zero[p.name].Seconds()))
	}
	t.Log("capacity timings:\n" + strings.Join(report, "\n"))
	if out := os.Getenv("RUNNERFLEET_E2E_REPORT"); out != "" {
		if err := os.WriteFile(out, []byte(strings.Join(report, "\n")+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func (p *pool) countRunning() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.running)
}

func (p *pool) stats() (median, maximum time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var d []time.Duration
	for _, v := range p.running {
		d = append(d, v)
	}
	if len(d) == 0 {
		return 0, 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], d[len(d)-1]
}

func create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: not after %s: %v", what, timeout, err)
}

// configOf reads back the config.toml the controller wrote for rs.
func configOf(t *testing.T, c client.Client, rs *v1alpha1.RunnerSet) runnerconfig.Config {
	t.Helper()
	sec := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: rs.Namespace, Name: naming.For(rs.Namespace, rs.Name).Config()}, sec); err != nil {
		t.Fatal(err)
	}
	var cfg runnerconfig.Config
	if _, err := toml.Decode(string(sec.Data[resources.ConfigKey]), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// executorPod is the pod gitlab-runner's kubernetes executor creates for
// job i from cfg (executorpod.Build).
func executorPod(cfg runnerconfig.Config, i int) *corev1.Pod {
	return executorpod.Build(cfg, fmt.Sprintf("runner-e2e-project-1-concurrent-%d", i))
}

func nodeClaims(ctx context.Context, c client.Client, nodePool string) int {
	list := &karpv1.NodeClaimList{}
	if err := c.List(ctx, list, client.MatchingLabels{karpv1.NodePoolLabelKey: nodePool}); err != nil {
		return -1
	}
	return len(list.Items)
}

func nodeClaimCPU(ctx context.Context, c client.Client, nodePool string) resource.Quantity {
	var sum resource.Quantity
	list := &karpv1.NodeClaimList{}
	if err := c.List(ctx, list, client.MatchingLabels{karpv1.NodePoolLabelKey: nodePool}); err != nil {
		return sum
	}
	for _, nc := range list.Items {
		if q, ok := nc.Status.Capacity[corev1.ResourceCPU]; ok {
			sum.Add(q)
		}
	}
	return sum
}

func runningPods(ctx context.Context, t *testing.T, c client.Client, pools []*pool) map[string]types.UID {
	out := map[string]types.UID{}
	for _, p := range pools {
		for _, pod := range p.pods {
			cur := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err == nil && cur.Status.Phase == corev1.PodRunning {
				out[pod.Namespace+"/"+pod.Name] = cur.UID
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no running jobs to watch")
	}
	return out
}
