//go:build e2e

// Package e2e runs runnerfleet end to end: the fleet CLI and the controller,
// built from this checkout, on the local control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok's fake nodes), or, for
// the tests that need no real node, on any cluster named by
// RUNNERFLEET_E2E_KUBECONFIG (cluster_test.go).
//
//	go test -tags e2e -count=1 -v ./e2e/
//	RUNNERFLEET_E2E_KUBECONFIG=$HOME/.kube/kind go test -tags e2e -count=1 -v ./e2e/
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/internal/checkout"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// The team of stacks/Pulumi.local.yaml.
var example = client.ObjectKey{Namespace: "team-a", Name: "build"}

func TestLocalStackUpRolloutDown(t *testing.T) {
	onRealNode(t) // fleet up --stack local starts the control plane and the real node
	root := repoRoot(t)
	start := time.Now()
	bin := buildBinaries(t, root)
	t.Logf("built fleet and runnerset-controller in %s (once per test process)", time.Since(start).Round(time.Millisecond))

	state := stateDir(t)
	fleet := func(timeout time.Duration, args ...string) string {
		t.Helper()
		return run(t, root, timeout, filepath.Join(bin, "fleet"), append(args, "--stack", "local", "--state-dir", state)...)
	}
	down := false
	t.Cleanup(func() {
		if !down { // a failed test still leaves nothing running
			cmd := exec.Command(filepath.Join(bin, "fleet"), "down", "--stack", "local", "--state-dir", state)
			out, err := cmd.CombinedOutput()
			t.Logf("cleanup: fleet down: %v\n%s", err, out)
		}
	})

	// fleet up: control plane, the Pulumi program inline, controller, Ready.
	start = time.Now()
	fleet(6*time.Minute, "up", "--timeout", "4m", "--demo-jobs", "2", "--demo-duration", "5s")
	t.Logf("fleet up took %s", time.Since(start).Round(time.Millisecond))

	c := clientFor(t, filepath.Join(state, "kubeconfig"))
	ctx := context.Background()
	rs := &v1alpha1.RunnerSet{}
	if err := c.Get(ctx, example, rs); err != nil {
		t.Fatal(err)
	}
	if !rs.IsReady() {
		t.Fatalf("fleet up returned but RunnerSet %s is not Ready: %+v", example, rs.Status.Conditions)
	}
	first := runningManager(t, c, rs)
	if first.Spec.NodeName != localcluster.NodeName {
		t.Errorf("manager pod %s runs on %s, want the real node %s", first.Name, first.Spec.NodeName, localcluster.NodeName)
	}
	t.Logf("manager pod %s Running on the real node %s", first.Name, first.Spec.NodeName)

	// fleet status shows it, and how to reach the cluster.
	out := fleet(time.Minute, "status")
	row := regexp.MustCompile(`(?m)^team-a\s+build\s+team-a\s+local\s+True\s+1/1\s+Reconciled\s`)
	if !row.MatchString(out) {
		t.Errorf("fleet status does not show team-a/build Ready with 1/1 managers:\n%s", out)
	}
	// The demo jobs: picked up by the manager on the real node, the row
	// naming how long the job waited, its RunnerSet and the stack's region.
	jobRow := regexp.MustCompile(`(?m)^\d+\s+team-a\s+5s\s+(running|success)\s+\S+\s+team-a/build\s+local\s+` + regexp.QuoteMeta(first.Name) + `\s*$`)
	if !jobRow.MatchString(out) {
		t.Errorf("fleet status does not show a demo job of team-a run by manager %s:\n%s", first.Name, out)
	}
	// The local stack's Prometheus watches it as a cluster's would.
	checkLocalMonitoring(t, state, example.Namespace, example.Name, first.Name)

	// Each demo job is a pod the manager created (as the kubernetes
	// executor does, through the API server it reaches from the real node),
	// on capacity Karpenter brought up from zero for the tag, and the
	// capacity goes back to zero once the jobs are done.
	pool := naming.For(example.Namespace, example.Name).Capacity()
	waitFor(t, 2*time.Minute, "a NodeClaim of NodePool "+pool+" for the demo jobs' pods", func() error {
		if n := nodeClaims(ctx, c, pool); n <= 0 {
			return fmt.Errorf("no NodeClaim of NodePool %s (%d)", pool, n)
		}
		return nil
	})
	waitFor(t, 3*time.Minute, "both demo jobs succeeded", func() error {
		out := fleet(time.Minute, "status")
		if n := len(regexp.MustCompile(`(?m)^\d+\s+team-a\s+5s\s+success\s`).FindAllString(out, -1)); n != 2 {
			return fmt.Errorf("%d demo jobs succeeded:\n%s", n, out)
		}
		return nil
	})
	start = time.Now()
	waitFor(t, 3*time.Minute, "NodePool "+pool+" back to zero NodeClaims", func() error {
		if n := nodeClaims(ctx, c, pool); n != 0 {
			return fmt.Errorf("%d NodeClaim(s) of NodePool %s", n, pool)
		}
		return nil
	})
	t.Logf("job capacity back to zero %s after the demo jobs ended", time.Since(start).Round(time.Second))

	if want := "export KUBECONFIG=" + filepath.Join(state, "kubeconfig"); !strings.Contains(out, want) {
		t.Errorf("fleet status does not say %q:\n%s", want, out)
	}
	// KEDA runs only for a stack whose teams autoscale; this one's do not.
	for _, p := range append(append([]string{}, localcluster.StartOrder...), localcluster.Karpenter, localcluster.Controller, localcluster.Prometheus) {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(p) + `\s+running\s+\d+`).MatchString(out) {
			t.Errorf("fleet status does not show %s running:\n%s", p, out)
		}
	}

	// A config change rolls the managers through the real Deployment
	// controller, scheduler and kwok.
	oldHash := rs.Status.ConfigHash
	patch := client.MergeFrom(rs.DeepCopy())
	rs.Spec.Managers.Concurrent = rs.Spec.Managers.ConcurrentOrDefault() + 4
	if err := c.Patch(ctx, rs, patch); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var second *corev1.Pod
	var prematureReady bool
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, example, rs); err != nil {
			return false, err
		}
		if rs.IsReady() && rs.Status.ConfigHash == oldHash {
			prematureReady = true
		}
		if !rs.IsReady() || rs.Status.ConfigHash == oldHash || rs.Status.ReadyManagers != 1 {
			return false, nil
		}
		second = managerOnConfig(ctx, t, c, rs, rs.Status.ConfigHash)
		return second != nil && second.Name != first.Name, nil
	})
	if err != nil {
		t.Fatalf("after managers.concurrent changed, no new manager pod became Running and Ready with RunnerSet Ready: %v\nstatus: %+v", err, rs.Status)
	}
	if prematureReady {
		t.Logf("note: RunnerSet was Ready at the new generation before its config hash changed")
	}
	t.Logf("rolled out manager pod %s on %s in %s (config %s → %s)", second.Name, second.Spec.NodeName,
		time.Since(start).Round(time.Millisecond), oldHash, rs.Status.ConfigHash)

	// fleet down: nothing of the state directory runs or listens.
	pids := pidsOf(t, state)
	ports := listeningPorts(t, pids)
	// Besides the control plane: Karpenter, the controller, the real node's
	// containerd, kubelet, kubernetes Service proxy and NetworkPolicy
	// enforcer, the loopback GitLab and Prometheus (no KEDA: no team of
	// this stack autoscales).
	if len(pids) != len(localcluster.StartOrder)+8 {
		t.Errorf("pid files before fleet down: %v; want one per control-plane process, Karpenter, the controller, containerd, the kubelet, the Service proxy, %s, the loopback GitLab and Prometheus", pids, localcluster.NetworkPolicies)
	}
	if len(ports) < len(localcluster.StartOrder) {
		t.Errorf("listening ports before fleet down: %v; want at least one per control-plane process", ports)
	}
	start = time.Now()
	out = fleet(4*time.Minute, "down")
	down = true
	t.Logf("fleet down took %s", time.Since(start).Round(time.Millisecond))
	// pulumi destroy ran while the controller still ran: the Pulumi state
	// holds nothing, and the RunnerSet's finalizer was let go.
	if left := stateResources(t, state); len(left) != 0 {
		t.Errorf("the Pulumi state still holds %d resources after fleet down: %v\n%s", len(left), left, out)
	}
	for name, pid := range pids {
		if alive(pid) {
			t.Errorf("%s (pid %d) still runs after fleet down", name, pid)
		}
	}
	still := listeningPorts(t, nil)
	for port, name := range ports {
		if _, ok := still[port]; ok {
			t.Errorf("port %d of %s still listens after fleet down", port, name)
		}
	}
	if left := networkPolicyRulesLeft(t); left != "" {
		t.Errorf("NetworkPolicy rules left after fleet down:\n%s", left)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := checkout.Root()
	if err != nil {
		t.Fatalf("run the e2e tests from the e2e directory of a runnerfleet checkout: %v", err)
	}
	return dir
}

// run runs a command in dir, streaming its output to the test log, and
// returns its standard output.
func run(t *testing.T, dir string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &logWriter{t: t, prefix: filepath.Base(name) + " " + args[0] + ": "}
	err := cmd.Run()
	if out := strings.TrimRight(stdout.String(), "\n"); out != "" {
		for _, l := range strings.Split(out, "\n") {
			t.Logf("%s %s| %s", filepath.Base(name), args[0], l)
		}
	}
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return stdout.String()
}

type logWriter struct {
	t      *testing.T
	prefix string
	buf    []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.t.Log(w.prefix + string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

func clientFor(t *testing.T, kubeconfig string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: localcluster.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientAs is clientFor acting as user (impersonated, as the user's
// pods would be authenticated).
func clientAs(t *testing.T, kubeconfig, user string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: localcluster.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runningManager returns the manager pod of rs on its current config,
// failing unless it is Running and Ready on the real node.
func runningManager(t *testing.T, c client.Client, rs *v1alpha1.RunnerSet) *corev1.Pod {
	t.Helper()
	p := managerOnConfig(context.Background(), t, c, rs, rs.Status.ConfigHash)
	if p == nil {
		pods := &corev1.PodList{}
		_ = c.List(context.Background(), pods, client.InNamespace(rs.Namespace))
		for _, p := range pods.Items {
			t.Logf("pod %s: node %q phase %s conditions %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
		}
		t.Fatalf("RunnerSet %s/%s is Ready but no manager pod on config %s is Running and Ready on the real node", rs.Namespace, rs.Name, rs.Status.ConfigHash)
	}
	return p
}

// managerOnConfig finds a Running, Ready manager pod of rs whose template
// carries config hash; nil when there is none. Managers run as real
// containers on the real node (containerd and a kubelet), never on kwok's.
func managerOnConfig(ctx context.Context, t *testing.T, c client.Client, rs *v1alpha1.RunnerSet, hash string) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(rs.Namespace),
		client.MatchingLabels(resources.SelectorLabels(rs, "manager"))); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Annotations[resources.AnnotationConfigHash] != hash || !podReady(p) {
			continue
		}
		if p.Spec.NodeName != localcluster.NodeName {
			t.Fatalf("manager pod %s runs on node %s, not on the real node %s", p.Name, p.Spec.NodeName, localcluster.NodeName)
		}
		return p
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pidsOf reads every pid file of the state directory.
func pidsOf(t *testing.T, state string) map[string]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(localcluster.LogsDir(state), "*.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		pids[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
	}
	return pids
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X')
}

// listeningPorts maps each TCP port in LISTEN state to the process owning
// it, among pids; with pids nil, to "" for every listening port.
func listeningPorts(t *testing.T, pids map[string]int) map[int]string {
	t.Helper()
	owner := map[string]string{} // socket inode → process name
	for name, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err == nil && strings.HasPrefix(link, "socket:[") {
				owner[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = name
			}
		}
	}
	ports := map[int]string{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			local := fields[1]
			port, err := strconv.ParseInt(local[strings.LastIndexByte(local, ':')+1:], 16, 32)
			if err != nil {
				continue
			}
			if pids == nil {
				ports[int(port)] = ""
			} else if name, ok := owner[fields[9]]; ok {
				ports[int(port)] = name
			}
		}
		fh.Close()
	}
	return ports
}

// stateResources lists the resources the local stack's Pulumi state (the file
// backend under the state directory) still holds, the stack itself aside.
func stateResources(t *testing.T, state string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "pulumi", "state", ".pulumi", "stacks", "runnerfleet", "local.json"))
	if err != nil {
		t.Fatalf("reading the local stack's Pulumi state: %v", err)
	}
	var cp struct {
		Checkpoint struct {
			Latest struct {
				Resources []struct {
					URN  string `json:"urn"`
					Type string `json:"type"`
				} `json:"resources"`
			} `json:"latest"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		t.Fatalf("decoding the local stack's Pulumi state: %v", err)
	}
	var out []string
	for _, r := range cp.Checkpoint.Latest.Resources {
		if r.Type != "pulumi:pulumi:Stack" {
			out = append(out, r.URN)
		}
	}
	return out
}
