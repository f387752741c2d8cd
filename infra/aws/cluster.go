package aws

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
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

// eksCluster is aws:eks/cluster:Cluster with the outputs read.
type eksCluster struct {
	pulumi.CustomResourceState

	Arn                  pulumi.StringOutput `pulumi:"arn"`
	Name                 pulumi.StringOutput `pulumi:"name"`
	Endpoint             pulumi.StringOutput `pulumi:"endpoint"`
	CertificateAuthority pulumi.MapOutput    `pulumi:"certificateAuthority"`
	Identities           pulumi.ArrayOutput  `pulumi:"identities"`
}

// launchTemplate is aws:ec2/launchTemplate:LaunchTemplate with its version.
type launchTemplate struct {
	pulumi.CustomResourceState

	LatestVersion pulumi.IntOutput `pulumi:"latestVersion"`
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

// nodeRole declares a role EC2 instances assume, with NodePolicies.
func nodeRole(p *platform, parent pulumi.Resource, name string, inputs pulumi.Map) (*pulumix.Resource, []pulumi.Resource, error) {
	inputs["assumeRolePolicy"] = pulumi.String(serviceTrust([]string{"sts:AssumeRole"}, "ec2.amazonaws.com"))
	role, err := pulumix.New(p.ctx, "aws:iam/role:Role", name, inputs, p.child(parent)...)
	if err != nil {
		return nil, nil, err
	}
	var attached []pulumi.Resource
	for _, pol := range NodePolicies {
		a, err := pulumix.New(p.ctx, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", name+"-"+pol, pulumi.Map{
			"role":      role.Name,
			"policyArn": pulumi.String(p.managedPolicy(pol)),
		}, p.child(parent)...)
		if err != nil {
			return nil, nil, err
		}
		attached = append(attached, a)
	}
	return role, attached, nil
}

func newCluster(p *platform, name string, net *Network, opts ...pulumi.ResourceOption) (*Cluster, error) {
	c := &Cluster{}
	if err := p.ctx.RegisterComponentResource("runnerfleet:aws:Cluster", name, c, opts...); err != nil {
		return nil, err
	}
	ctx, a := p.ctx, p.aws

	role, err := pulumix.New(ctx, "aws:iam/role:Role", name+"-cluster", pulumi.Map{
		"description":      pulumi.String("EKS control plane of " + p.cluster),
		"assumeRolePolicy": pulumi.String(serviceTrust([]string{"sts:AssumeRole", "sts:TagSession"}, "eks.amazonaws.com")),
		"tags":             p.tags(nil),
	}, p.child(c)...)
	if err != nil {
		return nil, err
	}
	clusterPolicy, err := pulumix.New(ctx, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", name+"-cluster-AmazonEKSClusterPolicy", pulumi.Map{
		"role":      role.Name,
		"policyArn": pulumi.String(p.managedPolicy("AmazonEKSClusterPolicy")),
	}, p.child(c)...)
	if err != nil {
		return nil, err
	}

	vpcConfig := pulumi.Map{
		"subnetIds":             ids(net.PrivateSubnetIDs),
		"securityGroupIds":      pulumi.StringArray{net.NodeSecurityGroupID},
		"endpointPrivateAccess": pulumi.Bool(true),
		"endpointPublicAccess":  pulumi.Bool(len(a.EndpointPublicAccessCIDRs) > 0),
	}
	if len(a.EndpointPublicAccessCIDRs) > 0 {
		vpcConfig["publicAccessCidrs"] = pulumix.Strings(a.EndpointPublicAccessCIDRs)
	}
	var eks eksCluster
	err = pulumix.Register(ctx, "aws:eks/cluster:Cluster", name, pulumi.Map{
		"name":      pulumi.String(p.cluster),
		"roleArn":   role.Arn,
		"version":   pulumi.String(a.KubernetesVersion),
		"vpcConfig": vpcConfig,
		"accessConfig": pulumi.Map{
			// Access entries only: no aws-auth ConfigMap to drift. Whoever
			// creates the cluster is its admin, which pulumi up needs to
			// deploy into it (and can only be set at creation).
			"authenticationMode":                      pulumi.String("API"),
			"bootstrapClusterCreatorAdminPermissions": pulumi.Bool(true),
		},
		// Standard support only: extended support bills six times as much;
		// upgrade kubernetesVersion instead.
		"upgradePolicy":          pulumi.Map{"supportType": pulumi.String("STANDARD")},
		"enabledClusterLogTypes": pulumi.ToStringArray([]string{"audit", "authenticator"}),
		"tags":                   p.tags(nil),
	}, &eks, p.child(c, pulumi.DependsOn([]pulumi.Resource{clusterPolicy}))...)
	if err != nil {
		return nil, err
	}
	c.Name, c.Arn, c.Endpoint = eks.Name, eks.Arn, eks.Endpoint
	issuer := eks.Identities.ApplyT(issuerOf).(pulumi.StringOutput)
	c.IssuerHost = issuer.ApplyT(func(s string) string { return strings.TrimPrefix(s, "https://") }).(pulumi.StringOutput)

	// IAM trusts the EKS issuer's certificate through its own store of
	// trusted root CAs and ignores thumbprints for it, so none is pinned
	// here: a thumbprint would only go stale when the issuer's chain
	// rotates.
	oidc, err := pulumix.New(ctx, "aws:iam/openIdConnectProvider:OpenIdConnectProvider", name+"-oidc", pulumi.Map{
		"url":           issuer,
		"clientIdLists": pulumi.StringArray{pulumi.String(Audience)},
		"tags":          p.tags(nil),
	}, p.child(c)...)
	if err != nil {
		return nil, err
	}
	c.OIDCProviderArn = oidc.Arn

	nodes, attached, err := nodeRole(p, c, name+"-system-node", pulumi.Map{
		"description": pulumi.String("system nodes of " + p.cluster),
		"tags":        p.tags(nil),
	})
	if err != nil {
		return nil, err
	}
	// The launch template puts the nodes in the node security group and
	// keeps pods off the instance's credentials (IMDSv2, one hop: only the
	// host network reaches it); the AMI comes from the node group's
	// Bottlerocket AMI type.
	var lt launchTemplate
	err = pulumix.Register(ctx, "aws:ec2/launchTemplate:LaunchTemplate", name+"-system", pulumi.Map{
		"description":         pulumi.String("system nodes of " + p.cluster),
		"vpcSecurityGroupIds": pulumi.StringArray{net.NodeSecurityGroupID},
		"metadataOptions": pulumi.Map{
			"httpEndpoint":            pulumi.String("enabled"),
			"httpTokens":              pulumi.String("required"),
			"httpPutResponseHopLimit": pulumi.Int(1),
		},
		"tagSpecifications": pulumi.Array{
			pulumi.Map{"resourceType": pulumi.String("instance"), "tags": p.named(name+"-system", nil)},
			pulumi.Map{"resourceType": pulumi.String("volume"), "tags": p.named(name+"-system", nil)},
		},
		"updateDefaultVersion": pulumi.Bool(true),
		"tags":                 p.tags(nil),
	}, &lt, p.child(c)...)
	if err != nil {
		return nil, err
	}
	sys := a.SystemNodes
	arch, _ := stackconfig.Architecture(sys.InstanceTypes[0])
	amiType := "BOTTLEROCKET_x86_64"
	if arch == "arm64" {
		amiType = "BOTTLEROCKET_ARM_64"
	}
	capacityType := "SPOT"
	if sys.CapacityType == stackconfig.CapacityTypeOnDemand {
		capacityType = "ON_DEMAND"
	}
	ng, err := pulumix.New(ctx, "aws:eks/nodeGroup:NodeGroup", name+"-system", pulumi.Map{
		"clusterName":   eks.Name,
		"nodeRoleArn":   nodes.Arn,
		"subnetIds":     ids(net.PrivateSubnetIDs),
		"capacityType":  pulumi.String(capacityType),
		"instanceTypes": pulumix.Strings(sys.InstanceTypes),
		"amiType":       pulumi.String(amiType),
		"scalingConfig": pulumi.Map{
			"minSize":     pulumi.Int(sys.Min),
			"maxSize":     pulumi.Int(sys.Max),
			"desiredSize": pulumi.Int(sys.Desired),
		},
		"updateConfig": pulumi.Map{"maxUnavailable": pulumi.Int(1)},
		"launchTemplate": pulumi.Map{
			"id":      lt.ID(),
			"version": lt.LatestVersion.ApplyT(func(v int) string { return strconv.Itoa(v) }).(pulumi.StringOutput),
		},
		"labels": pulumi.StringMap{"runnerfleet.dev/nodes": pulumi.String("system")},
		"tags":   p.tags(nil),
	}, p.child(c, pulumi.DependsOn(attached))...)
	if err != nil {
		return nil, err
	}
	c.NodeGroup = ng

	ca := eks.CertificateAuthority.ApplyT(func(m map[string]any) string {
		s, _ := m["data"].(string)
		return s
	}).(pulumi.StringOutput)
	region := a.Region
	c.Kubeconfig = pulumi.ToSecret(pulumi.All(eks.Name, eks.Endpoint, ca).ApplyT(func(v []any) (string, error) {
		return Kubeconfig(v[0].(string), v[1].(string), v[2].(string), region)
	})).(pulumi.StringOutput)
	c.Kubernetes, err = kube.NewProvider(ctx, name+"-k8s", p.cluster, c.Kubeconfig, pulumi.Parent(c))
	if err != nil {
		return nil, err
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
func issuerOf(ids []any) (string, error) {
	for _, id := range ids {
		m, _ := id.(map[string]any)
		oidcs, _ := m["oidcs"].([]any)
		for _, o := range oidcs {
			om, _ := o.(map[string]any)
			if s, _ := om["issuer"].(string); s != "" {
				return s, nil
			}
		}
	}
	return "", fmt.Errorf("the EKS cluster reported no OIDC issuer (identities %v)", ids)
}

// Kubeconfig is a kubeconfig for an EKS cluster that gets its token from
// the AWS CLI with the caller's credentials.
func Kubeconfig(cluster, endpoint, caData, region string) (string, error) {
	if endpoint == "" || caData == "" {
		return "", fmt.Errorf("EKS cluster %s has no endpoint or certificate authority yet", cluster)
	}
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": cluster,
		"clusters": []any{map[string]any{"name": cluster, "cluster": map[string]any{
			"server":                     endpoint,
			"certificate-authority-data": caData,
		}}},
		"contexts": []any{map[string]any{"name": cluster, "context": map[string]any{"cluster": cluster, "user": cluster}}},
		"users": []any{map[string]any{"name": cluster, "user": map[string]any{"exec": map[string]any{
			"apiVersion":      "client.authentication.k8s.io/v1beta1",
			"command":         "aws",
			"args":            []string{"eks", "get-token", "--cluster-name", cluster, "--region", region, "--output", "json"},
			"interactiveMode": "Never",
		}}}},
	}
	b, err := json.Marshal(cfg)
	return string(b), err
}
