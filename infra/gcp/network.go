package gcp

import (
	"fmt"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/compute"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
)

// Names of the subnet's secondary ranges, which the cluster's VPC-native IP
// allocation names.
const (
	PodsRange     = "pods"
	ServicesRange = "services"
)

// WebhookPorts are the node ports GKE's control plane must reach beyond the
// 443 and 10250 GKE opens itself: admission webhooks and the metrics API
// listen on 8443 and 9443 as often as on 443.
var WebhookPorts = []string{"443", "8443", "9443", "10250"}

// Network is the VPC of the cluster: one subnet with the pods and services
// secondary ranges and private Google access, Cloud NAT for egress (the
// nodes have no external IPs), and firewall rules that open nothing to the
// internet.
type Network struct {
	pulumi.ResourceState

	// Network and Subnetwork are the IDs of the VPC and its subnet.
	Network    pulumi.StringOutput
	Subnetwork pulumi.StringOutput
	// NodeTag is the network tag of every node, which the control plane's
	// firewall rule targets.
	NodeTag string
}

func newNetwork(ctx *pulumi.Context, name string, e *platform, opts ...pulumi.ResourceOption) (*Network, error) {
	n := &Network{NodeTag: e.args.Cluster + "-node"}
	if err := ctx.RegisterComponentResource("runnerfleet:gcp:Network", name, n, opts...); err != nil {
		return nil, err
	}
	g, cluster := e.gcp, e.args.Cluster

	vpc, err := compute.NewNetwork(ctx, name+"-vpc", &compute.NetworkArgs{
		Name:                  pulumi.String(stackconfig.GCPNetworkName(cluster)),
		Description:           pulumi.String("runnerfleet: the network of GKE cluster " + cluster),
		AutoCreateSubnetworks: pulumi.Bool(false),
		RoutingMode:           pulumi.String("REGIONAL"),
	}, e.opts(n)...)
	if err != nil {
		return nil, fmt.Errorf("creating the VPC: %w", err)
	}
	subnet, err := compute.NewSubnetwork(ctx, name+"-subnet", &compute.SubnetworkArgs{
		Name:                  pulumi.String(cluster + "-nodes"),
		Description:           pulumi.String("runnerfleet: the nodes, pods and services of GKE cluster " + cluster),
		Network:               vpc.ID(),
		Region:                pulumi.String(g.Region),
		IpCidrRange:           pulumi.String(g.SubnetCIDR),
		PrivateIpGoogleAccess: pulumi.Bool(true),
		SecondaryIpRanges: []compute.SubnetworkSecondaryIpRangeArgs{
			{RangeName: pulumi.String(PodsRange), IpCidrRange: pulumi.String(g.PodsCIDR)},
			{RangeName: pulumi.String(ServicesRange), IpCidrRange: pulumi.String(g.ServicesCIDR)},
		},
	}, e.opts(n)...)
	if err != nil {
		return nil, fmt.Errorf("creating the subnet: %w", err)
	}

	// Jobs pull images and talk to GitLab at a high rate: a busy node
	// gets up to 4096 NAT ports.
	if err := DeclareCloudNAT(ctx, name, CloudNAT{
		Name:          cluster + "-nat",
		Description:   "runnerfleet: Cloud NAT of GKE cluster " + cluster,
		Network:       vpc.ID(),
		Region:        g.Region,
		Subnetwork:    subnet.ID(),
		MaxPortsPerVM: 4096,
	}, e.opts(n)...); err != nil {
		return nil, err
	}

	// Nodes and pods talk to each other freely. The services range is left
	// out: ClusterIPs are only ever destinations, never sources.
	_, err = compute.NewFirewall(ctx, name+"-allow-internal", &compute.FirewallArgs{
		Name:         pulumi.String(cluster + "-internal"),
		Description:  pulumi.String("runnerfleet: nodes and pods of GKE cluster " + cluster + " reach each other"),
		Network:      vpc.ID(),
		Direction:    pulumi.String("INGRESS"),
		Priority:     pulumi.Int(1000),
		SourceRanges: pulumix.Strings([]string{g.SubnetCIDR, g.PodsCIDR}),
		// Only the nodes: the shared fleets' VMs in this VPC are reached
		// by their own rules (SharedFleetNetwork), from the pods alone.
		TargetTags: pulumix.Strings([]string{n.NodeTag}),
		Allows: []compute.FirewallAllowArgs{
			{Protocol: pulumi.String("tcp")},
			{Protocol: pulumi.String("udp")},
			{Protocol: pulumi.String("icmp")},
		},
	}, e.opts(n)...)
	if err != nil {
		return nil, fmt.Errorf("creating the internal firewall rule: %w", err)
	}
	_, err = compute.NewFirewall(ctx, name+"-allow-master-webhooks", &compute.FirewallArgs{
		Name:         pulumi.String(cluster + "-master-webhooks"),
		Description:  pulumi.String("runnerfleet: the control plane of GKE cluster " + cluster + " reaches webhooks and kubelets on its nodes"),
		Network:      vpc.ID(),
		Direction:    pulumi.String("INGRESS"),
		Priority:     pulumi.Int(1000),
		SourceRanges: pulumix.Strings([]string{g.MasterCIDR}),
		TargetTags:   pulumix.Strings([]string{n.NodeTag}),
		Allows:       []compute.FirewallAllowArgs{{Protocol: pulumi.String("tcp"), Ports: pulumix.Strings(WebhookPorts)}},
	}, e.opts(n)...)
	if err != nil {
		return nil, fmt.Errorf("creating the control plane's firewall rule: %w", err)
	}

	n.Network = vpc.ID().ToStringOutput()
	n.Subnetwork = subnet.ID().ToStringOutput()
	return n, ctx.RegisterResourceOutputs(n, pulumi.Map{
		"network":    n.Network,
		"subnetwork": n.Subnetwork,
	})
}

// CloudNAT is the egress of what has no external address in one
// subnetwork (the nodes, a shared fleet's VMs): a Cloud Router and its NAT
// for every range of the subnetwork, with dynamic port allocation (a busy
// VM gets more ports instead of dropped connections at the static 64) and
// its errors logged.
type CloudNAT struct {
	// Name is the GCE name of the router and of its NAT; Description the
	// router's.
	Name, Description string
	Network           pulumi.StringInput
	Region            string
	Subnetwork        pulumi.StringInput
	// MaxPortsPerVM caps one VM's NAT ports.
	MaxPortsPerVM int
}

// DeclareCloudNAT declares n as <name>-router and <name>-nat: the one
// definition of a Cloud NAT of the program (the cluster's network and each
// shared fleet's VM subnetwork, infra/sharedfleet).
func DeclareCloudNAT(ctx *pulumi.Context, name string, n CloudNAT, opts ...pulumi.ResourceOption) error {
	router, err := compute.NewRouter(ctx, name+"-router", &compute.RouterArgs{
		Name:        pulumi.String(n.Name),
		Description: pulumi.String(n.Description),
		Network:     n.Network,
		Region:      pulumi.String(n.Region),
	}, opts...)
	if err != nil {
		return fmt.Errorf("creating the router %s: %w", n.Name, err)
	}
	_, err = compute.NewRouterNat(ctx, name+"-nat", &compute.RouterNatArgs{
		Name:                          pulumi.String(n.Name),
		Router:                        router.Name,
		Region:                        pulumi.String(n.Region),
		NatIpAllocateOption:           pulumi.String("AUTO_ONLY"),
		SourceSubnetworkIpRangesToNat: pulumi.String("LIST_OF_SUBNETWORKS"),
		Subnetworks: []compute.RouterNatSubnetworkArgs{{
			Name:                 n.Subnetwork,
			SourceIpRangesToNats: pulumi.ToStringArray([]string{"ALL_IP_RANGES"}),
		}},
		EnableEndpointIndependentMapping: pulumi.Bool(false),
		EnableDynamicPortAllocation:      pulumi.Bool(true),
		MinPortsPerVm:                    pulumi.Int(64),
		MaxPortsPerVm:                    pulumi.Int(n.MaxPortsPerVM),
		LogConfig:                        &compute.RouterNatLogConfigArgs{Enable: pulumi.Bool(true), Filter: pulumi.String("ERRORS_ONLY")},
	}, opts...)
	if err != nil {
		return fmt.Errorf("creating Cloud NAT %s: %w", n.Name, err)
	}
	return nil
}
