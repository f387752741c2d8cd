// Package aws is the eks platform of the runnerfleet program: a VPC, an EKS
// cluster with a small spot node group, Karpenter with its interruption
// queue, an IRSA role per team and the S3 job cache, each concern a
// ComponentResource. Resources are registered by type token through
// infra/internal/pulumix (the generated pulumi-aws SDK is not compiled) and
// every one goes through one explicit AWS provider, so that the region and
// the default tags come from the stack config and nothing else.
package aws

import (
	"fmt"
	"maps"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Tags runnerfleet puts on every AWS resource.
const (
	TagStack   = "runnerfleet:stack"
	TagCluster = "runnerfleet:cluster"
	// TagDiscovery marks the subnets and security group Karpenter launches
	// runner nodes into; runnerset/capacity selects by it.
	TagDiscovery = "karpenter.sh/discovery"
)

// AMIAlias is the image of Karpenter's runner nodes.
const AMIAlias = v1alpha1.DefaultAMIAlias

// platform is what every component of one cluster shares.
type platform struct {
	ctx       *pulumi.Context
	f         *stackconfig.Fleet
	aws       *stackconfig.AWS
	cluster   string // the EKS cluster's name
	partition string
	provider  pulumi.ProviderResource
}

// common are the tags of every resource: the stack's, the cluster's and the
// stack config's aws.tags.
func (p *platform) common() map[string]string {
	t := maps.Clone(p.aws.Tags)
	if t == nil {
		t = map[string]string{}
	}
	t[TagStack] = p.ctx.Stack()
	t[TagCluster] = p.cluster
	return t
}

// tags are the common tags plus extra, as an input.
func (p *platform) tags(extra map[string]string) pulumi.StringMap {
	t := p.common()
	maps.Copy(t, extra)
	return pulumix.StringMap(t)
}

// named tags with a Name tag.
func (p *platform) named(name string, extra map[string]string) pulumi.StringMap {
	t := map[string]string{"Name": name}
	maps.Copy(t, extra)
	return p.tags(t)
}

// child are the options of a component's AWS resources: parented to it,
// through the stack's AWS provider.
func (p *platform) child(parent pulumi.Resource, more ...pulumi.ResourceOption) []pulumi.ResourceOption {
	return append([]pulumi.ResourceOption{pulumi.Parent(parent), pulumi.Provider(p.provider)}, more...)
}

// arn builds an ARN in the stack's partition.
func (p *platform) arn(service, region, account, resource string) string {
	return fmt.Sprintf("arn:%s:%s:%s:%s:%s", p.partition, service, region, account, resource)
}

// managedPolicy is the ARN of an AWS managed policy.
func (p *platform) managedPolicy(name string) string {
	return p.arn("iam", "", "aws", "policy/"+name)
}

// Partition is the AWS partition of a region.
func Partition(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	}
	return "aws"
}

// awsProvider is the explicit AWS provider.
type awsProvider struct {
	pulumi.ProviderResourceState
}

// NewPlatform declares the eks platform of f and returns the cluster the
// Kubernetes part of the program deploys into.
func NewPlatform(ctx *pulumi.Context, f *stackconfig.Fleet, opts ...pulumi.ResourceOption) (*kube.Cluster, error) {
	if f.AWS == nil {
		return nil, fmt.Errorf("%s: platform eks needs an aws section", stackconfig.Root.Child("aws"))
	}
	if errs := f.AWS.CheckCapacity(stackconfig.Root.Child("aws"), f.Capacity.AllowOnDemand); len(errs) > 0 {
		return nil, &stackconfig.Error{List: errs}
	}
	p := &platform{ctx: ctx, f: f, aws: f.AWS, cluster: f.ClusterName, partition: Partition(f.AWS.Region)}
	name := f.ClusterName

	// The same arguments the generated aws.NewProvider would send, with the
	// region and default tags from the stack config rather than from the
	// environment of whoever runs pulumi up.
	var prov awsProvider
	err := pulumix.Register(ctx, "pulumi:providers:aws", name+"-aws", pulumi.Map{
		"region":                    pulumi.String(f.AWS.Region),
		"defaultTags":               pulumi.Map{"tags": pulumix.StringMap(p.common())},
		"skipCredentialsValidation": pulumi.Bool(false),
		"skipRegionValidation":      pulumi.Bool(true),
	}, &prov, opts...)
	if err != nil {
		return nil, err
	}
	p.provider = &prov

	net, err := newNetwork(p, name, opts...)
	if err != nil {
		return nil, err
	}
	cl, err := newCluster(p, name, net, opts...)
	if err != nil {
		return nil, err
	}
	karp, err := newKarpenter(p, name, cl, opts...)
	if err != nil {
		return nil, err
	}
	identities := map[string]pulumi.StringOutput{}
	var roles []teamRole
	for _, t := range f.Teams {
		if !t.WantsIdentity(f.Platform) {
			continue
		}
		id, err := newIdentity(p, t.Namespace, t.Name, cl, opts...)
		if err != nil {
			return nil, err
		}
		identities[kube.IdentityKey(t.Namespace, t.Name)] = id.RoleArn
		roles = append(roles, teamRole{namespace: t.Namespace, arn: id.RoleArn})
	}
	cache, err := newCache(p, name, roles, opts...)
	if err != nil {
		return nil, err
	}

	return &kube.Cluster{
		Provider: cl.Kubernetes,
		Class: v1alpha1.RunnerClassSpec{
			Provider: v1alpha1.CapacityProviderKarpenter,
			Karpenter: &v1alpha1.KarpenterSettings{
				ClusterName: p.cluster,
				NodeRole:    karp.NodeRoleName,
				AMIAlias:    AMIAlias,
				Tags:        p.common(),
			},
			Policy: v1alpha1.RunnerClassPolicy{Identity: v1alpha1.IdentityPolicy{
				AWSRoleARNPatterns: []string{p.rolePattern()},
			}},
		},
		Identities: identities,
		Cache:      &kube.Cache{Type: v1alpha1.CacheTypeS3, Bucket: cache.Bucket, Region: f.AWS.Region},
		DependsOn:  []pulumi.Resource{cl.NodeGroup, karp.Release},
		InCluster:  true,
	}, nil
}

// RolePath is the IAM path of the team roles of a namespace. The path, not
// the name, carries the namespace: a role name joins namespace and
// RunnerSet with '-', both of which may contain '-', so a name pattern for
// namespace "team" would also match the roles of namespace "team-a"; a path
// segment cannot.
func RolePath(cluster, namespace string) string { return "/" + cluster + "/" + namespace + "/" }

// rolePattern is the RunnerClass identity pattern of the team roles: any
// role under the namespace's path ('*' never matches '/').
func (p *platform) rolePattern() string {
	return p.arn("iam", "", "*", "role"+RolePath(p.cluster, "{namespace}")+"*")
}

// teamRole is a team's role, for the cache bucket's policy.
type teamRole struct {
	namespace string
	arn       pulumi.StringOutput
}

// roleName is the name of a team's job role.
func roleName(cluster, namespace, runnerSet string) string {
	return naming.For(namespace, runnerSet).IAMRole(cluster)
}
