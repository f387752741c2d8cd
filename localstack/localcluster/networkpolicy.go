package localcluster

// NetworkPolicy enforcement on the real node: kube-router's network policy
// controller (github.com/cloudnativelabs/kube-router/v2, built by
// hack/tools.sh local against the project's k8s.io versions), alone: no
// routing, no service proxy, no CNI of its own (the node's bridge plugin
// stays). It turns the cluster's NetworkPolicies into iptables rules and
// ipsets (Debian's iptables, nf_tables backend, and ipset) on the node's
// FORWARD, INPUT and OUTPUT chains, which see the pods' bridged traffic
// (br_netfilter). Why kube-router and not sigs.k8s.io/kube-network-policies:
// the latter hands packets to user space with nftables' queue expression,
// which this machine's kernel lacks (CONFIG_NFT_QUEUE is not set: `nft add
// rule ... queue num 100` fails with "No such file or directory"), while
// iptables, its set match and ipset are built in; see
// docs/concepts/isolation.md.
//
// kube-router leaves its rules in place when it stops (it expects to be
// restarted), and its own --cleanup-config does not remove them in v2.1.0
// (it cleans an empty controller, then panics in the service proxy's
// cleanup); so Down, and a node that starts again, remove them here.

import (
	"bufio"
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
	"time"
)

const (
	// NetworkPolicies is the process that enforces NetworkPolicy on the
	// real node.
	NetworkPolicies = "kube-router"
	// The Debian binaries kube-router drives (hack/tools.sh node).
	iptablesBinary = "/usr/sbin/iptables"
	ipsetBinary    = "/usr/sbin/ipset"
)

// kubeRouterChainPrefixes name the filter table chains kube-router's network
// policy controller creates (KUBE-ROUTER-INPUT, -FORWARD and -OUTPUT, jumped
// to from the built-in chains; KUBE-POD-FW-<hash> per pod; KUBE-NWPLCY-<hash>
// per policy and KUBE-NWPLCY-DEFAULT), and kubeRouterSetPrefixes its ipsets.
var (
	kubeRouterChainPrefixes = []string{"KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-"}
	kubeRouterSetPrefixes   = []string{"KUBE-SRC-", "KUBE-DST-"}
)

// startNetworkPolicies starts kube-router's network policy controller for
// the real node, once the node is registered (it reads the node's address
// to tell its pods), and waits until it serves its health check and has
// written its chains. It reads pods, namespaces, NetworkPolicies and nodes
// of the whole cluster with the admin kubeconfig: the node's own credentials
// (the Node authorizer) may not list NetworkPolicies.
func (c *Cluster) startNetworkPolicies(ctx context.Context, opts Options) error {
	bin := filepath.Join(c.State.Assets, NetworkPolicies)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s is missing from %s: run hack/tools.sh local and use the directory it prints", NetworkPolicies, c.State.Assets)
	}
	// What an earlier run left (a kill -9, a crash) goes first.
	if err := cleanupNetworkPolicies(opts.Log); err != nil {
		return err
	}
	health, err := FreePort()
	if err != nil {
		return err
	}
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", health)
	plain := &http.Client{Timeout: 5 * time.Second}
	t := time.Now()
	pid, err := c.StartProcess(ctx, Process{
		Name: NetworkPolicies, Path: bin,
		Args: []string{
			"--kubeconfig=" + c.Kubeconfig,
			"--hostname-override=" + NodeName,
			"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
			"--service-cluster-ip-range=" + serviceClusterCIDR,
			"--health-port=" + strconv.Itoa(health), "--metrics-port=0",
		},
		// iptables, iptables-save/-restore and ipset, by name.
		Env:      []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Endpoint: healthz,
		Ready: func(ctx context.Context) error {
			if err := httpOK(ctx, plain, healthz); err != nil {
				return err
			}
			if out, err := exec.CommandContext(ctx, iptablesBinary, "-w", "-S", "KUBE-ROUTER-FORWARD").CombinedOutput(); err != nil {
				return fmt.Errorf("no KUBE-ROUTER-FORWARD chain yet: %v: %s", err, strings.TrimSpace(string(out)))
			}
			return nil
		},
	}, opts.StartTimeout, health)
	if err != nil {
		return fmt.Errorf("starting %s, the real node's NetworkPolicy enforcement: %w", NetworkPolicies, err)
	}
	fmt.Fprintf(opts.Log, "Started %-23s pid %-7d NetworkPolicy on %s %.1fs\n", NetworkPolicies, pid, NodeName, time.Since(t).Seconds())
	return nil
}

// cleanupNetworkPolicies removes kube-router's network policy rules, chains
// and ipsets from this machine; kube-router must not run. Nothing to do
// without iptables.
func cleanupNetworkPolicies(log io.Writer) error {
	if _, err := os.Stat(iptablesBinary); err != nil {
		return nil
	}
	iptables := func(args ...string) (string, error) {
		out, err := exec.Command(iptablesBinary, append([]string{"-w"}, args...)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return string(out), nil
	}
	removed := 0
	// The jumps from the built-in chains, by rule number (their comments
	// hold spaces), one at a time: each deletion renumbers the chain.
	for _, chain := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		for {
			out, err := iptables("-S", chain)
			if err != nil {
				return err
			}
			n := jumpToKubeRouter(out)
			if n == 0 {
				break
			}
			if _, err := iptables("-D", chain, strconv.Itoa(n)); err != nil {
				return err
			}
			removed++
		}
	}
	out, err := iptables("-S")
	if err != nil {
		return err
	}
	chains := kubeRouterChains(out)
	for _, ch := range chains {
		if _, err := iptables("-F", ch); err != nil {
			return err
		}
	}
	var errs []error
	for _, ch := range chains {
		if _, err := iptables("-X", ch); err != nil {
			errs = append(errs, err)
		}
	}
	sets := 0
	if _, err := os.Stat(ipsetBinary); err == nil {
		out, err := exec.Command(ipsetBinary, "list", "-n").CombinedOutput()
		if err != nil {
			return fmt.Errorf("ipset list -n: %v: %s", err, strings.TrimSpace(string(out)))
		}
		for _, s := range strings.Fields(string(out)) {
			if !hasAnyPrefix(s, kubeRouterSetPrefixes) {
				continue
			}
			if out, err := exec.Command(ipsetBinary, "destroy", s).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ipset destroy %s: %v: %s", s, err, strings.TrimSpace(string(out))))
				continue
			}
			sets++
		}
	}
	if removed+len(chains)+sets > 0 {
		fmt.Fprintf(log, "Removed %s's rules: %d jumps, %d chains, %d ipsets\n", NetworkPolicies, removed, len(chains), sets)
	}
	return errors.Join(errs...)
}

// jumpToKubeRouter returns the number of the first rule of a chain listed by
// `iptables -S <chain>` that jumps to a chain of kube-router's, 0 when none
// does. The listing's first line is the chain's policy (or -N), rule 1 the
// second.
func jumpToKubeRouter(listing string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(listing))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "-A" {
			continue
		}
		n++
		for i := 0; i+1 < len(f); i++ {
			if (f[i] == "-j" || f[i] == "-g") && hasAnyPrefix(f[i+1], kubeRouterChainPrefixes) {
				return n
			}
		}
	}
	return 0
}

// kubeRouterChains lists kube-router's chains in `iptables -S` output.
func kubeRouterChains(listing string) []string {
	var chains []string
	sc := bufio.NewScanner(strings.NewReader(listing))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "-N" && hasAnyPrefix(f[1], kubeRouterChainPrefixes) {
			chains = append(chains, f[1])
		}
	}
	return chains
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
