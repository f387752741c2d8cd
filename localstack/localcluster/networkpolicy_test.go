package localcluster

import (
	"slices"
	"testing"
)

// What `iptables -S` lists on a node kube-router's network policy
// controller has written to, beside the kubelet's own chains.
const kubeRouterListing = `-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-N KUBE-FIREWALL
-N KUBE-NWPLCY-5AAZ3YZ6MF5FAHET
-N KUBE-NWPLCY-DEFAULT
-N KUBE-POD-FW-4M5GCTOBCEZWBD7T
-N KUBE-ROUTER-FORWARD
-N KUBE-ROUTER-INPUT
-N KUBE-ROUTER-OUTPUT
-A INPUT -j KUBE-FIREWALL
-A INPUT -m comment --comment "kube-router netpol - 4IA2OSFRMVNDXBVV" -j KUBE-ROUTER-INPUT
-A FORWARD -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD
-A KUBE-POD-FW-4M5GCTOBCEZWBD7T -d 10.213.0.2/32 -m comment --comment "run through default ingress network policy chain" -j KUBE-NWPLCY-DEFAULT
`

func TestKubeRoutersChainsAreFoundAndNoOthers(t *testing.T) {
	got := kubeRouterChains(kubeRouterListing)
	want := []string{"KUBE-NWPLCY-5AAZ3YZ6MF5FAHET", "KUBE-NWPLCY-DEFAULT", "KUBE-POD-FW-4M5GCTOBCEZWBD7T", "KUBE-ROUTER-FORWARD", "KUBE-ROUTER-INPUT", "KUBE-ROUTER-OUTPUT"}
	if !slices.Equal(got, want) {
		t.Errorf("kube-router's chains: %v, want %v (the kubelet's KUBE-FIREWALL is not)", got, want)
	}
}

func TestTheJumpToKubeRouterIsFoundByItsRuleNumber(t *testing.T) {
	input := `-P INPUT ACCEPT
-A INPUT -j KUBE-FIREWALL
-A INPUT -m comment --comment "kube-router netpol - 4IA2OSFRMVNDXBVV" -j KUBE-ROUTER-INPUT
`
	if n := jumpToKubeRouter(input); n != 2 {
		t.Errorf("INPUT: rule %d, want 2 (rule 1 jumps to the kubelet's KUBE-FIREWALL)", n)
	}
	if n := jumpToKubeRouter("-P OUTPUT ACCEPT\n-A OUTPUT -j KUBE-FIREWALL\n"); n != 0 {
		t.Errorf("OUTPUT without kube-router: rule %d, want 0", n)
	}
}
