package aws

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/ec2"
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

func newNetwork(ctx *pulumi.Context, p *platform, name string, opts ...pulumi.ResourceOption) (*Network, error) {
	n := &Network{}
	if err := ctx.RegisterComponentResource("runnerfleet:aws:Network", name, n, opts...); err != nil {
		return nil, err
	}
	a := p.aws
	discovery := map[string]string{TagDiscovery: p.cluster}

	vpc, err := ec2.NewVpc(ctx, name+"-vpc", &ec2.VpcArgs{
		CidrBlock:          pulumi.String(a.VPCCIDR),
		EnableDnsSupport:   pulumi.Bool(true),
		EnableDnsHostnames: pulumi.Bool(true),
		Tags:               p.named(name, nil),
	}, p.child(n)...)
	if err != nil {
		return nil, fmt.Errorf("creating the VPC: %w", err)
	}
	n.VpcID = vpc.ID().ToStringOutput()

	igw, err := ec2.NewInternetGateway(ctx, name+"-igw", &ec2.InternetGatewayArgs{
		VpcId: vpc.ID(),
		Tags:  p.named(name, nil),
	}, p.child(n)...)
	if err != nil {
		return nil, fmt.Errorf("creating the internet gateway: %w", err)
	}

	var public, private []*ec2.Subnet
	for i, zone := range a.Zones {
		pub, err := ec2.NewSubnet(ctx, name+"-public-"+zone, &ec2.SubnetArgs{
			VpcId:            vpc.ID(),
			AvailabilityZone: pulumi.String(zone),
			CidrBlock:        pulumi.String(a.PublicSubnetCIDRs[i]),
			// Nothing launched here gets a public IP by itself: the NAT
			// gateway has its Elastic IP, load balancers their own.
			MapPublicIpOnLaunch: pulumi.Bool(false),
			Tags:                p.named(name+"-public-"+zone, map[string]string{"kubernetes.io/role/elb": "1"}),
		}, p.child(n)...)
		if err != nil {
			return nil, fmt.Errorf("creating the public subnet of %s: %w", zone, err)
		}
		priv, err := ec2.NewSubnet(ctx, name+"-private-"+zone, &ec2.SubnetArgs{
			VpcId:               vpc.ID(),
			AvailabilityZone:    pulumi.String(zone),
			CidrBlock:           pulumi.String(a.PrivateSubnetCIDRs[i]),
			MapPublicIpOnLaunch: pulumi.Bool(false),
			Tags: p.named(name+"-private-"+zone, map[string]string{
				"kubernetes.io/role/internal-elb": "1",
				TagDiscovery:                      p.cluster,
			}),
		}, p.child(n)...)
		if err != nil {
			return nil, fmt.Errorf("creating the private subnet of %s: %w", zone, err)
		}
		public, private = append(public, pub), append(private, priv)
		n.PublicSubnetIDs = append(n.PublicSubnetIDs, pub.ID().ToStringOutput())
		n.PrivateSubnetIDs = append(n.PrivateSubnetIDs, priv.ID().ToStringOutput())
	}

	// One NAT gateway, in the first zone: a zone outage cuts the other
	// zones' egress, which costs less than a gateway per zone for CI.
	eip, err := ec2.NewEip(ctx, name+"-nat", &ec2.EipArgs{
		Domain: pulumi.String("vpc"),
		Tags:   p.named(name+"-nat", nil),
	}, p.child(n, pulumi.DependsOn([]pulumi.Resource{igw}))...)
	if err != nil {
		return nil, fmt.Errorf("creating the NAT gateway's address: %w", err)
	}
	nat, err := ec2.NewNatGateway(ctx, name+"-nat", &ec2.NatGatewayArgs{
		AllocationId: eip.ID(),
		SubnetId:     public[0].ID(),
		Tags:         p.named(name+"-nat", nil),
	}, p.child(n, pulumi.DependsOn([]pulumi.Resource{igw}))...)
	if err != nil {
		return nil, fmt.Errorf("creating the NAT gateway: %w", err)
	}

	route := func(kind string, subnets []*ec2.Subnet, target func(*ec2.RouteArgs)) (*ec2.RouteTable, error) {
		rt, err := ec2.NewRouteTable(ctx, name+"-"+kind, &ec2.RouteTableArgs{
			VpcId: vpc.ID(),
			Tags:  p.named(name+"-"+kind, nil),
		}, p.child(n)...)
		if err != nil {
			return nil, err
		}
		def := &ec2.RouteArgs{RouteTableId: rt.ID(), DestinationCidrBlock: pulumi.String("0.0.0.0/0")}
		target(def)
		if _, err := ec2.NewRoute(ctx, name+"-"+kind+"-default", def, p.child(n)...); err != nil {
			return nil, err
		}
		for i, s := range subnets {
			if _, err := ec2.NewRouteTableAssociation(ctx, name+"-"+kind+"-"+a.Zones[i], &ec2.RouteTableAssociationArgs{
				RouteTableId: rt.ID(),
				SubnetId:     s.ID(),
			}, p.child(n)...); err != nil {
				return nil, err
			}
		}
		return rt, nil
	}
	if _, err := route("public", public, func(r *ec2.RouteArgs) { r.GatewayId = igw.ID() }); err != nil {
		return nil, fmt.Errorf("creating the public routes: %w", err)
	}
	privateRT, err := route("private", private, func(r *ec2.RouteArgs) { r.NatGatewayId = nat.ID() })
	if err != nil {
		return nil, fmt.Errorf("creating the private routes: %w", err)
	}
	// Cache traffic to S3 goes through a (free) gateway endpoint rather than
	// the NAT gateway, which bills per gigabyte.
	if _, err := ec2.NewVpcEndpoint(ctx, name+"-s3", &ec2.VpcEndpointArgs{
		VpcId:           vpc.ID(),
		ServiceName:     pulumi.String(s3Service(a.Region)),
		VpcEndpointType: pulumi.String("Gateway"),
		RouteTableIds:   pulumi.StringArray{privateRT.ID()},
		Tags:            p.named(name+"-s3", nil),
	}, p.child(n)...); err != nil {
		return nil, fmt.Errorf("creating the S3 endpoint: %w", err)
	}

	// Every node (the system node group's through its launch template,
	// Karpenter's by the discovery tag) and the control plane's network
	// interfaces (as the cluster's additional security group) are in this
	// group, and it lets its members reach each other: nodes, pods and the
	// control plane talk, nothing else comes in.
	sg, err := ec2.NewSecurityGroup(ctx, name+"-nodes", &ec2.SecurityGroupArgs{
		VpcId:       vpc.ID(),
		Description: pulumi.String("runnerfleet " + p.cluster + ": nodes and control plane"),
		Ingress: []ec2.SecurityGroupIngressArgs{{
			Description: pulumi.String("nodes, pods and control plane among themselves"),
			Protocol:    pulumi.String("-1"), FromPort: pulumi.Int(0), ToPort: pulumi.Int(0),
			Self: pulumi.Bool(true),
		}},
		Egress: []ec2.SecurityGroupEgressArgs{{
			Description: pulumi.String("anywhere, through the NAT gateway"),
			Protocol:    pulumi.String("-1"), FromPort: pulumi.Int(0), ToPort: pulumi.Int(0),
			CidrBlocks: pulumi.StringArray{pulumi.String("0.0.0.0/0")},
		}},
		RevokeRulesOnDelete: pulumi.Bool(true),
		Tags:                p.named(name+"-nodes", discovery),
	}, p.child(n)...)
	if err != nil {
		return nil, fmt.Errorf("creating the node security group: %w", err)
	}
	n.NodeSecurityGroupID = sg.ID().ToStringOutput()

	err = ctx.RegisterResourceOutputs(n, pulumi.Map{
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
