package stackconfig

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SharedFleet is one of the platform's own shared runner fleets for a whole
// GitLab instance (production, staging, …): manager groups in a namespace of
// their own, whose jobs run on autoscaled GCE VMs.
type SharedFleet struct {
	// Name names the fleet and its namespace.
	Name string `json:"name"`
}

// validateSharedFleets checks the sharedFleets section.
func (f *Fleet) validateSharedFleets(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(f.SharedFleets) > 0 && f.Platform != PlatformGKE {
		errs = append(errs, field.Forbidden(p, "shared fleets run on the gke platform (their jobs run on GCE VMs); remove them or set platform: gke"))
	}
	return errs
}
