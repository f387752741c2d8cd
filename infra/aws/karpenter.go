package aws

import (
	"encoding/json"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/cloudwatch"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/eks"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/iam"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/sqs"
	helmv3 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/helm/v3"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Karpenter's place in the cluster.
const (
	KarpenterNamespace      = "kube-system"
	KarpenterServiceAccount = "karpenter"
	// KarpenterChart is the chart's OCI location. The Helm release
	// resource takes an OCI chart by its full reference: a repositoryOpts
	// repo is looked up as a classic repository's index.yaml.
	KarpenterChart    = "oci://public.ecr.aws/karpenter/karpenter"
	KarpenterCRDChart = "oci://public.ecr.aws/karpenter/karpenter-crd"
)

// InterruptionEvents are the EventBridge events Karpenter acts on, by rule
// suffix: it drains a node before EC2 takes it.
var InterruptionEvents = []struct {
	Suffix string
	Source string
	Detail string
}{
	{"spot-interruption", "aws.ec2", "EC2 Spot Instance Interruption Warning"},
	{"rebalance", "aws.ec2", "EC2 Instance Rebalance Recommendation"},
	{"instance-state-change", "aws.ec2", "EC2 Instance State-change Notification"},
	{"scheduled-change", "aws.health", "AWS Health Event"},
}

// Karpenter is Karpenter on the cluster: its controller's IRSA role, the
// node role runner nodes get (and the access entry that lets them join),
// the interruption queue with the EventBridge rules feeding it, and the
// Helm releases.
type Karpenter struct {
	pulumi.ResourceState

	// NodeRoleName goes into the RunnerClass; EC2NodeClasses name it.
	NodeRoleName string
	QueueName    string
	Release      pulumi.Resource
}

func newKarpenter(ctx *pulumi.Context, p *platform, name string, c *Cluster, opts ...pulumi.ResourceOption) (*Karpenter, error) {
	k := &Karpenter{
		NodeRoleName: naming.Join(p.cluster, "karpenter-node"),
		QueueName:    naming.Join(p.cluster, "karpenter"),
	}
	if err := ctx.RegisterComponentResource("runnerfleet:aws:Karpenter", name, k, opts...); err != nil {
		return nil, err
	}

	// The node role has a fixed name: EC2NodeClasses name it, and Karpenter
	// makes the instance profiles of it. The profile here (of the same
	// name) is for anything launched by hand for debugging.
	nodeRole, attached, err := nodeRole(ctx, p, k, name+"-karpenter-node", &iam.RoleArgs{
		Name:        pulumi.String(k.NodeRoleName),
		Description: pulumi.String("runner nodes Karpenter launches for " + p.cluster),
		Tags:        p.tags(nil),
	})
	if err != nil {
		return nil, err
	}
	if _, err := iam.NewInstanceProfile(ctx, name+"-karpenter-node", &iam.InstanceProfileArgs{
		Name: pulumi.String(k.NodeRoleName),
		Role: nodeRole.Name,
		Tags: p.tags(nil),
	}, p.child(k)...); err != nil {
		return nil, fmt.Errorf("creating the node instance profile: %w", err)
	}
	entry, err := eks.NewAccessEntry(ctx, name+"-karpenter-node", &eks.AccessEntryArgs{
		ClusterName:  c.Name,
		PrincipalArn: nodeRole.Arn,
		Type:         pulumi.String("EC2_LINUX"),
		Tags:         p.tags(nil),
	}, p.child(k, pulumi.DependsOn(attached))...)
	if err != nil {
		return nil, fmt.Errorf("creating the nodes' access entry: %w", err)
	}

	queue, err := sqs.NewQueue(ctx, name+"-karpenter", &sqs.QueueArgs{
		Name:                    pulumi.String(k.QueueName),
		MessageRetentionSeconds: pulumi.Int(300),
		SqsManagedSseEnabled:    pulumi.Bool(true),
		Tags:                    p.tags(nil),
	}, p.child(k)...)
	if err != nil {
		return nil, fmt.Errorf("creating the interruption queue: %w", err)
	}
	queuePolicy, err := sqs.NewQueuePolicy(ctx, name+"-karpenter", &sqs.QueuePolicyArgs{
		QueueUrl: queue.Url,
		Policy: queue.Arn.ApplyT(func(arn string) string {
			return policy(
				Statement{
					Sid:       "EventBridgeAndSQSSend",
					Effect:    "Allow",
					Principal: map[string]any{"Service": []string{"events.amazonaws.com", "sqs.amazonaws.com"}},
					Action:    []string{"sqs:SendMessage"},
					Resource:  []string{arn},
				},
				Statement{
					Sid:       "DenyInsecureTransport",
					Effect:    "Deny",
					Principal: map[string]any{"AWS": "*"},
					Action:    []string{"sqs:*"},
					Resource:  []string{arn},
					Condition: map[string]map[string]any{"Bool": {"aws:SecureTransport": "false"}},
				},
			).String()
		}).(pulumi.StringOutput),
	}, p.child(k)...)
	if err != nil {
		return nil, fmt.Errorf("creating the interruption queue's policy: %w", err)
	}
	for _, ev := range InterruptionEvents {
		pattern, _ := json.Marshal(map[string][]string{"source": {ev.Source}, "detail-type": {ev.Detail}})
		rule, err := cloudwatch.NewEventRule(ctx, name+"-"+ev.Suffix, &cloudwatch.EventRuleArgs{
			Name:         pulumi.String(naming.Join(p.cluster, ev.Suffix)),
			Description:  pulumi.String(ev.Detail + " to Karpenter's interruption queue of " + p.cluster),
			EventPattern: pulumi.String(string(pattern)),
			Tags:         p.tags(nil),
		}, p.child(k)...)
		if err != nil {
			return nil, fmt.Errorf("creating the %s rule: %w", ev.Suffix, err)
		}
		if _, err := cloudwatch.NewEventTarget(ctx, name+"-"+ev.Suffix, &cloudwatch.EventTargetArgs{
			Rule:     rule.Name,
			TargetId: pulumi.String("karpenter-interruption-queue"),
			Arn:      queue.Arn,
		}, p.child(k, pulumi.DependsOn([]pulumi.Resource{queuePolicy}))...); err != nil {
			return nil, fmt.Errorf("creating the %s rule's target: %w", ev.Suffix, err)
		}
	}

	subject := "system:serviceaccount:" + KarpenterNamespace + ":" + KarpenterServiceAccount
	controller, err := iam.NewRole(ctx, name+"-karpenter", &iam.RoleArgs{
		Name:             pulumi.String(naming.Join(p.cluster, "karpenter")),
		Description:      pulumi.String("Karpenter controller of " + p.cluster + " (IRSA: " + subject + ")"),
		AssumeRolePolicy: irsaTrust(c, subject),
		Tags:             p.tags(nil),
	}, p.child(k)...)
	if err != nil {
		return nil, fmt.Errorf("creating the controller role: %w", err)
	}
	region, cluster := p.aws.Region, p.cluster
	controllerPolicy, err := iam.NewRolePolicy(ctx, name+"-karpenter", &iam.RolePolicyArgs{
		Role: controller.Name,
		Policy: pulumi.All(nodeRole.Arn, queue.Arn, c.Arn).ApplyT(func(v []any) (string, error) {
			account, err := accountOf(v[0].(string))
			if err != nil {
				return "", err
			}
			return p.controllerPolicy(region, account, cluster, v[0].(string), v[1].(string), v[2].(string)).String(), nil
		}).(pulumi.StringOutput),
	}, p.child(k)...)
	if err != nil {
		return nil, fmt.Errorf("creating the controller policy: %w", err)
	}

	// The CRDs come from their own chart so that upgrades update them
	// (Helm installs a chart's crds/ once and never upgrades them).
	version := pulumi.String(p.aws.KarpenterVersion)
	crds, err := helmv3.NewRelease(ctx, name+"-karpenter-crd", &helmv3.ReleaseArgs{
		Name:      pulumi.String("karpenter-crd"),
		Chart:     pulumi.String(KarpenterCRDChart),
		Version:   version,
		Namespace: pulumi.String(KarpenterNamespace),
	}, pulumi.Parent(k), pulumi.Provider(c.Kubernetes), pulumi.DependsOn([]pulumi.Resource{c.NodeGroup}))
	if err != nil {
		return nil, fmt.Errorf("creating the CRD release: %w", err)
	}
	replicas := min(2, p.aws.SystemNodes.Desired) // the chart keeps replicas on separate nodes
	release, err := helmv3.NewRelease(ctx, name+"-karpenter", &helmv3.ReleaseArgs{
		Name:      pulumi.String("karpenter"),
		Chart:     pulumi.String(KarpenterChart),
		Version:   version,
		Namespace: pulumi.String(KarpenterNamespace),
		SkipCrds:  pulumi.Bool(true),
		Values: pulumi.Map{
			"replicas": pulumi.Int(replicas),
			// On the managers' on-demand pool, never on the capacity it
			// launches.
			"nodeSelector": pulumix.ToInput(kube.ManagerPlacement()["nodeSelector"]),
			"tolerations":  pulumix.ToInput(kube.ManagerPlacement()["tolerations"]),
			"settings": pulumi.Map{
				"clusterName":       c.Name,
				"clusterEndpoint":   c.Endpoint,
				"interruptionQueue": queue.Name,
			},
			"serviceAccount": pulumi.Map{
				"name":        pulumi.String(KarpenterServiceAccount),
				"annotations": pulumi.Map{naming.AnnotationIRSA: controller.Arn},
			},
			"controller": pulumi.Map{"resources": pulumi.Map{
				"requests": pulumi.Map{"cpu": pulumi.String("500m"), "memory": pulumi.String("1Gi")},
				"limits":   pulumi.Map{"memory": pulumi.String("1Gi")},
			}},
		},
	}, pulumi.Parent(k), pulumi.Provider(c.Kubernetes),
		pulumi.DependsOn([]pulumi.Resource{c.NodeGroup, crds, controllerPolicy, entry, queuePolicy}))
	if err != nil {
		return nil, fmt.Errorf("creating the Karpenter release: %w", err)
	}
	k.Release = release

	err = ctx.RegisterResourceOutputs(k, pulumi.Map{
		"nodeRoleName":         pulumi.String(k.NodeRoleName),
		"controllerRoleArn":    controller.Arn,
		"interruptionQueue":    queue.Name,
		"interruptionQueueUrl": queue.Url,
	})
	return k, err
}

// controllerPolicy is what Karpenter's controller may do: launch, tag and
// terminate only instances (and launch templates, fleets, volumes,
// interfaces) tagged as this cluster's and a NodePool's; launch only into
// the subnets and security groups with the cluster's discovery tag; pass
// only the runner node role; manage only instance profiles it tagged;
// read only its own queue.
func (p *platform) controllerPolicy(region, account, cluster, nodeRoleARN, queueARN, clusterARN string) PolicyDocument {
	ec2 := func(resources ...string) []string {
		out := make([]string, len(resources))
		for i, r := range resources {
			acct := "*"
			if r == "image/*" || r == "snapshot/*" {
				acct = "" // public AMIs and their snapshots have no account
			}
			out[i] = p.arn("ec2", region, acct, r)
		}
		return out
	}
	owned := "kubernetes.io/cluster/" + cluster
	created := []string{"fleet/*", "instance/*", "volume/*", "network-interface/*", "launch-template/*", "spot-instances-request/*"}
	profiles := []string{p.arn("iam", "", account, "instance-profile/*")}
	return policy(
		Statement{
			Sid: "LaunchFromPublicImages", Effect: "Allow",
			Action:   []string{"ec2:RunInstances", "ec2:CreateFleet"},
			Resource: ec2("image/*", "snapshot/*", "capacity-reservation/*"),
		},
		Statement{
			Sid: "LaunchIntoDiscoveredNetwork", Effect: "Allow",
			Action:    []string{"ec2:RunInstances", "ec2:CreateFleet"},
			Resource:  ec2("subnet/*", "security-group/*"),
			Condition: map[string]map[string]any{"StringEquals": {"aws:ResourceTag/" + TagDiscovery: cluster}},
		},
		Statement{
			Sid: "LaunchFromOwnLaunchTemplates", Effect: "Allow",
			Action:   []string{"ec2:RunInstances", "ec2:CreateFleet"},
			Resource: ec2("launch-template/*"),
			Condition: map[string]map[string]any{
				"StringEquals": {"aws:ResourceTag/" + owned: "owned"},
				"Null":         {"aws:ResourceTag/karpenter.sh/nodepool": "false"},
			},
		},
		Statement{
			Sid: "CreateOwnedResources", Effect: "Allow",
			Action:   []string{"ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"},
			Resource: ec2(created...),
			Condition: map[string]map[string]any{
				"StringEquals": {"aws:RequestTag/" + owned: "owned", "aws:RequestTag/eks:eks-cluster-name": cluster},
				"Null":         {"aws:RequestTag/karpenter.sh/nodepool": "false"},
			},
		},
		Statement{
			Sid: "TagOnCreate", Effect: "Allow",
			Action:   []string{"ec2:CreateTags"},
			Resource: ec2(created...),
			Condition: map[string]map[string]any{
				"StringEquals": {
					"aws:RequestTag/" + owned:             "owned",
					"aws:RequestTag/eks:eks-cluster-name": cluster,
					"ec2:CreateAction":                    []string{"RunInstances", "CreateFleet", "CreateLaunchTemplate"},
				},
				"Null": {"aws:RequestTag/karpenter.sh/nodepool": "false"},
			},
		},
		Statement{
			Sid: "TagOwnedInstances", Effect: "Allow",
			Action:   []string{"ec2:CreateTags"},
			Resource: ec2("instance/*"),
			Condition: map[string]map[string]any{
				"StringEquals":              {"aws:ResourceTag/" + owned: "owned"},
				"Null":                      {"aws:ResourceTag/karpenter.sh/nodepool": "false"},
				"StringEqualsIfExists":      {"aws:RequestTag/eks:eks-cluster-name": cluster},
				"ForAllValues:StringEquals": {"aws:TagKeys": []string{"eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"}},
			},
		},
		Statement{
			Sid: "DeleteOwned", Effect: "Allow",
			Action:   []string{"ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"},
			Resource: ec2("instance/*", "launch-template/*"),
			Condition: map[string]map[string]any{
				"StringEquals": {"aws:ResourceTag/" + owned: "owned"},
				"Null":         {"aws:ResourceTag/karpenter.sh/nodepool": "false"},
			},
		},
		Statement{
			Sid: "DescribeInRegion", Effect: "Allow",
			Action: []string{
				"ec2:DescribeAvailabilityZones", "ec2:DescribeCapacityReservations", "ec2:DescribeImages",
				"ec2:DescribeInstances", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
				"ec2:DescribeLaunchTemplates", "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory",
				"ec2:DescribeSubnets",
			},
			Resource:  []string{"*"},
			Condition: map[string]map[string]any{"StringEquals": {"aws:RequestedRegion": region}},
		},
		Statement{
			Sid: "ReadPublicAMIParameters", Effect: "Allow",
			Action:   []string{"ssm:GetParameter"},
			Resource: []string{p.arn("ssm", region, "", "parameter/aws/service/*")},
		},
		Statement{
			Sid: "ReadPrices", Effect: "Allow",
			Action:   []string{"pricing:GetProducts"},
			Resource: []string{"*"},
		},
		Statement{
			Sid: "InterruptionQueue", Effect: "Allow",
			Action:   []string{"sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"},
			Resource: []string{queueARN},
		},
		Statement{
			Sid: "PassNodeRole", Effect: "Allow",
			Action:    []string{"iam:PassRole"},
			Resource:  []string{nodeRoleARN},
			Condition: map[string]map[string]any{"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
		},
		Statement{
			Sid: "CreateOwnedInstanceProfiles", Effect: "Allow",
			Action:   []string{"iam:CreateInstanceProfile"},
			Resource: profiles,
			Condition: map[string]map[string]any{
				"StringEquals": {
					"aws:RequestTag/" + owned:                      "owned",
					"aws:RequestTag/eks:eks-cluster-name":          cluster,
					"aws:RequestTag/topology.kubernetes.io/region": region,
				},
				"Null": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "false"},
			},
		},
		Statement{
			Sid: "TagOwnedInstanceProfiles", Effect: "Allow",
			Action:   []string{"iam:TagInstanceProfile"},
			Resource: profiles,
			Condition: map[string]map[string]any{
				"StringEquals": {
					"aws:ResourceTag/" + owned:                      "owned",
					"aws:ResourceTag/topology.kubernetes.io/region": region,
					"aws:RequestTag/" + owned:                       "owned",
					"aws:RequestTag/eks:eks-cluster-name":           cluster,
					"aws:RequestTag/topology.kubernetes.io/region":  region,
				},
				"Null": {
					"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "false",
					"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass":  "false",
				},
			},
		},
		Statement{
			Sid: "ManageOwnedInstanceProfiles", Effect: "Allow",
			Action:   []string{"iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"},
			Resource: profiles,
			Condition: map[string]map[string]any{
				"StringEquals": {
					"aws:ResourceTag/" + owned:                      "owned",
					"aws:ResourceTag/topology.kubernetes.io/region": region,
				},
				"Null": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "false"},
			},
		},
		Statement{
			Sid: "ReadInstanceProfiles", Effect: "Allow",
			Action:   []string{"iam:GetInstanceProfile"},
			Resource: profiles,
		},
		Statement{
			Sid: "ListInstanceProfiles", Effect: "Allow",
			Action:   []string{"iam:ListInstanceProfiles"},
			Resource: []string{"*"},
		},
		Statement{
			Sid: "DescribeCluster", Effect: "Allow",
			Action:   []string{"eks:DescribeCluster"},
			Resource: []string{clusterARN},
		},
	)
}
