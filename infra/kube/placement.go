package kube

import (
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// ManagerPlacement is the nodeSelector and tolerations, as Helm chart
// values, that put a chart's pods on the managers' on-demand pool
// (runnerset/resources): the gitlab-runner, Karpenter, KEDA and
// kube-state-metrics charts read them at the top level, ingress-nginx
// under controller.
func ManagerPlacement() map[string]any {
	sel := map[string]any{}
	for k, v := range resources.ManagerNodeSelector() {
		sel[k] = v
	}
	var tols []any
	for _, t := range resources.ManagerTolerations() {
		tols = append(tols, map[string]any{"key": t.Key, "operator": string(t.Operator), "value": t.Value, "effect": string(t.Effect)})
	}
	return map[string]any{"nodeSelector": sel, "tolerations": tols}
}
