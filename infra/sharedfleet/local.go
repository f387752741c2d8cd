package sharedfleet

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	helmv3 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/helm/v3"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// Local is what the local platform's shared fleets are declared from: the
// local platform has no cloud, so of a fleet it declares only the
// Kubernetes half (the namespace and each group's objects and managers'
// releases, by declareGroup as on gke), for the end-to-end proof of a
// change while jobs run (docs/concepts/shared-fleet.md, Generations). The
// stack config refused what it cannot have (VM groups, web terminals,
// scaling above minManagers, docker-autoscaler, alerting:
// stackconfig.validateLocalSharedFleets); VM networks, identities, the
// fleets' Prometheus and gc, which serve VMs the local stand-in runner
// never makes, are not declared.
type Local struct {
	// ChartRepository is the stack's local.chartRepository: the loopback
	// chart repository (localstack/chartrepo).
	ChartRepository string
	// Platform is the stack's fleetspec.Platform
	// (stackconfig.Fleet.FleetPlatform).
	Platform fleetspec.Platform
}

// newLocal declares the local platform's shared fleets.
func newLocal(ctx *pulumi.Context, args *Args, opts ...pulumi.ResourceOption) (*SharedFleets, error) {
	out := &SharedFleets{}
	if args.Local.ChartRepository == "" {
		return nil, fmt.Errorf("%s: the local platform's shared fleets need a chart repository", stackconfig.Root.Child("local", "chartRepository"))
	}
	var plans []*shared.FleetPlan
	for i, s := range args.Fleets {
		key := stackconfig.Root.Child("sharedFleets").Index(i).String()
		p, err := shared.PlanFleet(s, key, args.Local.Platform)
		if err != nil {
			return nil, err
		}
		if len(p.Cloud.VMGroups) > 0 {
			return nil, fmt.Errorf("%s.vmGroups: the local platform makes no VMs", key)
		}
		for _, gp := range p.Groups {
			for _, m := range gp.Managers {
				if m.Session != nil || m.Scaler != nil {
					return nil, fmt.Errorf("%s: manager %s has a web terminal or a KEDA scaler, which the local platform has not", key, m.Name)
				}
			}
			if _, ok := args.Secrets[gp.Group.TokenConfigKey]; !ok {
				return nil, fmt.Errorf("%s.groups: no token was read for config key %s (kube.ReadSecrets)", key, gp.Group.TokenConfigKey)
			}
		}
		plans = append(plans, p)
	}
	for _, p := range plans {
		fl := &SharedFleet{
			Name: p.Spec.Name, Namespace: p.Namespace,
			Managers: map[string][]string{}, Releases: map[string]*helmv3.Release{},
		}
		component := componentName(p)
		if err := ctx.RegisterComponentResource("runnerfleet:sharedfleet:SharedFleet", component, fl, opts...); err != nil {
			return nil, err
		}
		on := children(fl, args.Cluster)
		ns, err := kube.Declare(ctx, component+"-ns", kube.Namespace(p.Namespace, ctx.Stack()), nil, on(args.Cluster.DependsOn...)...)
		if err != nil {
			return nil, err
		}
		for _, gp := range p.Groups {
			if err := declareGroup(ctx, component, p, fl, gp, args.Local.ChartRepository, pulumi.StringOutput{}, false, args.Secrets[gp.Group.TokenConfigKey], ns, on); err != nil {
				return nil, err
			}
		}
		if err := ctx.RegisterResourceOutputs(fl, pulumi.Map{
			"namespace": pulumi.String(fl.Namespace),
			"managers":  pulumi.ToStringArray(fl.managerNames()),
		}); err != nil {
			return nil, err
		}
		out.Fleets = append(out.Fleets, fl)
	}
	return out, nil
}
