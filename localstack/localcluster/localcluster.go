// Package localcluster runs a Kubernetes control plane on this machine, for
// the local stack and the end-to-end tests: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok, whose fake nodes take the
// pods the scheduler gives them and report them Running. Nothing needs root,
// Docker or a network beyond 127.0.0.1.
//
// Every process runs detached (its own session), so the cluster outlives the
// command that started it. A state directory holds everything: the PKI, the
// admin kubeconfig, etcd's data, cluster.json (ports) and logs/<process>.{pid,log}.
// Up is idempotent; Down stops the processes in reverse dependency order and
// waits for each to exit.
//
// The binaries come from hack/tools.sh local, which builds them from the Go
// module proxy into a cache outside the repository.
package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// The processes of a local cluster, by name.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kwok              = "kwok"
	// Karpenter is Karpenter's kwok cloud provider: the real Karpenter
	// controllers, with instances that are kwok nodes. Up starts it after
	// the CRDs when Options.Karpenter is set.
	Karpenter = "karpenter"
	// Controller is the runnerset-controller. The caller starts it with
	// Cluster.StartProcess; Down stops it first.
	Controller = "runnerset-controller"
	// Prometheus is a Prometheus server that watches the local stack; the
	// caller starts it with Cluster.StartPrometheus.
	Prometheus = "prometheus"
)

// StartOrder is the order Up starts the control plane in.
var StartOrder = []string{Etcd, APIServer, ControllerManager, Scheduler, Kwok}

// StopOrder is the order Down stops processes in: whatever writes to the API
// first, then the API server, then its storage. Processes Down does not know
// (add-ons started with StartProcess) stop before all of these.
var StopOrder = []string{Controller, KEDAMetricsAPIServer, KEDAOperator, Karpenter, Kubelet, Containerd, ServiceProxy, Kwok, Scheduler, ControllerManager, APIServer, Etcd}

// Kwok selects the nodes it manages by this annotation; the nodes Up creates
// carry it and NodeLabel.
const (
	KwokNodeAnnotation = naming.AnnotationKwokNode
	KwokNodeValue      = "fake"
	NodeLabel          = naming.LabelKwokNodeType
	NodeLabelValue     = "kwok"
)

// Options say where and how to run a local cluster.
type Options struct {
	// Dir is the state directory; required. fleet uses <repo>/.local/<stack>.
	Dir string
	// Name names the kubeconfig context (runnerfleet-<Name>); default "local".
	Name string
	// Assets is the directory holding etcd, kube-apiserver,
	// kube-controller-manager, kube-scheduler, kwok and kwok-stages.yaml.
	// Default: $RUNNERFLEET_LOCAL_ASSETS, else what `hack/tools.sh local`
	// in RepoRoot prints (it builds them the first time).
	Assets string
	// RepoRoot is the runnerfleet checkout holding hack/tools.sh.
	RepoRoot string
	// CRDs are installed once the nodes are up, for example Karpenter's.
	// runnerfleet's own come with the Pulumi program.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// Karpenter starts Karpenter's kwok provider once the CRDs are in; CRDs
	// must then hold Karpenter's (NodePool, NodeClaim, KWOKNodeClass, …).
	Karpenter bool
	// KEDA installs KEDA's CRDs and starts KEDA's operator and its metrics
	// adapter (keda.go) once the CRDs are in, and registers the adapter as
	// the external metrics API: every ScaledObject is then reconciled by
	// KEDA itself, its HPA included.
	KEDA bool
	// Nodes is the number of fake kwok nodes; default 2, none when Node is
	// set (managers then run on the real node, jobs on Karpenter's nodes).
	Nodes int
	// Node starts the real node (node.go): containerd and a kubelet on this
	// machine, running the pause and stand-in runner images built from
	// RepoRoot. It needs root and hack/tools.sh node.
	Node bool
	// StartTimeout bounds the start of each process; default 2m.
	StartTimeout time.Duration
	// StopTimeout is how long Down waits after SIGTERM before SIGKILL; default 20s.
	StopTimeout time.Duration
	// Log receives progress lines; default io.Discard.
	Log io.Writer
}

func (o *Options) defaults() error {
	if o.Dir == "" {
		return errors.New("localcluster: Options.Dir (the state directory) is required")
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	o.Dir = abs
	if o.Name == "" {
		o.Name = "local"
	}
	if o.Nodes <= 0 && !o.Node {
		o.Nodes = 2
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 20 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// Ports are the 127.0.0.1 ports of a local cluster.
type Ports struct {
	EtcdClient        int `json:"etcdClient"`
	EtcdPeer          int `json:"etcdPeer"`
	APIServer         int `json:"apiServer"`
	ControllerManager int `json:"controllerManager"`
	Scheduler         int `json:"scheduler"`
	Kwok              int `json:"kwok"`
}

// State is <dir>/cluster.json: what a later command needs to find the cluster.
type State struct {
	Name   string `json:"name"`
	Assets string `json:"assets"`
	Ports  Ports  `json:"ports"`
	// Endpoints of every process, by name, for Status.
	Endpoints map[string]string `json:"endpoints"`
	// ExtraPorts are the ports of processes started with StartProcess.
	ExtraPorts map[string][]int `json:"extraPorts,omitempty"`
}

// AllPorts lists every port the cluster's processes were given.
func (s *State) AllPorts() []int {
	p := s.Ports
	out := []int{p.EtcdClient, p.EtcdPeer, p.APIServer, p.ControllerManager, p.Scheduler, p.Kwok}
	for _, ps := range s.ExtraPorts {
		out = append(out, ps...)
	}
	return slices.DeleteFunc(out, func(p int) bool { return p == 0 })
}

func statePath(dir string) string { return filepath.Join(dir, "cluster.json") }

// ReadState reads <dir>/cluster.json; nil, nil when there is none.
func ReadState(dir string) (*State, error) {
	b, err := os.ReadFile(statePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := &State{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("reading %s: %w (delete the state directory and run fleet up again)", statePath(dir), err)
	}
	return s, nil
}

func writeState(dir string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(statePath(dir), append(b, '\n'), 0o644)
}

// KubeconfigPath is the admin kubeconfig of the cluster in dir.
func KubeconfigPath(dir string) string { return filepath.Join(dir, "kubeconfig") }

// Up starts the local cluster in opts.Dir, or reuses it when every process
// runs and the API server is ready. A cluster found half running (a process
// died, the machine rebooted) is stopped and started again on the same data.
// When Up fails it stops what it started, leaving the logs.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	dir := opts.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating state directory %s: %w", dir, err)
	}
	unlock, err := lock(dir, opts.Log)
	if err != nil {
		return nil, err
	}
	defer unlock()

	prev, err := ReadState(dir)
	if err != nil {
		return nil, err
	}
	if prev != nil && allRunning(dir) {
		c, err := open(dir, prev)
		if err == nil {
			if err = c.ping(ctx); err == nil {
				fmt.Fprintf(opts.Log, "Reusing the local control plane in %s (%s)\n", dir, c.Server)
				if err := c.setup(ctx, opts); err != nil {
					return nil, err
				}
				return c, nil
			}
		}
		fmt.Fprintf(opts.Log, "The local control plane in %s does not answer (%v); restarting it\n", dir, err)
	}
	// Whatever is left of an earlier run goes first.
	if err := stopAll(dir, opts.StopTimeout, opts.Log); err != nil {
		return nil, err
	}

	assets, err := resolveAssets(opts)
	if err != nil {
		return nil, err
	}
	pki, err := EnsurePKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("generating the cluster's certificates: %w", err)
	}
	st := &State{Name: opts.Name, Assets: assets, Endpoints: map[string]string{}}
	if st.Ports, err = pickPorts(prev); err != nil {
		return nil, err
	}
	if err := writeKubeconfig(dir, opts.Name, st.Ports.APIServer, pki); err != nil {
		return nil, err
	}
	c, err := open(dir, st)
	if err != nil {
		return nil, err
	}
	audit, err := auditArgs(dir)
	if err != nil {
		return nil, err
	}
	procs := c.controlPlane(pki, assets, audit)
	for _, p := range procs {
		st.Endpoints[p.Name] = p.Endpoint
	}
	if err := writeState(dir, st); err != nil {
		return nil, err
	}
	fail := func(err error) (*Cluster, error) {
		if serr := stopAll(dir, opts.StopTimeout, io.Discard); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, err
	}
	for _, p := range procs {
		start := time.Now()
		pid, err := spawn(dir, p)
		if err != nil {
			return fail(err)
		}
		if err := waitReady(ctx, dir, p, pid, opts.StartTimeout); err != nil {
			return fail(err)
		}
		fmt.Fprintf(opts.Log, "Started %-23s pid %-7d %-28s %.1fs\n", p.Name, pid, p.Endpoint, time.Since(start).Seconds())
	}
	if err := c.setup(ctx, opts); err != nil {
		return fail(err)
	}
	return c, nil
}

// Down stops every process of the cluster in dir (StopOrder, add-ons first),
// waiting for each to exit, and checks that none of their ports still
// accepts connections. The state directory stays, with the logs and etcd's
// data; a later Up starts on the same data.
func Down(ctx context.Context, dir string) error {
	return DownWithTimeout(ctx, dir, 20*time.Second, io.Discard)
}

// DownWithTimeout is Down with the time between SIGTERM and SIGKILL and a
// writer for progress lines.
func DownWithTimeout(ctx context.Context, dir string, grace time.Duration, log io.Writer) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	unlock, err := lock(dir, log)
	if err != nil {
		return err
	}
	defer unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := stopAll(dir, grace, log); err != nil {
		return err
	}
	st, err := ReadState(dir)
	if err != nil || st == nil {
		return err
	}
	var still []string
	for _, p := range st.AllPorts() {
		if Listening(p) {
			still = append(still, fmt.Sprint(p))
		}
	}
	if len(still) > 0 {
		return fmt.Errorf("every process of %s is stopped, yet 127.0.0.1 port(s) %s still accept connections: find the listener with `ss -ltnp`",
			dir, strings.Join(still, ", "))
	}
	return nil
}

// stopOrder is the order stopAll stops the recorded processes in.
func stopOrder(recordedNames []string) []string {
	var order []string
	for _, n := range recordedNames {
		if !slices.Contains(StopOrder, n) {
			order = append(order, n)
		}
	}
	return append(order, StopOrder...)
}

func stopAll(dir string, grace time.Duration, log io.Writer) error {
	var errs []error
	for _, name := range stopOrder(recorded(dir)) {
		if name == Containerd {
			// The kubelet is stopped: remove the pods through CRI while
			// containerd still runs, so that it unmounts and releases them.
			if err := stopNodeSandboxes(dir, log); err != nil {
				errs = append(errs, err)
			}
		}
		pid := running(dir, name)
		if name == Kwok {
			// After containerd: whatever the real node left goes.
			if err := sweepNodeOf(dir, log); err != nil {
				errs = append(errs, err)
			}
		}
		if pid == 0 {
			_ = os.Remove(pidFile(dir, name))
			continue
		}
		start := time.Now()
		if err := stopProcess(dir, name, grace); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(log, "Stopped %-23s pid %-7d %.1fs\n", name, pid, time.Since(start).Seconds())
	}
	return errors.Join(errs...)
}

// allRunning reports whether every control-plane process runs.
func allRunning(dir string) bool {
	for _, n := range StartOrder {
		if running(dir, n) == 0 {
			return false
		}
	}
	return true
}

// pickPorts gives each process a free port, the one it had before when that
// is still free: etcd keeps its peer URL and old kubeconfigs keep working.
func pickPorts(prev *State) (Ports, error) {
	var old Ports
	if prev != nil {
		old = prev.Ports
	}
	var p Ports
	taken := map[int]bool{}
	for _, f := range []struct {
		dst *int
		old int
	}{
		{&p.EtcdClient, old.EtcdClient}, {&p.EtcdPeer, old.EtcdPeer}, {&p.APIServer, old.APIServer},
		{&p.ControllerManager, old.ControllerManager}, {&p.Scheduler, old.Scheduler}, {&p.Kwok, old.Kwok},
	} {
		if f.old != 0 && !taken[f.old] && portFree(f.old) {
			*f.dst = f.old
		} else {
			for {
				port, err := FreePort()
				if err != nil {
					return p, err
				}
				if !taken[port] {
					*f.dst = port
					break
				}
			}
		}
		taken[*f.dst] = true
	}
	return p, nil
}

// resolveAssets finds the directory holding the binaries.
func resolveAssets(opts Options) (string, error) {
	dir := opts.Assets
	if dir == "" {
		dir = os.Getenv("RUNNERFLEET_LOCAL_ASSETS")
	}
	if dir == "" {
		if opts.RepoRoot == "" {
			return "", errors.New("localcluster: no binaries: set RUNNERFLEET_LOCAL_ASSETS to the output of `hack/tools.sh local`, or run from a runnerfleet checkout")
		}
		fmt.Fprintf(opts.Log, "Finding the control-plane binaries with hack/tools.sh local (the first run builds them, which takes minutes)\n")
		cmd := exec.Command(filepath.Join(opts.RepoRoot, "hack", "tools.sh"), "local")
		cmd.Dir = opts.RepoRoot
		cmd.Stderr = opts.Log
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("building the control-plane binaries with hack/tools.sh local: %w (its output is above)", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	need := []string{Etcd, APIServer, ControllerManager, Scheduler, Kwok, kwokStagesFile}
	if opts.Karpenter {
		need = append(need, karpenterBinary)
	}
	if opts.KEDA {
		if err := buildKEDA(dir, opts); err != nil {
			return "", err
		}
		need = append(need, kedaAssets...)
	}
	if opts.Node {
		need = append(need, Kubelet)
	}
	if b := missingAssets(dir, need); b != "" {
		return "", fmt.Errorf("%s is missing from %s: run hack/tools.sh local and use the directory it prints", b, dir)
	}
	return dir, nil
}

// buildKEDA builds KEDA into the assets directory's links with `hack/tools.sh
// keda` when they do not lead to its files yet: `hack/tools.sh local` links
// them but builds KEDA only on this call, about 7 minutes the first time
// (a stack that scales nothing never pays them). Another caller's build of
// the same version is waited for.
func buildKEDA(assets string, opts Options) error {
	if missingAssets(assets, kedaAssets) == "" || opts.RepoRoot == "" {
		return nil
	}
	fmt.Fprintf(opts.Log, "Building KEDA's operator and metrics adapter with hack/tools.sh keda (the first build takes about 7 minutes)\n")
	cmd := exec.Command(filepath.Join(opts.RepoRoot, "hack", "tools.sh"), "keda")
	cmd.Dir = opts.RepoRoot
	cmd.Stderr = opts.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building KEDA with hack/tools.sh keda: %w (its output is above)", err)
	}
	return nil
}

// lock keeps two commands from starting or stopping the same cluster at once.
func lock(dir string, log io.Writer) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		fmt.Fprintf(log, "Waiting for another fleet command working on %s\n", dir)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
