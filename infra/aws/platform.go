// Package aws is the eks platform of the runnerfleet program: a VPC, an EKS
// cluster with a small spot node group, Karpenter with its interruption
// queue, an IRSA role per team and the S3 job cache, each concern a
// ComponentResource under one Platform. Resources are declared through the
// typed constructors of infra/internal/sdk (generated from the pinned
// pulumi-aws SDK, which is not compiled) and every one goes through one
// explicit AWS provider, so that the region and
// the default tags come from the stack config and nothing else.
package aws

import (
	"fmt"
	"maps"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	awssdk "github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws"
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
	TagDiscovery = naming.TagKarpenterDiscovery
)

// AMIAlias is the image of Karpenter's runner nodes.
const AMIAlias = v1alpha1.DefaultAMIAlias

// platform is what every component of one cluster shares.
type platform struct {
	stack     string
	args      *PlatformArgs
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
	t[TagStack] = p.stack
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

// PlatformArgs are what the eks platform is declared from.
type PlatformArgs struct {
	// Cluster is the EKS cluster's name.
	Cluster string
	AWS     *stackconfig.AWS
	// Teams are the RunnerSets that get an IRSA role.
	Teams []Team
	// CacheExpireDays is how long cache objects live.
	CacheExpireDays int
	// CIIdentity, when set, is the deploy pipeline's identity to declare.
	CIIdentity *stackconfig.CIIdentity
}

// Team is a RunnerSet that gets a job identity.
type Team struct{ Namespace, Name string }

// ArgsFor is the eks platform's part of a fleet.
func ArgsFor(f *stackconfig.Fleet) *PlatformArgs {
	a := &PlatformArgs{Cluster: f.ClusterName, AWS: f.AWS, CacheExpireDays: f.Cache.ExpireDays}
	if f.CIIdentity != nil && f.CIIdentity.AWS != nil {
		a.CIIdentity = f.CIIdentity
	}
	for _, t := range f.Teams {
		if t.WantsIdentity(f.Platform) {
			a.Teams = append(a.Teams, Team{Namespace: t.Namespace, Name: t.Name})
		}
	}
	return a
}

// Platform is the eks platform: every AWS resource of the stack hangs
// under it, through one explicit AWS provider.
type Platform struct {
	pulumi.ResourceState

	// Cluster is what the Kubernetes part of the program deploys into.
	Cluster *kube.Cluster
	// CIRoleArn is the deploy pipeline's role (RUNNERFLEET_AWS_ROLE_ARN)
	// when the stack declares ciIdentity.aws.
	CIRoleArn *pulumi.StringOutput
}

// wasTopLevel is the alias of a component that was declared at the stack's
// top level before the Platform component held it; its children follow.
var wasTopLevel = pulumi.Aliases([]pulumi.Alias{{NoParent: pulumi.Bool(true)}})

// NewPlatform declares the eks platform.
func NewPlatform(ctx *pulumi.Context, name string, args *PlatformArgs, opts ...pulumi.ResourceOption) (*Platform, error) {
	if args == nil || args.AWS == nil {
		return nil, fmt.Errorf("%s: platform eks needs an aws section", stackconfig.Root.Child("aws"))
	}
	if errs := args.AWS.CheckManagersPool(stackconfig.Root.Child("aws")); len(errs) > 0 {
		return nil, &stackconfig.Error{List: errs}
	}
	pl := &Platform{}
	if err := ctx.RegisterComponentResource("runnerfleet:aws:Platform", name, pl, opts...); err != nil {
		return nil, fmt.Errorf("creating the eks platform: %w", err)
	}
	p := &platform{stack: ctx.Stack(), args: args, aws: args.AWS, cluster: args.Cluster, partition: Partition(args.AWS.Region)}
	under := []pulumi.ResourceOption{pulumi.Parent(pl), wasTopLevel}

	// The same arguments the SDK's aws.NewProvider would send, with the
	// region and default tags from the stack config rather than from the
	// environment of whoever runs pulumi up.
	prov, err := awssdk.NewProvider(ctx, name+"-aws", &awssdk.ProviderArgs{
		Region:                    pulumi.String(args.AWS.Region),
		DefaultTags:               &awssdk.ProviderDefaultTagsArgs{Tags: pulumix.StringMap(p.common())},
		SkipCredentialsValidation: pulumi.Bool(false),
		SkipRegionValidation:      pulumi.Bool(true),
	}, under...)
	if err != nil {
		return nil, fmt.Errorf("creating the aws provider: %w", err)
	}
	p.provider = prov

	net, err := newNetwork(ctx, p, name, under...)
	if err != nil {
		return nil, fmt.Errorf("creating the network: %w", err)
	}
	cl, err := newCluster(ctx, p, name, net, under...)
	if err != nil {
		return nil, fmt.Errorf("creating the EKS cluster: %w", err)
	}
	karp, err := newKarpenter(ctx, p, name, cl, under...)
	if err != nil {
		return nil, fmt.Errorf("creating Karpenter: %w", err)
	}
	identities := map[string]pulumi.StringOutput{}
	var roles []teamRole
	for _, t := range args.Teams {
		id, err := newIdentity(ctx, p, t.Namespace, t.Name, cl, under...)
		if err != nil {
			return nil, fmt.Errorf("creating the identity of %s/%s: %w", t.Namespace, t.Name, err)
		}
		identities[kube.IdentityKey(t.Namespace, t.Name)] = id.RoleArn
		roles = append(roles, teamRole{namespace: t.Namespace, arn: id.RoleArn})
	}
	cache, err := newCache(ctx, p, name, roles, under...)
	if err != nil {
		return nil, fmt.Errorf("creating the cache bucket: %w", err)
	}

	outputs := pulumi.Map{}
	if args.CIIdentity != nil {
		ci, err := newCIIdentity(ctx, p, name+"-ci", args.CIIdentity, under...)
		if err != nil {
			return nil, fmt.Errorf("creating the deploy pipeline's identity: %w", err)
		}
		pl.CIRoleArn = &ci.RoleArn
		outputs["ciRoleArn"] = ci.RoleArn
	}

	pl.Cluster = &kube.Cluster{
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
		Cache:      &kube.Cache{Type: v1alpha1.CacheTypeS3, Bucket: cache.Bucket, Region: args.AWS.Region},
		DependsOn:  []pulumi.Resource{cl.NodeGroup, karp.Release},
		InCluster:  true,
	}
	outputs["clusterName"] = pulumi.String(p.cluster)
	outputs["endpoint"] = cl.Endpoint
	outputs["kubeconfig"] = cl.Kubeconfig
	outputs["cacheBucket"] = cache.Bucket
	if err := ctx.RegisterResourceOutputs(pl, outputs); err != nil {
		return nil, fmt.Errorf("registering the eks platform's outputs: %w", err)
	}
	return pl, nil
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
