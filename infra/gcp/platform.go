// Package gcp declares the gke platform: a VPC with Cloud NAT, a private
// regional GKE cluster with Workload Identity and node auto-provisioning (for
// the teams' ComputeClasses), a Google service account per team bound to
// exactly that team's job ServiceAccount, and a private GCS cache bucket.
// Its anatomy is infra/aws's: ArgsFor, NewPlatform and the platform struct
// in platform.go, one file per component (network, cluster, identity,
// cache). The shared fleets' VM networks and identities are
// infra/sharedfleet's, composed from the Platform's outputs.
//
// Every GCP resource goes through one explicit gcp provider, which carries
// the project, the region and the labels, and is declared through the typed
// constructors generated from the pinned pulumi-gcp SDK (infra/internal/sdk)
// rather than through the SDK itself.
package gcp

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	gcpsdk "github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/policy"
)

// Platform is the component every other resource of the gke platform hangs
// under.
type Platform struct {
	pulumi.ResourceState

	// Cluster is what the Kubernetes part of the program deploys into.
	Cluster *kube.Cluster

	// What infra/sharedfleet composes the shared fleets' cloud side from:
	// the arguments, the gcp provider, the VPC's ID, the GKE cluster (which
	// Workload Identity bindings wait for: the project's identity pool
	// exists once a cluster uses it) and the cache bucket.
	Args        *PlatformArgs
	Provider    pulumi.ProviderResource
	Network     pulumi.StringOutput
	GKE         pulumi.Resource
	CacheBucket pulumi.StringOutput
	// CIProvider is the deploy pipeline's Workload Identity provider
	// (RUNNERFLEET_GCP_WORKLOAD_IDENTITY_PROVIDER) when the stack declares
	// ciIdentity.gcp.
	CIProvider *pulumi.StringOutput
}

// PlatformArgs are what the gke platform is declared from.
type PlatformArgs struct {
	// Cluster is the GKE cluster's name.
	Cluster string
	GCP     *stackconfig.GCP
	// Teams are the RunnerSets that get a Google service account.
	Teams []Team
	// CacheExpireDays is how long cache objects live.
	CacheExpireDays int
	// SharedFleets are the stack's shared fleets, whose managers the
	// managers' pool must outlast in an upgrade (ManagerPoolSoak); their
	// cloud side is infra/sharedfleet's, composed from this platform.
	SharedFleets []fleetspec.SharedFleet
	// CIIdentity, when set, is the deploy pipeline's identity to declare.
	CIIdentity *stackconfig.CIIdentity
}

// Team is a RunnerSet that gets a job identity.
type Team struct{ Namespace, Name string }

// ArgsFor is the gke platform's part of a fleet, as infra/aws's ArgsFor
// is the eks platform's. The fleet is a decoded one: stackconfig.Validate
// has refused the teams the platform cannot give an identity
// (stackconfig.ValidateGKETeams).
func ArgsFor(f *stackconfig.Fleet) *PlatformArgs {
	a := &PlatformArgs{Cluster: f.ClusterName, GCP: f.GCP, CacheExpireDays: f.Cache.ExpireDays, SharedFleets: f.SharedFleets}
	if f.CIIdentity != nil && f.CIIdentity.GCP != nil {
		a.CIIdentity = f.CIIdentity
	}
	for _, t := range f.Teams {
		if t.WantsIdentity(f.Platform) {
			a.Teams = append(a.Teams, Team{Namespace: t.Namespace, Name: t.Name})
		}
	}
	return a
}

// platform is what every component of the platform shares.
type platform struct {
	args   *PlatformArgs
	gcp    *stackconfig.GCP
	labels map[string]string
	gcpp   pulumi.ProviderResource
}

// opts are the options of a GCP resource that is a child of parent.
func (e *platform) opts(parent pulumi.Resource, more ...pulumi.ResourceOption) []pulumi.ResourceOption {
	return append([]pulumi.ResourceOption{pulumi.Parent(parent), pulumi.Provider(e.gcpp)}, more...)
}

// NewPlatform declares the gke platform.
func NewPlatform(ctx *pulumi.Context, name string, args *PlatformArgs, opts ...pulumi.ResourceOption) (*Platform, error) {
	if args == nil || args.GCP == nil {
		return nil, fmt.Errorf("gcp: the gke platform needs a gcp section")
	}
	p := &Platform{}
	if err := ctx.RegisterComponentResource("runnerfleet:gcp:Platform", name, p, opts...); err != nil {
		return nil, fmt.Errorf("creating the gke platform: %w", err)
	}
	e := &platform{args: args, gcp: args.GCP, labels: Labels(ctx.Stack(), args.GCP, args.Cluster)}
	gp, err := gcpsdk.NewProvider(ctx, name+"-gcp", &gcpsdk.ProviderArgs{
		Project:       pulumi.String(args.GCP.Project),
		Region:        pulumi.String(args.GCP.Region),
		DefaultLabels: pulumix.StringMap(e.labels),
	}, pulumi.Parent(p))
	if err != nil {
		return nil, fmt.Errorf("declaring the gcp provider: %w", err)
	}
	e.gcpp = gp

	nw, err := newNetwork(ctx, name+"-network", e, pulumi.Parent(p))
	if err != nil {
		return nil, fmt.Errorf("declaring the network: %w", err)
	}
	cl, err := newCluster(ctx, name+"-cluster", e, nw, pulumi.Parent(p))
	if err != nil {
		return nil, fmt.Errorf("declaring the GKE cluster: %w", err)
	}
	ids, err := newIdentities(ctx, name+"-identity", e, cl, pulumi.Parent(p))
	if err != nil {
		return nil, fmt.Errorf("declaring the teams' identities: %w", err)
	}
	cache, err := newCache(ctx, name+"-cache", e, ids, pulumi.Parent(p))
	if err != nil {
		return nil, fmt.Errorf("declaring the cache bucket: %w", err)
	}
	outputs := pulumi.Map{
		"clusterName": cl.Name,
		"kubeconfig":  cl.Kubeconfig,
		"network":     nw.Network,
		"cacheBucket": cache.Bucket,
	}
	if args.CIIdentity != nil {
		ci, err := newCIIdentity(ctx, name+"-ci", e, args.CIIdentity, pulumi.Parent(p))
		if err != nil {
			return nil, fmt.Errorf("declaring the deploy pipeline's identity: %w", err)
		}
		p.CIProvider = &ci.Provider
		outputs["ciProvider"] = ci.Provider
	}
	if err := ctx.RegisterResourceOutputs(p, outputs); err != nil {
		return nil, fmt.Errorf("registering the gke platform's outputs: %w", err)
	}

	emails := make(map[string]pulumi.StringOutput, len(ids.Teams))
	for _, t := range ids.Teams {
		emails[kube.IdentityKey(t.Namespace, t.Name)] = t.Email
	}
	p.Cluster = &kube.Cluster{
		Provider: cl.Kubernetes,
		Class: v1alpha1.RunnerClassSpec{
			Provider:     v1alpha1.CapacityProviderComputeClass,
			ComputeClass: &v1alpha1.ComputeClassSettings{MachineFamilies: append([]string(nil), args.GCP.MachineFamilies...)},
			Policy: v1alpha1.RunnerClassPolicy{Identity: v1alpha1.IdentityPolicy{
				GCPServiceAccountPatterns: []string{ServiceAccountPattern(args.GCP.Project)},
			}},
		},
		Identities: emails,
		Cache:      &kube.Cache{Type: v1alpha1.CacheTypeGCS, Bucket: cache.Bucket, Region: args.GCP.Region},
		DependsOn:  []pulumi.Resource{cl.SystemPool},
		InCluster:  true,
	}
	p.Args, p.Provider, p.Network, p.GKE, p.CacheBucket = args, gp, nw.Network, cl.Resource, cache.Bucket
	return p, nil
}

// ServiceAccountPattern is the RunnerClass identity pattern that allows a
// namespace the Google service accounts this platform creates for its
// RunnerSets (naming.GCPServiceAccountID: "<namespace>-<hash>"): the hash
// is matched digit by digit ('?'), so namespace team cannot take
// team-a's accounts as "{namespace}-*" would let it.
func ServiceAccountPattern(project string) string {
	return naming.GCPServiceAccountIDPattern(policy.Placeholder) + "@" + project + ".iam.gserviceaccount.com"
}

// WorkloadPool is the project's Workload Identity pool.
func WorkloadPool(project string) string { return project + ".svc.id.goog" }

// WorkloadIdentityMember is the IAM member of one Kubernetes ServiceAccount
// of the project's clusters.
func WorkloadIdentityMember(project, namespace, serviceAccount string) string {
	return "serviceAccount:" + WorkloadPool(project) + "[" + namespace + "/" + serviceAccount + "]"
}

// Labels are the labels of every labelable GCP resource of the stack: the
// stack's own, then the stack and cluster labels, which win.
func Labels(stack string, g *stackconfig.GCP, cluster string) map[string]string {
	out := map[string]string{}
	for k, v := range g.Labels {
		out[k] = v
	}
	out[stackconfig.GCPLabelStack] = LabelValue(stack)
	out[stackconfig.GCPLabelCluster] = LabelValue(cluster)
	return out
}

var notLabelValue = regexp.MustCompile(`[^a-z0-9_-]`)

// LabelValue makes s a GCP label value: lower-case letters, digits, '_' and
// '-', at most 63 characters (Pulumi stack names may have capitals and dots).
func LabelValue(s string) string {
	v := notLabelValue.ReplaceAllString(strings.ToLower(s), "-")
	if len(v) > 63 {
		v = v[:63]
	}
	return v
}
