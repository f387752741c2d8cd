//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/e2e/internal/abandoned"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/crds"
)

// EnvKubeconfig points the suite at a cluster the user already has (kind,
// minikube, a cloud cluster) instead of the local control planes it starts
// itself; make e2e KUBECONFIG=<path> sets it. The suite never reads
// KUBECONFIG itself, so a kubeconfig exported for daily work is never
// installed into by accident.
const EnvKubeconfig = "RUNNERFLEET_E2E_KUBECONFIG"

// The CRDs that tell the suite that a cluster has Karpenter, and Karpenter's
// kwok provider (whose KWOKNodeClass the kwok RunnerClass writes).
var (
	karpenterCRD = "nodepools." + karpenterapis.Group
	kwokClassCRD = "kwoknodeclasses." + kwokapis.Group
)

// cluster is what a test that needs no real node runs on: a kubeconfig, and
// what the cluster behind it has. By default it is a local control plane the
// test starts and stops (localcluster.Up); with RUNNERFLEET_E2E_KUBECONFIG it
// is the user's cluster, found as it is and left as it was.
type cluster struct {
	Kubeconfig string
	Client     client.Client
	// Existing: the user's cluster, not one this test started.
	Existing bool
	// NoKarpenterKWOK says what the cluster lacks of Karpenter with its kwok
	// provider; "" when it has both CRDs.
	NoKarpenterKWOK string
	// RealNode: this machine's real node (localcluster.NodeName), into
	// whose containerd the test imports images.
	RealNode bool
	// RunsContainers: some Ready node runs its pods' containers (kind's,
	// minikube's, a cloud's, the real node). When false every node is a kwok
	// node, whose pods run no code, and the controller runs as a process
	// here with its installed ServiceAccount's token.
	RunsContainers bool

	local *localcluster.Cluster // nil for an existing cluster
	stops []func()              // the controller processes, stopped by the cleanup
}

// existingKubeconfig is RUNNERFLEET_E2E_KUBECONFIG, "" in the default mode.
func existingKubeconfig() string { return os.Getenv(EnvKubeconfig) }

// needsRealNode skips a test that needs this machine's real node (and its
// own local control plane) when the suite runs on an existing cluster.
func needsRealNode(t *testing.T) {
	t.Helper()
	if kc := existingKubeconfig(); kc != "" {
		t.Skipf("needs this machine's real node (a kubelet and containerd started by the test beside its own local control plane); %s=%s runs the suite on an existing cluster", EnvKubeconfig, kc)
	}
}

// The suite runs in two lanes at once. A lane runs its tests one after
// another; each test calls t.Parallel and then waits for its lane:
//
//   - realNodeLane: the tests on this machine's real node. There is one
//     (one kubelet, one containerd, one node address and its iptables
//     rules), so they take turns.
//   - clusterLane: the tests on a control plane whose nodes are all kwok
//     nodes (one each test starts), or on the user's existing cluster,
//     which they share and so also take turns on.
//
// The second lane's tests (about 6 minutes) run beside the first's
// (about 19), which mostly wait on jobs, drains and Karpenter: on 2
// cores they cost the first lane little. make e2e runs go test with
// -parallel high enough that a test waiting for its lane never keeps
// the other lane's test from starting.
var (
	realNodeLane = make(chan struct{}, 1)
	clusterLane  = make(chan struct{}, 1)
)

// onRealNode makes t a test of the real node's lane: skipped on an
// existing cluster (needsRealNode), otherwise run in parallel with the
// cluster lane and after the real node's previous test.
func onRealNode(t *testing.T) {
	t.Helper()
	needsRealNode(t)
	enterLane(t, realNodeLane, "real node")
}

// onKWOKCluster makes t a test of the cluster lane.
func onKWOKCluster(t *testing.T) {
	t.Helper()
	enterLane(t, clusterLane, "cluster")
}

func enterLane(t *testing.T, lane chan struct{}, name string) {
	t.Helper()
	t.Parallel()
	takeLane(t, lane, name)
}

// takeLane waits for lane, and gives it back at t's end.
func takeLane(t *testing.T, lane chan struct{}, name string) {
	t.Helper()
	waited := time.Now()
	lane <- struct{}{}
	t.Cleanup(func() { <-lane })
	if d := time.Since(waited); d > time.Second {
		t.Logf("waited %s for the %s lane", d.Round(time.Second), name)
	}
}

// needsKarpenterKWOK skips t, naming what is missing, when the cluster has no
// Karpenter with its kwok provider.
func (c *cluster) needsKarpenterKWOK(t *testing.T) {
	t.Helper()
	if c.NoKarpenterKWOK != "" {
		t.Skipf("%s; install Karpenter's kwok provider (docs/tasks/run-the-tests.md) to run this test", c.NoKarpenterKWOK)
	}
}

// startCluster gives a test its cluster: the existing one of
// RUNNERFLEET_E2E_KUBECONFIG, or a local control plane started with opts
// (Dir defaults to a temporary directory). Either way the cleanup leaves it
// as it was: the local control plane stops; from an existing cluster
// everything runnerfleet installed goes.
func startCluster(t *testing.T, opts localcluster.Options) *cluster {
	t.Helper()
	if kc := existingKubeconfig(); kc != "" {
		return openExisting(t, kc)
	}
	ctx := context.Background()
	if opts.Dir == "" {
		opts.Dir = stateDir(t)
	}
	if opts.Log == nil {
		opts.Log = &logWriter{t: t, prefix: "localcluster: "}
	}
	if opts.Karpenter && len(opts.CRDs) == 0 {
		for _, c := range slices.Concat(karpenterapis.CRDs, kwokapis.CRDs) {
			opts.CRDs = append(opts.CRDs, c.DeepCopy())
		}
	}
	cl, err := localcluster.Up(ctx, opts)
	t.Cleanup(func() { _ = localcluster.DownWithTimeout(context.Background(), opts.Dir, 20*time.Second, io.Discard) })
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{Kubeconfig: cl.Kubeconfig, Client: cl.Client, RealNode: opts.Node, RunsContainers: opts.Node, local: cl}
	if !opts.Karpenter {
		c.NoKarpenterKWOK = "the local control plane was started without Karpenter"
	}
	t.Cleanup(c.stopControllers)
	return c
}

// openExisting opens the user's cluster, finds what it has, and refuses one
// that already holds runnerfleet: the test installs it and removes it again.
func openExisting(t *testing.T, kubeconfig string) *cluster {
	t.Helper()
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("%s=%s: %v", EnvKubeconfig, kubeconfig, err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: localcluster.Scheme()})
	if err != nil {
		t.Fatalf("%s=%s: %v", EnvKubeconfig, kubeconfig, err)
	}
	c := &cluster{Kubeconfig: kubeconfig, Client: cl, Existing: true}
	have := func(crd string) (bool, error) {
		err := cl.Get(ctx, client.ObjectKey{Name: crd}, &apiextensionsv1.CustomResourceDefinition{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}
	ours, err := crds.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range ours {
		if has, err := have(crd.Name); err != nil {
			t.Fatalf("the cluster of %s=%s does not answer: %v", EnvKubeconfig, kubeconfig, err)
		} else if has {
			t.Fatalf("the cluster of %s=%s already has runnerfleet's CRD %s: the end-to-end tests install runnerfleet and remove it again, so they need a cluster without it (remove it with kubectl delete -f charts/manifests/install.yaml, or use a fresh kind cluster)", EnvKubeconfig, kubeconfig, crd.Name)
		}
	}
	for _, crd := range []string{karpenterCRD, kwokClassCRD} {
		has, err := have(crd)
		if err != nil {
			t.Fatal(err)
		}
		if !has {
			what := "no Karpenter"
			if crd == kwokClassCRD {
				what = "no Karpenter kwok provider"
			}
			c.NoKarpenterKWOK = fmt.Sprintf("the cluster has %s (no %s CRD)", what, crd)
			break
		}
	}
	nodes := &corev1.NodeList{}
	if err := cl.List(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	for i := range nodes.Items {
		if n := &nodes.Items[i]; !isKwokNode(n) && nodeIsReady(n) {
			c.RunsContainers = true
		}
	}
	t.Logf("existing cluster %s: %d nodes, containers run: %v, Karpenter kwok provider: %v", kubeconfig, len(nodes.Items), c.RunsContainers, c.NoKarpenterKWOK == "")
	t.Cleanup(func() { c.uninstall(t) })
	return c
}

// isKwokNode: a node that kwok manages (the local control plane's, and
// those Karpenter's kwok provider creates), whose pods run no code.
func isKwokNode(n *corev1.Node) bool {
	return n.Annotations[localcluster.KwokNodeAnnotation] == localcluster.KwokNodeValue ||
		n.Labels[localcluster.KwokNodeAnnotation] == localcluster.KwokNodeValue
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// uninstall removes from an existing cluster what the test installed: the
// RunnerSets, then the RunnerClasses, while the controller still runs to
// drain them and let their finalizers go; then the teams' namespaces, and
// every object of the install (charts/manifests/install.yaml, which holds
// what the chart and fleet up install too), waiting until its namespace is
// gone so that the next test starts from the same cluster.
func (c *cluster) uninstall(t *testing.T) {
	ctx := context.Background()
	var problems []string
	teams := map[string]bool{}
	sets := &v1alpha1.RunnerSetList{}
	if err := c.Client.List(ctx, sets); err == nil {
		for _, rs := range sets.Items {
			teams[rs.Namespace] = true
		}
	}
	// RunnerSets first (their managers drain, their runner and capacity
	// go), then RunnerClasses, each let go by the controller's finalizer.
	for _, list := range []client.ObjectList{&v1alpha1.RunnerSetList{}, &v1alpha1.RunnerClassList{}} {
		if err := c.deleteAll(ctx, list, 3*time.Minute); err != nil {
			problems = append(problems, err.Error())
		}
	}
	c.stopControllers()
	docs, err := charts.ObjectsOf(charts.InstallYAML())
	if err != nil {
		t.Error(err)
	}
	var gone []client.Object
	for _, d := range docs {
		u := &unstructured.Unstructured{Object: d}
		if err := client.IgnoreNotFound(c.Client.Delete(ctx, u)); err != nil {
			problems = append(problems, fmt.Sprintf("deleting %s %s: %v", u.GetKind(), u.GetName(), err))
		}
		if k := u.GetKind(); k == "Namespace" || k == "CustomResourceDefinition" {
			gone = append(gone, u)
		}
	}
	for ns := range teams {
		_ = client.IgnoreNotFound(c.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	// The next test refuses a cluster that still has runnerfleet's CRDs.
	if err := poll(2*time.Minute, func() error {
		for _, o := range gone {
			if err := c.Client.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object)); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s %s still there (%v)", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
			}
		}
		return nil
	}); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		t.Errorf("removing runnerfleet from the existing cluster: %s", strings.Join(problems, "; "))
	}
}

// deleteAll deletes every object of list's kind and waits until they are
// gone; those the controller has not let go by then lose their finalizers
// (nothing would let them go once it stops), and the error says so. A kind
// the cluster does not have (the test skipped before installing) is no
// error.
func (c *cluster) deleteAll(ctx context.Context, list client.ObjectList, timeout time.Duration) error {
	if err := c.Client.List(ctx, list); err != nil {
		return nil
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	for _, o := range items {
		_ = client.IgnoreNotFound(c.Client.Delete(ctx, o.(client.Object)))
	}
	err = poll(timeout, func() error {
		if err := c.Client.List(ctx, list); err != nil {
			return err
		}
		if n := meta.LenList(list); n > 0 {
			return fmt.Errorf("%d %T items still deleting", n, list)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	items, _ = meta.ExtractList(list)
	for _, o := range items {
		obj := o.(client.Object)
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		obj.SetFinalizers(nil)
		_ = c.Client.Patch(ctx, obj, patch)
	}
	return fmt.Errorf("the controller did not let them go: %w", err)
}

func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %s: %w", timeout, err)
		}
		time.Sleep(time.Second)
	}
}

func (c *cluster) stopControllers() {
	for _, stop := range c.stops {
		stop()
	}
	c.stops = nil
}

// startProcess runs a binary beside the test until the cluster's cleanup
// (an existing cluster's uninstall stops it after the RunnerSets are gone)
// and waits until ready answers 200. Its output goes to a file whose tail
// the test log shows when the test failed.
func (c *cluster) startProcess(t *testing.T, name, path string, args []string, ready string) error {
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		cancel()
		logFile.Close()
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logFile.Close() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cancel()
			<-exited
		}
		cancel()
		if t.Failed() {
			t.Logf("%s's log (last 40 lines):\n%s", name, localcluster.Tail(logPath, 40))
		}
	}
	c.stops = append(c.stops, stop)
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-exited:
			stopped = true
			cancel()
			return fmt.Errorf("%s exited before it was ready: %v\n%s", name, err, localcluster.Tail(logPath, 40))
		case <-time.After(250 * time.Millisecond):
		}
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return errors.New(name + " was not ready after a minute: " + ready)
		}
	}
}

// built is the directory of the binaries buildBinaries built: the suite's
// tests share it (they only run the binaries), and TestMain removes it.
var built struct {
	sync.Mutex
	dir string
}

// buildBinaries builds fleet and the runnerset-controller from this
// checkout, once per test process: a build into a new directory links both
// again, 12 CPU seconds each time (20-60 s on 2 shared cores), which four
// tests paid until then. A failed build is tried again by the next test.
func buildBinaries(t *testing.T, root string) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if built.dir != "" {
		return built.dir
	}
	dir, err := os.MkdirTemp("", "runnerfleet-e2e-bin-")
	if err != nil {
		t.Fatal(err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	run(t, root, 10*time.Minute, "go", "build", "-o", dir+string(os.PathSeparator), "./cmd/fleet", "./cmd/runnerset-controller")
	ok, built.dir = true, filepath.Clean(dir)
	return built.dir
}

// stateDir is a new state directory for a local control plane this test
// starts and stops, owned by this test process: a later run stops the
// control plane if this process dies before its cleanups do.
func stateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := abandoned.Own(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestMain(m *testing.M) {
	if existingKubeconfig() == "" {
		// What an earlier run killed before its cleanups left running.
		if _, err := abandoned.Sweep(context.Background(), os.TempDir(), 20*time.Second, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
		}
	}
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}
