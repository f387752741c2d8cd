package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

const kwokStagesFile = "kwok-stages.yaml"

// Cluster is a running local cluster.
type Cluster struct {
	Name string
	// Dir is the state directory.
	Dir string
	// Kubeconfig is the admin kubeconfig: client certificate of a member of
	// system:masters.
	Kubeconfig string
	// Server is the API server's URL.
	Server string
	Config *rest.Config
	// Client knows the Kubernetes, apiextensions and runnerfleet types.
	Client client.Client
	State  *State
}

// Scheme has the types Cluster.Client reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme, capacity.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// Open returns the cluster running in dir, or an error saying how to start it.
func Open(ctx context.Context, dir string) (*Cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := ReadState(dir)
	if err != nil {
		return nil, err
	}
	if st == nil || running(dir, APIServer) == 0 {
		return nil, fmt.Errorf("no local control plane runs in %s: start it with fleet up --stack local", dir)
	}
	c, err := open(dir, st)
	if err != nil {
		return nil, err
	}
	if err := c.ping(ctx); err != nil {
		return nil, fmt.Errorf("the local control plane in %s does not answer (%w): restart it with fleet up --stack local", dir, err)
	}
	return c, nil
}

func open(dir string, st *State) (*Cluster, error) {
	kc := KubeconfigPath(dir)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", kc, err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, err
	}
	return &Cluster{Name: st.Name, Dir: dir, Kubeconfig: kc, Server: cfg.Host, Config: cfg, Client: c, State: st}, nil
}

// ping asks the API server's /readyz.
func (c *Cluster) ping(ctx context.Context) error {
	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		return err
	}
	return httpOK(ctx, hc, c.Server+"/readyz")
}

// writeKubeconfig writes the admin kubeconfig with the certificates inline,
// so that it works copied anywhere on this machine.
func writeKubeconfig(dir, name string, port int, pki PKI) error {
	read := func(f string) ([]byte, error) { return os.ReadFile(pki.Path(f)) }
	ca, err := read(caCertFile)
	if err != nil {
		return err
	}
	cert, err := read(adminCertFile)
	if err != nil {
		return err
	}
	key, err := read(adminKeyFile)
	if err != nil {
		return err
	}
	ctxName := "runnerfleet-" + name
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ctxName] = &clientcmdapi.Cluster{Server: fmt.Sprintf("https://127.0.0.1:%d", port), CertificateAuthorityData: ca}
	cfg.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[ctxName] = &clientcmdapi.Context{Cluster: ctxName, AuthInfo: adminUser, Namespace: "default"}
	cfg.CurrentContext = ctxName
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeFileAtomic(KubeconfigPath(dir), b, 0o600)
}

// controlPlane describes the processes of the control plane, in start order.
//
// Choices: etcd speaks plain HTTP, on 127.0.0.1 only. kube-apiserver
// authenticates clients by certificates from the cluster CA and authorizes
// with Node,RBAC, as a real cluster does; the admin kubeconfig is in
// system:masters. kube-controller-manager runs every default controller but
// node IPAM (kwok gives pods their IPs) and the legacy service-account token
// controller (tokens come from the TokenRequest API); it signs with the
// cluster CA and publishes it as kube-root-ca.crt.
func (c *Cluster) controlPlane(pki PKI, assets string, audit []string) []Process {
	p := c.State.Ports
	dir := c.Dir
	bin := func(name string) string { return filepath.Join(assets, name) }
	kc := c.Kubeconfig
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// kube-controller-manager and kube-scheduler serve /healthz with a
		// certificate they make up themselves; this only asks whether they
		// are up.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health check
	}}
	plain := &http.Client{Timeout: 5 * time.Second}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", p.EtcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", p.EtcdPeer)
	apiURL := fmt.Sprintf("https://127.0.0.1:%d", p.APIServer)
	kcm := fmt.Sprintf("https://127.0.0.1:%d", p.ControllerManager)
	sched := fmt.Sprintf("https://127.0.0.1:%d", p.Scheduler)
	kwok := fmt.Sprintf("http://127.0.0.1:%d", p.Kwok)
	delegated := []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc}

	return []Process{
		{
			Name: Etcd, Path: bin(Etcd), Endpoint: etcdURL,
			Args: []string{
				"--name=default",
				"--data-dir=" + filepath.Join(dir, "etcd"),
				"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
				"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
				"--initial-cluster=default=" + peerURL,
				// A development cluster: speed over surviving a power cut.
				"--unsafe-no-fsync=true",
				"--log-level=warn",
			},
			Ready: func(ctx context.Context) error {
				return httpOK(ctx, plain, etcdURL+"/health")
			},
		},
		{
			Name: APIServer, Path: bin(APIServer), Endpoint: apiURL,
			// Deletions and evictions are audited (audit.go).
			Args: append([]string{
				"--etcd-servers=" + etcdURL,
				"--bind-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", p.APIServer),
				"--tls-cert-file=" + pki.Path(apiserverCertFile),
				"--tls-private-key-file=" + pki.Path(apiserverKeyFile),
				"--client-ca-file=" + pki.Path(caCertFile),
				"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
				"--service-account-key-file=" + pki.Path(serviceAccountPub),
				"--service-account-signing-key-file=" + pki.Path(serviceAccountKey),
				"--service-cluster-ip-range=" + serviceClusterCIDR,
				"--authorization-mode=Node,RBAC",
				"--requestheader-client-ca-file=" + pki.Path(frontProxyCACert),
				"--requestheader-allowed-names=" + frontProxyUser,
				"--requestheader-username-headers=X-Remote-User",
				"--requestheader-group-headers=X-Remote-Group",
				"--requestheader-extra-headers-prefix=X-Remote-Extra-",
				"--proxy-client-cert-file=" + pki.Path(frontProxyCert),
				"--proxy-client-key-file=" + pki.Path(frontProxyKey),
				"--allow-privileged=true",
				"--profiling=false",
				// kubectl logs and exec on the real node's pods.
				"--kubelet-client-certificate=" + pki.Path(adminCertFile),
				"--kubelet-client-key=" + pki.Path(adminKeyFile),
				"--kubelet-preferred-address-types=InternalIP,Hostname",
			}, audit...),
			Ready: func(ctx context.Context) error {
				hc, err := rest.HTTPClientFor(c.Config)
				if err != nil {
					return err
				}
				return httpOK(ctx, hc, apiURL+"/readyz")
			},
		},
		{
			Name: ControllerManager, Path: bin(ControllerManager), Endpoint: kcm,
			Args: slices.Concat(delegated, []string{
				"--bind-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", p.ControllerManager),
				"--cert-dir=" + filepath.Join(dir, "pki", ControllerManager),
				// No taint-eviction-controller: Karpenter's kwok provider
				// makes its nodes Ready at once, with the NoExecute taint
				// karpenter.sh/unregistered that Karpenter removes a moment
				// later, and the scheduler binds a job pod the moment it
				// is gone; the eviction controller, its node cache a step
				// behind, then deletes that pod at once (kubernetes/kubernetes
				// issues 119862 and 139992), and the job is lost. A cloud's
				// node is NotReady (NoSchedule) until well after that taint
				// went, which closes the window there. Nothing here relies
				// on NoExecute evictions: PodGC deletes the pods of a node
				// that goes (the reclaim test).
				"--controllers=*,-nodeipam,-serviceaccount-token,-taint-eviction-controller",
				// The built-in host-path provisioner gives a claim of
				// StorageClassName a directory of this machine, where the
				// real node's kubelet mounts it (one node: the volume is
				// wherever the pod runs), and deletes it with its claim.
				"--enable-hostpath-provisioner=true",
				"--leader-elect=false",
				"--use-service-account-credentials=false",
				"--service-account-private-key-file=" + pki.Path(serviceAccountKey),
				"--root-ca-file=" + pki.Path(caCertFile),
				"--cluster-signing-cert-file=" + pki.Path(caCertFile),
				"--cluster-signing-key-file=" + pki.Path(caKeyFile),
				"--cluster-name=runnerfleet-" + c.Name,
				"--profiling=false",
			}),
			Ready: func(ctx context.Context) error { return httpOK(ctx, insecure, kcm+"/healthz") },
		},
		{
			Name: Scheduler, Path: bin(Scheduler), Endpoint: sched,
			Args: slices.Concat(delegated, []string{
				"--bind-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", p.Scheduler),
				"--cert-dir=" + filepath.Join(dir, "pki", Scheduler),
				"--leader-elect=false",
				"--profiling=false",
			}),
			Ready: func(ctx context.Context) error { return httpOK(ctx, insecure, sched+"/healthz") },
		},
		{
			Name: Kwok, Path: bin(Kwok), Endpoint: kwok,
			Args: []string{
				"--kubeconfig=" + kc,
				"--config=" + filepath.Join(assets, kwokStagesFile),
				"--manage-all-nodes=false",
				"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=" + KwokNodeValue,
				fmt.Sprintf("--server-address=127.0.0.1:%d", p.Kwok),
				"--node-lease-duration-seconds=40",
				"--cidr=10.244.0.0/16",
			},
			// kwok also reads ~/.kwok/kwok.yaml when it exists: give it a
			// home of its own, so that nothing outside the state directory
			// changes what it does.
			Env:   []string{"HOME=" + filepath.Join(dir, "kwok-home")},
			Ready: func(ctx context.Context) error { return httpOK(ctx, plain, kwok+"/healthz") },
		},
	}
}

func httpOK(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// setup creates the fake nodes and installs Options.CRDs, and waits until
// the nodes are Ready and the CRDs served. runnerfleet's own CRDs are not
// among them: the Pulumi program declares those, like on every platform.
func (c *Cluster) setup(ctx context.Context, opts Options) error {
	if opts.Node && (c.Running(Kubelet) == 0 || c.Running(Containerd) == 0) {
		// A node half up (one of the two died) starts again from scratch.
		for _, n := range []string{NetworkPolicies, Kubelet} {
			if err := c.StopProcess(n, opts.StopTimeout); err != nil {
				return err
			}
		}
		if err := stopNodeSandboxes(c.Dir, opts.Log); err != nil {
			return err
		}
		if err := c.StopProcess(Containerd, opts.StopTimeout); err != nil {
			return err
		}
		pki, err := EnsurePKI(filepath.Join(c.Dir, "pki"))
		if err != nil {
			return err
		}
		if _, err := c.startNode(ctx, opts, pki); err != nil {
			return err
		}
	}
	if opts.Node && c.Running(NetworkPolicies) == 0 {
		if err := c.startNetworkPolicies(ctx, opts); err != nil {
			return err
		}
	}
	start := time.Now()
	names := make([]string, opts.Nodes)
	for i := range names {
		names[i] = fmt.Sprintf("kwok-node-%d", i)
		if err := c.Client.Create(ctx, fakeNode(names[i])); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating fake node %s: %w", names[i], err)
		}
	}
	if len(names) > 0 {
		if err := c.waitNodesReady(ctx, names, opts.StartTimeout); err != nil {
			return err
		}
		fmt.Fprintf(opts.Log, "Nodes %s Ready (kwok) %.1fs\n", strings.Join(names, ", "), time.Since(start).Seconds())
	}

	if err := c.ensureStorageClass(ctx); err != nil {
		return err
	}
	start = time.Now()
	for _, crd := range opts.CRDs {
		if err := c.applyCRD(ctx, crd); err != nil {
			return err
		}
	}
	fmt.Fprintf(opts.Log, "Installed %d CRDs %.1fs\n", len(opts.CRDs), time.Since(start).Seconds())
	if opts.Karpenter && c.Running(Karpenter) == 0 {
		if err := c.startKarpenter(ctx, opts.StartTimeout, opts.Log); err != nil {
			return err
		}
	}
	if opts.KEDA {
		return c.ensureKEDA(ctx, opts)
	}
	return nil
}

// karpenterBinary is what hack/tools.sh calls Karpenter's kwok provider.
const karpenterBinary = "karpenter-kwok"

// startKarpenter runs Karpenter's kwok provider against the cluster. Its
// metrics and health servers bind every interface (it has no setting for
// the address), on ports picked free.
func (c *Cluster) startKarpenter(ctx context.Context, timeout time.Duration, log io.Writer) error {
	metrics, err := FreePort()
	if err != nil {
		return err
	}
	probe, err := FreePort()
	if err != nil {
		return err
	}
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", probe)
	plain := &http.Client{Timeout: 5 * time.Second}
	p := Process{
		Name: Karpenter,
		Path: filepath.Join(c.State.Assets, karpenterBinary),
		// Its KUBECONFIG, inside the state directory, marks the process as
		// this cluster's (see running).
		Env: []string{
			"KUBECONFIG=" + c.Kubeconfig,
			"DISABLE_LEADER_ELECTION=true",
			"SYSTEM_NAMESPACE=kube-system",
			fmt.Sprintf("METRICS_PORT=%d", metrics),
			fmt.Sprintf("HEALTH_PROBE_PORT=%d", probe),
			"LOG_LEVEL=info",
		},
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics),
		Ready:    func(ctx context.Context) error { return httpOK(ctx, plain, readyz) },
	}
	start := time.Now()
	pid, err := c.StartProcess(ctx, p, timeout, metrics, probe)
	if err != nil {
		return fmt.Errorf("starting Karpenter's kwok provider: %w", err)
	}
	fmt.Fprintf(log, "Started %-23s pid %-7d %-28s %.1fs\n", p.Name, pid, p.Endpoint, time.Since(start).Seconds())
	return nil
}

// fakeNode is a node kwok manages: it marks it Ready, keeps its lease and
// runs the pods scheduled to it, without running anything.
func fakeNode(name string) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("128Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{KwokNodeAnnotation: KwokNodeValue, corev1.ObjectTTLAnnotationKey: "0"},
			Labels: map[string]string{
				NodeLabel:                      NodeLabelValue,
				corev1.LabelHostname:           name,
				corev1.LabelOSStable:           "linux",
				corev1.LabelArchStable:         "amd64",
				corev1.LabelInstanceTypeStable: "kwok",
				naming.LabelNodeRoleAgent:      "",
				naming.LabelLocalFakeNode:      "true",
			},
		},
		// Without a real node the fake nodes are the managers' pool:
		// labelled and tainted as the cloud pools (runnerset/resources).
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{resources.ManagerNodeTaint()}},
		Status: corev1.NodeStatus{Allocatable: res, Capacity: res},
	}
	for k, v := range resources.ManagerNodeLabels() {
		n.Labels[k] = v
	}
	return n
}

func (c *Cluster) waitNodesReady(ctx context.Context, names []string, timeout time.Duration) error {
	var pending []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pending = pending[:0]
		for _, n := range names {
			node := &corev1.Node{}
			if err := c.Client.Get(ctx, client.ObjectKey{Name: n}, node); err != nil {
				pending = append(pending, n+" ("+err.Error()+")")
				continue
			}
			if !nodeReady(node) {
				pending = append(pending, n)
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("fake nodes %s are not Ready after %s: kwok marks them Ready; the end of %s:\n%s",
			strings.Join(pending, ", "), timeout, LogFile(c.Dir, Kwok), Tail(LogFile(c.Dir, Kwok), 20))
	}
	return nil
}

// nodeReady: Ready, and no not-ready or unreachable taint left to keep pods off.
func nodeReady(n *corev1.Node) bool {
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	return ready
}

func (c *Cluster) applyCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	live := &apiextensionsv1.CustomResourceDefinition{}
	err := c.Client.Get(ctx, client.ObjectKeyFromObject(crd), live)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Client.Create(ctx, crd.DeepCopy()); err != nil {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
	case err != nil:
		return fmt.Errorf("getting CRD %s: %w", crd.Name, err)
	default:
		upd := crd.DeepCopy()
		upd.ResourceVersion = live.ResourceVersion
		if err := c.Client.Update(ctx, upd); err != nil {
			return fmt.Errorf("updating CRD %s: %w", crd.Name, err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(crd), live); err != nil {
			return false, nil
		}
		for _, cond := range live.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s is not Established after 30s: see %s", crd.Name, LogFile(c.Dir, APIServer))
	}
	return nil
}

// Running returns the pid of the named process when it runs, 0 otherwise.
func (c *Cluster) Running(name string) int { return running(c.Dir, name) }

// StartProcess starts p detached beside the control plane, with the same pid
// file and log conventions, and waits until it is ready; Down stops it before
// the control plane. ports are recorded so that Down can check they are free.
func (c *Cluster) StartProcess(ctx context.Context, p Process, timeout time.Duration, ports ...int) (int, error) {
	if running(c.Dir, p.Name) != 0 {
		return 0, fmt.Errorf("%s already runs in %s: stop it first", p.Name, c.Dir)
	}
	pid, err := spawn(c.Dir, p)
	if err != nil {
		return 0, err
	}
	if err := waitReady(ctx, c.Dir, p, pid, timeout); err != nil {
		_ = stopProcess(c.Dir, p.Name, 10*time.Second)
		return 0, err
	}
	st, err := ReadState(c.Dir)
	if err != nil || st == nil {
		return pid, errors.Join(err, errors.New("the cluster state disappeared"))
	}
	if st.Endpoints == nil {
		st.Endpoints = map[string]string{}
	}
	st.Endpoints[p.Name] = p.Endpoint
	if st.ExtraPorts == nil {
		st.ExtraPorts = map[string][]int{}
	}
	st.ExtraPorts[p.Name] = ports
	c.State = st
	return pid, writeState(c.Dir, st)
}

// StopProcess stops one process, SIGKILL after grace.
func (c *Cluster) StopProcess(name string, grace time.Duration) error {
	return stopProcess(c.Dir, name, grace)
}

// ProcessStatus is one process of a local cluster.
type ProcessStatus struct {
	Name     string
	PID      int // 0 when it does not run
	Endpoint string
	Log      string
}

// StatusReport is what runs in a state directory.
type StatusReport struct {
	Dir        string
	Kubeconfig string
	Server     string
	// Ready: the API server answers /readyz.
	Ready bool
	// Err says why the API server does not answer.
	Err       error
	Processes []ProcessStatus
}

// Status reports the processes of the cluster in dir and whether its API
// server is ready. A directory with no cluster is not an error.
func Status(ctx context.Context, dir string) (*StatusReport, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &StatusReport{Dir: dir, Kubeconfig: KubeconfigPath(dir)}
	st, err := ReadState(dir)
	if err != nil {
		return nil, err
	}
	endpoints := map[string]string{}
	if st != nil {
		endpoints = st.Endpoints
	}
	names := append([]string{}, StartOrder...)
	for _, n := range append([]string{Controller}, recorded(dir)...) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, n := range names {
		s.Processes = append(s.Processes, ProcessStatus{Name: n, PID: running(dir, n), Endpoint: endpoints[n], Log: LogFile(dir, n)})
	}
	if st == nil {
		s.Err = fmt.Errorf("no local control plane in %s", dir)
		return s, nil
	}
	c, err := open(dir, st)
	if err != nil {
		s.Err = err
		return s, nil
	}
	s.Server = c.Server
	if running(dir, APIServer) == 0 {
		s.Err = errors.New("kube-apiserver is not running")
		return s, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.ping(pctx); err != nil {
		s.Err = err
		return s, nil
	}
	s.Ready = true
	return s, nil
}

// RunsBinary reports whether the named process runs the file at path as it
// is now: same executable, not rebuilt since the process started.
func (c *Cluster) RunsBinary(name, path string) bool {
	pid := running(c.Dir, name)
	if pid == 0 {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	want, err := filepath.EvalSymlinks(path)
	if err != nil || exe != want {
		return false // a rebuilt binary shows as "<path> (deleted)"
	}
	bin, err := os.Stat(want)
	if err != nil {
		return false
	}
	started, err := os.Stat(pidFile(c.Dir, name))
	return err == nil && !bin.ModTime().After(started.ModTime())
}

// StorageClassName is the local cluster's default StorageClass: volumes of
// kube-controller-manager's host-path provisioner (kubernetes.io/host-path),
// directories under /tmp of this machine that go with their claims. Only
// the real node's pods can use them (a kwok node mounts nothing).
const StorageClassName = "local-hostpath"

// hostPathProvisioner is the provisioner name of kube-controller-manager's
// --enable-hostpath-provisioner.
const hostPathProvisioner = "kubernetes.io/host-path"

// ensureStorageClass creates the default StorageClass.
func (c *Cluster) ensureStorageClass(ctx context.Context) error {
	del := corev1.PersistentVolumeReclaimDelete
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: StorageClassName, Annotations: map[string]string{
			"storageclass.kubernetes.io/is-default-class": "true",
		}},
		Provisioner:   hostPathProvisioner,
		ReclaimPolicy: &del,
	}
	if err := c.Client.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", StorageClassName, err)
	}
	return nil
}
