package sharedfleet

import (
	"testing"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

// A fleet's Prometheus is named after the fleet's namespace and gets the
// stack's VM quota, or the sum of the groups' maxVMs times their
// maxManagers when the stack names none (fleetspec's Effective fleet).
func TestMonitoringSpecQuota(t *testing.T) {
	group := func(name string, maxVMs int, maxManagers int32) fleetspec.ManagerGroup {
		return fleetspec.ManagerGroup{Name: name, MaxVMs: maxVMs, Scaling: fleetspec.Scaling{MinManagers: 1, MaxManagers: maxManagers}}
	}
	prod := monitoringSpec(fleetspec.SharedFleet{
		Name: "production", Namespace: "production",
		Monitoring: fleetspec.SharedFleetMonitoring{VMQuota: 800},
		Groups:     []fleetspec.ManagerGroup{group("linux", 100, 4), group("fleeting", 50, 2)},
	}.Effective(fleetspec.Platform{}))
	if prod.Name != "production" || prod.VMQuota != 800 || len(prod.Groups) != 2 {
		t.Errorf("production %+v, want its vmQuota 800 and both groups", prod)
	}
	staging := monitoringSpec(fleetspec.SharedFleet{
		Name: "staging", Namespace: "ci-staging",
		Groups: []fleetspec.ManagerGroup{group("linux", 10, 1), group("windows", 5, 3)},
	}.Effective(fleetspec.Platform{}))
	if staging.Name != "ci-staging" || staging.VMQuota != 25 || len(staging.Groups) != 2 {
		t.Errorf("staging %+v, want it named after its namespace with quota 25 (10 × 1 + 5 × 3) and its groups", staging)
	}
}
