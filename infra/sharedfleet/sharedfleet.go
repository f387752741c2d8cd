// Package sharedfleet is the one place a shared runner fleet is declared,
// as provisioning/sharedfleet plans it (this package builds nothing
// itself), composed after the gke platform from its outputs
// (infra/gcp.Platform): for each fleet of the stack config (production,
// staging, …) one component holding its cloud side (the VMs' subnetwork,
// Cloud NAT, firewall rules and instance groups: vmnetwork.go) and a
// namespace, its manager groups as gitlab-runner Helm releases whose jobs
// run on autoscaled GCE VMs, their scaling, disruption budgets, web
// terminal and network policy, and the fleet's own Prometheus; and a
// central Prometheus in the monitoring namespace that federates every
// fleet's; and the fleets' Google identities and grants, one component for
// all fleets (identity.go).
//
// # One Helm release per manager
//
// A group of maxManagers managers is maxManagers releases of the pinned
// gitlab-runner chart, <namespace>-<group>-<n>-<generation>, each a Deployment of one
// manager (a "slot"), rather than one release whose replicas scale. The web
// terminal decides it: GitLab reaches the manager that runs a job at the
// session server address that manager advertised, and the session server
// pins its own self-signed certificate (gitlab-runner generates it at start
// and hands it to GitLab with the session URL), so every manager needs a
// distinct, stable address that reaches exactly it, with TLS passed through
// untouched. Replicas of one Deployment have neither; a release per manager
// gives each a hostname, <manager>.<webTerminal.domain>, its own Service and
// its own Ingress rule, all known before it starts.
//
// Managers below minManagers always run. Each one above is scaled between 0
// and 1 by its own KEDA ScaledObject on the group's running jobs
// (gitlab_runner_jobs from the fleet's Prometheus): manager n starts when
// the group runs more than n × targetUtilization × concurrent jobs, and
// drains once it has run fewer for the cool-down. That is the same staircase
// as one HPA over the group, without a shared address. The group's
// PodDisruptionBudget keeps minManagers through node drains.
//
// # Graceful deploys
//
// A manager never dies mid-job. A preStop hook, the chart's
// deploymentLifecycle value, sends gitlab-runner SIGQUIT and waits for it to
// exit: it takes no new job and finishes the running ones (Kubernetes stops
// containers with SIGTERM, which makes gitlab-runner abort its jobs; the
// chart's own unregister hook is off). terminationGracePeriodSeconds is the
// fleet's jobTimeout (at least 3h) plus ten minutes for the last job's
// report and the VMs' removal.
//
// A change of what a manager runs is a new generation of it, not an upgrade
// of its release: a release <manager>-<generation>
// (provisioning/sharedfleet.Release.GenerationOf: a hash of the chart and
// of every value known before deploy time), with a config Secret and a
// docker+machine state volume of its own, created before Pulumi deletes the
// old generation. The old release is declared skipAwait, so its uninstall
// does not wait, and its pod drains for its whole grace after pulumi up
// returned; its state claim is deleted with its config Secret
// (pulumi.DeletedWith, an owner reference), by Kubernetes once the pod is
// gone, never by Pulumi, which would wait for the drain. So two
// docker+machine processes never share a state volume, and a change does not
// wait for hours of drain. What only deploy time knows (a rotated token) rolls
// a generation in place: a docker-autoscaler manager's Deployment with
// maxUnavailable 0 and maxSurge 1; a docker+machine manager's with Recreate
// (its state volume is one manager's at a time), while the group's other
// managers serve. The pod template carries the hash of the config and token
// it runs, so a rotated token rolls the managers.
//
// # config.toml
//
// Each manager's config.toml is rendered by runnerconfig from the group's
// provisioning/sharedfleet.Release.ConfigTOML(), with the manager's
// [session_server], and is what the manager runs, byte for byte but
// the token. The chart takes a runner configuration template
// (runners.config), but its registration step keeps only the [[runners]]
// entry of a template, fills the fields it sets itself from the chart's
// defaults (executor kubernetes, request_concurrency 1, …), and writes the
// global section from other values: the [session_server], listen_address or
// shutdown_timeout of a template never arrive. So runners.config carries the
// whole rendered file (with a placeholder token) for the registration step,
// and the chart's preEntrypointScript, which runs after it, copies the
// rendered file over the registered one from a config Secret per manager
// that this package declares: config.toml with the token put in by the
// TOML encoder (never by sed or a template), mounted through the chart's
// secrets value. docker-autoscaler managers then install their fleeting
// plugin. The token is never in the release's values.
//
// # Web terminal
//
// Every manager's session server listens on 8093 and advertises
// <manager>.<domain>:443. Because the session server pins its own
// certificate, nothing between GitLab and it may terminate TLS, and the
// GitLab ranges must be enforced where traffic enters: each manager's
// session Service is its own TCP passthrough load balancer that admits
// only webTerminal.allowedCIDRs (loadBalancerSourceRanges) and keeps the
// client's address (externalTrafficPolicy Local), external-dns names it
// <manager>.<domain>, and the managers' NetworkPolicy admits only those
// ranges to the session port (and only the fleet's Prometheus to the
// metrics port). No ingress controller is involved: ingress-nginx, used
// before, applies no source range to a TLS-passthrough host, and any
// source that reached it reached the session servers. The cost is one
// load balancer per manager with a terminal. During a manager's rollout
// its hostname moves to the new pod at once, so a terminal opened on a job
// that the draining pod still runs is refused.
//
// # Retiring
//
// A fleet's VMs are deleted by its managers or its fleet gc, which finds
// them by the fleet's namespace in its project and zones. A change that
// removes a fleet, changes its namespace or its groups' project, or takes a
// zone from its groups is refused
// before anything is declared (CheckFootprint, against the previous
// deployment's FootprintOutput, read through a StackReference to the stack
// itself) unless it was retired first: a retired fleet keeps everything
// but its managers, so its gc deletes the VMs they leave, and a retired
// zone stays in its gc's scope, each for its retire wait.
//
// # Monitoring
//
// Each fleet namespace runs a Prometheus (provisioning/sharedfleet's
// objects, configuration and rules: managers by Kubernetes pod discovery, so that a
// draining manager stays scraped; VMs by GCE discovery; the fleet's own
// kube-state-metrics) on a PersistentVolumeClaim, behind a Service named
// prometheus, which KEDA reads; its alerts go to the Alertmanager of the
// monitoring namespace, whose receiver is the stack's alerting.receiver; a
// central Prometheus there federates the fleets'. KEDA is a prerequisite
// the program reads before it declares anything (prerequisites.go).
package sharedfleet

import (
	"fmt"
	"sort"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/gcp"
	helmv3 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/helm/v3"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
)

// SharedFleets is every shared fleet of the stack, and the central
// Prometheus.
type SharedFleets struct {
	// Fleets are the fleets in stack config order.
	Fleets []*SharedFleet
	// Monitoring is the central Prometheus; nil without fleets.
	Monitoring *CentralMonitoring
}

// SharedFleet is one fleet: the runnerfleet:sharedfleet:SharedFleet
// component, which holds all of it (its VM network and its Kubernetes
// objects).
type SharedFleet struct {
	pulumi.ResourceState

	// Name and Namespace are the fleet's.
	Name, Namespace string
	// Managers are the fleet's managers, one Helm release each, by group.
	Managers map[string][]string
	// Releases are the managers' Helm releases by manager name.
	Releases map[string]*helmv3.Release
	// TerminalHosts are the managers' web terminal hostnames.
	TerminalHosts []string
	// Prometheus is the fleet's Prometheus, as KEDA and the central one
	// reach it.
	Prometheus string
}

// Outputs are the stack outputs of the shared fleets.
func (s *SharedFleets) Outputs() pulumi.Map {
	out := pulumi.Map{}
	for _, f := range s.Fleets {
		var managers []string
		for _, g := range sortedKeys(f.Managers) {
			managers = append(managers, f.Managers[g]...)
		}
		out[f.Name] = pulumi.Map{
			"namespace":     pulumi.String(f.Namespace),
			"managers":      pulumi.ToStringArray(managers),
			"terminalHosts": pulumi.ToStringArray(f.TerminalHosts),
			"prometheus":    pulumi.String(f.Prometheus),
		}
	}
	if s.Monitoring != nil {
		out["centralPrometheus"] = pulumi.String(s.Monitoring.Prometheus)
	}
	return out
}

// Args are what the shared fleets are declared from.
type Args struct {
	// Fleets are the stack config's sharedFleets, decoded and defaulted
	// (stackconfig.Decode).
	Fleets  []fleetspec.SharedFleet
	Cluster *kube.Cluster
	// Secrets are the stack's config secrets by key (kube.ReadSecrets,
	// which read and checked them before anything was declared): the
	// groups' runner tokens and the alert receiver's secret.
	Secrets map[string]pulumi.StringOutput
	// Alerting is the stack config's alerting: the receiver of the
	// shared fleets' Alertmanager.
	Alerting *fleetspec.Alerting
	// Platform is the gke platform the fleets' cloud side (VM network,
	// identities and grants) is composed from.
	Platform *gcp.Platform
	// Prices is the stack config's cost: the fleets' VMs are priced by it
	// over the defaults.
	Prices *cost.Table
	// Local, instead of Platform, declares the fleets on the local
	// platform: their Kubernetes half only (Local).
	Local *Local
}

// New declares the stack's shared fleets on the cluster. Everything is
// rendered and checked first: on any error nothing is declared.
func New(ctx *pulumi.Context, args *Args, opts ...pulumi.ResourceOption) (*SharedFleets, error) {
	out := &SharedFleets{}
	fleets, c, secrets := args.Fleets, args.Cluster, args.Secrets
	if len(fleets) == 0 {
		return out, nil
	}
	if args.Local != nil {
		return newLocal(ctx, args, opts...)
	}
	if args.Platform == nil || args.Platform.Args == nil || args.Platform.Args.GCP == nil {
		return nil, fmt.Errorf("%s: shared fleets run on the gke platform, which was not declared", stackconfig.Root.Child("sharedFleets"))
	}
	e := &cloud{p: args.Platform}
	for i, s := range fleets {
		for j, g := range s.Groups {
			if _, ok := secrets[g.TokenConfigKey]; !ok {
				return nil, fmt.Errorf("%s.sharedFleets[%d].groups[%d].tokenConfigKey: no token was read for config key %s (kube.ReadSecrets)", stackconfig.Root, i, j, g.TokenConfigKey)
			}
		}
		for j, g := range s.VMGroups {
			if _, ok := secrets[g.TokenConfigKey]; !ok {
				return nil, fmt.Errorf("%s.sharedFleets[%d].vmGroups[%d].tokenConfigKey: no token was read for config key %s (kube.ReadSecrets)", stackconfig.Root, i, j, g.TokenConfigKey)
			}
		}
	}
	var err error
	plans := make([]*shared.FleetPlan, len(fleets))
	for i := range fleets {
		key := stackconfig.Root.Child("sharedFleets").Index(i).String()
		if plans[i], err = shared.PlanFleet(fleets[i], key, e.platform(), shared.WithPrices(cost.Effective(args.Prices))); err != nil {
			return nil, err
		}
	}
	central, err := shared.PlanCentral(plans)
	if err != nil {
		return nil, err
	}
	am, err := shared.PlanAlertmanager(args.Alerting, stackconfig.Root.Child("alerting").String())
	if err != nil {
		return nil, err
	}
	alertSecret, ok := secrets[am.SecretKey]
	if !ok {
		return nil, fmt.Errorf("%s: no secret was read for config key %s (kube.ReadSecrets)", stackconfig.Root.Child("alerting", "receiver"), am.SecretKey)
	}
	// KEDA must be there before any fleet object is.
	if c, err = kube.RequireKEDA(ctx, c); err != nil {
		return nil, err
	}
	for _, p := range plans {
		fl, err := declareFleet(ctx, p, c, e, secrets, opts...)
		if err != nil {
			return nil, err
		}
		out.Fleets = append(out.Fleets, fl)
	}
	e.plans = plans
	if _, err := newSharedFleetIdentity(ctx, e.cluster()+"-shared-identity", e, opts...); err != nil {
		return nil, fmt.Errorf("declaring the shared fleets' identities: %w", err)
	}
	if out.Monitoring, err = declareCentral(ctx, central, am, alertSecret, c, out.Fleets, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// managerNames are the fleet's managers, group by group in the groups'
// order by name: the fleet's "managers" output.
func (fl *SharedFleet) managerNames() []string {
	var out []string
	for _, g := range sortedKeys(fl.Managers) {
		out = append(out, fl.Managers[g]...)
	}
	return out
}
