package kube

import (
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// ManagerPlacement is the nodeSelector and tolerations, as Helm chart
// values, that put a chart's pods on the managers' on-demand pool
// (runnerset/resources).
func ManagerPlacement() map[string]any {
	sel, tols := resources.ManagerPlacementValues()
	return map[string]any{"nodeSelector": sel, "tolerations": tols}
}
