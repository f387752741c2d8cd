package gcp

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
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

func newNetwork(ctx *pulumi.Context, name string, e *env, opts ...pulumi.ResourceOption) (*Network, error) {
	n := &Network{NodeTag: e.fleet.ClusterName + "-node"}
	if err := ctx.RegisterComponentResource("runnerfleet:gcp:Network", name, n, opts...); err != nil {
		return nil, err
	}
	g, cluster := e.gcp, e.fleet.ClusterName

	vpc, err := pulumix.New(ctx, "gcp:compute/network:Network", name+"-vpc", pulumi.Map{
		"name":                  pulumi.String(cluster),
		"description":           pulumi.String("runnerfleet: the network of GKE cluster " + cluster),
		"autoCreateSubnetworks": pulumi.Bool(false),
		"routingMode":           pulumi.String("REGIONAL"),
	}, e.opts(n)...)
	if err != nil {
		return nil, err
	}
	subnet, err := pulumix.New(ctx, "gcp:compute/subnetwork:Subnetwork", name+"-subnet", pulumi.Map{
		"name":                  pulumi.String(cluster + "-nodes"),
		"description":           pulumi.String("runnerfleet: the nodes, pods and services of GKE cluster " + cluster),
		"network":               vpc.ID(),
		"region":                pulumi.String(g.Region),
		"ipCidrRange":           pulumi.String(g.SubnetCIDR),
		"privateIpGoogleAccess": pulumi.Bool(true),
		"secondaryIpRanges": pulumi.Array{
			pulumi.Map{"rangeName": pulumi.String(PodsRange), "ipCidrRange": pulumi.String(g.PodsCIDR)},
			pulumi.Map{"rangeName": pulumi.String(ServicesRange), "ipCidrRange": pulumi.String(g.ServicesCIDR)},
		},
	}, e.opts(n)...)
	if err != nil {
		return nil, err
	}

	router, err := pulumix.New(ctx, "gcp:compute/router:Router", name+"-router", pulumi.Map{
		"name":        pulumi.String(cluster + "-nat"),
		"description": pulumi.String("runnerfleet: Cloud NAT of GKE cluster " + cluster),
		"network":     vpc.ID(),
		"region":      pulumi.String(g.Region),
	}, e.opts(n)...)
	if err != nil {
		return nil, err
	}
	// Jobs pull images and talk to GitLab at a high rate: dynamic port
	// allocation gives a busy node more NAT ports instead of dropping
	// connections at the static 64.
	_, err = pulumix.New(ctx, "gcp:compute/routerNat:RouterNat", name+"-nat", pulumi.Map{
		"name":                          pulumi.String(cluster + "-nat"),
		"router":                        router.Name,
		"region":                        pulumi.String(g.Region),
		"natIpAllocateOption":           pulumi.String("AUTO_ONLY"),
		"sourceSubnetworkIpRangesToNat": pulumi.String("LIST_OF_SUBNETWORKS"),
		"subnetworks": pulumi.Array{pulumi.Map{
			"name":                 subnet.ID(),
			"sourceIpRangesToNats": pulumi.ToStringArray([]string{"ALL_IP_RANGES"}),
		}},
		"enableEndpointIndependentMapping": pulumi.Bool(false),
		"enableDynamicPortAllocation":      pulumi.Bool(true),
		"minPortsPerVm":                    pulumi.Int(64),
		"maxPortsPerVm":                    pulumi.Int(4096),
		"logConfig":                        pulumi.Map{"enable": pulumi.Bool(true), "filter": pulumi.String("ERRORS_ONLY")},
	}, e.opts(n)...)
	if err != nil {
		return nil, err
	}

	// Nodes and pods talk to each other freely. The services range is left
	// out: ClusterIPs are only ever destinations, never sources.
	_, err = pulumix.New(ctx, "gcp:compute/firewall:Firewall", name+"-allow-internal", pulumi.Map{
		"name":         pulumi.String(cluster + "-internal"),
		"description":  pulumi.String("runnerfleet: nodes and pods of GKE cluster " + cluster + " reach each other"),
		"network":      vpc.ID(),
		"direction":    pulumi.String("INGRESS"),
		"priority":     pulumi.Int(1000),
		"sourceRanges": pulumix.Strings([]string{g.SubnetCIDR, g.PodsCIDR}),
		"allows": pulumi.Array{
			pulumi.Map{"protocol": pulumi.String("tcp")},
			pulumi.Map{"protocol": pulumi.String("udp")},
			pulumi.Map{"protocol": pulumi.String("icmp")},
		},
	}, e.opts(n)...)
	if err != nil {
		return nil, err
	}
	_, err = pulumix.New(ctx, "gcp:compute/firewall:Firewall", name+"-allow-master-webhooks", pulumi.Map{
		"name":         pulumi.String(cluster + "-master-webhooks"),
		"description":  pulumi.String("runnerfleet: the control plane of GKE cluster " + cluster + " reaches webhooks and kubelets on its nodes"),
		"network":      vpc.ID(),
		"direction":    pulumi.String("INGRESS"),
		"priority":     pulumi.Int(1000),
		"sourceRanges": pulumix.Strings([]string{g.MasterCIDR}),
		"targetTags":   pulumix.Strings([]string{n.NodeTag}),
		"allows":       pulumi.Array{pulumi.Map{"protocol": pulumi.String("tcp"), "ports": pulumix.Strings(WebhookPorts)}},
	}, e.opts(n)...)
	if err != nil {
		return nil, err
	}

	n.Network = vpc.ID().ToStringOutput()
	n.Subnetwork = subnet.ID().ToStringOutput()
	return n, ctx.RegisterResourceOutputs(n, pulumi.Map{
		"network":    n.Network,
		"subnetwork": n.Subnetwork,
	})
}
