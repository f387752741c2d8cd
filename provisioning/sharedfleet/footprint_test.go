package sharedfleet

import (
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

// A retire wait runs from the deployment that first retired the fleet or
// the zone: later deployments keep its end, so that redeploying a retired
// fleet never pushes its removal out, and a fleet retired anew waits anew.
func TestFootprintsKeepTheRetireTime(t *testing.T) {
	fleet := fleetspec.SharedFleet{
		Name: "staging", Namespace: "ci-staging", Retired: true, RetiredZones: []string{"europe-west1-d"},
		Groups: []fleetspec.ManagerGroup{{Name: "linux", Project: "ci", Zone: "europe-west1-b"}},
	}.Effective(fleetspec.Platform{})
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	wait := RetireWait(fleet)
	if least := fleetspec.MinSharedJobTimeout + GCMinGrace; wait < least {
		t.Fatalf("retire wait %s, want at least the job timeout and gc's grace, %s", wait, least)
	}
	first, err := Footprints([]fleetspec.SharedFleet{fleet}, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	fp := first["ci-staging"]
	if fp.Fleet != "staging" || fp.Project != "ci" || len(fp.Zones) != 1 || fp.Zones[0] != "europe-west1-b" {
		t.Errorf("footprint %+v, want fleet staging in project ci, europe-west1-b (retired zones apart)", fp)
	}
	if !fp.RetiredUntil.Equal(t0.Add(wait)) || !fp.RetiredZones["europe-west1-d"].Equal(t0.Add(wait)) {
		t.Errorf("first retired: until %s and zones %v, want %s", fp.RetiredUntil, fp.RetiredZones, t0.Add(wait))
	}
	again, err := Footprints([]fleetspec.SharedFleet{fleet}, first, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if fp := again["ci-staging"]; !fp.RetiredUntil.Equal(t0.Add(wait)) || !fp.RetiredZones["europe-west1-d"].Equal(t0.Add(wait)) {
		t.Errorf("redeployed an hour later: until %s and zones %v, want still %s", fp.RetiredUntil, fp.RetiredZones, t0.Add(wait))
	}
	active := fleet
	active.Retired, active.RetiredZones = false, nil
	back, err := Footprints([]fleetspec.SharedFleet{active}, again, t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if fp := back["ci-staging"]; !fp.RetiredUntil.IsZero() || fp.RetiredZones != nil {
		t.Errorf("no longer retired: %+v, want no retire time", fp)
	}
	anew, err := Footprints([]fleetspec.SharedFleet{fleet}, back, t0.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if fp := anew["ci-staging"]; !fp.RetiredUntil.Equal(t0.Add(3*time.Hour + wait)) {
		t.Errorf("retired anew: until %s, want %s", fp.RetiredUntil, t0.Add(3*time.Hour+wait))
	}
}
