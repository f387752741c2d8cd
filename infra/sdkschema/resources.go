package sdkschema

// Package is a Go package of a provider SDK and the resources of it that
// the program declares.
type Package struct {
	// Provider is the provider's package name (Modules[].Package).
	Provider string
	// Dir is the package's directory under the module's Root ("." for the
	// provider resource itself).
	Dir string
	// Tokens are the type tokens of the resources generated from it.
	Tokens []string
}

// Resources are exactly the provider resources the runnerfleet program
// declares. Generate writes a typed constructor, Args and output struct for
// each, and for nothing else; a resource the program starts to use is added
// here and `make generate` run.
var Resources = []Package{
	{"aws", ".", []string{"pulumi:providers:aws"}},
	{"aws", "ec2", []string{
		"aws:ec2/vpc:Vpc", "aws:ec2/internetGateway:InternetGateway", "aws:ec2/subnet:Subnet",
		"aws:ec2/eip:Eip", "aws:ec2/natGateway:NatGateway", "aws:ec2/routeTable:RouteTable",
		"aws:ec2/route:Route", "aws:ec2/routeTableAssociation:RouteTableAssociation",
		"aws:ec2/vpcEndpoint:VpcEndpoint", "aws:ec2/securityGroup:SecurityGroup",
		"aws:ec2/launchTemplate:LaunchTemplate",
	}},
	{"aws", "eks", []string{"aws:eks/cluster:Cluster", "aws:eks/nodeGroup:NodeGroup", "aws:eks/accessEntry:AccessEntry", "aws:eks/addon:Addon"}},
	{"aws", "iam", []string{
		"aws:iam/role:Role", "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "aws:iam/rolePolicy:RolePolicy",
		"aws:iam/openIdConnectProvider:OpenIdConnectProvider", "aws:iam/instanceProfile:InstanceProfile",
	}},
	{"aws", "sqs", []string{"aws:sqs/queue:Queue", "aws:sqs/queuePolicy:QueuePolicy"}},
	{"aws", "cloudwatch", []string{"aws:cloudwatch/eventRule:EventRule", "aws:cloudwatch/eventTarget:EventTarget"}},
	{"aws", "s3", []string{
		"aws:s3/bucketV2:BucketV2", "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
		"aws:s3/bucketOwnershipControls:BucketOwnershipControls",
		"aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
		"aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2", "aws:s3/bucketPolicy:BucketPolicy",
	}},

	{"gcp", ".", []string{"pulumi:providers:gcp"}},
	{"gcp", "compute", []string{
		"gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork", "gcp:compute/router:Router",
		"gcp:compute/routerNat:RouterNat", "gcp:compute/firewall:Firewall",
		"gcp:compute/instanceTemplate:InstanceTemplate", "gcp:compute/instanceGroupManager:InstanceGroupManager",
	}},
	{"gcp", "container", []string{"gcp:container/cluster:Cluster", "gcp:container/nodePool:NodePool"}},
	{"gcp", "serviceaccount", []string{"gcp:serviceaccount/account:Account", "gcp:serviceaccount/iAMMember:IAMMember"}},
	{"gcp", "projects", []string{"gcp:projects/iAMMember:IAMMember", "gcp:projects/iAMCustomRole:IAMCustomRole"}},
	{"gcp", "iam", []string{
		"gcp:iam/workloadIdentityPool:WorkloadIdentityPool", "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider",
	}},
	{"gcp", "storage", []string{"gcp:storage/bucket:Bucket", "gcp:storage/bucketIAMMember:BucketIAMMember"}},
	{"gcp", "secretmanager", []string{
		"gcp:secretmanager/secret:Secret", "gcp:secretmanager/secretVersion:SecretVersion", "gcp:secretmanager/secretIamMember:SecretIamMember",
	}},

	{"kubernetes", ".", []string{"pulumi:providers:kubernetes"}},
	{"kubernetes", "helm/v3", []string{"kubernetes:helm.sh/v3:Release"}},
	{"kubernetes", "core/v1", []string{
		"kubernetes:core/v1:Namespace", "kubernetes:core/v1:Secret", "kubernetes:core/v1:ServiceAccount",
		"kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:Service", "kubernetes:core/v1:PersistentVolumeClaim",
	}},
	{"kubernetes", "apps/v1", []string{"kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:DeploymentPatch"}},
	{"kubernetes", "policy/v1", []string{"kubernetes:policy/v1:PodDisruptionBudget"}},
	{"kubernetes", "rbac/v1", []string{
		"kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
		"kubernetes:rbac.authorization.k8s.io/v1:Role", "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
	}},
	{"kubernetes", "batch/v1", []string{"kubernetes:batch/v1:CronJob"}},
	{"kubernetes", "networking/v1", []string{
		"kubernetes:networking.k8s.io/v1:NetworkPolicy", "kubernetes:networking.k8s.io/v1:Ingress",
	}},
	{"kubernetes", "apiextensions/v1", []string{"kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"}},
}
