package sharedfleet

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/gcp"
	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/compute"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// SharedFleetNetwork is where one shared fleet's VMs live, in the cluster's
// VPC:
//
//   - a subnetwork of the fleet's vmNetwork.cidr with Private Google Access
//     (the cache bucket, Artifact Registry and the Compute API without a
//     public address), and a Cloud NAT of its own for everything else
//     (GitLab, public image registries); or the existing subnetwork the
//     stack names, whose egress is its owner's;
//   - firewall rules, one per consumer and VM tag
//     (fleetspec.SharedFleet.VMIngress), from exactly the cluster's pod
//     range (vmSourceRanges): the managers to the VMs of the groups that
//     use one set of ports, tagged so, and on those ports only (Docker
//     2376 and SSH 22 for docker+machine, the fleeting connector's, SSH 22
//     or WinRM 5985/5986, for docker-autoscaler); the fleet's Prometheus
//     to the docker+machine VMs on their node_exporter's port alone. The
//     VPC admits nothing else: its implied rule denies ingress, the
//     cluster's own internal rule targets only the nodes, and no VM has an
//     external address, so nothing on the internet reaches one;
//   - for each docker-autoscaler manager an instance template (no external
//     address, the VM tag, the labels of vmfleet.Owner) and a zonal managed
//     instance group of its own, which fleeting's googlecloud plugin sizes
//     (no autoscaler, as the plugin requires; the program never sets the
//     size, and a new template reaches only new VMs, never one running a
//     job).
type SharedFleetNetwork struct {
	pulumi.ResourceState

	// Subnetwork is the VMs' subnetwork's resource path.
	Subnetwork string
	// InstanceGroups are the docker-autoscaler managers' groups by manager.
	InstanceGroups map[string]*compute.InstanceGroupManager
}

// vmSourceRanges are the only sources a consumer of the VMs' ports
// (fleetspec.ConsumerManagers, fleetspec.ConsumerPrometheus) reaches them
// from: the cluster's pod range, for both. The cluster is VPC-native and
// leaves GKE's default SNAT on, which masquerades nothing bound for the
// private ranges (the VMs' subnetworks are private ranges of the VPC), so
// a pod's packets reach a VM in another subnetwork from the pod's own
// address in the pods range, not its node's. Network tags name nodes, not
// pods: a source tag would at best admit every pod of a tagged node. The
// managers and the fleet's Prometheus run on the system pool beside other
// pods and take their addresses from the one pods range, so the VPC
// firewall cannot tell them from the cluster's other pods; narrowing
// further needs a pods range of their own (a node pool with its own pod
// range), which the cluster does not declare today.
func vmSourceRanges(g *stackconfig.GCP, consumer string) []string {
	switch consumer {
	case fleetspec.ConsumerManagers, fleetspec.ConsumerPrometheus:
		return []string{g.PodsCIDR}
	}
	return nil
}

// vmFirewallResource is the Pulumi name of the rule of in: the managers'
// rules keep the names they had.
func vmFirewallResource(name string, in fleetspec.VMIngress) string {
	if in.Consumer == fleetspec.ConsumerManagers {
		return name + "-" + in.Tag
	}
	return name + "-" + in.Tag + "-" + in.Consumer
}

// newSharedFleetNetwork declares fleet s's VM network under its
// component (it was the gke platform's child, whose URNs its alias keeps).
func newSharedFleetNetwork(ctx *pulumi.Context, name string, e *cloud, plan shared.CloudPlan, opts ...pulumi.ResourceOption) (*SharedFleetNetwork, error) {
	n := &SharedFleetNetwork{Subnetwork: plan.VMSubnetwork, InstanceGroups: map[string]*compute.InstanceGroupManager{}}
	opts = append(opts, pulumi.Aliases([]pulumi.Alias{{Type: pulumi.String("runnerfleet:gcp:SharedFleetNetwork"), Parent: e.p}}))
	if err := ctx.RegisterComponentResource("runnerfleet:sharedfleet:VMNetwork", name, n, opts...); err != nil {
		return nil, err
	}
	g := e.p.Args.GCP
	subnetwork := pulumi.String(n.Subnetwork).ToStringOutput()
	if sp := plan.Subnetwork; sp != nil {
		sub, err := compute.NewSubnetwork(ctx, name+"-subnet", &compute.SubnetworkArgs{
			Name:                  pulumi.String(sp.Name),
			Description:           pulumi.String(sp.Description),
			Network:               e.p.Network,
			Region:                pulumi.String(g.Region),
			IpCidrRange:           pulumi.String(sp.CIDR),
			PrivateIpGoogleAccess: pulumi.Bool(true),
		}, e.opts(n)...)
		if err != nil {
			return nil, fmt.Errorf("creating the VM subnetwork %s: %w", sp.Name, err)
		}
		subnetwork = sub.ID().ToStringOutput()
		// Jobs pull images: ports as a busy VM needs them.
		if err := gcp.DeclareCloudNAT(ctx, name, gcp.CloudNAT{
			Name:          sp.Name,
			Description:   sp.NATDescription,
			Network:       e.p.Network,
			Region:        g.Region,
			Subnetwork:    sub.ID(),
			MaxPortsPerVM: 8192,
		}, e.opts(n)...); err != nil {
			return nil, fmt.Errorf("the VM network %s: %w", sp.Name, err)
		}
	}

	// One rule per consumer and VM tag (fleetspec.SharedFleet.VMIngress):
	// the managers to the groups' VMs on the ports their executors use,
	// the fleet's Prometheus to the VMs that run node_exporter on its port.
	for _, fw := range plan.Firewalls {
		_, err := compute.NewFirewall(ctx, vmFirewallResource(name, fw.VMIngress), &compute.FirewallArgs{
			Name:         pulumi.String(fw.Name),
			Description:  pulumi.String(fw.Description),
			Network:      e.p.Network,
			Direction:    pulumi.String("INGRESS"),
			Priority:     pulumi.Int(1000),
			SourceRanges: pulumix.Strings(vmSourceRanges(g, fw.Consumer)),
			TargetTags:   pulumix.Strings([]string{fw.Tag}),
			Allows:       []compute.FirewallAllowArgs{{Protocol: pulumi.String("tcp"), Ports: pulumix.Strings(fw.Ports)}},
		}, e.opts(n)...)
		if err != nil {
			return nil, fmt.Errorf("creating the VM firewall rule %s: %w", fw.Name, err)
		}
	}

	for _, ig := range plan.InstanceGroups {
		tpl, err := compute.NewInstanceTemplate(ctx, name+"-"+ig.Manager+"-template", &compute.InstanceTemplateArgs{
			// Templates cannot change: a new one is made, then the group
			// pointed at it, then the old one deleted.
			NamePrefix:  pulumi.String(ig.TemplatePrefix),
			Description: pulumi.String(ig.Description),
			Project:     pulumi.String(ig.Project),
			MachineType: pulumi.String(ig.MachineType),
			Disks: []compute.InstanceTemplateDiskArgs{{
				SourceImage: pulumi.String(ig.Image),
				Boot:        pulumi.Bool(true),
				AutoDelete:  pulumi.Bool(true),
				Labels:      pulumix.StringMap(ig.Labels),
			}},
			// No access config: no external address.
			NetworkInterfaces: []compute.InstanceTemplateNetworkInterfaceArgs{{
				Network:    e.p.Network,
				Subnetwork: subnetwork,
			}},
			Scheduling: scheduling(ig.Spot),
			Tags:       pulumix.Strings(ig.Tags),
			Labels:     pulumix.StringMap(ig.Labels),
		}, e.opts(n)...)
		if err != nil {
			return nil, fmt.Errorf("creating the instance template of manager %s: %w", ig.Manager, err)
		}
		mig, err := compute.NewInstanceGroupManager(ctx, name+"-"+ig.Manager+"-group", &compute.InstanceGroupManagerArgs{
			Name:             pulumi.String(ig.Group),
			Description:      pulumi.String(ig.Description + "; sized by its fleeting plugin"),
			Project:          pulumi.String(ig.Project),
			Zone:             pulumi.String(ig.Zone),
			BaseInstanceName: pulumi.String(ig.Manager),
			Versions:         []compute.InstanceGroupManagerVersionArgs{{InstanceTemplate: tpl.SelfLinkUnique}},
			// A new template reaches new VMs only: a VM running a job
			// is never replaced under it.
			UpdatePolicy: &compute.InstanceGroupManagerUpdatePolicyArgs{
				Type:          pulumi.String("OPPORTUNISTIC"),
				MinimalAction: pulumi.String("REFRESH"),
			},
		}, e.opts(n, pulumi.IgnoreChanges([]string{"targetSize"}))...)
		if err != nil {
			return nil, fmt.Errorf("creating the instance group of manager %s: %w", ig.Manager, err)
		}
		n.InstanceGroups[ig.Manager] = mig
	}
	return n, ctx.RegisterResourceOutputs(n, pulumi.Map{"subnetwork": subnetwork})
}

// scheduling is the job VMs' scheduling: spot VMs are deleted when
// preempted (a preempted VM's job is lost either way; a stopped one would
// only hold its disk).
func scheduling(spot bool) *compute.InstanceTemplateSchedulingArgs {
	if !spot {
		return &compute.InstanceTemplateSchedulingArgs{AutomaticRestart: pulumi.Bool(true), OnHostMaintenance: pulumi.String("MIGRATE")}
	}
	return &compute.InstanceTemplateSchedulingArgs{
		Preemptible:               pulumi.Bool(true),
		ProvisioningModel:         pulumi.String("SPOT"),
		AutomaticRestart:          pulumi.Bool(false),
		OnHostMaintenance:         pulumi.String("TERMINATE"),
		InstanceTerminationAction: pulumi.String("DELETE"),
	}
}
