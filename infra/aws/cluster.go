package aws

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/ec2"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/eks"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/iam"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Cluster is the EKS cluster: its role, the control plane (API
// authentication mode, private endpoint), the IRSA OIDC provider, the
// system node group (spot, Bottlerocket, private subnets) and a Kubernetes
// provider pointed at it.
type Cluster struct {
	pulumi.ResourceState

	Name     pulumi.StringOutput
	Arn      pulumi.StringOutput
	Endpoint pulumi.StringOutput
	// OIDCProviderArn is the IAM OIDC provider of the cluster's issuer;
	// IssuerHost the issuer without https://, as IRSA conditions name it.
	OIDCProviderArn pulumi.StringOutput
	IssuerHost      pulumi.StringOutput
	// Kubeconfig is a secret: it reaches the cluster through the caller's
	// AWS credentials (aws eks get-token), and holds no key itself.
	Kubeconfig pulumi.StringOutput
	NodeGroup  pulumi.Resource
	Kubernetes *kube.Provider
}

// NodePolicies are the managed policies of a node role: join the cluster,
// run the VPC CNI, pull images, and let Bottlerocket's control container
// reach SSM.
var NodePolicies = []string{
	"AmazonEKSWorkerNodePolicy",
	"AmazonEKS_CNI_Policy",
	"AmazonEC2ContainerRegistryReadOnly",
	"AmazonSSMManagedInstanceCore",
}

// The VPC CNI add-on and its configuration values (the add-on's
// configuration schema: enableNetworkPolicy, a string) that turn on its
// network policy agent, which enforces NetworkPolicy on EKS.
const (
	VPCCNIAddon         = "vpc-cni"
	VPCCNIConfiguration = `{"enableNetworkPolicy":"true"}`
)

// nodeRole declares a role EC2 instances assume, with NodePolicies.
func nodeRole(ctx *pulumi.Context, p *platform, parent pulumi.Resource, name string, args *iam.RoleArgs) (*iam.Role, []pulumi.Resource, error) {
	args.AssumeRolePolicy = pulumi.String(serviceTrust([]string{"sts:AssumeRole"}, "ec2.amazonaws.com"))
	role, err := iam.NewRole(ctx, name, args, p.child(parent)...)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the node role %s: %w", name, err)
	}
	var attached []pulumi.Resource
	for _, pol := range NodePolicies {
		a, err := iam.NewRolePolicyAttachment(ctx, name+"-"+pol, &iam.RolePolicyAttachmentArgs{
			Role:      role.Name,
			PolicyArn: pulumi.String(p.managedPolicy(pol)),
		}, p.child(parent)...)
		if err != nil {
			return nil, nil, fmt.Errorf("attaching %s to %s: %w", pol, name, err)
		}
		attached = append(attached, a)
	}
	return role, attached, nil
}

func newCluster(ctx *pulumi.Context, p *platform, name string, net *Network, opts ...pulumi.ResourceOption) (*Cluster, error) {
	c := &Cluster{}
	if err := ctx.RegisterComponentResource("runnerfleet:aws:Cluster", name, c, opts...); err != nil {
		return nil, err
	}
	a := p.aws

	role, err := iam.NewRole(ctx, name+"-cluster", &iam.RoleArgs{
		Description:      pulumi.String("EKS control plane of " + p.cluster),
		AssumeRolePolicy: pulumi.String(serviceTrust([]string{"sts:AssumeRole", "sts:TagSession"}, "eks.amazonaws.com")),
		Tags:             p.tags(nil),
	}, p.child(c)...)
	if err != nil {
		return nil, fmt.Errorf("creating the cluster role: %w", err)
	}
	clusterPolicy, err := iam.NewRolePolicyAttachment(ctx, name+"-cluster-AmazonEKSClusterPolicy", &iam.RolePolicyAttachmentArgs{
		Role:      role.Name,
		PolicyArn: pulumi.String(p.managedPolicy("AmazonEKSClusterPolicy")),
	}, p.child(c)...)
	if err != nil {
		return nil, fmt.Errorf("attaching AmazonEKSClusterPolicy: %w", err)
	}

	vpcConfig := &eks.ClusterVpcConfigArgs{
		SubnetIds:             ids(net.PrivateSubnetIDs),
		SecurityGroupIds:      pulumi.StringArray{net.NodeSecurityGroupID},
		EndpointPrivateAccess: pulumi.Bool(true),
		EndpointPublicAccess:  pulumi.Bool(len(a.EndpointPublicAccessCIDRs) > 0),
	}
	if len(a.EndpointPublicAccessCIDRs) > 0 {
		vpcConfig.PublicAccessCidrs = pulumix.Strings(a.EndpointPublicAccessCIDRs)
	}
	cluster, err := eks.NewCluster(ctx, name, &eks.ClusterArgs{
		Name:      pulumi.String(p.cluster),
		RoleArn:   role.Arn,
		Version:   pulumi.String(a.KubernetesVersion),
		VpcConfig: vpcConfig,
		AccessConfig: &eks.ClusterAccessConfigArgs{
			// Access entries only: no aws-auth ConfigMap to drift. Whoever
			// creates the cluster is its admin, which pulumi up needs to
			// deploy into it (and can only be set at creation).
			AuthenticationMode:                      pulumi.String("API"),
			BootstrapClusterCreatorAdminPermissions: pulumi.Bool(true),
		},
		// Standard support only: extended support bills six times as much;
		// upgrade kubernetesVersion instead.
		UpgradePolicy:          &eks.ClusterUpgradePolicyArgs{SupportType: pulumi.String("STANDARD")},
		EnabledClusterLogTypes: pulumi.ToStringArray([]string{"audit", "authenticator"}),
		Tags:                   p.tags(nil),
	}, p.child(c, pulumi.DependsOn([]pulumi.Resource{clusterPolicy}))...)
	if err != nil {
		return nil, fmt.Errorf("creating the EKS cluster: %w", err)
	}
	c.Name, c.Arn, c.Endpoint = cluster.Name, cluster.Arn, cluster.Endpoint
	issuer := cluster.Identities.ApplyT(issuerOf).(pulumi.StringOutput)
	c.IssuerHost = issuer.ApplyT(func(s string) string { return strings.TrimPrefix(s, "https://") }).(pulumi.StringOutput)

	// IAM trusts the EKS issuer's certificate through its own store of
	// trusted root CAs and ignores thumbprints for it, so none is pinned
	// here: a thumbprint would only go stale when the issuer's chain
	// rotates.
	oidc, err := iam.NewOpenIdConnectProvider(ctx, name+"-oidc", &iam.OpenIdConnectProviderArgs{
		Url:           issuer,
		ClientIdLists: pulumi.StringArray{pulumi.String(Audience)},
		Tags:          p.tags(nil),
	}, p.child(c)...)
	if err != nil {
		return nil, fmt.Errorf("creating the OIDC provider: %w", err)
	}
	c.OIDCProviderArn = oidc.Arn

	nodes, attached, err := nodeRole(ctx, p, c, name+"-system-node", &iam.RoleArgs{
		Description: pulumi.String("system nodes of " + p.cluster),
		Tags:        p.tags(nil),
	})
	if err != nil {
		return nil, err
	}
	// The launch template puts the nodes in the node security group and
	// keeps pods off the instance's credentials (IMDSv2, one hop: only the
	// host network reaches it); the AMI comes from the node group's
	// Bottlerocket AMI type.
	lt, err := ec2.NewLaunchTemplate(ctx, name+"-system", &ec2.LaunchTemplateArgs{
		Description:         pulumi.String("system nodes of " + p.cluster),
		VpcSecurityGroupIds: pulumi.StringArray{net.NodeSecurityGroupID},
		MetadataOptions: &ec2.LaunchTemplateMetadataOptionsArgs{
			HttpEndpoint:            pulumi.String("enabled"),
			HttpTokens:              pulumi.String("required"),
			HttpPutResponseHopLimit: pulumi.Int(1),
		},
		TagSpecifications: []ec2.LaunchTemplateTagSpecificationArgs{
			{ResourceType: pulumi.String("instance"), Tags: p.named(name+"-system", nil)},
			{ResourceType: pulumi.String("volume"), Tags: p.named(name+"-system", nil)},
		},
		UpdateDefaultVersion: pulumi.Bool(true),
		Tags:                 p.tags(nil),
	}, p.child(c)...)
	if err != nil {
		return nil, fmt.Errorf("creating the system nodes' launch template: %w", err)
	}
	// The VPC CNI as a managed add-on with its network policy agent on:
	// without it EKS enforces no NetworkPolicy, the jobs namespaces' and
	// the controller's included. Declared before the nodes, so that none
	// starts without it.
	cni, err := eks.NewAddon(ctx, name+"-"+VPCCNIAddon, &eks.AddonArgs{
		ClusterName:         cluster.Name,
		AddonName:           pulumi.String(VPCCNIAddon),
		ConfigurationValues: pulumi.String(VPCCNIConfiguration),
		// EKS installs the CNI itself; the add-on takes it over.
		ResolveConflictsOnCreate: pulumi.String("OVERWRITE"),
		ResolveConflictsOnUpdate: pulumi.String("OVERWRITE"),
		Tags:                     p.tags(nil),
	}, p.child(c)...)
	if err != nil {
		return nil, fmt.Errorf("declaring the %s add-on: %w", VPCCNIAddon, err)
	}
	sys := a.SystemNodes
	arch, _ := stackconfig.Architecture(sys.InstanceTypes[0])
	amiType := "BOTTLEROCKET_x86_64"
	if arch == "arm64" {
		amiType = "BOTTLEROCKET_ARM_64"
	}
	// The managers' pool: on-demand (stackconfig refuses anything else),
	// labelled and tainted so that managers select it and nothing else
	// lands there (runnerset/resources).
	taint := resources.ManagerNodeTaint()
	ng, err := eks.NewNodeGroup(ctx, name+"-system", &eks.NodeGroupArgs{
		ClusterName:   cluster.Name,
		NodeRoleArn:   nodes.Arn,
		SubnetIds:     ids(net.PrivateSubnetIDs),
		CapacityType:  pulumi.String("ON_DEMAND"),
		InstanceTypes: pulumix.Strings(sys.InstanceTypes),
		AmiType:       pulumi.String(amiType),
		ScalingConfig: &eks.NodeGroupScalingConfigArgs{
			MinSize:     pulumi.Int(sys.Min),
			MaxSize:     pulumi.Int(sys.Max),
			DesiredSize: pulumi.Int(sys.Desired),
		},
		// One node at a time, and never forced: EKS fails the update
		// rather than delete a manager whose PodDisruptionBudget holds
		// past its 15 minutes (a forced update would delete it mid-drain).
		UpdateConfig:       &eks.NodeGroupUpdateConfigArgs{MaxUnavailable: pulumi.Int(1)},
		ForceUpdateVersion: pulumi.Bool(false),
		LaunchTemplate: &eks.NodeGroupLaunchTemplateArgs{
			Id:      lt.ID(),
			Version: lt.LatestVersion.ApplyT(func(v int) string { return strconv.Itoa(v) }).(pulumi.StringOutput),
		},
		Labels: pulumi.ToStringMap(resources.ManagerNodeLabels()),
		Taints: []eks.NodeGroupTaintArgs{{
			Key: pulumi.String(taint.Key), Value: pulumi.String(taint.Value), Effect: pulumi.String(pulumix.CloudTaintEffect(taint.Effect)),
		}},
		Tags: p.tags(nil),
	}, p.child(c, pulumi.DependsOn(append(attached, cni)))...)
	if err != nil {
		return nil, fmt.Errorf("creating the system node group: %w", err)
	}
	c.NodeGroup = ng

	ca := cluster.CertificateAuthority.ApplyT(func(a eks.ClusterCertificateAuthority) string {
		if a.Data == nil {
			return ""
		}
		return *a.Data
	}).(pulumi.StringOutput)
	region := a.Region
	c.Kubeconfig = pulumi.ToSecret(pulumi.All(cluster.Name, cluster.Endpoint, ca).ApplyT(func(v []any) (string, error) {
		return Kubeconfig(v[0].(string), v[1].(string), v[2].(string), region)
	})).(pulumi.StringOutput)
	c.Kubernetes, err = kube.NewProvider(ctx, name+"-k8s", p.cluster, c.Kubeconfig, pulumi.Parent(c))
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes provider: %w", err)
	}

	err = ctx.RegisterResourceOutputs(c, pulumi.Map{
		"name":            c.Name,
		"arn":             c.Arn,
		"endpoint":        c.Endpoint,
		"oidcProviderArn": c.OIDCProviderArn,
		"kubeconfig":      c.Kubeconfig,
	})
	return c, err
}

// issuerOf reads the OIDC issuer from an EKS cluster's identities output.
func issuerOf(ids []eks.ClusterIdentity) (string, error) {
	for _, id := range ids {
		for _, o := range id.Oidcs {
			if o.Issuer != nil && *o.Issuer != "" {
				return *o.Issuer, nil
			}
		}
	}
	return "", fmt.Errorf("the EKS cluster reported no OIDC issuer (identities %+v)", ids)
}

// Kubeconfig is a kubeconfig for an EKS cluster that gets its token from
// the AWS CLI with the caller's credentials.
func Kubeconfig(cluster, endpoint, caData, region string) (string, error) {
	return kube.Kubeconfig{Platform: "EKS", Cluster: cluster, Server: endpoint, CAData: caData, Exec: kube.Exec{
		Command: "aws",
		Args:    []string{"eks", "get-token", "--cluster-name", cluster, "--region", region, "--output", "json"},
	}}.JSON()
}
