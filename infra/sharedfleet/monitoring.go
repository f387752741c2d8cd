package sharedfleet

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"k8s.io/apimachinery/pkg/runtime"

	helmv3 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/helm/v3"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// CentralMonitoring is the central Prometheus: the
// runnerfleet:gke:SharedFleetMonitoring component.
type CentralMonitoring struct {
	pulumi.ResourceState

	Namespace string
	// Prometheus is its address in the cluster.
	Prometheus string
}

// componentName is the name of fleet p's component, which prefixes the
// names of its children.
func componentName(p *shared.FleetPlan) string { return "shared-" + p.Spec.Name }

// declarePrometheus declares the objects of Prometheus plan pp.
func declarePrometheus(ctx *pulumi.Context, pp *shared.PrometheusPlan, prefix string, on func(deps ...pulumi.Resource) []pulumi.ResourceOption, ns pulumi.Resource) error {
	var deps []pulumi.Resource
	for _, o := range []struct {
		suffix string
		obj    runtime.Object
	}{{"sa", pp.ServiceAccount}, {"config", pp.ConfigMap}, {"data", pp.Data}, {"role", pp.Role}, {"binding", pp.Binding}, {"dashboard", pp.Dashboard}} {
		if reflect.ValueOf(o.obj).IsNil() {
			continue
		}
		r, err := kube.Declare(ctx, prefix+"-prometheus-"+o.suffix, o.obj, nil, on(ns)...)
		if err != nil {
			return err
		}
		deps = append(deps, r)
	}
	if _, err := kube.Declare(ctx, prefix+"-prometheus", pp.Deployment, nil, on(append(deps, ns)...)...); err != nil {
		return err
	}
	if _, err := kube.Declare(ctx, prefix+"-prometheus-svc", pp.Service, nil, on(ns)...); err != nil {
		return err
	}
	for _, o := range pp.KubeStateMetrics {
		kind := strings.ToLower(o.GetObjectKind().GroupVersionKind().Kind)
		if _, err := kube.Declare(ctx, prefix+"-kube-state-metrics-"+kind, o, nil, on(ns)...); err != nil {
			return err
		}
	}
	return nil
}

// declareFleet declares one fleet under its component.
func declareFleet(ctx *pulumi.Context, p *shared.FleetPlan, c *kube.Cluster, e *cloud, tokens map[string]pulumi.StringOutput, opts ...pulumi.ResourceOption) (*SharedFleet, error) {
	fl := &SharedFleet{
		Name: p.Spec.Name, Namespace: p.Namespace,
		Managers: map[string][]string{}, Releases: map[string]*helmv3.Release{},
		Prometheus: shared.Address(p.Namespace),
	}
	component := componentName(p)
	opts = append(opts, pulumi.Aliases([]pulumi.Alias{{Type: pulumi.String("runnerfleet:gke:SharedFleet")}}))
	if err := ctx.RegisterComponentResource("runnerfleet:sharedfleet:SharedFleet", component, fl, opts...); err != nil {
		return nil, err
	}
	if _, err := newSharedFleetNetwork(ctx, e.cluster()+"-"+p.Namespace+"-vms", e, p.Cloud, pulumi.Parent(fl)); err != nil {
		return nil, fmt.Errorf("declaring the VM network of shared fleet %s: %w", p.Spec.Name, err)
	}
	for _, vp := range p.Cloud.VMGroups {
		token, ok := tokens[vp.Group.TokenConfigKey]
		if !ok {
			return nil, fmt.Errorf("sharedfleet: the runner token of VM group %s was not read", vp.Group.Name)
		}
		if _, err := declareVMGroup(ctx, e.cluster()+"-vmgroup-"+vp.Group.Name, e, vp, token, fl); err != nil {
			return nil, fmt.Errorf("declaring VM group %s of shared fleet %s: %w", vp.Group.Name, p.Spec.Name, err)
		}
	}
	on := children(fl, c)
	ns, err := kube.Declare(ctx, component+"-ns", kube.Namespace(p.Namespace, ctx.Stack()), nil, on(c.DependsOn...)...)
	if err != nil {
		return nil, err
	}
	var bucket pulumi.StringOutput
	hasBucket := p.Spec.CacheBucket == "" && c.Cache != nil
	if hasBucket {
		bucket = c.Cache.Bucket
	}
	groups := p.Groups
	if p.Spec.Retired {
		// A retired fleet's managers go (and drain); its gc, declared
		// below, deletes the VMs they leave.
		groups = nil
	}
	for _, gp := range groups {
		token, ok := tokens[gp.Group.TokenConfigKey]
		if !ok {
			return nil, fmt.Errorf("sharedfleet: the token of %s was not read", gp.Manager)
		}
		if err := declareGroup(ctx, component, p, fl, gp, shared.ChartRepository, bucket, hasBucket, token, ns, on); err != nil {
			return nil, err
		}
	}
	if err := declarePrometheus(ctx, p.Prometheus, component, on, ns); err != nil {
		return nil, err
	}
	for _, o := range []struct {
		suffix string
		obj    runtime.Object
	}{{"gc-sa", p.GC.ServiceAccount}, {"gc-role", p.GC.Role}, {"gc-binding", p.GC.Binding}, {"gc", p.GC.CronJob}} {
		if _, err := kube.Declare(ctx, component+"-"+o.suffix, o.obj, nil, on(ns)...); err != nil {
			return nil, err
		}
	}
	if err := ctx.RegisterResourceOutputs(fl, pulumi.Map{
		"namespace":     pulumi.String(fl.Namespace),
		"managers":      pulumi.ToStringArray(fl.managerNames()),
		"terminalHosts": pulumi.ToStringArray(fl.TerminalHosts),
		"prometheus":    pulumi.String(fl.Prometheus),
	}); err != nil {
		return nil, err
	}
	return fl, nil
}

// declareCentral declares the central Prometheus and its namespace.
func declareCentral(ctx *pulumi.Context, pp *shared.PrometheusPlan, am *shared.AlertmanagerPlan, alertSecret pulumi.StringOutput, c *kube.Cluster, fleets []*SharedFleet, opts ...pulumi.ResourceOption) (*CentralMonitoring, error) {
	cm := &CentralMonitoring{Namespace: fleetspec.MonitoringNamespace, Prometheus: shared.Address(fleetspec.MonitoringNamespace)}
	const name = "shared-monitoring"
	opts = append(opts, pulumi.Aliases([]pulumi.Alias{{Type: pulumi.String("runnerfleet:gke:SharedFleetMonitoring")}}))
	if err := ctx.RegisterComponentResource("runnerfleet:sharedfleet:CentralMonitoring", name, cm, opts...); err != nil {
		return nil, err
	}
	on := children(cm, c)
	ns, err := kube.Declare(ctx, name+"-ns", kube.Namespace(fleetspec.MonitoringNamespace, ctx.Stack()), nil, on(c.DependsOn...)...)
	if err != nil {
		return nil, err
	}
	if err := declarePrometheus(ctx, pp, name, on, ns); err != nil {
		return nil, err
	}
	if err := declareAlertmanager(ctx, am, name, alertSecret, on, ns); err != nil {
		return nil, err
	}
	var federated []string
	for _, f := range fleets {
		federated = append(federated, f.Prometheus)
	}
	if err := ctx.RegisterResourceOutputs(cm, pulumi.Map{
		"prometheus":   pulumi.String(cm.Prometheus),
		"alertmanager": pulumi.String(shared.AlertmanagerAddress()),
		"federates":    pulumi.ToStringArray(federated),
	}); err != nil {
		return nil, err
	}
	return cm, nil
}

// children are the options of a component's children: parented to it, on
// the cluster's provider, after deps.
func children(parent pulumi.Resource, c *kube.Cluster) func(deps ...pulumi.Resource) []pulumi.ResourceOption {
	return func(deps ...pulumi.Resource) []pulumi.ResourceOption {
		opts := []pulumi.ResourceOption{pulumi.Parent(parent), pulumi.Provider(c.Provider)}
		if len(deps) > 0 {
			opts = append(opts, pulumi.DependsOn(deps))
		}
		return opts
	}
}
