package sharedfleet

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/gcp"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// cloud is what the shared fleets' cloud side is composed from: the gke
// platform's outputs (its provider, VPC, GKE cluster and cache bucket) and
// the fleets' plans.
type cloud struct {
	p *gcp.Platform
	// plans are the fleets' plans, once planned.
	plans []*shared.FleetPlan
}

// platform is what the fleets take from the gke platform.
func (e *cloud) platform() fleetspec.Platform {
	g := e.p.Args.GCP
	return fleetspec.Platform{Project: g.Project, Region: g.Region, Cluster: e.cluster(), Network: stackconfig.GCPNetworkPath(g.Project, e.cluster()),
		CacheBucket: gcp.BucketName(g.Project, e.cluster()), Zones: g.Zones}
}

func (e *cloud) project() string { return e.p.Args.GCP.Project }
func (e *cloud) cluster() string { return e.p.Args.Cluster }

// opts are the options of a GCP resource that is a child of parent: the
// platform's gcp provider.
func (e *cloud) opts(parent pulumi.Resource, more ...pulumi.ResourceOption) []pulumi.ResourceOption {
	return append([]pulumi.ResourceOption{pulumi.Parent(parent), pulumi.Provider(e.p.Provider)}, more...)
}
