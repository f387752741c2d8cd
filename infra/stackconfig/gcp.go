package stackconfig

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// GCP is the gke platform: a VPC with Cloud NAT, a GKE cluster with
// Workload Identity and node auto-provisioning, Google service accounts per
// team and a GCS cache bucket.
type GCP struct {
	// Project is the Google Cloud project ID.
	Project string `json:"project"`
	// Region, for example europe-west1.
	Region string `json:"region"`
	// Zones of the region the node pools use; default the region's b, c, d.
	Zones []string `json:"zones,omitempty"`
	// SubnetCIDR is the nodes' range; PodsCIDR and ServicesCIDR are the
	// subnet's secondary ranges; MasterCIDR is the private control plane's
	// /28. None may overlap.
	SubnetCIDR   string `json:"subnetCIDR,omitempty"`
	PodsCIDR     string `json:"podsCIDR,omitempty"`
	ServicesCIDR string `json:"servicesCIDR,omitempty"`
	MasterCIDR   string `json:"masterCIDR,omitempty"`
	// ReleaseChannel is RAPID, REGULAR or STABLE.
	ReleaseChannel string `json:"releaseChannel,omitempty"`
	// MasterAuthorizedCIDRs may reach the Kubernetes API.
	MasterAuthorizedCIDRs []string `json:"masterAuthorizedCIDRs,omitempty"`
	// SystemNodes is the spot node pool for the controller and managers.
	SystemNodes GKENodePool `json:"systemNodes,omitempty"`
	// Autoprovisioning caps node auto-provisioning.
	Autoprovisioning Autoprovisioning `json:"autoprovisioning,omitempty"`
	// Labels are added to every GCP resource (the stack label always is).
	Labels map[string]string `json:"labels,omitempty"`
}

// GKENodePool is a GKE node pool.
type GKENodePool struct {
	MachineType string `json:"machineType,omitempty"`
	Min         int    `json:"min,omitempty"`
	Max         int    `json:"max,omitempty"`
}

// Autoprovisioning caps GKE node auto-provisioning.
type Autoprovisioning struct {
	MaxCPU      int `json:"maxCPU,omitempty"`
	MaxMemoryGB int `json:"maxMemoryGB,omitempty"`
}

func (g *GCP) setDefaults() {}

// Validate checks the gcp section.
func (g *GCP) Validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if g.Project == "" {
		errs = append(errs, field.Required(p.Child("project"), "the Google Cloud project ID"))
	}
	if g.Region == "" {
		errs = append(errs, field.Required(p.Child("region"), "the region to deploy to, for example europe-west1"))
	}
	return errs
}
