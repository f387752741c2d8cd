// Package infra is the runnerfleet Pulumi program as a library: Program reads
// the typed stack config (runnerfleet:fleet), validates all of it before it
// declares anything, and composes the platform (local, eks or gke) with the
// Kubernetes part (the runnerset-controller, a RunnerClass, a RunnerSet per
// team). cmd/infra runs it under the Pulumi CLI; fleet up runs it inline
// through the Automation API.
package infra

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/runnerfleet/runnerfleet/infra/aws"
	"github.com/runnerfleet/runnerfleet/infra/gcp"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/local"
	"github.com/runnerfleet/runnerfleet/infra/sharedfleet"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/rbac"
)

// CIAWSRoleArnOutput is the stack output holding the deploy pipeline's
// AWS role (ciIdentity.aws), the value of RUNNERFLEET_AWS_ROLE_ARN.
const CIAWSRoleArnOutput = "ciAWSRoleArn"

// CIGCPProviderOutput is the stack output holding the deploy pipeline's
// Workload Identity provider (ciIdentity.gcp), the value of
// RUNNERFLEET_GCP_WORKLOAD_IDENTITY_PROVIDER.
const CIGCPProviderOutput = "ciGCPWorkloadIdentityProvider"

// Options change how the program reaches what is outside the stack config.
type Options struct {
	// Kubeconfig is the local platform's kubeconfig path; it overrides
	// local.kubeconfig and $KUBECONFIG (fleet up passes its control plane's).
	Kubeconfig string
	// PrometheusAddress is the local platform's Prometheus (fleet up passes
	// its control plane's), which the RunnerClass names for KEDA.
	PrometheusAddress string
	// Now is the clock the shared fleets' retire waits are measured by
	// (sharedfleet.CheckFootprint); default time.Now.
	Now func() time.Time
}

// Program is the Pulumi program (pulumi.Run(infra.Program)).
func Program(ctx *pulumi.Context) error { return ProgramWith(Options{})(ctx) }

// ProgramWith returns the program with options.
func ProgramWith(o Options) pulumi.RunFunc {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return func(ctx *pulumi.Context) error {
		f, err := LoadConfig(ctx)
		if err != nil {
			return err
		}
		// Every config secret the stack names, each once, before anything
		// is declared.
		secrets, err := kube.ReadSecrets(ctx, f)
		if err != nil {
			return err
		}
		// Shared fleets run on gke only. A change of them that would
		// orphan VMs is refused before anything is declared.
		if f.Platform == stackconfig.PlatformGKE {
			footprint, err := sharedfleet.CheckFootprint(ctx, f.SharedFleets, now())
			if err != nil {
				return err
			}
			ctx.Export(sharedfleet.FootprintOutput, footprint)
		}
		// An overflow stack's teams are judged against their primaries'
		// stack before anything is declared.
		if err := readPrimary(ctx, f); err != nil {
			return err
		}
		cluster, gke, err := platform(ctx, f, o)
		if err != nil {
			return err
		}
		if f.Autoscales() {
			// KEDA must be there before the RunnerSets that need it.
			if cluster, err = kube.RequireKEDA(ctx, cluster); err != nil {
				return err
			}
		}
		var role *rbacv1.ClusterRole
		if cluster.InCluster {
			if role, err = rbac.ClusterRole(); err != nil {
				return err
			}
		}
		fleet, err := kube.NewFleet(ctx, f.ClusterName, &kube.FleetArgs{Fleet: f, Cluster: cluster, Secrets: secrets, ClusterRole: role})
		if err != nil {
			return err
		}
		var localFleets *sharedfleet.Local
		if f.Platform == stackconfig.PlatformLocal && len(f.SharedFleets) > 0 {
			localFleets = &sharedfleet.Local{ChartRepository: f.Local.ChartRepository, Platform: f.FleetPlatform()}
		}
		shared, err := sharedfleet.New(ctx, &sharedfleet.Args{Fleets: f.SharedFleets, Cluster: cluster, Secrets: secrets, Alerting: f.Alerting, Platform: gke, Prices: f.Cost, Local: localFleets})
		if err != nil {
			return err
		}
		if len(f.SharedFleets) > 0 {
			ctx.Export("sharedFleets", shared.Outputs())
		}
		ctx.Export("platform", pulumi.String(string(f.Platform)))
		ctx.Export("clusterName", pulumi.String(f.ClusterName))
		ctx.Export("runnerClass", pulumi.String(fleet.ClassName))
		names := make([]string, 0, len(fleet.RunnerSets))
		for k := range fleet.RunnerSets {
			names = append(names, k)
		}
		sort.Strings(names)
		ctx.Export("runnerSets", pulumi.ToStringArray(names))
		if cluster.Cache != nil {
			ctx.Export("cacheBucket", cluster.Cache.Bucket)
		}
		if p := f.Primary(); p != nil {
			ctx.Export(stackconfig.PrimaryOutput, pulumi.Any(p))
		}
		return nil
	}
}

// LoadConfig reads and validates the stack config. It never panics: a
// missing or malformed key is an error that names it.
func LoadConfig(ctx *pulumi.Context) (*stackconfig.Fleet, error) {
	var raw json.RawMessage
	if err := config.New(ctx, "").TryObject(stackconfig.Key, &raw); err != nil {
		if errors.Is(err, config.ErrMissingVar) {
			return nil, fmt.Errorf("%s is not set: add it to stacks/Pulumi.%s.yaml (see stacks/README.md)", stackconfig.Root, ctx.Stack())
		}
		return nil, fmt.Errorf("%s: %w", stackconfig.Root, err)
	}
	return stackconfig.Decode(raw, ctx.Stack())
}

// platform declares the stack's platform and returns its cluster, and the
// gke platform, which the shared fleets are composed from.
func platform(ctx *pulumi.Context, f *stackconfig.Fleet, o Options) (*kube.Cluster, *gcp.Platform, error) {
	switch f.Platform {
	case stackconfig.PlatformLocal:
		path := o.Kubeconfig
		if path == "" && f.Local != nil {
			path = f.Local.Kubeconfig
		}
		if path == "" {
			path = os.Getenv("KUBECONFIG")
		}
		if path == "" {
			return nil, nil, fmt.Errorf("%s.local.kubeconfig: no kubeconfig for the local platform: run fleet up --stack local, or set local.kubeconfig or $KUBECONFIG", stackconfig.Root)
		}
		if _, err := os.Stat(path); err != nil {
			return nil, nil, fmt.Errorf("%s.local.kubeconfig: %w (is the local control plane up? fleet up --stack local)", stackconfig.Root, err)
		}
		p, err := local.NewPlatform(ctx, f.ClusterName, &local.PlatformArgs{Cluster: f.ClusterName, Kubeconfig: path, PrometheusAddress: o.PrometheusAddress})
		if err != nil {
			return nil, nil, err
		}
		return p.Cluster, nil, nil
	case stackconfig.PlatformEKS:
		p, err := aws.NewPlatform(ctx, f.ClusterName, aws.ArgsFor(f))
		if err != nil {
			return nil, nil, err
		}
		if p.CIRoleArn != nil {
			// The deploy pipeline's RUNNERFLEET_AWS_ROLE_ARN.
			ctx.Export(CIAWSRoleArnOutput, *p.CIRoleArn)
		}
		return p.Cluster, nil, nil
	case stackconfig.PlatformGKE:
		p, err := gcp.NewPlatform(ctx, f.ClusterName, gcp.ArgsFor(f))
		if err != nil {
			return nil, nil, err
		}
		if p.CIProvider != nil {
			ctx.Export(CIGCPProviderOutput, *p.CIProvider)
		}
		return p.Cluster, p, nil
	}
	return nil, nil, fmt.Errorf("platform %q has no implementation in this build", f.Platform)
}
