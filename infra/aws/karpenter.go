package aws

import (
	"encoding/json"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
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

// sqsQueue is aws:sqs/queue:Queue with the outputs read.
type sqsQueue struct {
	pulumi.CustomResourceState

	Arn  pulumi.StringOutput `pulumi:"arn"`
	Name pulumi.StringOutput `pulumi:"name"`
	URL  pulumi.StringOutput `pulumi:"url"`
}

func newKarpenter(p *platform, name string, c *Cluster, opts ...pulumi.ResourceOption) (*Karpenter, error) {
	k := &Karpenter{
		NodeRoleName: naming.Join(p.cluster, "karpenter-node"),
		QueueName:    naming.Join(p.cluster, "karpenter"),
	}
	if err := p.ctx.RegisterComponentResource("runnerfleet:aws:Karpenter", name, k, opts...); err != nil {
		return nil, err
	}
	ctx := p.ctx

	// The node role has a fixed name: EC2NodeClasses name it, and Karpenter
	// makes the instance profiles of it. The profile here (of the same
	// name) is for anything launched by hand for debugging.
	nodeRole, attached, err := nodeRole(p, k, name+"-karpenter-node", pulumi.Map{
		"name":        pulumi.String(k.NodeRoleName),
		"description": pulumi.String("runner nodes Karpenter launches for " + p.cluster),
		"tags":        p.tags(nil),
	})
	if err != nil {
		return nil, err
	}
	if _, err := pulumix.New(ctx, "aws:iam/instanceProfile:InstanceProfile", name+"-karpenter-node", pulumi.Map{
		"name": pulumi.String(k.NodeRoleName),
		"role": nodeRole.Name,
		"tags": p.tags(nil),
	}, p.child(k)...); err != nil {
		return nil, err
	}
	entry, err := pulumix.New(ctx, "aws:eks/accessEntry:AccessEntry", name+"-karpenter-node", pulumi.Map{
		"clusterName":  c.Name,
		"principalArn": nodeRole.Arn,
		"type":         pulumi.String("EC2_LINUX"),
		"tags":         p.tags(nil),
	}, p.child(k, pulumi.DependsOn(attached))...)
	if err != nil {
		return nil, err
	}

	var queue sqsQueue
	err = pulumix.Register(ctx, "aws:sqs/queue:Queue", name+"-karpenter", pulumi.Map{
		"name":                    pulumi.String(k.QueueName),
		"messageRetentionSeconds": pulumi.Int(300),
		"sqsManagedSseEnabled":    pulumi.Bool(true),
		"tags":                    p.tags(nil),
	}, &queue, p.child(k)...)
	if err != nil {
		return nil, err
	}
	queuePolicy, err := pulumix.New(ctx, "aws:sqs/queuePolicy:QueuePolicy", name+"-karpenter", pulumi.Map{
		"queueUrl": queue.URL,
		"policy": queue.Arn.ApplyT(func(arn string) string {
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
		return nil, err
	}
	for _, ev := range InterruptionEvents {
		pattern, _ := json.Marshal(map[string][]string{"source": {ev.Source}, "detail-type": {ev.Detail}})
		rule, err := pulumix.New(ctx, "aws:cloudwatch/eventRule:EventRule", name+"-"+ev.Suffix, pulumi.Map{
			"name":         pulumi.String(naming.Join(p.cluster, ev.Suffix)),
			"description":  pulumi.String(ev.Detail + " to Karpenter's interruption queue of " + p.cluster),
			"eventPattern": pulumi.String(string(pattern)),
			"tags":         p.tags(nil),
		}, p.child(k)...)
		if err != nil {
			return nil, err
		}
		if _, err := pulumix.New(ctx, "aws:cloudwatch/eventTarget:EventTarget", name+"-"+ev.Suffix, pulumi.Map{
			"rule":     rule.Name,
			"targetId": pulumi.String("karpenter-interruption-queue"),
			"arn":      queue.Arn,
		}, p.child(k, pulumi.DependsOn([]pulumi.Resource{queuePolicy}))...); err != nil {
			return nil, err
		}
	}

	subject := "system:serviceaccount:" + KarpenterNamespace + ":" + KarpenterServiceAccount
	controller, err := pulumix.New(ctx, "aws:iam/role:Role", name+"-karpenter", pulumi.Map{
		"name":             pulumi.String(naming.Join(p.cluster, "karpenter")),
		"description":      pulumi.String("Karpenter controller of " + p.cluster + " (IRSA: " + subject + ")"),
		"assumeRolePolicy": irsaTrust(c, subject),
		"tags":             p.tags(nil),
	}, p.child(k)...)
	if err != nil {
		return nil, err
	}
	region, cluster := p.aws.Region, p.cluster
	controllerPolicy, err := pulumix.New(ctx, "aws:iam/rolePolicy:RolePolicy", name+"-karpenter", pulumi.Map{
		"role": controller.Name,
		"policy": pulumi.All(nodeRole.Arn, queue.Arn, c.Arn).ApplyT(func(v []any) (string, error) {
			account, err := accountOf(v[0].(string))
			if err != nil {
				return "", err
			}
			return p.controllerPolicy(region, account, cluster, v[0].(string), v[1].(string), v[2].(string)).String(), nil
		}).(pulumi.StringOutput),
	}, p.child(k)...)
	if err != nil {
		return nil, err
	}

	// The CRDs come from their own chart so that upgrades update them
	// (Helm installs a chart's crds/ once and never upgrades them).
	version := pulumi.String(p.aws.KarpenterVersion)
	crds, err := pulumix.New(ctx, "kubernetes:helm.sh/v3:Release", name+"-karpenter-crd", pulumi.Map{
		"name":      pulumi.String("karpenter-crd"),
		"chart":     pulumi.String(KarpenterCRDChart),
		"version":   version,
		"namespace": pulumi.String(KarpenterNamespace),
		"compat":    pulumi.String("true"),
	}, pulumi.Parent(k), pulumi.Provider(c.Kubernetes), pulumi.DependsOn([]pulumi.Resource{c.NodeGroup}))
	if err != nil {
		return nil, err
	}
	replicas := min(2, p.aws.SystemNodes.Desired) // the chart keeps replicas on separate nodes
	release, err := pulumix.New(ctx, "kubernetes:helm.sh/v3:Release", name+"-karpenter", pulumi.Map{
		"name":      pulumi.String("karpenter"),
		"chart":     pulumi.String(KarpenterChart),
		"version":   version,
		"namespace": pulumi.String(KarpenterNamespace),
		"skipCrds":  pulumi.Bool(true),
		"compat":    pulumi.String("true"),
		"values": pulumi.Map{
			"replicas": pulumi.Int(replicas),
			"settings": pulumi.Map{
				"clusterName":       c.Name,
				"clusterEndpoint":   c.Endpoint,
				"interruptionQueue": queue.Name,
			},
			"serviceAccount": pulumi.Map{
				"name":        pulumi.String(KarpenterServiceAccount),
				"annotations": pulumi.Map{"eks.amazonaws.com/role-arn": controller.Arn},
			},
			"controller": pulumi.Map{"resources": pulumi.Map{
				"requests": pulumi.Map{"cpu": pulumi.String("500m"), "memory": pulumi.String("1Gi")},
				"limits":   pulumi.Map{"memory": pulumi.String("1Gi")},
			}},
		},
	}, pulumi.Parent(k), pulumi.Provider(c.Kubernetes),
		pulumi.DependsOn([]pulumi.Resource{c.NodeGroup, crds, controllerPolicy, entry, queuePolicy}))
	if err != nil {
		return nil, err
	}
	k.Release = release

	err = ctx.RegisterResourceOutputs(k, pulumi.Map{
		"nodeRoleName":         pulumi.String(k.NodeRoleName),
		"controllerRoleArn":    controller.Arn,
		"interruptionQueue":    queue.Name,
		"interruptionQueueUrl": queue.URL,
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
