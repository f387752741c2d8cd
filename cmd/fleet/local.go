package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/stacks"
)

const stackLocal = "local"

// localStack is a control plane on this machine (localstack/localcluster)
// with the runnerset-controller running beside it as a process.
type localStack struct {
	root           string   // the runnerfleet checkout, "" when fleet runs outside one
	dir            string   // the state directory
	config         string   // --config
	flags          []string // --state-dir and --config as given, for the commands fleet suggests
	stdout, stderr io.Writer
}

func newLocalStack(c common, stdout, stderr io.Writer) (*localStack, error) {
	s := &localStack{root: repoRoot(), dir: c.stateDir, config: c.config, stdout: stdout, stderr: stderr}
	if c.stateDir != "" {
		s.flags = append(s.flags, "--state-dir", c.stateDir)
	}
	if c.config != "" {
		s.flags = append(s.flags, "--config", c.config)
	}
	if s.dir == "" {
		if s.root != "" {
			s.dir = filepath.Join(s.root, ".local", stackLocal)
		} else {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, fmt.Errorf("no state directory: give --state-dir (%w)", err)
			}
			s.dir = filepath.Join(home, ".local", "state", "runnerfleet", stackLocal)
		}
	}
	abs, err := filepath.Abs(s.dir)
	if err != nil {
		return nil, err
	}
	s.dir = abs
	return s, nil
}

func (s *localStack) Up(ctx context.Context, o upOptions) error {
	start := time.Now()
	stackFile, err := s.stackFile()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(stackFile)
	if err != nil {
		return err
	}
	// A stack config the program would refuse stops here, before anything
	// starts.
	stack, err := parseStack(stackLocal, b)
	if err != nil {
		return err
	}
	tools, err := pulumiTools(ctx, s.root, s.stderr)
	if err != nil {
		return err
	}
	cl, err := localcluster.Up(ctx, localcluster.Options{
		Dir:       s.dir,
		Name:      stackLocal,
		RepoRoot:  s.root,
		CRDs:      localCRDs(),
		Karpenter: true,
		// KEDA's operator and metrics adapter reconcile the ScaledObjects
		// the controller writes, their HPAs included: for a stack whose
		// teams autoscale (their first run builds KEDA, ~7 minutes).
		KEDA: stack.fleet.Autoscales(),
		// Managers run as containers on a real node (containerd and a
		// kubelet); jobs get capacity from Karpenter's kwok nodes.
		Node: true,
		Log:  s.stderr,
	})
	if err != nil {
		return fmt.Errorf("starting the local control plane: %w", err)
	}
	keep := "\n(the control plane keeps running for you to look; fleet down --stack local stops it)"
	if err := s.startGitLab(ctx, cl); err != nil {
		return fmt.Errorf("%w%s", err, keep)
	}
	// The program declares runnerfleet's CRDs, the RunnerClass and the
	// teams; the controller starts once its API exists. When the API is
	// already there (a stack brought up before), the controller starts
	// first, so that a team the program removes drains and lets go.
	apiUp := cl.Client.Get(ctx, client.ObjectKey{Name: "runnersets." + v1alpha1.GroupVersion.Group}, &apiextensionsv1.CustomResourceDefinition{}) == nil
	if apiUp {
		if err := s.startController(ctx, cl); err != nil {
			return fmt.Errorf("%w%s", err, keep)
		}
	}
	prom, err := cl.PrometheusAddress()
	if err != nil {
		return fmt.Errorf("%w%s", err, keep)
	}
	p := s.program(tools, stackFile, cl.Kubeconfig, prom)
	sets, err := p.up(ctx)
	if err != nil {
		return fmt.Errorf("%w%s", err, keep)
	}
	if !apiUp {
		if err := s.startController(ctx, cl); err != nil {
			return fmt.Errorf("%w%s", err, keep)
		}
	}
	if err := s.startPrometheus(ctx, cl); err != nil {
		return fmt.Errorf("%w%s", err, keep)
	}
	if err := s.registerRunners(ctx, cl); err != nil {
		return fmt.Errorf("%w%s", err, keep)
	}
	if err := s.waitReady(ctx, cl, sets, o.timeout); err != nil {
		return err
	}
	if o.demoJobs > 0 {
		if err := s.queueDemoJobs(ctx, cl, o.demoJobs, o.demoDuration); err != nil {
			return fmt.Errorf("%w%s", err, keep)
		}
		s.waitPicked(ctx, 30*time.Second)
	}
	fmt.Fprintf(s.stderr, "The local stack is up (%.1fs)\n\n", time.Since(start).Seconds())
	return s.Status(ctx, statusOptions{output: "table"})
}

// stackFile is --config, else the checkout's stacks/Pulumi.local.yaml, else
// the one compiled into fleet, written into the state directory.
func (s *localStack) stackFile() (string, error) {
	if s.config != "" {
		return s.config, nil
	}
	if s.root != "" {
		return filepath.Join(s.root, "stacks", "Pulumi."+stackLocal+".yaml"), nil
	}
	b, err := stacks.Config(stackLocal)
	if err != nil {
		return "", err
	}
	p := filepath.Join(s.dir, "Pulumi."+stackLocal+".yaml")
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return "", err
	}
	return p, os.WriteFile(p, b, 0o600)
}

func (s *localStack) program(tools, stackFile, kubeconfig, prometheus string) *program {
	return &program{stack: stackLocal, stackFile: stackFile, dir: filepath.Join(s.dir, "pulumi"), tools: tools, kubeconfig: kubeconfig, prometheus: prometheus, stderr: s.stderr}
}

// controllerBinary finds runnerset-controller next to fleet, or builds it
// from the checkout into <state>/bin.
func (s *localStack) controllerBinary(ctx context.Context) (string, error) {
	if exe, err := os.Executable(); err == nil {
		next := filepath.Join(filepath.Dir(exe), localcluster.Controller)
		if fi, err := os.Stat(next); err == nil && !fi.IsDir() {
			return next, nil
		}
	}
	if s.root == "" {
		return "", fmt.Errorf("%s is neither next to the fleet binary nor buildable: build both with `go build -o bin/ ./cmd/...` in a runnerfleet checkout", localcluster.Controller)
	}
	out := filepath.Join(s.dir, "bin", localcluster.Controller)
	fmt.Fprintf(s.stderr, "Building %s into %s\n", localcluster.Controller, out)
	// Build beside the binary and keep the old file when nothing changed, so
	// that the running controller is not restarted for an identical build.
	next := out + ".next"
	cmd := exec.CommandContext(ctx, "go", "build", "-o", next, "./cmd/runnerset-controller")
	cmd.Dir = s.root
	cmd.Stdout, cmd.Stderr = s.stderr, s.stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s with go build in %s: %w", localcluster.Controller, s.root, err)
	}
	if sameFile(out, next) {
		return out, os.Remove(next)
	}
	return out, os.Rename(next, out)
}

// sameFile reports whether two files have the same content.
func sameFile(a, b string) bool {
	x, err := os.ReadFile(a)
	if err != nil {
		return false
	}
	y, err := os.ReadFile(b)
	return err == nil && bytes.Equal(x, y)
}

// startController runs the runnerset-controller against the cluster, unless
// the same build already does.
func (s *localStack) startController(ctx context.Context, cl *localcluster.Cluster) error {
	bin, err := s.controllerBinary(ctx)
	if err != nil {
		return err
	}
	if cl.RunsBinary(localcluster.Controller, bin) {
		fmt.Fprintf(s.stderr, "Reusing the running %s (pid %d)\n", localcluster.Controller, cl.Running(localcluster.Controller))
		return nil
	}
	if cl.Running(localcluster.Controller) != 0 {
		fmt.Fprintf(s.stderr, "Restarting %s on the new build\n", localcluster.Controller)
		if err := cl.StopProcess(localcluster.Controller, 20*time.Second); err != nil {
			return err
		}
	}
	metrics, err := localcluster.FreePort()
	if err != nil {
		return err
	}
	probe, err := localcluster.FreePort()
	if err != nil {
		return err
	}
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", probe)
	p := localcluster.Process{
		Name: localcluster.Controller,
		Path: bin,
		Args: []string{
			"--kubeconfig=" + cl.Kubeconfig,
			"--leader-elect=false",
			// Bound to localhost on the developer's own machine: plain
			// HTTP, reachable only from it (a cluster install serves TLS
			// behind TokenReview and SubjectAccessReview).
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics),
			"--metrics-secure=false",
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe),
		},
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics),
		Ready:    func(ctx context.Context) error { return get(ctx, readyz) },
	}
	t := time.Now()
	pid, err := cl.StartProcess(ctx, p, time.Minute, metrics, probe)
	if err != nil {
		return fmt.Errorf("starting %s: %w", localcluster.Controller, err)
	}
	fmt.Fprintf(s.stderr, "Started %-23s pid %-7d %-28s %.1fs\n", p.Name, pid, p.Endpoint, time.Since(t).Seconds())
	return nil
}

// waitReady waits until every RunnerSet in keys is Ready, printing each
// change of its Ready condition; a timeout says why managers do not run.
func (s *localStack) waitReady(ctx context.Context, cl *localcluster.Cluster, keys []client.ObjectKey, timeout time.Duration) error {
	w := newReadyWait(cl.Client, keys, timeout, s.stderr)
	w.hint = func() string {
		return fmt.Sprintf("%s\nsee `kubectl describe runnerset` and the pods of its namespace (export KUBECONFIG=%s), and the controller log %s",
			managerTrouble(cl), cl.Kubeconfig, localcluster.LogFile(cl.Dir, localcluster.Controller))
	}
	w.controllerDown = controllerProcessDown(cl)
	w.status, w.again, w.down = s.command("status"), s.command("up", "--timeout", "10m"), s.command("down")
	return w.wait(ctx)
}

func (s *localStack) Status(ctx context.Context, o statusOptions) error {
	st, err := localcluster.Status(ctx, s.dir)
	if err != nil {
		return err
	}
	rep := statusReport{Stack: stackLocal, Up: st.Ready, RunnerSets: []runnerSetRow{}}
	if st.Ready {
		cl, err := localcluster.Open(ctx, s.dir)
		if err != nil {
			return err
		}
		if rep.RunnerSets, err = runnerSetRows(ctx, cl.Client); err != nil {
			return err
		}
		if rep.Nodes, err = countNodes(ctx, cl.Client); err != nil {
			return err
		}
		rep.Kubeconfig = st.Kubeconfig
		if rep.SharedFleets, err = s.sharedFleets(ctx, cl); err != nil {
			return err
		}
		if jobs, err := s.jobs(ctx); err == nil {
			regions := runnerSetRegions(rep.RunnerSets, stackLocal)
			for _, j := range jobs {
				rep.Jobs = append(rep.Jobs, jobRow{ControlJob: j, Region: regions[j.Runner]})
			}
		}
	}
	for _, p := range st.Processes {
		rep.Processes = append(rep.Processes, processRow{Name: p.Name, Running: p.PID != 0, PID: p.PID, Endpoint: p.Endpoint, Log: p.Log})
	}
	if o.output == "json" {
		return printJSON(s.stdout, rep)
	}
	w := s.stdout
	if st.Ready {
		printRunnerSetTable(w, rep.RunnerSets)
		cl, err := localcluster.Open(ctx, s.dir)
		if err != nil {
			return err
		}
		if err := printManagers(ctx, w, cl.Client); err != nil {
			return err
		}
		printSharedFleets(w, rep.SharedFleets)
		s.printJobs(ctx, w, runnerSetRegions(rep.RunnerSets, stackLocal))
		fmt.Fprintf(w, "\nNodes: %d, %d Ready: %s; %d kwok node(s) for job capacity (their pods go Running but run nothing)\n",
			rep.Nodes.Total, rep.Nodes.Ready, rep.Nodes.realNode(), rep.Nodes.kwok())
	} else {
		fmt.Fprintf(w, "The local stack is down (%v): start it with fleet up --stack local\n", st.Err)
	}
	fmt.Fprintf(w, "\nControl plane (%s)\n", st.Dir)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tSTATE\tPID\tENDPOINT\tLOG")
	for _, p := range rep.Processes {
		state, pid := "stopped", "-"
		if p.Running {
			state, pid = "running", fmt.Sprint(p.PID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, state, pid, dash(p.Endpoint), p.Log)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.Ready {
		fmt.Fprintf(w, "\nkubeconfig: %s\n  export KUBECONFIG=%s\n", st.Kubeconfig, st.Kubeconfig)
	}
	return nil
}

func countNodes(ctx context.Context, c client.Client) (*nodeCount, error) {
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	n := &nodeCount{Total: len(nodes.Items)}
	for _, node := range nodes.Items {
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
				n.Ready++
			}
		}
		if node.Name == localcluster.NodeName {
			n.Real, n.RealReady = node.Name, ready
		}
	}
	return n, nil
}

// printManagers lists the manager pods and where they run.
func printManagers(ctx context.Context, w io.Writer, c client.Client) error {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.MatchingLabels{resources.LabelComponent: resources.ComponentManager}); err != nil {
		return fmt.Errorf("listing manager pods: %w", err)
	}
	if len(pods.Items) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nManagers")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tNODE\tPHASE\tREADY\tIMAGE")
	for _, p := range pods.Items {
		ready := "false"
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ready = "true"
			}
		}
		image := "-"
		if len(p.Spec.Containers) > 0 {
			image = p.Spec.Containers[0].Image
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, ready, image)
	}
	return tw.Flush()
}

// printJobs summarizes the loopback GitLab's jobs: which RunnerSet (the
// runner's description), region and manager ran each, and how long it
// waited in the queue.
func (s *localStack) printJobs(ctx context.Context, w io.Writer, regions map[string]string) {
	jobs, err := s.jobs(ctx)
	if err != nil {
		fmt.Fprintf(w, "\nJobs: the loopback GitLab does not answer (%v)\n", err)
		return
	}
	if len(jobs) == 0 {
		fmt.Fprintln(w, "\nJobs: none queued (fleet up --stack local --demo-jobs 3 queues some)")
		return
	}
	fmt.Fprintf(w, "\nJobs in the loopback GitLab (%s)\n", localGitLabURL())
	printJobTable(w, jobs, regions, time.Now())
}

// printJobTable writes jobs as a table; regions maps a RunnerSet's
// namespace/name to its region.
func printJobTable(w io.Writer, jobs []gitlabserver.ControlJob, regions map[string]string, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "JOB\tTAGS\tDURATION\tSTATE\tWAITED\tRUNNER SET\tREGION\tMANAGER")
	for _, j := range jobs {
		m := strings.TrimPrefix(j.SystemID, "s_")
		region := regions[j.Runner]
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, strings.Join(j.Tags, ","), j.Duration, j.State,
			j.Waited(now).Round(time.Second), dash(j.Runner), dash(region), dash(m))
	}
	_ = tw.Flush()
}

// waitPicked waits a little for the managers to pick the demo jobs up.
func (s *localStack) waitPicked(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		jobs, err := s.jobs(ctx)
		if err != nil {
			return
		}
		pending := 0
		for _, j := range jobs {
			if j.State == "pending" {
				pending++
			}
		}
		if pending == 0 {
			return
		}
		time.Sleep(time.Second)
	}
}

func (s *localStack) Down(ctx context.Context, o downOptions) error {
	if _, err := os.Stat(s.dir); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(s.stderr, "No local stack in %s: nothing to stop\n", s.dir)
		return nil
	}
	if err := s.destroy(ctx, o); err != nil {
		return err
	}
	if err := localcluster.DownWithTimeout(ctx, s.dir, o.grace, s.stderr); err != nil {
		return fmt.Errorf("stopping the local stack in %s: %w", s.dir, err)
	}
	if o.purge {
		if err := os.RemoveAll(s.dir); err != nil {
			return fmt.Errorf("removing %s: %w", s.dir, err)
		}
		fmt.Fprintf(s.stderr, "The local stack is down; removed %s\n", s.dir)
		return nil
	}
	fmt.Fprintf(s.stderr, "The local stack is down; its state and logs stay in %s (fleet down --purge removes them)\n", s.dir)
	return nil
}

// destroy drains the stack's RunnerSets, then runs pulumi destroy, while
// the control plane and the controller still run, so that the controller
// drains and releases every RunnerSet before its API goes away. fleet, not
// Pulumi, waits for the drain: it says what it waits for, and stops with
// what is left and the next command. A stack whose control plane is
// already down keeps its Pulumi state (fleet down --purge removes it with
// the rest).
func (s *localStack) destroy(ctx context.Context, o downOptions) error {
	if _, err := os.Stat(filepath.Join(s.dir, "pulumi", "state")); err != nil {
		return nil
	}
	st, err := localcluster.Status(ctx, s.dir)
	if err != nil || !st.Ready {
		fmt.Fprintf(s.stderr, "The control plane is not running: skipping pulumi destroy; the Pulumi state stays in %s\n", filepath.Join(s.dir, "pulumi"))
		return nil
	}
	cl, err := localcluster.Open(ctx, s.dir)
	if err != nil {
		return err
	}
	if err := s.startController(ctx, cl); err != nil && o.force {
		fmt.Fprintf(s.stderr, "Starting %s failed (%v): forcing without it\n", localcluster.Controller, err)
	} else if err != nil {
		return fmt.Errorf("%w\n(the control plane keeps running; without the controller nothing removes the finalizer %s of the RunnerSets: fix the cause and run %s again, or %s to delete them without a drain)",
			err, controller.Finalizer, s.command("down"), s.command("down", "--force"))
	}
	if err := s.drainer(cl, o).run(ctx, o.force); err != nil {
		return err
	}
	tools, err := pulumiTools(ctx, s.root, s.stderr)
	if err != nil {
		return err
	}
	stackFile := filepath.Join(s.dir, "pulumi", "Pulumi."+stackLocal+".yaml")
	// A destroy runs no program: the Prometheus address is not read.
	if err := s.program(tools, stackFile, cl.Kubeconfig, "").destroy(ctx); err != nil {
		return fmt.Errorf("%w\n(the control plane keeps running; fix the cause and run %s again)", err, s.command("down"))
	}
	return nil
}

// command is a fleet command on this local stack.
func (s *localStack) command(verb string, more ...string) string {
	return commandLine(append(append([]string{verb, "--stack", stackLocal}, s.flags...), more...)...)
}

// controllerProcessDown says why the local stack's controller does not
// run: its process has exited.
func controllerProcessDown(cl *localcluster.Cluster) func(context.Context) string {
	return func(context.Context) string {
		if cl.Running(localcluster.Controller) != 0 {
			return ""
		}
		return fmt.Sprintf("the %s process has exited (its log: %s)", localcluster.Controller, localcluster.LogFile(cl.Dir, localcluster.Controller))
	}
}

// drainer waits for the local stack's RunnerSets: those of the Pulumi
// program (its labels), the controller a process beside the control plane,
// the managers on the real node, the jobs in the loopback GitLab.
func (s *localStack) drainer(cl *localcluster.Cluster, o downOptions) *drainer {
	d := newDrainer(cl.Client, s.stderr, o)
	d.sel = []client.ListOption{client.MatchingLabels(kube.Labels(stackLocal))}
	d.controllerDown = controllerProcessDown(cl)
	d.notes = func(context.Context) []string {
		if cl.Running(localcluster.Kubelet) != 0 {
			return nil
		}
		return []string{fmt.Sprintf("The real node's kubelet has exited (its log: %s): pods on %s cannot stop; --force deletes them from the API",
			localcluster.LogFile(cl.Dir, localcluster.Kubelet), localcluster.NodeName)}
	}
	d.jobStates = func(ctx context.Context) map[string]string {
		jobs, err := s.jobs(ctx)
		if err != nil {
			return nil
		}
		m := map[string]string{}
		for _, j := range jobs {
			m[strconv.FormatInt(j.ID, 10)] = j.State
		}
		return m
	}
	d.again, d.force = s.command("down"), s.command("down", "--force")
	d.kept = "The control plane keeps running (" + s.command("status") + " shows it)"
	return d
}

// get succeeds when url answers 200.
func get(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func name(namespace, n string) string {
	if namespace == "" {
		return n
	}
	return namespace + "/" + n
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// managerTrouble says why manager pods do not run: an image the node does
// not have, a container that keeps exiting, a pod no node takes.
func managerTrouble(cl *localcluster.Cluster) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pods := &corev1.PodList{}
	if err := cl.Client.List(ctx, pods, client.MatchingLabels{resources.LabelComponent: resources.ComponentManager}); err != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range pods.Items {
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
				fmt.Fprintf(&b, "\n  pod %s/%s container %s: %s: %s", p.Namespace, p.Name, cs.Name, w.Reason, w.Message)
				if strings.Contains(w.Reason, "Image") {
					fmt.Fprintf(&b, " (the real node has only the images fleet up imports: %s)", localcluster.StandinImage)
				}
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				fmt.Fprintf(&b, "\n  pod %s/%s is not scheduled: %s", p.Namespace, p.Name, c.Message)
			}
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return ":" + b.String()
}

// sharedFleets are the local platform's shared fleets of the stack file,
// as the cluster has them (their managers, the draining ones with their
// jobs and time left), as fleet status shows a gke stack's.
func (s *localStack) sharedFleets(ctx context.Context, cl *localcluster.Cluster) ([]sharedFleetStatus, error) {
	path, err := s.stackFile()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := parseStack(stackLocal, b)
	if err != nil {
		return nil, err
	}
	if len(v.fleet.SharedFleets) == 0 {
		return nil, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cl.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return sharedFleetStatuses(ctx, cl.Client, jobReader{cs: cs}, v.fleet.SharedFleets, time.Now())
}
