package aws

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
)

// Network is the cluster's VPC: a public and a private subnet per zone,
// one NAT gateway for the private subnets' egress, an S3 gateway endpoint
// (cache traffic skips the NAT) and the security group of every node.
type Network struct {
	pulumi.ResourceState

	VpcID pulumi.StringOutput
	// PublicSubnetIDs hold only the NAT gateway and load balancers;
	// PrivateSubnetIDs every node. Both in the order of aws.zones.
	PublicSubnetIDs  []pulumi.StringOutput
	PrivateSubnetIDs []pulumi.StringOutput
	// NodeSecurityGroupID is the security group of all nodes (system and
	// Karpenter's) and of the control plane's network interfaces.
	NodeSecurityGroupID pulumi.StringOutput
}

func newNetwork(p *platform, name string, opts ...pulumi.ResourceOption) (*Network, error) {
	n := &Network{}
	if err := p.ctx.RegisterComponentResource("runnerfleet:aws:Network", name, n, opts...); err != nil {
		return nil, err
	}
	ctx, a := p.ctx, p.aws
	discovery := map[string]string{TagDiscovery: p.cluster}

	vpc, err := pulumix.New(ctx, "aws:ec2/vpc:Vpc", name+"-vpc", pulumi.Map{
		"cidrBlock":          pulumi.String(a.VPCCIDR),
		"enableDnsSupport":   pulumi.Bool(true),
		"enableDnsHostnames": pulumi.Bool(true),
		"tags":               p.named(name, nil),
	}, p.child(n)...)
	if err != nil {
		return nil, err
	}
	n.VpcID = vpc.ID().ToStringOutput()

	igw, err := pulumix.New(ctx, "aws:ec2/internetGateway:InternetGateway", name+"-igw", pulumi.Map{
		"vpcId": vpc.ID(),
		"tags":  p.named(name, nil),
	}, p.child(n)...)
	if err != nil {
		return nil, err
	}

	var public, private []*pulumix.Resource
	for i, zone := range a.Zones {
		pub, err := pulumix.New(ctx, "aws:ec2/subnet:Subnet", name+"-public-"+zone, pulumi.Map{
			"vpcId":            vpc.ID(),
			"availabilityZone": pulumi.String(zone),
			"cidrBlock":        pulumi.String(a.PublicSubnetCIDRs[i]),
			// Nothing launched here gets a public IP by itself: the NAT
			// gateway has its Elastic IP, load balancers their own.
			"mapPublicIpOnLaunch": pulumi.Bool(false),
			"tags":                p.named(name+"-public-"+zone, map[string]string{"kubernetes.io/role/elb": "1"}),
		}, p.child(n)...)
		if err != nil {
			return nil, err
		}
		priv, err := pulumix.New(ctx, "aws:ec2/subnet:Subnet", name+"-private-"+zone, pulumi.Map{
			"vpcId":               vpc.ID(),
			"availabilityZone":    pulumi.String(zone),
			"cidrBlock":           pulumi.String(a.PrivateSubnetCIDRs[i]),
			"mapPublicIpOnLaunch": pulumi.Bool(false),
			"tags": p.named(name+"-private-"+zone, map[string]string{
				"kubernetes.io/role/internal-elb": "1",
				TagDiscovery:                      p.cluster,
			}),
		}, p.child(n)...)
		if err != nil {
			return nil, err
		}
		public, private = append(public, pub), append(private, priv)
		n.PublicSubnetIDs = append(n.PublicSubnetIDs, pub.ID().ToStringOutput())
		n.PrivateSubnetIDs = append(n.PrivateSubnetIDs, priv.ID().ToStringOutput())
	}

	// One NAT gateway, in the first zone: a zone outage cuts the other
	// zones' egress, which costs less than a gateway per zone for CI.
	eip, err := pulumix.New(ctx, "aws:ec2/eip:Eip", name+"-nat", pulumi.Map{
		"domain": pulumi.String("vpc"),
		"tags":   p.named(name+"-nat", nil),
	}, p.child(n, pulumi.DependsOn([]pulumi.Resource{igw}))...)
	if err != nil {
		return nil, err
	}
	nat, err := pulumix.New(ctx, "aws:ec2/natGateway:NatGateway", name+"-nat", pulumi.Map{
		"allocationId": eip.ID(),
		"subnetId":     public[0].ID(),
		"tags":         p.named(name+"-nat", nil),
	}, p.child(n, pulumi.DependsOn([]pulumi.Resource{igw}))...)
	if err != nil {
		return nil, err
	}

	route := func(kind string, subnets []*pulumix.Resource, target string, via pulumi.IDOutput) (*pulumix.Resource, error) {
		rt, err := pulumix.New(ctx, "aws:ec2/routeTable:RouteTable", name+"-"+kind, pulumi.Map{
			"vpcId": vpc.ID(),
			"tags":  p.named(name+"-"+kind, nil),
		}, p.child(n)...)
		if err != nil {
			return nil, err
		}
		if _, err := pulumix.New(ctx, "aws:ec2/route:Route", name+"-"+kind+"-default", pulumi.Map{
			"routeTableId":         rt.ID(),
			"destinationCidrBlock": pulumi.String("0.0.0.0/0"),
			target:                 via,
		}, p.child(n)...); err != nil {
			return nil, err
		}
		for i, s := range subnets {
			if _, err := pulumix.New(ctx, "aws:ec2/routeTableAssociation:RouteTableAssociation", name+"-"+kind+"-"+a.Zones[i], pulumi.Map{
				"routeTableId": rt.ID(),
				"subnetId":     s.ID(),
			}, p.child(n)...); err != nil {
				return nil, err
			}
		}
		return rt, nil
	}
	if _, err := route("public", public, "gatewayId", igw.ID()); err != nil {
		return nil, err
	}
	privateRT, err := route("private", private, "natGatewayId", nat.ID())
	if err != nil {
		return nil, err
	}
	// Cache traffic to S3 goes through a (free) gateway endpoint rather than
	// the NAT gateway, which bills per gigabyte.
	if _, err := pulumix.New(ctx, "aws:ec2/vpcEndpoint:VpcEndpoint", name+"-s3", pulumi.Map{
		"vpcId":           vpc.ID(),
		"serviceName":     pulumi.String(s3Service(a.Region)),
		"vpcEndpointType": pulumi.String("Gateway"),
		"routeTableIds":   pulumi.StringArray{privateRT.ID()},
		"tags":            p.named(name+"-s3", nil),
	}, p.child(n)...); err != nil {
		return nil, err
	}

	// Every node (the system node group's through its launch template,
	// Karpenter's by the discovery tag) and the control plane's network
	// interfaces (as the cluster's additional security group) are in this
	// group, and it lets its members reach each other: nodes, pods and the
	// control plane talk, nothing else comes in.
	sg, err := pulumix.New(ctx, "aws:ec2/securityGroup:SecurityGroup", name+"-nodes", pulumi.Map{
		"vpcId":       vpc.ID(),
		"description": pulumi.String("runnerfleet " + p.cluster + ": nodes and control plane"),
		"ingress": pulumi.Array{pulumi.Map{
			"description": pulumi.String("nodes, pods and control plane among themselves"),
			"protocol":    pulumi.String("-1"), "fromPort": pulumi.Int(0), "toPort": pulumi.Int(0),
			"self": pulumi.Bool(true),
		}},
		"egress": pulumi.Array{pulumi.Map{
			"description": pulumi.String("anywhere, through the NAT gateway"),
			"protocol":    pulumi.String("-1"), "fromPort": pulumi.Int(0), "toPort": pulumi.Int(0),
			"cidrBlocks": pulumi.StringArray{pulumi.String("0.0.0.0/0")},
		}},
		"revokeRulesOnDelete": pulumi.Bool(true),
		"tags":                p.named(name+"-nodes", discovery),
	}, p.child(n)...)
	if err != nil {
		return nil, err
	}
	n.NodeSecurityGroupID = sg.ID().ToStringOutput()

	err = p.ctx.RegisterResourceOutputs(n, pulumi.Map{
		"vpcId":               n.VpcID,
		"publicSubnetIds":     pulumi.ToStringArrayOutput(n.PublicSubnetIDs),
		"privateSubnetIds":    pulumi.ToStringArrayOutput(n.PrivateSubnetIDs),
		"nodeSecurityGroupId": n.NodeSecurityGroupID,
	})
	return n, err
}

// ids turns subnet IDs into an input.
func ids(outs []pulumi.StringOutput) pulumi.StringArray {
	a := make(pulumi.StringArray, len(outs))
	for i, o := range outs {
		a[i] = o
	}
	return a
}

// s3Service is the S3 endpoint service of a region.
func s3Service(region string) string {
	if Partition(region) == "aws-cn" {
		return "cn.com.amazonaws." + region + ".s3"
	}
	return "com.amazonaws." + region + ".s3"
}
