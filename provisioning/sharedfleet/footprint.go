package sharedfleet

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// Footprint is what one deployment of a shared fleet leaves for the next to
// judge a change by: where the fleet's docker+machine VMs may be, and, for
// what was retired, until when. A fleet's VMs are deleted, once idle, by
// its managers or by its fleet gc, which finds them by the fleet's
// namespace (the runnerfleet-fleet label) in its zones (GCScope); a change
// that takes away the namespace's gc, or a zone from it, while VMs are
// left there orphans them: nothing would ever delete them.
type Footprint struct {
	// Fleet is the fleet's name.
	Fleet string `json:"fleet"`
	// Project is the project of the fleet's VMs (fleet gc covers one).
	Project string `json:"project"`
	// Zones are the zones the fleet's groups ran VMs in.
	Zones []string `json:"zones"`
	// RetiredZones are the fleet's retiredZones, each with the time until
	// which VMs may be left there (RetireWait after it was first retired).
	RetiredZones map[string]time.Time `json:"retiredZones,omitempty"`
	// RetiredUntil is, for a retired fleet, the time until which its VMs
	// may be left (RetireWait after it was first retired); zero otherwise.
	RetiredUntil time.Time `json:"retiredUntil,omitzero"`
}

// RetireWait is how long after a deployment that retires fleet s, or a
// zone of it, VMs it ran may be left: its managers that go drain for the
// job timeout and drain margin; then fleet gc notes each VM they leave at
// its next run and deletes it at the first run past the grace
// (Fleet.orphanedFor). Past it, a VM left is one gc failed to delete, which
// the GCFailing or OrphanedVMs alert reports.
func RetireWait(s fleetspec.SharedFleet) time.Duration {
	return s.JobTimeoutOrDefault() + DrainMarginSeconds*time.Second + monitoringSpec(s).orphanedFor()
}

// Footprints are the footprints of fleets, by namespace, deployed at now
// after a deployment that left prev (nil for none): what is retired keeps
// the time prev gave it, and what is retired now waits RetireWait from now.
func Footprints(fleets []fleetspec.SharedFleet, prev map[string]Footprint, now time.Time) (map[string]Footprint, error) {
	out := make(map[string]Footprint, len(fleets))
	for _, s := range fleets {
		project, zones, err := groupScope(s)
		if err != nil {
			return nil, err
		}
		was, until := prev[s.Namespace], now.Add(RetireWait(s)).UTC()
		fp := Footprint{Fleet: s.Name, Project: project, Zones: zones}
		for _, z := range s.RetiredZones {
			if fp.RetiredZones == nil {
				fp.RetiredZones = map[string]time.Time{}
			}
			fp.RetiredZones[z] = until
			if t, ok := was.RetiredZones[z]; ok {
				fp.RetiredZones[z] = t
			}
		}
		if s.Retired {
			fp.RetiredUntil = until
			if !was.RetiredUntil.IsZero() {
				fp.RetiredUntil = was.RetiredUntil
			}
		}
		out[s.Namespace] = fp
	}
	return out, nil
}

// groupScope is the project and the zones fleet s's groups run VMs in:
// gc's scope without the retired zones.
func groupScope(s fleetspec.SharedFleet) (string, []string, error) {
	s.RetiredZones = nil
	return GCScope(s)
}

// CheckFootprints refuses, at now, a change of fleets that would orphan VMs
// the previous deployment (whose footprints are prev, by namespace) may
// have left: a fleet's namespace gone from the stack (the fleet removed or
// its namespace changed) before the fleet was retired for its RetireWait,
// its groups moved to another project, a zone the fleet's groups used that is now neither a group's nor in its
// retiredZones, or a retired zone gone from retiredZones before its wait.
// p is the path of sharedFleets, the keys the errors name.
func CheckFootprints(prev map[string]Footprint, fleets []fleetspec.SharedFleet, p *field.Path, now time.Time) (field.ErrorList, error) {
	var errs field.ErrorList
	namespaces := make([]string, 0, len(prev))
	for ns := range prev {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	for _, ns := range namespaces {
		was := prev[ns]
		label := vmfleet.LabelFleet + "=" + ns
		i := slices.IndexFunc(fleets, func(s fleetspec.SharedFleet) bool { return s.Namespace == ns })
		if i < 0 {
			if !was.RetiredUntil.IsZero() && !now.Before(was.RetiredUntil) {
				continue
			}
			fix := "put the fleet back as it was (namespace " + ns + ") with retired: true and deploy: its managers drain and its fleet gc deletes the VMs they leave; the fleet may go after its retire wait (docs/tasks/retire-a-shared-fleet.md)"
			if !was.RetiredUntil.IsZero() {
				fix = "it is retired, and its managers may drain and its fleet gc delete the VMs they leave until " + stamp(was.RetiredUntil) + ": put it back as it was until then (docs/tasks/retire-a-shared-fleet.md)"
			}
			if j := slices.IndexFunc(fleets, func(s fleetspec.SharedFleet) bool { return s.Name == was.Fleet }); j >= 0 {
				if !was.RetiredUntil.IsZero() {
					fix = "it is retired, and its managers may drain and its fleet gc delete the VMs they leave until " + stamp(was.RetiredUntil) + ": keep namespace " + ns + " until then (docs/tasks/retire-a-shared-fleet.md)"
				} else {
					fix = fmt.Sprintf("keep namespace %s and set %s: true, and change the namespace after its retire wait (docs/tasks/retire-a-shared-fleet.md); to serve meanwhile, add the fleet in the new namespace as another entry under another name", ns, p.Index(j).Child("retired"))
				}
				errs = append(errs, field.Forbidden(p.Index(j).Child("namespace"), fmt.Sprintf(
					"shared fleet %s ran in namespace %s in the previous deployment; its VMs (labelled %s) are deleted only by that namespace's fleet gc, which moving the fleet to namespace %s removes, so they would be orphaned: %s",
					was.Fleet, ns, label, fleets[j].Namespace, fix)))
				continue
			}
			errs = append(errs, field.Forbidden(p, fmt.Sprintf(
				"shared fleet %s (namespace %s) of the previous deployment is gone; its VMs (labelled %s) are deleted only by its fleet gc, which removing it removes, so they would be orphaned: %s",
				was.Fleet, ns, label, fix)))
			continue
		}
		project, zones, err := GCScope(fleets[i])
		if err != nil {
			return nil, err
		}
		if project != was.Project {
			errs = append(errs, field.Forbidden(p.Index(i).Child("groups"), fmt.Sprintf(
				"shared fleet %s's groups ran VMs in project %s in the previous deployment and now in %s; fleet gc covers one project, so VMs left in %s would be orphaned. Keep project %s; to move the fleet, add it in project %s as another entry (its own name and namespace), set %s: true on this one, and remove it after its retire wait (docs/tasks/retire-a-shared-fleet.md)",
				fleets[i].Name, was.Project, project, was.Project, was.Project, project, p.Index(i).Child("retired"))))
			continue
		}
		for _, z := range was.Zones {
			if slices.Contains(zones, z) {
				continue
			}
			errs = append(errs, field.Forbidden(p.Index(i).Child("groups"), fmt.Sprintf(
				"no group of shared fleet %s runs in zone %s any more, where its groups ran VMs in the previous deployment; fleet gc covers the groups' zones and retiredZones only, so VMs left in %s would be orphaned. Add %s to %s: fleet gc keeps deleting the fleet's VMs there, and the zone may leave the list after its retire wait (docs/tasks/retire-a-shared-fleet.md)",
				fleets[i].Name, z, z, z, p.Index(i).Child("retiredZones"))))
		}
		for _, z := range slices.Sorted(maps.Keys(was.RetiredZones)) {
			if until := was.RetiredZones[z]; !slices.Contains(zones, z) && now.Before(until) {
				errs = append(errs, field.Forbidden(p.Index(i).Child("retiredZones"), fmt.Sprintf(
					"zone %s of shared fleet %s is retired, and the managers that left it may drain and its fleet gc delete the VMs they left there until %s: keep it in the list until then (docs/tasks/retire-a-shared-fleet.md)",
					z, fleets[i].Name, stamp(until))))
			}
		}
	}
	return errs, nil
}
