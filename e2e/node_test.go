//go:build e2e

package e2e

// Managers on the real node (containerd + kubelet, localstack/localcluster)
// running the stand-in gitlab-runner (localstack/standin) against a
// loopback GitLab (gitlabserver) with a job queue: a config change, a drain,
// a deletion and a controller killed mid-rollout lose no job; the same
// manager Deployment without the preStop drain and with a short grace
// period loses jobs.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/localstack/standin"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

type nodeEnv struct {
	t     *testing.T
	root  string
	state string
	cl    *localcluster.Cluster
	c     client.Client
	gl    *gitlabserver.Server
	imgs  localcluster.NodeImages
	ctrl  string // the runnerset-controller binary
	class string

	mu     sync.Mutex
	drains map[string]drain // by system_id
	// rec keeps the pods' lives and the node's container logs, the
	// evidence of a lost job (evidence_test.go).
	rec *recorder
}

// drain is when a manager logged standin.DrainLine.
type drain struct {
	ns string
	at time.Time
}

// startNodeEnv starts a local cluster with the real node, the controller
// and a loopback GitLab that the node's pods reach.
func startNodeEnv(t *testing.T) *nodeEnv {
	root := repoRoot(t)
	e := &nodeEnv{t: t, root: root, state: stateDir(t), class: "real-node", drains: map[string]drain{}, rec: newRecorder()}
	e.ctrl = filepath.Join(buildBinaries(t, root), localcluster.Controller)

	rf, err := crds.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	all := slices.Concat(rf, karpenterapis.CRDs, kwokapis.CRDs)
	var cs []*apiextensionsv1.CustomResourceDefinition
	for _, c := range all {
		cs = append(cs, c.DeepCopy())
	}
	ctx := context.Background()
	start := time.Now()
	cl, err := localcluster.Up(ctx, localcluster.Options{
		Dir: e.state, Name: "e2enode", RepoRoot: root, CRDs: cs, Node: true, Karpenter: true,
		Log: &logWriter{t: t, prefix: "localcluster: "},
	})
	t.Cleanup(func() { e.down() })
	if err != nil {
		t.Fatalf("starting the local cluster with the real node: %v", err)
	}
	t.Logf("cold cost: control plane + real node (images, containerd, kubelet) up in %s", time.Since(start).Round(time.Millisecond))
	e.cl, e.c = cl, cl.Client
	if e.imgs, err = localcluster.ReadNodeImages(e.state); err != nil {
		t.Fatal(err)
	}
	// The kubelet deletes a pod's logs with the pod, and a job pod goes
	// when its job ends: record them while they exist.
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	e.rec.watchPods(t, cl, stop)
	e.startController()
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				e.readLogs()
			}
		}
	}()
	if e.gl, err = gitlabserver.NewOn(localcluster.HostIP + ":0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.gl.Close)
	// What an install puts beside the controller: the executor's
	// ClusterRole, which it binds to each RunnerSet's managers in their jobs
	// namespace.
	create(t, e.c, install.ExecutorClusterRole(install.Defaults()))
	create(t, e.c, &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{Name: e.class},
		Spec: v1alpha1.RunnerClassSpec{
			Provider:  v1alpha1.CapacityProviderKWOK,
			GitLabURL: e.gl.URL(),
			Defaults:  v1alpha1.RunnerClassDefaults{ManagerImage: v1alpha1.ImageReference(e.imgs.Standin), JobImage: v1alpha1.DefaultJobImage},
		},
	})
	return e
}

func (e *nodeEnv) startController() {
	e.t.Helper()
	metrics, err := localcluster.FreePort()
	if err != nil {
		e.t.Fatal(err)
	}
	probe, err := localcluster.FreePort()
	if err != nil {
		e.t.Fatal(err)
	}
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", probe)
	_, err = e.cl.StartProcess(context.Background(), localcluster.Process{
		Name: localcluster.Controller, Path: e.ctrl,
		Args: []string{"--kubeconfig=" + e.cl.Kubeconfig, "--leader-elect=false",
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics), fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe)},
		Ready: func(ctx context.Context) error { return httpGet(ctx, readyz) },
	}, time.Minute, metrics, probe)
	if err != nil {
		e.t.Fatal(err)
	}
}

// down stops everything and checks that nothing of the node is left.
func (e *nodeEnv) down() {
	t := e.t
	start := time.Now()
	if err := localcluster.DownWithTimeout(context.Background(), e.state, 20*time.Second, &logWriter{t: t, prefix: "down: "}); err != nil {
		t.Errorf("stopping the local cluster: %v", err)
	}
	t.Logf("down in %s", time.Since(start).Round(time.Millisecond))
	if m := localcluster.NodeMounts(e.state); len(m) > 0 {
		t.Errorf("mounts left under the node's directory after down: %v", m)
	}
	if cg := localcluster.NodeCgroups("e2enode"); len(cg) > 0 {
		t.Errorf("cgroups left after down: %v", cg)
	}
	if _, err := net.InterfaceByName(localcluster.Bridge); err == nil {
		t.Errorf("bridge %s left after down", localcluster.Bridge)
	}
	if left := networkPolicyRulesLeft(t); left != "" {
		t.Errorf("NetworkPolicy rules left after down:\n%s", left)
	}
	if out, _ := exec.Command("pgrep", "-fa", e.state).Output(); len(out) > 0 {
		t.Errorf("processes naming %s still run after down:\n%s", e.state, out)
	}
}

// team is one RunnerSet with its own runner (and tag) in the loopback GitLab.
type team struct {
	ns, tag string
	token   string
	rs      *v1alpha1.RunnerSet
}

func (e *nodeEnv) newTeam(ns string, replicas, concurrent int32, shutdown time.Duration) *team {
	t := e.t
	t.Helper()
	rn := e.gl.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{ns}})
	create(t, e.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	create(t, e.c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runner-token"}, Data: map[string][]byte{"token": []byte(rn.Token)}})
	rs := &v1alpha1.RunnerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "build"},
		Spec: v1alpha1.RunnerSetSpec{
			ClassName: e.class,
			Tags:      []string{ns},
			GitLab:    v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "runner-token"}},
			Managers: v1alpha1.ManagerSpec{
				Replicas: ptr.To(replicas), Concurrent: concurrent,
				ShutdownTimeout: &metav1.Duration{Duration: shutdown},
			},
		},
	}
	create(t, e.c, rs)
	tm := &team{ns: ns, tag: ns, token: rn.Token, rs: rs}
	e.waitManagers(tm, int(replicas), 4*time.Minute)
	return tm
}

// managers lists the team's manager pods.
func (e *nodeEnv) managers(tm *team) []corev1.Pod {
	pods := &corev1.PodList{}
	if err := e.c.List(context.Background(), pods, client.InNamespace(tm.ns), client.MatchingLabels{resources.LabelComponent: resources.ComponentManager}); err != nil {
		e.t.Fatal(err)
	}
	return pods.Items
}

// waitManagers waits until n manager pods run Ready on the real node and no
// other exists.
func (e *nodeEnv) waitManagers(tm *team, n int, timeout time.Duration) {
	e.t.Helper()
	waitFor(e.t, timeout, fmt.Sprintf("%d Ready managers of %s on %s", n, tm.ns, localcluster.NodeName), func() error {
		pods := e.managers(tm)
		ready := 0
		var states []string
		for _, p := range pods {
			states = append(states, podState(&p))
			if p.Spec.NodeName == localcluster.NodeName && podReady(&p) && p.DeletionTimestamp == nil {
				ready++
			}
		}
		if ready != n || len(pods) != n {
			return fmt.Errorf("%d Ready of %d pods: %s", ready, len(pods), strings.Join(states, "; "))
		}
		return nil
	})
}

func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("%s %s on %q ready=%v", p.Name, p.Status.Phase, p.Spec.NodeName, podReady(p))
	if p.DeletionTimestamp != nil {
		s += " terminating"
	}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			s += fmt.Sprintf(" %s: %s %s", cs.Name, w.Reason, w.Message)
		}
		if x := cs.State.Terminated; x != nil && x.ExitCode != 0 {
			s += fmt.Sprintf(" %s: exited %d %s", cs.Name, x.ExitCode, x.Reason)
		}
	}
	return s
}

func (e *nodeEnv) queue(tm *team, n int, d time.Duration) []int64 {
	var ids []int64
	for range n {
		ids = append(ids, e.gl.QueueJob([]string{tm.tag}, d))
	}
	return ids
}

func (e *nodeEnv) jobsOf(tm *team) []gitlabserver.Job {
	var out []gitlabserver.Job
	for _, j := range e.gl.Jobs() {
		if slices.Contains(j.Tags, tm.tag) {
			out = append(out, j)
		}
	}
	return out
}

// waitRunning waits until managers have taken n jobs of tm. A taken job
// may still wait for its pod (and for the node Karpenter brings for it).
func (e *nodeEnv) waitRunning(tm *team, n int) {
	e.t.Helper()
	waitFor(e.t, 2*time.Minute, fmt.Sprintf("%d jobs of %s running", n, tm.tag), func() error {
		running := 0
		for _, j := range e.jobsOf(tm) {
			if j.State == gitlabserver.JobRunning {
				running++
			}
		}
		if running < n {
			return fmt.Errorf("%d running", running)
		}
		return nil
	})
}

// waitInPods waits until n jobs of tm run in their own pods (their traces
// say "Running on <pod> via <node>"), and returns how long the slowest took
// from its pick. A disruption that starts before would count the pods'
// start, Karpenter bringing their nodes, against the managers' shutdown
// timeout: a drain is the same for a job waiting for its pod, only the
// time left to the job is unknown.
func (e *nodeEnv) waitInPods(tm *team, n int, timeout time.Duration) time.Duration {
	e.t.Helper()
	ran := map[int64]time.Duration{}
	waitFor(e.t, timeout, fmt.Sprintf("%d jobs of %s running in their pods", n, tm.tag), func() error {
		waiting := 0
		for _, j := range e.jobsOf(tm) {
			if _, ok := ran[j.ID]; ok || j.State != gitlabserver.JobRunning && j.State != gitlabserver.JobSuccess {
				continue
			}
			if jobPodLine.Match(j.Trace) {
				ran[j.ID] = time.Since(j.PickedAt)
			} else {
				waiting++
			}
		}
		if len(ran) < n {
			return fmt.Errorf("%d in their pods, %d waiting for one", len(ran), waiting)
		}
		return nil
	})
	var slowest time.Duration
	for _, d := range ran {
		slowest = max(slowest, d)
	}
	return slowest
}

// slowCapacity makes Karpenter's nodes for e's class register d after they
// are asked for, as a cloud's instances boot (the kwok provider's node
// registration delay on the class's KWOKNodeClass), until the returned
// function (or the end of t) puts it back. The controller leaves the change
// alone: it rewrites an object only when what it builds changes.
func (e *nodeEnv) slowCapacity(t *testing.T, d time.Duration) func() {
	t.Helper()
	nc := &kwokv1alpha1.KWOKNodeClass{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: naming.ClassCapacity(e.class)}, nc); err != nil {
		t.Fatalf("reading the node class of RunnerClass %s: %v", e.class, err)
	}
	before := nc.Spec.NodeRegistrationDelay
	patch := client.MergeFrom(nc.DeepCopy())
	nc.Spec.NodeRegistrationDelay = metav1.Duration{Duration: d}
	if err := e.c.Patch(context.Background(), nc, patch); err != nil {
		t.Fatalf("slowing the nodes of RunnerClass %s: %v", e.class, err)
	}
	var once sync.Once
	restore := func() {
		once.Do(func() {
			patch := client.MergeFrom(nc.DeepCopy())
			nc.Spec.NodeRegistrationDelay = before
			if err := e.c.Patch(context.Background(), nc, patch); err != nil {
				t.Errorf("putting back the node registration delay of RunnerClass %s: %v", e.class, err)
			}
		})
	}
	t.Cleanup(restore)
	return restore
}

// readLogs copies the real node's container logs (the evidence of a lost
// job) and reads from the managers' logs when each stopped taking jobs after
// SIGQUIT (the stand-in's own clock), by system_id ("s_" + its pod's name).
func (e *nodeEnv) readLogs() {
	e.rec.readNodeLogs(e.state, func(ns, pod, line string) {
		// CRI log line: <time> <stream> <tag> <message>; the message
		// is the stand-in's "<time> standin: SIGQUIT: ...".
		fields := strings.Fields(line)
		if len(fields) > 5 && fields[4] == "standin:" && fields[5] == standin.DrainLine+":" {
			if ts, err := time.Parse(time.RFC3339Nano, fields[3]); err == nil {
				e.mu.Lock()
				e.drains["s_"+pod] = drain{ns: ns, at: ts}
				e.mu.Unlock()
			}
		}
	})
}

// drainTimes returns the drain times of the managers of ns seen so far.
func (e *nodeEnv) drainTimes(ns string) map[string]time.Time {
	e.readLogs()
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]time.Time{}
	for id, d := range e.drains {
		if d.ns == ns {
			out[id] = d.at
		}
	}
	return out
}

// jobPodLine is the stand-in's log line naming the job's pod and its node.
var jobPodLine = regexp.MustCompile(`Running on \S+ via (\S+)\.\.\.`)

// lostJobs waits until no job of tm runs (up to timeout), then returns what
// went wrong: a job that failed, one still running or picked by nobody, and
// one a manager took after it was told to drain.
func (e *nodeEnv) lostJobs(tm *team, timeout time.Duration) []lostJob {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		busy := false
		for _, j := range e.jobsOf(tm) {
			busy = busy || j.State == gitlabserver.JobRunning || j.State == gitlabserver.JobPending
		}
		if !busy {
			break
		}
		time.Sleep(time.Second)
	}
	drains := e.drainTimes(tm.ns)
	var lost []lostJob
	add := func(j gitlabserver.Job, format string, args ...any) {
		lost = append(lost, lostJob{id: j.ID, problem: fmt.Sprintf(format, args...)})
	}
	for _, j := range e.jobsOf(tm) {
		switch j.State {
		case gitlabserver.JobSuccess:
			// The job ran in a pod of its own, on capacity Karpenter
			// made for the tag, never beside the managers.
			if m := jobPodLine.FindSubmatch(j.Trace); m == nil || string(m[1]) == localcluster.NodeName {
				add(j, "job %d succeeded but did not run in a job pod on a Karpenter node: %q", j.ID, j.Trace)
			}
		case gitlabserver.JobFailed:
			add(j, "job %d (%s, on %s) failed: %s", j.ID, j.Duration, j.SystemID, j.FailureReason)
		case gitlabserver.JobRunning:
			add(j, "job %d (%s, on %s) never reported its end: its manager is gone", j.ID, j.Duration, j.SystemID)
		case gitlabserver.JobPending:
			add(j, "job %d (%s) was never picked up", j.ID, j.Duration)
		}
		if d, ok := drains[j.SystemID]; ok && j.PickedAt.After(d) {
			add(j, "job %d was picked up by %s at %s, after it was told to drain at %s",
				j.ID, j.SystemID, j.PickedAt.Format(time.RFC3339Nano), d.Format(time.RFC3339Nano))
		}
	}
	return lost
}

func (e *nodeEnv) deployment(tm *team) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: tm.ns, Name: naming.For(tm.ns, "build").Managers()}, d); err != nil {
		e.t.Fatal(err)
	}
	return d
}

func (e *nodeEnv) patchConcurrent(tm *team, n int32) {
	rs := &v1alpha1.RunnerSet{}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(tm.rs), rs); err != nil {
		e.t.Fatal(err)
	}
	patch := client.MergeFrom(rs.DeepCopy())
	rs.Spec.Managers.Concurrent = n
	if err := e.c.Patch(context.Background(), rs, patch); err != nil {
		e.t.Fatal(err)
	}
}

// waitRolledOut waits until the Deployment's every replica runs the newest
// template and no old manager remains.
func (e *nodeEnv) waitRolledOut(tm *team, replicas int, oldPods []string, timeout time.Duration) {
	e.t.Helper()
	waitFor(e.t, timeout, "the managers of "+tm.ns+" rolled out", func() error {
		d := e.deployment(tm)
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != int32(replicas) || d.Status.AvailableReplicas != int32(replicas) || d.Status.Replicas != int32(replicas) {
			return fmt.Errorf("deployment status %+v", d.Status)
		}
		for _, p := range e.managers(tm) {
			if slices.Contains(oldPods, p.Name) {
				return fmt.Errorf("old manager %s still there: %s", p.Name, podState(&p))
			}
		}
		return nil
	})
}

// release deletes a team's RunnerSet once its test is done, so that later
// tests (the drain) find only their own managers on the node.
func (e *nodeEnv) release(tm *team) {
	if err := e.c.Delete(context.Background(), tm.rs); err != nil && !apierrors.IsNotFound(err) {
		e.t.Errorf("deleting RunnerSet %s: %v", tm.ns, err)
	}
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

func longest(jobs []gitlabserver.Job) time.Duration {
	var m time.Duration
	for _, j := range jobs {
		m = max(m, j.Duration)
	}
	return m
}

func TestRealNodeManagersLoseNoJob(t *testing.T) {
	onRealNode(t)
	e := startNodeEnv(t)
	ctx := context.Background()
	const replicas, concurrent = 2, 2
	jobLen := 25 * time.Second

	t.Run("NetworkPolicies keep jobs from other teams and from the managers", func(t *testing.T) {
		e.proveNetworkIsolation(t)
	})
	t.Run("a config change rolls every manager", func(t *testing.T) {
		tm := e.newTeam("rollout", replicas, concurrent, 2*time.Minute)
		e.collectOnFailure(t, tm)
		e.queue(tm, replicas*concurrent, jobLen)
		e.waitRunning(tm, replicas*concurrent)
		old := podNames(e.managers(tm))
		start := time.Now()
		e.patchConcurrent(tm, concurrent+1)
		// Jobs keep coming during the rollout: the new managers take them.
		e.queue(tm, 4, 5*time.Second)
		e.waitRolledOut(tm, replicas, old, 5*time.Minute)
		t.Logf("rollout of %d managers took %s; longest job %s", replicas, time.Since(start).Round(time.Millisecond), longest(e.jobsOf(tm)))
		e.expectNoLostJob(t, tm, 3*time.Minute, "in the rollout")
		if d := e.drainTimes(tm.ns); len(d) != len(old) {
			t.Errorf("%d managers logged their drain, want %d (%v)", len(d), len(old), d)
		}
		e.release(tm)
	})

	t.Run("the controller is killed and restarted mid-rollout", func(t *testing.T) {
		tm := e.newTeam("restart", replicas, concurrent, 2*time.Minute)
		e.collectOnFailure(t, tm)
		e.queue(tm, replicas*concurrent, jobLen)
		e.waitRunning(tm, replicas*concurrent)
		old := podNames(e.managers(tm))
		e.patchConcurrent(tm, concurrent+1)
		waitFor(t, time.Minute, "the rollout started", func() error {
			if d := e.deployment(tm); d.Status.UpdatedReplicas == 0 {
				return fmt.Errorf("no updated replica yet")
			}
			return nil
		})
		if err := e.cl.StopProcess(localcluster.Controller, 0); err != nil {
			t.Fatal(err)
		}
		e.queue(tm, 2, 5*time.Second)
		time.Sleep(3 * time.Second)
		e.startController()
		e.waitRolledOut(tm, replicas, old, 5*time.Minute)
		e.expectNoLostJob(t, tm, 3*time.Minute, "while the controller restarted mid-rollout")
		e.release(tm)
	})

	t.Run("kubectl drain of the node", func(t *testing.T) {
		// Capacity is slow here: Karpenter's nodes register 45 s after
		// they are asked for, as a cloud's instances boot, and the
		// managers may take 1 minute to drain. A drain started as soon as
		// the managers took the jobs, with their pods still waiting for
		// nodes, would outlast that minute (45 s and more to a pod, 40 s of
		// job): the kubelet's SIGTERM would abort the jobs. The first
		// version of this test did start so, and lost a job one run in
		// three wherever Karpenter was slow. The drain starts once every
		// job runs in its pod: the time left to each (40 s at most) is
		// then within the grace, and a lost job is the drain's. (Checked:
		// drained at the pick, with the nodes slow until the end, this
		// subtest lost all four jobs, "aborted: the runner was stopped
		// (SIGTERM)" 60 s after each eviction.)
		const shutdown, registration, drainJob = time.Minute, 45 * time.Second, 40 * time.Second
		tm := e.newTeam("drain", replicas, concurrent, shutdown)
		e.collectOnFailure(t, tm)
		restore := e.slowCapacity(t, registration)
		e.queue(tm, replicas*concurrent, drainJob)
		e.waitRunning(tm, replicas*concurrent)
		slowest := e.waitInPods(tm, replicas*concurrent, 4*time.Minute)
		restore()
		t.Logf("the %d jobs run in their pods, the slowest %s after its pick (nodes register after %s; shutdown timeout %s, jobs %s)",
			replicas*concurrent, slowest.Round(time.Millisecond), registration, shutdown, drainJob)
		if slowest < registration {
			t.Errorf("a job ran in its pod %s after its pick, before its node could register (%s): the slow capacity this proof needs is not in place", slowest, registration)
		}
		old := podNames(e.managers(tm))
		kubectl := filepath.Join(e.cl.State.Assets, "kubectl")
		dctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
		defer cancel()
		drain := exec.CommandContext(dctx, kubectl, "--kubeconfig", e.cl.Kubeconfig, "drain", localcluster.NodeName,
			"--ignore-daemonsets", "--delete-emptydir-data", "--pod-selector=app.kubernetes.io/component=manager")
		out := &strings.Builder{}
		var mu sync.Mutex
		drain.Stdout, drain.Stderr = lockedWriter{&mu, out}, lockedWriter{&mu, out}
		if err := drain.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- drain.Wait() }()
		// The node is cordoned: the first evicted manager's replacement
		// cannot start, and the PDB holds the other one.
		waitFor(t, time.Minute, "one manager evicted", func() error {
			n := 0
			for _, p := range e.managers(tm) {
				if p.DeletionTimestamp != nil {
					n++
				}
			}
			if n == 0 {
				return fmt.Errorf("none terminating")
			}
			return nil
		})
		time.Sleep(10 * time.Second)
		terminating := 0
		for _, p := range e.managers(tm) {
			if p.DeletionTimestamp != nil && slices.Contains(old, p.Name) {
				terminating++
			}
		}
		if terminating != 1 {
			t.Errorf("%d old managers terminating while no replacement is Ready; the PDB allows one", terminating)
		}
		// New capacity for managers: the node takes pods again.
		node := &corev1.Node{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: localcluster.NodeName}, node); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Unschedulable = false
		if err := e.c.Patch(ctx, node, patch); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			mu.Lock()
			t.Logf("kubectl drain: %v\n%s", err, out.String())
			mu.Unlock()
			if err != nil {
				t.Errorf("kubectl drain failed: %v", err)
			}
		case <-dctx.Done():
			t.Fatalf("kubectl drain did not finish")
		}
		e.waitManagers(tm, replicas, 4*time.Minute)
		for _, p := range e.managers(tm) {
			if slices.Contains(old, p.Name) {
				t.Errorf("manager %s survived the drain", p.Name)
			}
		}
		e.expectNoLostJob(t, tm, 3*time.Minute, "in the drain")
	})

	t.Run("the RunnerSet is deleted", func(t *testing.T) {
		tm := e.newTeam("delete", replicas, concurrent, 2*time.Minute)
		e.collectOnFailure(t, tm)
		e.queue(tm, replicas*concurrent, jobLen)
		e.waitRunning(tm, replicas*concurrent)
		// As in the drain: the deletion starts once the jobs run.
		e.waitInPods(tm, replicas*concurrent, 4*time.Minute)
		start := time.Now()
		if err := e.c.Delete(ctx, tm.rs); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 4*time.Minute, "RunnerSet deleted", func() error {
			err := e.c.Get(ctx, client.ObjectKeyFromObject(tm.rs), &v1alpha1.RunnerSet{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
		t.Logf("RunnerSet deleted in %s (longest job %s)", time.Since(start).Round(time.Millisecond), jobLen)
		e.expectNoLostJob(t, tm, time.Minute, "when the RunnerSet was deleted")
	})

	// Issue 32: a manager killed outright (SIGKILL: no preStop, no
	// clean-up) leaves its job pods Running with no process that will ever
	// delete them. Deleting the RunnerSet must still finish: once no
	// manager pod is left, the controller deletes those pods after
	// spec.managers.orphanedJobGracePeriod, with a Warning Event each.
	// Negative control, in the same RunnerSet: with a 48h grace it stays
	// Deleting, its orphaned job pods Running, for as long as we watch (as
	// every RunnerSet did before the controller deleted orphans); only
	// then is the grace shortened.
	t.Run("a manager killed with its job pods Running does not hold the deletion", func(t *testing.T) {
		const grace = 30 * time.Second
		tm := e.newTeam("orphans", 1, concurrent, 2*time.Minute)
		e.collectOnFailure(t, tm)
		jobsNS := naming.For(tm.ns, "build").JobsNamespace()
		jobPods := func() []corev1.Pod {
			pods := &corev1.PodList{}
			if err := e.c.List(ctx, pods, client.InNamespace(jobsNS), client.MatchingLabels{resources.LabelComponent: resources.ComponentJob}); err != nil {
				t.Fatal(err)
			}
			return pods.Items
		}
		e.queue(tm, concurrent, 10*time.Minute)
		e.waitRunning(tm, concurrent)
		waitFor(t, 2*time.Minute, "the jobs' pods Running", func() error {
			running := 0
			for _, p := range jobPods() {
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					running++
				}
			}
			if running != concurrent {
				return fmt.Errorf("%d of %d job pods Running", running, concurrent)
			}
			return nil
		})
		orphans := podNames(jobPods())

		// SIGKILL the manager's container: the kubelet restarts it, a new
		// process that knows nothing of the old one's jobs.
		mgr := e.managers(tm)
		if len(mgr) != 1 {
			t.Fatalf("%d manager pods, want 1", len(mgr))
		}
		var id string
		for _, cs := range mgr[0].Status.ContainerStatuses {
			if cs.Name == "manager" {
				id = cs.ContainerID
			}
		}
		if id == "" {
			t.Fatalf("manager pod %s has no running manager container: %s", mgr[0].Name, podState(&mgr[0]))
		}
		if err := e.cl.KillContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the killed manager restarted", func() error {
			for _, p := range e.managers(tm) {
				for _, cs := range p.Status.ContainerStatuses {
					if cs.Name == "manager" && cs.RestartCount > 0 && cs.State.Running != nil {
						return nil
					}
				}
			}
			return fmt.Errorf("not yet: %v", podNames(e.managers(tm)))
		})
		if got := podNames(jobPods()); !slices.Equal(got, orphans) {
			t.Fatalf("job pods %v after the manager was killed, want %v still there: the proof needs pods no manager will delete", got, orphans)
		}

		setGrace := func(d time.Duration) {
			rs := &v1alpha1.RunnerSet{}
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(tm.rs), rs); err != nil {
				t.Fatal(err)
			}
			patch := client.MergeFrom(rs.DeepCopy())
			rs.Spec.Managers.OrphanedJobGracePeriod = &metav1.Duration{Duration: d}
			if err := e.c.Patch(ctx, rs, patch); err != nil {
				t.Fatal(err)
			}
		}
		setGrace(48 * time.Hour)
		if err := e.c.Delete(ctx, tm.rs); err != nil {
			t.Fatal(err)
		}
		// The restarted manager drains at once (it runs no job); then only
		// the orphans are left.
		waitFor(t, 2*time.Minute, "the managers gone and the orphans named", func() error {
			if n := len(e.managers(tm)); n > 0 {
				return fmt.Errorf("%d manager pods left", n)
			}
			rs := &v1alpha1.RunnerSet{}
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(tm.rs), rs); err != nil {
				return err
			}
			c := meta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Reason != v1alpha1.ReasonDeleting || !strings.Contains(c.Message, fmt.Sprintf("0 manager pods and %d orphaned job pods left", len(orphans))) {
				return fmt.Errorf("Ready %+v", c)
			}
			return nil
		})
		time.Sleep(time.Minute)
		if got := podNames(jobPods()); !slices.Equal(got, orphans) {
			t.Errorf("negative control: with a 48h grace the orphans are %v after a minute, want %v still Running", got, orphans)
		}
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(tm.rs), &v1alpha1.RunnerSet{}); err != nil {
			t.Errorf("negative control: with a 48h grace the RunnerSet did not stay Deleting: %v", err)
		}

		// The grace, counted from when the last manager went, is now
		// shorter than the time already waited: the pods go at once.
		start := time.Now()
		setGrace(grace)
		waitFor(t, grace+2*time.Minute, "RunnerSet deleted", func() error {
			err := e.c.Get(ctx, client.ObjectKeyFromObject(tm.rs), &v1alpha1.RunnerSet{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v; job pods %v", err, podNames(jobPods()))
		})
		t.Logf("RunnerSet deleted %s after its grace was shortened to %s", time.Since(start).Round(time.Millisecond), grace)
		events := &eventsv1.EventList{}
		if err := e.c.List(ctx, events, client.InNamespace(tm.ns)); err != nil {
			t.Fatal(err)
		}
		named := map[string]bool{}
		for _, ev := range events.Items {
			if ev.Reason == v1alpha1.ReasonOrphanedJobPodDeleted && ev.Type == corev1.EventTypeWarning {
				for _, o := range orphans {
					if strings.Contains(ev.Note, jobsNS+"/"+o) {
						named[o] = true
					}
				}
			}
		}
		if len(named) != len(orphans) {
			t.Errorf("OrphanedJobPodDeleted Events name %v, want every one of %v", named, orphans)
		}
	})

	t.Run("a job longer than the shutdown timeout is named as lost", func(t *testing.T) {
		tm := e.newTeam("overrun", 1, 1, time.Minute)
		e.collectOnFailure(t, tm)
		ids := e.queue(tm, 1, 10*time.Minute)
		e.waitRunning(tm, 1)
		if err := e.c.Delete(ctx, tm.rs); err != nil {
			t.Fatal(err)
		}
		lost := e.lostJobs(tm, 90*time.Second)
		e.logEvidence(t, tm, lost)
		got := problems(lost)
		want := fmt.Sprintf("job %d (10m0s, on s_", ids[0])
		// At the end of the grace period the kubelet sends SIGTERM (the
		// stand-in aborts the job and reports it failed, as gitlab-runner
		// does), then SIGKILL (the job never reports its end).
		if len(got) != 1 || !strings.Contains(got[0], want) ||
			!strings.Contains(got[0], "failed: runner_system_failure") && !strings.Contains(got[0], "never reported its end") {
			t.Errorf("a 10m job on a manager with a 1m shutdown timeout, deleted: problems %q, want one naming job %d as lost", got, ids[0])
		}
		t.Logf("named as lost: %s", got)
	})

	t.Run("negative control: SIGTERM and a short grace period lose jobs", func(t *testing.T) {
		tm := e.newTeam("control", 1, concurrent, 2*time.Minute)
		e.collectOnFailure(t, tm)
		// A second runner and a copy of the managers without the preStop
		// drain, with a 3s grace period: the image's own stop signal
		// (SIGTERM) ends them.
		rn := e.gl.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"control-sigterm"}})
		// The controller's config.toml (a Secret holding the token), with
		// the second runner's token.
		cfg := &corev1.Secret{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: tm.ns, Name: naming.For(tm.ns, "build").Config()}, cfg); err != nil {
			t.Fatal(err)
		}
		toml := string(cfg.Data["config.toml"])
		if !strings.Contains(toml, tm.token) {
			t.Fatalf("the managers' config.toml does not hold the runner's token")
		}
		create(t, e.c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: "sigterm-config"},
			Data: map[string][]byte{"config.toml": []byte(strings.ReplaceAll(toml, tm.token, rn.Token))}})
		ours := e.deployment(tm)
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: "sigterm-managers"}}
		d.Spec = *ours.Spec.DeepCopy()
		sel := map[string]string{naming.LabelName: "sigterm-managers"}
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
		d.Spec.Template.Labels = sel
		d.Spec.Replicas = ptr.To[int32](1)
		d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3)
		for i := range d.Spec.Template.Spec.Containers {
			d.Spec.Template.Spec.Containers[i].Lifecycle = nil
		}
		swapped := 0
		for i, v := range d.Spec.Template.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == cfg.Name {
				d.Spec.Template.Spec.Volumes[i].Secret.SecretName = "sigterm-config"
				swapped++
			}
		}
		if swapped != 1 {
			t.Fatalf("the manager Deployment mounts its config Secret %s %d times, want once", cfg.Name, swapped)
		}
		create(t, e.c, d)
		ctl := &team{ns: tm.ns, tag: "control-sigterm"}
		for _, id := range e.queue(ctl, concurrent, jobLen) {
			_ = id
		}
		e.waitRunning(ctl, concurrent)
		pods := &corev1.PodList{}
		if err := e.c.List(ctx, pods, client.InNamespace(tm.ns), client.MatchingLabels(sel)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if err := e.c.Delete(ctx, &p); err != nil {
				t.Fatal(err)
			}
		}
		lost := e.lostJobs(ctl, time.Minute)
		t.Logf("the negative control lost:\n  %s", strings.Join(problems(lost), "\n  "))
		if len(lost) == 0 {
			t.Errorf("managers stopped with SIGTERM and a 3s grace period lost no job: the proofs above could not fail")
		}
		// Its evidence outlives the manager's pod: the job's trace, the
		// manager's log (the kubelet deleted it with the pod) and the
		// job pod's life.
		for _, l := range lost {
			ev := e.evidence(ctl, l.id)
			t.Log(ev)
			for _, want := range []string{"Running with gitlab-runner", "standin: started: system_id s_sigterm-managers-", "its life:\n    "} {
				if !strings.Contains(ev, want) {
					t.Errorf("the evidence of lost job %d does not hold %q", l.id, want)
				}
			}
			if strings.Contains(ev, "job pod: none was ever seen") {
				t.Errorf("the evidence of lost job %d has no job pod", l.id)
			}
		}
		if err := e.c.Delete(ctx, d); err != nil {
			t.Fatal(err)
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func httpGet(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// A kubelet that cannot start: Up says so with the kubelet's log, and
// stops what it started, leaving no process, mount, cgroup or bridge.
func TestRealNodeWhoseKubeletFailsLeavesNothing(t *testing.T) {
	onRealNode(t)
	root := repoRoot(t)
	good := os.Getenv("RUNNERFLEET_LOCAL_ASSETS")
	if good == "" {
		good = strings.TrimSpace(run(t, root, 60*time.Minute, filepath.Join(root, "hack", "tools.sh"), "local"))
	}
	assets := t.TempDir()
	ents, err := os.ReadDir(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Symlink(filepath.Join(good, e.Name()), filepath.Join(assets, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	// The real kubelet, with a flag it refuses: it exits at once.
	kubelet := filepath.Join(assets, localcluster.Kubelet)
	os.Remove(kubelet)
	script := "#!/bin/sh\nexec " + filepath.Join(good, localcluster.Kubelet) + " --no-such-flag \"$@\"\n"
	if err := os.WriteFile(kubelet, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	state := stateDir(t)
	_, err = localcluster.Up(context.Background(), localcluster.Options{
		Dir: state, Name: "e2efail", RepoRoot: root, Assets: assets, Node: true,
		Log: &logWriter{t: t, prefix: "localcluster: "},
	})
	if err == nil {
		localcluster.Down(context.Background(), state)
		t.Fatal("Up succeeded with a kubelet that cannot start")
	}
	t.Logf("Up: %v", err)
	for _, want := range []string{"starting the kubelet", "no-such-flag", localcluster.LogFile(state, localcluster.Kubelet)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Up's error does not say %q", want)
		}
	}
	if out, _ := exec.Command("pgrep", "-fa", state).Output(); len(out) > 0 {
		t.Errorf("processes of %s still run after the failed Up:\n%s", state, out)
	}
	if m := localcluster.NodeMounts(state); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if cg := localcluster.NodeCgroups("e2efail"); len(cg) > 0 {
		t.Errorf("cgroups left: %v", cg)
	}
	if _, err := net.InterfaceByName(localcluster.Bridge); err == nil {
		t.Errorf("bridge %s left behind", localcluster.Bridge)
	}
}
