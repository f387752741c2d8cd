package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
	"github.com/runnerfleet/runnerfleet/stacks"
)

// fakeClock: sleeping moves the clock on at once, so a wait of minutes
// runs in a moment against a real API server.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return nil
}

// drainFixture is a RunnerSet of the local stack's first team, in its own
// namespace, held by the controller's finalizer (no controller runs), with
// a manager pod on a Ready node and a job pod of GitLab job 12 in its jobs
// namespace on a node that is gone. envtest runs no kubelet: a deleted pod
// on a node keeps its deletionTimestamp for good, as on a node whose
// kubelet is dead.
type drainFixture struct {
	rs          *v1alpha1.RunnerSet
	manager     *corev1.Pod
	job         *corev1.Pod
	jobsNS      string
	labels      map[string]string
	managerNode string
}

func newDrainFixture(ctx context.Context, t *testing.T, c client.Client, ns string, labels map[string]string, finalizers ...string) *drainFixture {
	t.Helper()
	v, err := parseStack(stackLocal, must(stacks.Config(stackLocal)))
	if err != nil {
		t.Fatal(err)
	}
	team := v.fleet.Teams[0]
	team.Namespace = ns
	rs := kube.RunnerSet(team, v.fleet.ClusterName)
	rs.Labels = labels
	if len(finalizers) == 0 {
		finalizers = []string{controller.Finalizer}
	}
	rs.Finalizers = finalizers
	f := &drainFixture{rs: rs, jobsNS: rs.Names().JobsNamespace(), labels: labels, managerNode: "node-" + ns}
	for _, n := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		{ObjectMeta: metav1.ObjectMeta{Name: f.jobsNS, Labels: map[string]string{resources.LabelOwnerNamespace: ns, resources.LabelOwnerName: rs.Name}}},
	} {
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.managerNode}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	pod := func(namespace, name, component, node string, extra map[string]string) *corev1.Pod {
		l := map[string]string{resources.LabelRunnerSet: rs.Name, resources.LabelComponent: component}
		for k, v := range extra {
			l[k] = v
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: l},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](300),
				Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c:1"}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = ptr.To(metav1.Now())
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f.manager = pod(ns, "build-manager-7c9d-x2x4q", resources.ComponentManager, f.managerNode, nil)
	f.job = pod(f.jobsNS, "runner-build-job-12-abcde", resources.ComponentJob, "kwok-gone-"+ns, map[string]string{jobIDKey: "12"})
	return f
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func startEnv(t *testing.T) (*testenv.Env, context.Context) {
	t.Helper()
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return env, ctx
}

func testDrainer(c client.Client, log *bytes.Buffer, clk *fakeClock, labels map[string]string) *drainer {
	d := newDrainer(c, log, downOptions{stall: 3 * time.Minute, timeout: 30 * time.Minute})
	d.now, d.sleep = clk.now, clk.sleep
	d.sel = []client.ListOption{client.MatchingLabels(labels)}
	d.again, d.force = "fleet down --stack local", "fleet down --stack local --force"
	d.kept = "The control plane keeps running"
	return d
}

var graceLeftRE = regexp.MustCompile(`manager pod \S+ on node \S+: stopping, (\S+) of its 5m0s grace left`)

// fleet down says what holds the drain while it waits (the RunnerSet and
// its Ready message, the manager pod and how long its grace has left, the
// job pod and its job), repeats it every minute with the grace going down,
// keeps waiting while a pod is within its grace, and then stops naming
// what is left, the command to go on and the one to force, with the job
// that forcing fails.
func TestDrainSaysWhatItWaitsForAndStopsNamingTheNextCommand(t *testing.T) {
	env, ctx := startEnv(t)
	c := env.Client

	t.Run("a drain held by its pods", func(t *testing.T) {
		labels := map[string]string{"test": "held"}
		f := newDrainFixture(ctx, t, c, "team-held", labels)
		clk := &fakeClock{t: time.Now()}
		var log bytes.Buffer
		d := testDrainer(c, &log, clk, labels)
		d.controllerDown = func(context.Context) string { return "" }
		// The controller would scale the managers to zero; the ReplicaSet
		// deletes the pod with its grace.
		if err := c.Delete(ctx, f.manager); err != nil {
			t.Fatal(err)
		}
		err := d.run(ctx, false)
		var stopped *stoppedError
		if !errors.As(err, &stopped) {
			t.Fatalf("fleet down did not stop with what is left: %v\n%s", err, log.String())
		}
		out := log.String()
		t.Logf("log:\n%s\nerror:\n%v", out, err)
		for _, want := range []string{
			"Deleting RunnerSet team-held/build",
			"RunnerSet team-held/build: deleting for",
			"held by the controller's finalizer " + controller.Finalizer,
			"manager pod team-held/build-manager-7c9d-x2x4q on node " + f.managerNode + ": stopping,",
			"job pod " + f.jobsNS + "/runner-build-job-12-abcde (job 12) on node kwok-gone-team-held: Running for",
			"node kwok-gone-team-held no longer exists",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the progress does not say %q", want)
			}
		}
		// The grace is the pod's own (the API server put the end of it in
		// the deletionTimestamp), and it goes down from report to report.
		var left []time.Duration
		for _, m := range graceLeftRE.FindAllStringSubmatch(out, -1) {
			left = append(left, must(time.ParseDuration(m[1])))
		}
		if len(left) < 4 {
			t.Fatalf("want a report a minute with the grace left while the pod is within its 5m grace, got %v", left)
		}
		if left[0] > 5*time.Minute || left[0] < 4*time.Minute+50*time.Second {
			t.Errorf("first grace left %s, want about the pod's 5m grace", left[0])
		}
		for i := 1; i < len(left); i++ {
			if left[i] >= left[i-1] {
				t.Errorf("grace left %v does not go down", left)
			}
		}
		msg := err.Error()
		for _, want := range []string{
			"nothing changed for", "no pod is within its grace",
			"RunnerSet team-held/build",
			"manager pod team-held/build-manager-7c9d-x2x4q", "past its 5m0s grace",
			"job pod " + f.jobsNS + "/runner-build-job-12-abcde (job 12)",
			"no manager of team-held/build is left to end it",
			"The control plane keeps running",
			"fleet down --stack local\n", "fleet down --stack local --force\n",
			"this job fails: job 12 (pod " + f.jobsNS + "/runner-build-job-12-abcde)",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("the stop message does not say %q", want)
			}
		}
		// It waited while the pod was within its grace (5m), past the
		// 3m of --stall-timeout.
		if el := clk.now().Sub(f.manager.CreationTimestamp.Time); el < 5*time.Minute {
			t.Errorf("stopped after %s, while the manager was within its 5m grace", el)
		}
		if rs := (&v1alpha1.RunnerSet{}); c.Get(ctx, client.ObjectKeyFromObject(f.rs), rs) != nil || rs.DeletionTimestamp == nil {
			t.Errorf("the RunnerSet should be left deleting, %v", rs.DeletionTimestamp)
		}

		// Within the pod's grace, --timeout stops it, and the message
		// says how long to wait for the grace to end.
		clk = &fakeClock{t: time.Now()}
		d = testDrainer(c, &log, clk, labels)
		d.timeout = 2 * time.Minute
		err = d.wait(ctx)
		if err == nil || !strings.Contains(err.Error(), "the RunnerSets still drain after 2m0s (--timeout); a pod has") ||
			!strings.Contains(err.Error(), "of its grace left: fleet down --stack local --timeout") {
			t.Errorf("a stop at --timeout within a pod's grace: %v", err)
		}
	})

	t.Run("a drain whose controller does not run", func(t *testing.T) {
		labels := map[string]string{"test": "nocontroller"}
		f := newDrainFixture(ctx, t, c, "team-noctl", labels)
		if err := c.Delete(ctx, f.job, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		ns := "ctl-noctl"
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		o := install.Defaults()
		o.Namespace = ns
		dep := install.Deployment(o)
		if err := c.Create(ctx, dep); err != nil {
			t.Fatal(err)
		}
		clk := &fakeClock{t: time.Now()}
		var log bytes.Buffer
		d := testDrainer(c, &log, clk, labels)
		d.stall = time.Hour // only the controller can stop it early
		d.controllerDown = func(ctx context.Context) string { return deploymentDown(ctx, c, ns) }
		start := clk.now()
		err := d.run(ctx, false)
		var stopped *stoppedError
		if !errors.As(err, &stopped) {
			t.Fatalf("fleet down did not stop: %v\n%s", err, log.String())
		}
		msg := err.Error()
		for _, want := range []string{
			"the controller has not run for 1m0s", "Deployment " + ns + "/" + install.Name + " has 0 of 2 ready replicas and no pod",
			"the finalizer " + controller.Finalizer + " can never be removed", "manager pod team-noctl/build-manager-7c9d-x2x4q",
			"no running job fails", "fleet down --stack local --force",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("the stop message does not say %q:\n%s", want, msg)
			}
		}
		if el := clk.now().Sub(start); el > 2*time.Minute {
			t.Errorf("stopped after %s, want within a minute or so of seeing the controller down", el)
		}

		// Negative control: with its controller ready, the same drain
		// does not stop for the controller.
		if err := testenv.MarkAvailable(ctx, c, dep); err != nil {
			t.Fatal(err)
		}
		d.timeout = 5 * time.Minute
		err = d.wait(ctx)
		if err == nil || strings.Contains(err.Error(), "the controller has not run") || !strings.Contains(err.Error(), "--timeout") {
			t.Errorf("with the controller ready, want a stop at --timeout only: %v", err)
		}
	})

	t.Run("a finalizer runnerfleet does not own, forced", func(t *testing.T) {
		labels := map[string]string{"test": "foreign"}
		f := newDrainFixture(ctx, t, c, "team-foreign", labels, "example.com/hold")
		for _, p := range []*corev1.Pod{f.manager, f.job} {
			if err := c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
		}
		clk := &fakeClock{t: time.Now()}
		var log bytes.Buffer
		d := testDrainer(c, &log, clk, labels)
		err := d.run(ctx, false)
		if err == nil || !strings.Contains(err.Error(), "held by finalizer example.com/hold, which runnerfleet does not own") {
			t.Fatalf("want a stop naming the foreign finalizer: %v", err)
		}
		log.Reset()
		if err := d.run(ctx, true); err != nil {
			t.Fatalf("fleet down --force: %v\n%s", err, log.String())
		}
		if !strings.Contains(log.String(), "Removed the finalizers example.com/hold of RunnerSet team-foreign/build") {
			t.Errorf("--force does not say which finalizer it removed:\n%s", log.String())
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(f.rs), &v1alpha1.RunnerSet{}); !apierrors.IsNotFound(err) {
			t.Errorf("the RunnerSet after --force: %v", err)
		}
	})

	t.Run("fleet up stops on a RunnerSet that is being deleted", func(t *testing.T) {
		labels := map[string]string{"test": "up"}
		f := newDrainFixture(ctx, t, c, "team-up", labels)
		if err := c.Delete(ctx, f.rs); err != nil {
			t.Fatal(err)
		}
		clk := &fakeClock{t: time.Now()}
		var log bytes.Buffer
		w := newReadyWait(c, []client.ObjectKey{client.ObjectKeyFromObject(f.rs)}, 3*time.Minute, &log)
		w.now, w.sleep = clk.now, clk.sleep
		w.status, w.again, w.down = "fleet status --kubeconfig k", "fleet up --kubeconfig k --timeout 10m", "fleet down --kubeconfig k"
		start := clk.now()
		err := w.wait(ctx)
		var stopped *stoppedError
		if !errors.As(err, &stopped) {
			t.Fatalf("fleet up did not stop: %v", err)
		}
		for _, want := range []string{"RunnerSet team-up/build is being deleted", controller.Finalizer, "cannot become Ready until its deletion ends",
			"fleet down --kubeconfig k\n", "fleet up --kubeconfig k --timeout 10m"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the stop message does not say %q:\n%v", want, err)
			}
		}
		if clk.now() != start {
			t.Errorf("waited %s for a RunnerSet that cannot become Ready", clk.now().Sub(start))
		}
	})

	t.Run("fleet up stops when the controller does not run", func(t *testing.T) {
		labels := map[string]string{"test": "upctl"}
		f := newDrainFixture(ctx, t, c, "team-upctl", labels)
		clk := &fakeClock{t: time.Now()}
		var log bytes.Buffer
		w := newReadyWait(c, []client.ObjectKey{client.ObjectKeyFromObject(f.rs)}, 30*time.Minute, &log)
		w.now, w.sleep = clk.now, clk.sleep
		down := "Deployment runnerfleet-system/runnerset-controller has 0 of 1 ready replicas; pod runnerset-controller-1: ImagePullBackOff"
		w.controllerDown = func(context.Context) string { return down }
		w.status, w.again, w.down = "fleet status --kubeconfig k", "fleet up --kubeconfig k --timeout 10m", "fleet down --kubeconfig k"
		err := w.wait(ctx)
		var stopped *stoppedError
		if !errors.As(err, &stopped) {
			t.Fatalf("fleet up did not stop: %v", err)
		}
		for _, want := range []string{"the controller has not run for 1m0s", "ImagePullBackOff", "Not Ready:\n  RunnerSet team-upctl/build: no Ready condition yet",
			"fleet status --kubeconfig k", "fleet up --kubeconfig k --timeout 10m", "fleet down --kubeconfig k"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the stop message does not say %q:\n%v", want, err)
			}
		}
		if !strings.Contains(log.String(), "Still waiting for 1 RunnerSet to be Ready") {
			t.Errorf("no progress while waiting:\n%s", log.String())
		}
	})
}

// fleet down --kubeconfig on a drain that cannot finish (a job pod no
// manager is left to end, no controller) stops with exit code 3 naming
// what is left and --force; fleet down --force deletes the pods at once,
// names the job that fails, removes the finalizer and takes the stack
// down; and on a cluster without runnerfleet's CRDs fleet down says that
// nothing of the stack is there and how to point it at the right cluster.
func TestFleetDownKubeconfigStopsThenForces(t *testing.T) {
	env, ctx := startEnv(t)
	c := env.Client
	kc := kubeconfigFor(t, env.Config, "")
	s := &clusterStack{name: stackLocal}
	f := newDrainFixture(ctx, t, c, "team-a", s.labels())
	if err := c.Delete(ctx, f.manager, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	err := run(ctx, []string{"down", "--kubeconfig", kc, "--context", "ci", "--timeout", "1s"}, &out, &errOut)
	var stopped *stoppedError
	if !errors.As(err, &stopped) {
		t.Fatalf("fleet down on a stuck drain: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{
		"RunnerSet team-a/build", "job pod " + f.jobsNS + "/runner-build-job-12-abcde (job 12)", "no manager of team-a/build is left to end it",
		"The controller and the rest of the stack stay in the cluster",
		"fleet down --stack local --kubeconfig " + kc + " --context ci\n",
		"fleet down --stack local --kubeconfig " + kc + " --context ci --force\n",
		"this job fails: job 12",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the stop message does not say %q:\n%v", want, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(f.rs), &v1alpha1.RunnerSet{}); err != nil {
		t.Errorf("without --force the RunnerSet must stay: %v", err)
	}

	errOut.Reset()
	if err := run(ctx, []string{"down", "--kubeconfig", kc, "--context", "ci", "--force"}, &out, &errOut); err != nil {
		t.Fatalf("fleet down --force: %v\n%s", err, errOut.String())
	}
	t.Logf("fleet down --force:\n%s", errOut.String())
	for _, want := range []string{
		"Forcing fleet down of 1 RunnerSet: this job fails: job 12 (pod " + f.jobsNS + "/runner-build-job-12-abcde)",
		"Deleted job pod " + f.jobsNS + "/runner-build-job-12-abcde (job 12) at once",
		"The controller does not run (there is no Deployment runnerfleet-system/" + install.Name + ")",
		"Removed the finalizers " + controller.Finalizer + " of RunnerSet team-a/build. Left behind:",
		"its jobs namespace " + f.jobsNS,
		"The local stack is down",
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("fleet down --force does not say %q", want)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(f.rs), &v1alpha1.RunnerSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("the RunnerSet after --force: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(f.job), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("the job pod after --force: %v", err)
	}

	// A second fleet down finishes.
	errOut.Reset()
	if err := run(ctx, []string{"down", "--kubeconfig", kc, "--context", "ci"}, &out, &errOut); err != nil {
		t.Errorf("a second fleet down: %v\n%s", err, errOut.String())
	}

	// A cluster without runnerfleet's API: nothing to drain, and fleet
	// down says so.
	defs, err := crds.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	c, err = client.New(env.Config, client.Options{Scheme: scheme()})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if err := c.Delete(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: d.Name}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, d := range defs {
		for c.Get(ctx, client.ObjectKey{Name: d.Name}, &apiextensionsv1.CustomResourceDefinition{}) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not gone after a minute", d.Name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	errOut.Reset()
	if err := run(ctx, []string{"down", "--kubeconfig", kc, "--context", "ci"}, &out, &errOut); err != nil {
		t.Fatalf("fleet down on a cluster without the CRDs: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"No RunnerSet API in the cluster", "Nothing of the local stack is in the cluster at", "--kubeconfig and --context (contexts here: ci)"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("fleet down on a cluster without the CRDs does not say %q:\n%s", want, errOut.String())
		}
	}
}

// What --force costs names every job by its GitLab ID, name and URL (from
// the executor's labels and annotations), says which fail, and tells the
// pods of jobs GitLab says have ended (as in issue 32: three demo jobs had
// succeeded, their pods held the RunnerSet) from those whose job fails.
func TestForceCostNamesTheJobsThatFail(t *testing.T) {
	jobPod := func(name, id string, annotations map[string]string) podView {
		return podView{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a-build-j1", Name: name,
			Labels: map[string]string{resources.LabelComponent: resources.ComponentJob, jobIDKey: id}, Annotations: annotations}}}
	}
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
	v := &drainView{at: time.Now(), jobStates: map[string]string{"12": "success", "13": "running"}, sets: []setView{{rs: rs,
		jobs: []podView{
			jobPod("runner-job-12", "12", nil),
			jobPod("runner-job-13", "13", nil),
			// gitlab-runner's kubernetes executor annotates, the ID too.
			{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a-build-j1", Name: "runner-abc-project-7-concurrent-0",
				Labels:      map[string]string{resources.LabelComponent: resources.ComponentJob},
				Annotations: map[string]string{jobIDKey: "14", jobNameKey: "unit tests", jobURLKey: "https://gitlab.example.com/g/p/-/jobs/14"}}}},
		}}}}
	cost := v.cost()
	for _, want := range []string{
		"these 2 jobs fail: job 13, running in GitLab (pod team-a-build-j1/runner-job-13); job 14, unit tests, https://gitlab.example.com/g/p/-/jobs/14 (pod team-a-build-j1/runner-abc-project-7-concurrent-0)",
		"the pods of jobs that already ended are deleted (nothing lost): job 12, success in GitLab (pod team-a-build-j1/runner-job-12)",
	} {
		if !strings.Contains(cost, want) {
			t.Errorf("the cost of --force does not say\n  %q\nit says\n  %q", want, cost)
		}
	}
	v.sets[0].jobs = nil
	if cost := v.cost(); !strings.Contains(cost, "no running job fails") {
		t.Errorf("no job pods: %q", cost)
	}
}

// The controller counts as down only when it cannot come back by itself:
// no Deployment, scaled to zero, no pod, or pods that fail. A pod that is
// still starting (an image pull, a node on its way) is not reported, so
// fleet up and fleet down do not stop for a slow start.
func TestDeploymentDownTellsAFailingControllerFromAStartingOne(t *testing.T) {
	const ns = "runnerfleet-system"
	o := install.Defaults()
	o.Namespace = ns
	pod := func(reason string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runnerset-controller-1", Labels: install.Selector()},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "manager",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "the " + reason + " message"}}}}}}
	}
	for _, tc := range []struct {
		name     string
		replicas int32
		ready    int32
		objs     []client.Object
		want     []string // "" for running or starting
	}{
		{name: "ready", replicas: 1, ready: 1, objs: []client.Object{pod("CrashLoopBackOff")}},
		{name: "starting", replicas: 1, objs: []client.Object{pod("ContainerCreating")}},
		{name: "crash loop", replicas: 1, objs: []client.Object{pod("CrashLoopBackOff")}, want: []string{"has 0 of 1 ready replicas", "pod runnerset-controller-1: CrashLoopBackOff the CrashLoopBackOff message", "kubectl -n runnerfleet-system describe deployment"}},
		{name: "image", replicas: 1, objs: []client.Object{pod("ImagePullBackOff")}, want: []string{"ImagePullBackOff"}},
		{name: "no pod", replicas: 1, want: []string{"has 0 of 1 ready replicas and no pod"}},
		{name: "scaled to zero", replicas: 0, want: []string{"has 0 of 0 ready replicas"}},
		{name: "missing", replicas: -1, want: []string{"there is no Deployment runnerfleet-system/runnerset-controller"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := tc.objs
			if tc.replicas >= 0 {
				o.Replicas = tc.replicas
				dep := install.Deployment(o)
				dep.Status.ReadyReplicas = tc.ready
				objs = append(objs, dep)
			}
			c := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(objs...).Build()
			got := deploymentDown(context.Background(), c, ns)
			if len(tc.want) == 0 && got != "" {
				t.Errorf("deploymentDown = %q, want nothing", got)
			}
			if len(tc.want) > 0 && got == "" {
				t.Errorf("deploymentDown says nothing, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("deploymentDown = %q, want it to say %q", got, w)
				}
			}
		})
	}
}

// fleet down keeps waiting while the controller still has orphaned job
// pods to delete (status.orphanedJobPodsSince plus the RunnerSet's
// orphanedJobGracePeriod): without it the default 3m stall limit stopped
// fleet down before the controller's 5m deletion of the job pods no
// manager was left to delete.
func TestFleetDownWaitsForTheControllersDeletionOfOrphanedJobPods(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	rs := &v1alpha1.RunnerSet{}
	v := &drainView{at: now, sets: []setView{{rs: rs}}}
	if v.withinGrace() {
		t.Fatal("no orphaned job pods: nothing to wait for, want withinGrace false")
	}
	since := metav1.NewTime(now.Add(-time.Minute))
	rs.Status.OrphanedJobPodsSince = &since
	if !v.withinGrace() || v.longestGrace() != 4*time.Minute {
		t.Fatalf("orphaned since 1m with the default 5m grace: withinGrace %v, longestGrace %s; want true, 4m0s", v.withinGrace(), v.longestGrace())
	}
	rs.Spec.Managers.OrphanedJobGracePeriod = &metav1.Duration{Duration: 30 * time.Second}
	if v.withinGrace() {
		t.Fatalf("orphaned since 1m with a 30s grace: the controller is late, nothing more to wait for; longestGrace %s", v.longestGrace())
	}
}
