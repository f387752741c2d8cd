package localcluster

// The real node: containerd (with its CRI plugin) and a kubelet on this
// machine, registered beside kwok's fake nodes. Managers run on it as real
// containers from images built locally (images.go); job capacity stays on
// Karpenter's kwok nodes.
//
// Everything lives under <dir>/node: containerd's root, state and socket,
// the kubelet's root directory, pod logs, the CNI configuration and IPAM
// state. The pods' cgroups are under /sys/fs/cgroup/<controller>/runnerfleet-<name>.
// Pods reach this machine at HostIP, the gateway of the node's bridge.
// stopNode removes every pod (through CRI: containers, mounts, network
// namespaces), stops containerd and its shims, then sweeps what a crash may
// have left: processes in the node's cgroups, mounts under <dir>/node, the
// bridge.

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	criv1 "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/runnerfleet/runnerfleet/internal/ociimage"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// The real node's processes, its name, and how pods reach this machine.
const (
	Containerd = "containerd"
	Kubelet    = "kubelet"
	// ServiceProxy carries the kubernetes Service's address to the API
	// server, so that pods on the real node (managers creating job pods,
	// a controller in a pod) reach it as in any cluster.
	ServiceProxy = "kubernetes-service-proxy"
	// NodeName is the real node's name.
	NodeName = "runnerfleet-node"
	// Bridge, PodCIDR and HostIP: the node's pod network. HostIP is the
	// bridge's own address, the pods' gateway: a server on this machine that
	// pods must reach (the loopback GitLab) listens there.
	Bridge  = "rf0"
	PodCIDR = "10.213.0.0/24"
	HostIP  = "10.213.0.1"
	// The system binaries the node runs, from Debian (hack/tools.sh node).
	containerdBinary = "/usr/bin/containerd"
	runcBinary       = "/usr/sbin/runc"
	ctrBinary        = "/usr/bin/ctr"
	cniBinDir        = "/usr/lib/cni"
	// criNamespace is the containerd namespace of the CRI plugin.
	criNamespace = "k8s.io"
	// nodeOwnerFile records which state directory runs the machine's one
	// real node (the bridge and HostIP are per machine).
	nodeOwnerFile = "/run/runnerfleet-node.owner"
	// containerLogLinks is where the kubelet links container logs (fixed).
	containerLogLinks = "/var/log/containers"
)

// managerTaint is the real node's taint: it is the managers' pool.
var managerTaint = resources.ManagerNodeTaint()

// nodeLabels is the kubelet's --node-labels: the managers' pool's labels.
func nodeLabels() string {
	var kv []string
	for k, v := range resources.ManagerNodeLabels() {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// nodeDir is where everything of the real node lives.
func nodeDir(dir string) string { return filepath.Join(dir, "node") }

// ContainerdSocket is the CRI socket of the real node.
func ContainerdSocket(dir string) string {
	return filepath.Join(nodeDir(dir), "run", "containerd.sock")
}

// PodLogsDir is where the kubelet writes the logs of the real node's
// containers: <namespace>_<pod>_<uid>/<container>/<restart>.log.
func PodLogsDir(dir string) string { return filepath.Join(nodeDir(dir), "pod-logs") }

func cgroupRoot(name string) string { return "/runnerfleet-" + name }

// NodeImages are the images imported into the real node.
type NodeImages struct {
	Pause, Standin string
}

// checkNodeHost says what this machine lacks to run the real node.
func checkNodeHost() error {
	if os.Geteuid() != 0 {
		return errors.New("the real node (containerd, kubelet) needs root: run as root, or without the real node")
	}
	for _, f := range []string{containerdBinary, runcBinary, ctrBinary, filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback"), busyboxPath, iptablesBinary, ipsetBinary} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("the real node needs %s: install the Debian packages with hack/tools.sh node", f)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		if _, err2 := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err2 != nil {
			return errors.New("the real node needs cgroups: neither /sys/fs/cgroup/memory (v1) nor /sys/fs/cgroup/cgroup.controllers (v2) exists")
		}
	}
	return nil
}

// claimNode makes dir the owner of the machine's real node, unless another
// state directory's node still runs.
func claimNode(dir string) error { return claimNodeAt(nodeOwnerFile, dir) }

// nodeProcesses are the processes of the real node's state directory that
// hold something of the machine's: the node (containerd, the kubelet), the
// kubernetes Service's address on the bridge, the NetworkPolicy rules.
var nodeProcesses = []string{Containerd, Kubelet, ServiceProxy, NetworkPolicies}

// nodeRuns names a process of dir's real node that still runs, or is "".
// A node whose kubelet died but whose service proxy runs still holds the
// Service's address: a new node beside it would send its pods to a dead
// API server (x509 errors were how one such leftover showed).
func nodeRuns(dir string) string {
	for _, n := range nodeProcesses {
		if running(dir, n) != 0 {
			return n
		}
	}
	return ""
}

// claimNodeAt is claimNode with the owner file at path.
func claimNodeAt(path, dir string) error {
	if b, err := os.ReadFile(path); err == nil {
		other := strings.TrimSpace(string(b))
		if p := nodeRuns(other); other != dir && p != "" {
			return fmt.Errorf("the local cluster in %s runs this machine's real node (bridge %s, %s; its %s runs): stop it first (fleet down --state-dir %s)", other, Bridge, HostIP, p, other)
		}
	}
	return writeFileAtomic(path, []byte(dir+"\n"), 0o644)
}

// ensureBridge creates the node's bridge with HostIP, so that servers can
// listen there before the first pod exists; the CNI bridge plugin adopts it.
func ensureBridge() error {
	if _, err := net.InterfaceByName(Bridge); err != nil {
		if out, err := exec.Command("ip", "link", "add", Bridge, "type", "bridge").CombinedOutput(); err != nil {
			return fmt.Errorf("creating bridge %s: %v: %s", Bridge, err, out)
		}
	}
	ifc, err := net.InterfaceByName(Bridge)
	if err != nil {
		return err
	}
	addrs, _ := ifc.Addrs()
	has := false
	for _, a := range addrs {
		if strings.HasPrefix(a.String(), HostIP+"/") {
			has = true
		}
	}
	if !has {
		_, ipnet, _ := net.ParseCIDR(PodCIDR)
		ones, _ := ipnet.Mask.Size()
		if out, err := exec.Command("ip", "addr", "add", fmt.Sprintf("%s/%d", HostIP, ones), "dev", Bridge).CombinedOutput(); err != nil {
			return fmt.Errorf("giving bridge %s the address %s: %v: %s", Bridge, HostIP, err, out)
		}
	}
	if out, err := exec.Command("ip", "link", "set", Bridge, "up").CombinedOutput(); err != nil {
		return fmt.Errorf("bringing bridge %s up: %v: %s", Bridge, err, out)
	}
	return nil
}

// startServiceProxy gives the bridge the kubernetes Service's address (pods
// route to it through their gateway, this machine) and starts ServiceProxy
// there, carrying the Service's port to the API server. No kube-proxy runs
// here; this is the one Service a pod of the real node needs.
func (c *Cluster) startServiceProxy(ctx context.Context, opts Options) error {
	ifc, err := net.InterfaceByName(Bridge)
	if err != nil {
		return err
	}
	addrs, _ := ifc.Addrs()
	if !slices.ContainsFunc(addrs, func(a net.Addr) bool { return a.String() == kubernetesService+"/32" }) {
		if out, err := exec.Command("ip", "addr", "add", kubernetesService+"/32", "dev", Bridge).CombinedOutput(); err != nil {
			return fmt.Errorf("giving bridge %s the kubernetes Service's address %s: %v: %s", Bridge, kubernetesService, err, out)
		}
	}
	bin := filepath.Join(nodeDir(c.Dir), "bin", ServiceProxy)
	if err := ociimage.GoBuild(ctx, opts.RepoRoot, "./localstack/localcluster/internal/serviceproxy", bin, "", ""); err != nil {
		return fmt.Errorf("building %s: %w", ServiceProxy, err)
	}
	listen := net.JoinHostPort(kubernetesService, strconv.Itoa(kubernetesServicePort))
	t := time.Now()
	pid, err := c.StartProcess(ctx, Process{
		Name: ServiceProxy, Path: bin,
		Args:     []string{"--listen=" + listen, "--to=" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.State.Ports.APIServer))},
		Endpoint: "tcp://" + listen,
		Ready: func(ctx context.Context) error {
			conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", listen)
			if err == nil {
				conn.Close()
			}
			return err
		},
	}, opts.StartTimeout)
	if err != nil {
		return fmt.Errorf("starting %s: %w", ServiceProxy, err)
	}
	fmt.Fprintf(opts.Log, "Started %-23s pid %-7d %-28s %.1fs\n", ServiceProxy, pid, "tcp://"+listen, time.Since(t).Seconds())
	return nil
}

// ensureCgroupRoot creates the node's cgroup in every hierarchy: the
// kubelet refuses a cgroupRoot that does not exist. A v1 cpuset cgroup
// starts with no CPUs and no memory nodes; it gets its parent's.
func ensureCgroupRoot(name string) error {
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue // not a hierarchy
		}
		cg := filepath.Join(h, cgroupRoot(name))
		if err := os.MkdirAll(cg, 0o755); err != nil {
			return fmt.Errorf("creating the real node's cgroup %s: %w", cg, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(cg, f), b, 0o644); err != nil {
					return fmt.Errorf("setting %s of %s: %w", f, cg, err)
				}
			}
		}
	}
	return nil
}

// nodeFiles writes containerd's and the kubelet's configuration, the CNI
// network and the kubelet's kubeconfig.
func (c *Cluster) nodeFiles(pki PKI, pauseRef string, kubeletPort, healthzPort int) error {
	nd := nodeDir(c.Dir)
	for _, d := range []string{"containerd/root", "containerd/state", "run", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "pki"} {
		if err := os.MkdirAll(filepath.Join(nd, d), 0o755); err != nil {
			return err
		}
	}
	// Containerd 1.6 (Debian), config version 2, CRI with runc on cgroupfs.
	containerd := fmt.Sprintf(`# Written by runnerfleet's localcluster; rewritten on every start.
version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1
`, filepath.Join(nd, "containerd/root"), filepath.Join(nd, "containerd/state"), ContainerdSocket(c.Dir), ContainerdSocket(c.Dir)+".ttrpc",
		filepath.Join(nd, "containerd/opt"), pauseRef, runcBinary, cniBinDir, filepath.Join(nd, "cni/net.d"))
	if err := writeFileAtomic(filepath.Join(nd, "containerd/config.toml"), []byte(containerd), 0o644); err != nil {
		return err
	}

	cni := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "runnerfleet",
		"plugins": []any{
			map[string]any{
				// The bridge already has HostIP (ensureBridge); as a
				// gateway the plugin would also turn on the machine's IP
				// forwarding, which pods that only talk to this machine
				// do not need and which would outlive the cluster.
				"type": "bridge", "bridge": Bridge, "isGateway": false, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": PodCIDR, "gateway": HostIP}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(nd, "cni/ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, _ := json.MarshalIndent(cni, "", "  ")
	if err := writeFileAtomic(filepath.Join(nd, "cni/net.d/10-runnerfleet.conflist"), b, 0o644); err != nil {
		return err
	}

	// The kubelet's client certificate: system:node:<name> in system:nodes,
	// authorized by the Node authorizer like any kubelet's.
	if err := issueClientCert(pki, "system:node:"+NodeName, []string{"system:nodes"}, filepath.Join(nd, "pki/kubelet-client")); err != nil {
		return err
	}
	if err := writeKubeletKubeconfig(filepath.Join(nd, "kubelet.kubeconfig"), c.Server, pki, filepath.Join(nd, "pki/kubelet-client")); err != nil {
		return err
	}
	// The machine's resolv.conf may point at 127.0.0.53, which no pod
	// reaches; pods here resolve nothing.
	if err := writeFileAtomic(filepath.Join(nd, "resolv.conf"), []byte("# pods of the real node resolve no names\n"), 0o644); err != nil {
		return err
	}
	kubelet := fmt.Sprintf(`# Written by runnerfleet's localcluster; rewritten on every start.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://%s
# This machine's cgroups: v1 controllers (plus a unified hierarchy), no
# systemd: cgroupfs, and the kubelet must be told that v1 is acceptable.
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: %s
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
resolvConf: %q
podLogsDir: %q
podCIDR: %s
maxPods: 30
# A development machine's disk is often fuller than a node's: evict only
# when it is all but full, and never garbage-collect images.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", nodefs.inodesFree: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
serializeImagePulls: false
registerWithTaints: []
syncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
shutdownGracePeriod: 0s
`, HostIP, kubeletPort, healthzPort, pki.Path(caCertFile), ContainerdSocket(c.Dir), cgroupRoot(c.Name),
		filepath.Join(nd, "resolv.conf"), PodLogsDir(c.Dir), PodCIDR)
	return writeFileAtomic(filepath.Join(nd, "kubelet.yaml"), []byte(kubelet), 0o644)
}

// issueClientCert writes <base>.crt and <base>.key, a client certificate of
// the cluster CA, unless they exist.
func issueClientCert(pki PKI, cn string, orgs []string, base string) error {
	return issueCert(pki, certSpec{cn: cn, orgs: orgs, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, base)
}

// certSpec says what a certificate of the cluster CA is for.
type certSpec struct {
	cn     string
	orgs   []string
	usages []x509.ExtKeyUsage
	dns    []string
	ips    []net.IP
}

// issueCert writes <base>.crt and <base>.key, a certificate of the cluster
// CA, unless they exist.
func issueCert(pki PKI, spec certSpec, base string) error {
	if _, err := os.Stat(base + ".crt"); err == nil {
		if _, err := os.Stat(base + ".key"); err == nil {
			return nil
		}
	}
	caCert, err := LoadCertificate(pki.Path(caCertFile))
	if err != nil {
		return err
	}
	kb, err := os.ReadFile(pki.Path(caKeyFile))
	if err != nil {
		return err
	}
	block, _ := pem.Decode(kb)
	if block == nil {
		return errors.New(pki.Path(caKeyFile) + ": no PEM key")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return err
	}
	caKey, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return fmt.Errorf("%s is not an ECDSA key", pki.Path(caKeyFile))
	}
	key, err := newKey()
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	_, der, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: spec.cn, Organization: spec.orgs},
		NotBefore:   now,
		NotAfter:    now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: spec.usages,
		DNSNames:    spec.dns,
		IPAddresses: spec.ips,
	}, key, caCert, caKey)
	if err != nil {
		return fmt.Errorf("signing the certificate of %s: %w", spec.cn, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(base+".key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(base+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeKubeletKubeconfig(path, server string, pki PKI, base string) error {
	ca, err := os.ReadFile(pki.Path(caCertFile))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[NodeName] = &clientcmdapi.AuthInfo{ClientCertificate: base + ".crt", ClientKey: base + ".key"}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: NodeName}
	cfg.CurrentContext = "local"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b, 0o600)
}

// startNode starts containerd, imports the images, starts the kubelet and
// waits until the node is Ready.
func (c *Cluster) startNode(ctx context.Context, opts Options, pki PKI) (NodeImages, error) {
	var imgs NodeImages
	if err := checkNodeHost(); err != nil {
		return imgs, err
	}
	// Whatever an earlier run left (a crash, a kill -9) goes first (not
	// another state directory's running node: see sweepNode); then the
	// claim, which the sweep of an earlier run of this directory removes.
	if err := c.sweepNode(opts.Log); err != nil {
		return imgs, err
	}
	if err := claimNode(c.Dir); err != nil {
		return imgs, err
	}
	start := time.Now()
	pause, standin, err := buildImages(ctx, opts.RepoRoot, filepath.Join(nodeDir(c.Dir), "images"), opts.Log)
	if err != nil {
		return imgs, err
	}
	imgs = NodeImages{Pause: pause.Ref, Standin: standin.Ref}
	if err := ensureBridge(); err != nil {
		return imgs, err
	}
	if err := c.startServiceProxy(ctx, opts); err != nil {
		return imgs, err
	}
	if err := ensureCgroupRoot(c.Name); err != nil {
		return imgs, err
	}
	kubeletPort, err := FreePort()
	if err != nil {
		return imgs, err
	}
	healthzPort, err := FreePort()
	if err != nil {
		return imgs, err
	}
	if err := c.nodeFiles(pki, pause.Ref, kubeletPort, healthzPort); err != nil {
		return imgs, fmt.Errorf("writing the real node's configuration: %w", err)
	}
	nd := nodeDir(c.Dir)
	sock := ContainerdSocket(c.Dir)
	t := time.Now()
	pid, err := c.StartProcess(ctx, Process{
		Name: Containerd, Path: containerdBinary,
		Args:     []string{"--config=" + filepath.Join(nd, "containerd/config.toml"), "--log-level=warn"},
		Endpoint: "unix://" + sock,
		Ready:    func(ctx context.Context) error { return criReady(ctx, sock) },
	}, opts.StartTimeout)
	if err != nil {
		return imgs, fmt.Errorf("starting containerd: %w", err)
	}
	fmt.Fprintf(opts.Log, "Started %-23s pid %-7d %-28s %.1fs\n", Containerd, pid, "unix://"+filepath.Base(sock), time.Since(t).Seconds())

	t = time.Now()
	for _, im := range []builtImage{pause, standin} {
		if err := importImage(ctx, sock, im); err != nil {
			return imgs, err
		}
	}
	fmt.Fprintf(opts.Log, "Imported %s and %s into the node's containerd %.1fs\n", pause.Ref, standin.Ref, time.Since(t).Seconds())

	t = time.Now()
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", healthzPort)
	plain := &http.Client{Timeout: 5 * time.Second}
	pid, err = c.StartProcess(ctx, Process{
		Name: Kubelet, Path: filepath.Join(c.State.Assets, Kubelet),
		Args: []string{
			"--config=" + filepath.Join(nd, "kubelet.yaml"),
			"--kubeconfig=" + filepath.Join(nd, "kubelet.kubeconfig"),
			"--root-dir=" + filepath.Join(nd, "kubelet"),
			"--cert-dir=" + filepath.Join(nd, "pki"),
			"--hostname-override=" + NodeName,
			"--node-ip=" + HostIP,
			// The managers' pool, labelled and tainted as the cloud ones
			// (runnerset/resources): managers select and tolerate it.
			"--node-labels=" + nodeLabels(),
			"--register-with-taints=" + managerTaint.ToString(),
			"--v=1",
		},
		Endpoint: fmt.Sprintf("https://%s:%d", HostIP, kubeletPort),
		Ready:    func(ctx context.Context) error { return httpOK(ctx, plain, healthz) },
	}, opts.StartTimeout, kubeletPort, healthzPort)
	if err != nil {
		return imgs, fmt.Errorf("starting the kubelet: %w", err)
	}
	if err := c.waitNodesReady(ctx, []string{NodeName}, opts.StartTimeout); err != nil {
		return imgs, fmt.Errorf("the real node %s is not Ready: the end of %s:\n%s", NodeName, LogFile(c.Dir, Kubelet), Tail(LogFile(c.Dir, Kubelet), 25))
	}
	fmt.Fprintf(opts.Log, "Started %-23s pid %-7d node %s Ready %.1fs (the real node took %.1fs)\n", Kubelet, pid, NodeName,
		time.Since(t).Seconds(), time.Since(start).Seconds())
	return imgs, writeNodeImages(c.Dir, imgs)
}

func writeNodeImages(dir string, imgs NodeImages) error {
	b, _ := json.Marshal(imgs)
	return writeFileAtomic(filepath.Join(nodeDir(dir), "images.json"), b, 0o644)
}

// ReadNodeImages returns the images imported into the real node of the
// cluster in dir.
func ReadNodeImages(dir string) (NodeImages, error) {
	var imgs NodeImages
	b, err := os.ReadFile(filepath.Join(nodeDir(dir), "images.json"))
	if err != nil {
		return imgs, fmt.Errorf("the cluster in %s has no real node images: %w", dir, err)
	}
	return imgs, json.Unmarshal(b, &imgs)
}

func criConn(sock string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// criReady asks containerd's CRI plugin for its status.
func criReady(ctx context.Context, sock string) error {
	conn, err := criConn(sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	st, err := criv1.NewRuntimeServiceClient(conn).Status(ctx, &criv1.StatusRequest{})
	if err != nil {
		return err
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type == criv1.RuntimeReady && !c.Status {
			return fmt.Errorf("CRI runtime not ready: %s %s", c.Reason, c.Message)
		}
	}
	return nil
}

// KillContainer sends SIGKILL to a container of the real node, by its CRI
// ID (a pod's containerStatuses[].containerID without "containerd://"), as
// a crash or the OOM killer would end it: no preStop hook, no SIGTERM, no
// clean-up. The kubelet restarts it in the same pod.
func (c *Cluster) KillContainer(ctx context.Context, id string) error {
	out, err := exec.CommandContext(ctx, ctrBinary, "--address", ContainerdSocket(c.Dir), "--namespace", criNamespace,
		"tasks", "kill", "--signal", "SIGKILL", strings.TrimPrefix(id, "containerd://")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("killing container %s on the real node: %v: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// importImage imports a docker archive into the CRI namespace with ctr, and
// checks that CRI lists it.
// ImportImage imports a docker archive (as make image writes it) into the
// real node's containerd as ref, so that pods of the node run it without a
// registry (imagePullPolicy IfNotPresent).
func (c *Cluster) ImportImage(ctx context.Context, ref, archive string) error {
	return importImage(ctx, ContainerdSocket(c.Dir), builtImage{Ref: ref, Archive: archive})
}

func importImage(ctx context.Context, sock string, im builtImage) error {
	out, err := exec.CommandContext(ctx, ctrBinary, "--address", sock, "--namespace", criNamespace, "images", "import", "--no-unpack=false", im.Archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing %s (%s) into the node's containerd: %v: %s", im.Ref, im.Archive, err, strings.TrimSpace(string(out)))
	}
	conn, err := criConn(sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	st, err := criv1.NewImageServiceClient(conn).ImageStatus(ctx, &criv1.ImageStatusRequest{Image: &criv1.ImageSpec{Image: im.Ref}})
	if err != nil {
		return fmt.Errorf("asking CRI for image %s: %w", im.Ref, err)
	}
	if st.GetImage() == nil {
		return fmt.Errorf("image %s is not in the node's containerd after ctr images import %s: %s", im.Ref, im.Archive, strings.TrimSpace(string(out)))
	}
	return nil
}

// stopNodeSandboxes stops and removes every pod sandbox through CRI, so that
// containerd unmounts their volumes and releases their network namespaces.
func stopNodeSandboxes(dir string, log io.Writer) error {
	sock := ContainerdSocket(dir)
	if running(dir, Containerd) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := criConn(sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := criv1.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &criv1.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing the node's pods through CRI: %w", err)
	}
	var errs []error
	for _, sb := range list.GetItems() {
		if _, err := rt.StopPodSandbox(ctx, &criv1.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping pod %s/%s: %w", sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName(), err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &criv1.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("removing pod %s/%s: %w", sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName(), err))
		}
	}
	if n := len(list.GetItems()); n > 0 {
		fmt.Fprintf(log, "Removed %d pod(s) from the real node\n", n)
	}
	return errors.Join(errs...)
}

// sweepNode removes what the real node of dir may have left behind: the
// containerd shims of its socket, processes in its cgroups, mounts under
// <dir>/node, its cgroups, and the bridge. Nothing of another cluster is
// touched. It is a no-op when nothing is left.
func (c *Cluster) sweepNode(log io.Writer) error {
	return sweepNode(c.Dir, c.Name, log)
}

// sweepNodeOf sweeps the real node of the cluster in dir, if it ever had one.
func sweepNodeOf(dir string, log io.Writer) error {
	if _, err := os.Stat(nodeDir(dir)); err != nil {
		return nil
	}
	name := "local"
	if st, err := ReadState(dir); err == nil && st != nil {
		name = st.Name
	}
	return sweepNode(dir, name, log)
}

func sweepNode(dir, name string, log io.Writer) error {
	if running(dir, Kubelet) != 0 || running(dir, Containerd) != 0 {
		return fmt.Errorf("the real node of %s still runs: stop it first", dir)
	}
	// Another state directory's node runs on this machine: the cgroups of
	// name may be its (a cluster of the same name), and the bridge and the
	// NetworkPolicy rules are; none of it is ours to sweep.
	if b, err := os.ReadFile(nodeOwnerFile); err == nil {
		if other := strings.TrimSpace(string(b)); other != dir && nodeRuns(other) != "" {
			return nil
		}
	}
	var errs []error
	nd := nodeDir(dir)
	sock := ContainerdSocket(dir)
	// Shims: containerd-shim-runc-v2 ... -address <sock>.
	killed := 0
	for _, pid := range pidsWhere(func(cmdline []string) bool {
		return len(cmdline) > 0 && strings.HasPrefix(filepath.Base(cmdline[0]), "containerd-shim") && slices.Contains(cmdline, sock)
	}) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		killed++
	}
	// Processes of the node's containers: in its cgroups.
	cgroups := nodeCgroups(name)
	for _, cg := range cgroups {
		for _, pid := range cgroupProcs(cg) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed++
		}
	}
	if killed > 0 {
		time.Sleep(500 * time.Millisecond)
	}
	// Mounts under the node's directory, deepest first; and the network
	// namespaces containerd pinned for its sandboxes, when their sandbox
	// is gone with the node.
	mounts := mountsUnder(nd)
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	// Cgroups, deepest first (rmdir fails while a process remains).
	sort.Slice(cgroups, func(i, j int) bool { return len(cgroups[i]) > len(cgroups[j]) })
	for _, cg := range cgroups {
		var err error
		for range 20 {
			if err = syscall.Rmdir(cg); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", cg, err))
		}
	}
	// The kubelet links every container log into /var/log/containers.
	links, _ := filepath.Glob(filepath.Join(containerLogLinks, "*.log"))
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, PodLogsDir(dir)+"/") {
			_ = os.Remove(l)
		}
	}
	if owner, _ := os.ReadFile(nodeOwnerFile); strings.TrimSpace(string(owner)) == dir {
		// The NetworkPolicy rules are the machine's, like the bridge.
		if running(dir, NetworkPolicies) == 0 {
			if err := cleanupNetworkPolicies(log); err != nil {
				errs = append(errs, err)
			}
		}
		if _, err := net.InterfaceByName(Bridge); err == nil {
			if out, err := exec.Command("ip", "link", "del", Bridge).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("deleting bridge %s: %v: %s", Bridge, err, out))
			}
		}
		if len(errs) == 0 {
			_ = os.Remove(nodeOwnerFile)
		}
	}
	if killed+len(mounts) > 0 {
		fmt.Fprintf(log, "Swept the real node: %d process(es) killed, %d mount(s) removed\n", killed, len(mounts))
	}
	return errors.Join(errs...)
}

// pidsWhere lists the processes whose command line matches.
func pidsWhere(match func(cmdline []string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			out = append(out, pid)
		}
	}
	return out
}

// nodeCgroups lists every cgroup directory under the node's cgroup root, in
// every hierarchy.
func nodeCgroups(name string) []string {
	var out []string
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	hier = append(hier, "/sys/fs/cgroup")
	for _, h := range hier {
		root := filepath.Join(h, cgroupRoot(name))
		if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
			continue
		}
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

func cgroupProcs(cg string) []int {
	f, err := os.Open(filepath.Join(cg, "cgroup.procs"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var pid int
		if _, err := fmt.Sscanf(sc.Text(), "%d", &pid); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// mountsUnder lists the mount points at or under dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return slices.Compact(out)
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// NodeMounts lists what is mounted under the real node's directory of dir;
// empty once the node is stopped.
func NodeMounts(dir string) []string { return mountsUnder(nodeDir(dir)) }

// NodeCgroups lists the real node's cgroups of the cluster named name.
func NodeCgroups(name string) []string { return nodeCgroups(name) }
