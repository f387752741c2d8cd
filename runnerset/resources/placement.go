package resources

import (
	"maps"

	corev1 "k8s.io/api/core/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Where managers run. A manager never runs on spot capacity: a preemption
// (30 s notice on GKE, 2 min on EC2) kills every job it runs, while it must
// drain them. Managers, and the platform's own pods beside them (the
// controller, Karpenter, KEDA, the ingress controller, Prometheus), run on
// a small on-demand pool: the EKS managed node group and the GKE node pool
// the program declares (infra/aws, infra/gcp), the local cluster's real node
// (localstack/localcluster). The pool carries LabelNodeRole=
// NodeRoleManagers, which manager pods select, and ManagerNodeTaint, which
// they tolerate; job capacity stays spot and tainted per tag.
//
// The taint is CriticalAddonsOnly=true:NoSchedule, Kubernetes' convention
// for a system pool (AKS's system node pools carry the same), rather than a
// taint of our own: the cluster's add-ons that nobody here configures
// (CoreDNS and metrics-server on EKS, kube-dns and its autoscaler on GKE)
// and Karpenter's chart already tolerate it, so tainting the only
// non-Karpenter nodes keeps application pods off the on-demand pool without
// stranding DNS.
const (
	// LabelNodeRole with value NodeRoleManagers marks the managers' nodes.
	LabelNodeRole    = naming.LabelNodeRole
	NodeRoleManagers = "managers"

	managerTaintKey   = "CriticalAddonsOnly"
	managerTaintValue = "true"
)

// ManagerNodeLabels are the labels of the managers' nodes.
func ManagerNodeLabels() map[string]string { return map[string]string{LabelNodeRole: NodeRoleManagers} }

// ManagerNodeSelector is the nodeSelector of every manager pod and of the
// platform's pods that belong beside them.
func ManagerNodeSelector() map[string]string { return maps.Clone(ManagerNodeLabels()) }

// ManagerNodeTaint is the taint of the managers' nodes.
func ManagerNodeTaint() corev1.Taint {
	return corev1.Taint{Key: managerTaintKey, Value: managerTaintValue, Effect: corev1.TaintEffectNoSchedule}
}

// ManagerTolerations let a pod onto the managers' nodes: exactly their
// taint.
func ManagerTolerations() []corev1.Toleration {
	t := ManagerNodeTaint()
	return []corev1.Toleration{{Key: t.Key, Operator: corev1.TolerationOpEqual, Value: t.Value, Effect: t.Effect}}
}

// ManagerPlacementValues are ManagerNodeSelector and ManagerTolerations as
// Helm chart values (plain maps and slices): the gitlab-runner, Karpenter
// and most charts read them as nodeSelector and tolerations.
func ManagerPlacementValues() (nodeSelector map[string]any, tolerations []any) {
	nodeSelector = map[string]any{}
	for k, v := range ManagerNodeSelector() {
		nodeSelector[k] = v
	}
	for _, t := range ManagerTolerations() {
		tolerations = append(tolerations, map[string]any{"key": t.Key, "operator": string(t.Operator), "value": t.Value, "effect": string(t.Effect)})
	}
	return nodeSelector, tolerations
}
