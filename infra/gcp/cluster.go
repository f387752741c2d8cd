package gcp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/kube"
)

// NodeRoles are the only project roles of the nodes' service account: write
// logs and metrics, read metrics (for the autoscaler's views) and pull
// images from Artifact Registry. Jobs get their cloud access from their
// team's own service account through Workload Identity, never from the node.
var NodeRoles = []string{
	"roles/logging.logWriter",
	"roles/monitoring.metricWriter",
	"roles/monitoring.viewer",
	"roles/artifactregistry.reader",
}

// cloudPlatform is the OAuth scope of nodes: GKE's recommendation with a
// least-privilege service account, whose roles are what limits them.
const cloudPlatform = "https://www.googleapis.com/auth/cloud-platform"

// SystemPool is the name of the system node pool.
const SystemPool = "system"

// Cluster is the private regional GKE cluster with its node service account,
// its spot system node pool and a Kubernetes provider for it.
type Cluster struct {
	pulumi.ResourceState

	Name pulumi.StringOutput
	// Kubeconfig reaches the cluster through gke-gcloud-auth-plugin; secret.
	Kubeconfig pulumi.StringOutput
	// Resource is the GKE cluster, which Workload Identity bindings wait
	// for (the project's identity pool exists once a cluster uses it).
	Resource pulumi.Resource
	// SystemPool is the spot node pool of the controller and the managers.
	SystemPool pulumi.Resource
	// Kubernetes is the provider of the cluster.
	Kubernetes *kube.Provider
}

type account struct {
	pulumi.CustomResourceState

	Email  pulumi.StringOutput `pulumi:"email"`
	Member pulumi.StringOutput `pulumi:"member"`
	// Name is projects/<project>/serviceAccounts/<email>.
	Name pulumi.StringOutput `pulumi:"name"`
}

type gkeCluster struct {
	pulumi.CustomResourceState

	Name       pulumi.StringOutput `pulumi:"name"`
	Endpoint   pulumi.StringOutput `pulumi:"endpoint"`
	MasterAuth pulumi.MapOutput    `pulumi:"masterAuth"`
}

func newCluster(ctx *pulumi.Context, name string, e *env, nw *Network, opts ...pulumi.ResourceOption) (*Cluster, error) {
	c := &Cluster{}
	if err := ctx.RegisterComponentResource("runnerfleet:gcp:Cluster", name, c, opts...); err != nil {
		return nil, err
	}
	g, cluster := e.gcp, e.fleet.ClusterName

	var nodeSA account
	err := pulumix.Register(ctx, "gcp:serviceaccount/account:Account", name+"-nodes", pulumi.Map{
		"project":     pulumi.String(g.Project),
		"accountId":   pulumi.String(nodeAccountID(cluster)),
		"displayName": pulumi.String("runnerfleet nodes of " + cluster),
		"description": pulumi.String("The nodes of GKE cluster " + cluster + ": logs, metrics and image pulls only."),
	}, &nodeSA, e.opts(c)...)
	if err != nil {
		return nil, err
	}
	var grants []pulumi.Resource
	for _, role := range NodeRoles {
		r, err := pulumix.New(ctx, "gcp:projects/iAMMember:IAMMember", name+"-nodes-"+roleSuffix(role), pulumi.Map{
			"project": pulumi.String(g.Project),
			"role":    pulumi.String(role),
			"member":  nodeSA.Member,
		}, e.opts(c)...)
		if err != nil {
			return nil, err
		}
		grants = append(grants, r)
	}

	labels := pulumix.StringMap(e.labels)
	shielded := pulumi.Map{"enableSecureBoot": pulumi.Bool(true), "enableIntegrityMonitoring": pulumi.Bool(true)}
	authorized := pulumi.Array{}
	for _, cidr := range g.MasterAuthorizedCIDRs {
		authorized = append(authorized, pulumi.Map{"cidrBlock": pulumi.String(cidr), "displayName": pulumi.String("stack config " + cidr)})
	}
	var gke gkeCluster
	err = pulumix.Register(ctx, "gcp:container/cluster:Cluster", name, pulumi.Map{
		"name":          pulumi.String(cluster),
		"description":   pulumi.String("runnerfleet: GitLab runners of stack " + ctx.Stack()),
		"location":      pulumi.String(g.Region),
		"nodeLocations": pulumix.Strings(g.Zones),
		"network":       nw.Network,
		"subnetwork":    nw.Subnetwork,
		// Node pools are declared on their own; the default pool GKE must
		// create goes at once, but gets the least-privilege account meanwhile.
		"removeDefaultNodePool": pulumi.Bool(true),
		"initialNodeCount":      pulumi.Int(1),
		"nodeConfig": pulumi.Map{
			"serviceAccount":         nodeSA.Email,
			"oauthScopes":            pulumix.Strings([]string{cloudPlatform}),
			"workloadMetadataConfig": pulumi.Map{"mode": pulumi.String("GKE_METADATA")},
			"shieldedInstanceConfig": shielded,
			"resourceLabels":         labels,
			"tags":                   pulumix.Strings([]string{nw.NodeTag}),
		},
		"networkingMode": pulumi.String("VPC_NATIVE"),
		"ipAllocationPolicy": pulumi.Map{
			"clusterSecondaryRangeName":  pulumi.String(PodsRange),
			"servicesSecondaryRangeName": pulumi.String(ServicesRange),
		},
		"privateClusterConfig": pulumi.Map{
			"enablePrivateNodes":    pulumi.Bool(true),
			"enablePrivateEndpoint": pulumi.Bool(false),
			"masterIpv4CidrBlock":   pulumi.String(g.MasterCIDR),
		},
		"masterAuthorizedNetworksConfig": pulumi.Map{"cidrBlocks": authorized},
		"releaseChannel":                 pulumi.Map{"channel": pulumi.String(g.ReleaseChannel)},
		"workloadIdentityConfig":         pulumi.Map{"workloadPool": pulumi.String(WorkloadPool(g.Project))},
		"enableShieldedNodes":            pulumi.Bool(true),
		// Node auto-provisioning creates the node pools of the teams'
		// ComputeClasses (nodePoolAutoCreation), within these caps.
		"clusterAutoscaling": pulumi.Map{
			"enabled":            pulumi.Bool(true),
			"autoscalingProfile": pulumi.String("OPTIMIZE_UTILIZATION"),
			"resourceLimits": pulumi.Array{
				pulumi.Map{"resourceType": pulumi.String("cpu"), "minimum": pulumi.Int(0), "maximum": pulumi.Int(*g.Autoprovisioning.MaxCPU)},
				pulumi.Map{"resourceType": pulumi.String("memory"), "minimum": pulumi.Int(0), "maximum": pulumi.Int(*g.Autoprovisioning.MaxMemoryGB)},
			},
			"autoProvisioningLocations": pulumix.Strings(g.Zones),
			"autoProvisioningDefaults": pulumi.Map{
				"serviceAccount":         nodeSA.Email,
				"oauthScopes":            pulumix.Strings([]string{cloudPlatform}),
				"shieldedInstanceConfig": shielded,
				"management":             pulumi.Map{"autoRepair": pulumi.Bool(true), "autoUpgrade": pulumi.Bool(true)},
			},
		},
		// Auto-provisioned pools carry the node tag too, so that the control
		// plane reaches webhooks on them.
		"nodePoolAutoConfig": pulumi.Map{"networkTags": pulumi.Map{"tags": pulumix.Strings([]string{nw.NodeTag})}},
		"resourceLabels":     labels,
		"deletionProtection": pulumi.Bool(true),
	}, &gke, e.opts(c, pulumi.DependsOn(grants))...)
	if err != nil {
		return nil, err
	}

	pool, err := pulumix.New(ctx, "gcp:container/nodePool:NodePool", name+"-"+SystemPool, pulumi.Map{
		"name":          pulumi.String(SystemPool),
		"cluster":       gke.Name,
		"location":      pulumi.String(g.Region),
		"nodeLocations": pulumix.Strings(g.Zones),
		// Per zone at creation; the autoscaler then keeps the totals.
		"initialNodeCount": pulumi.Int(1),
		"autoscaling": pulumi.Map{
			"totalMinNodeCount": pulumi.Int(*g.SystemNodes.Min),
			"totalMaxNodeCount": pulumi.Int(*g.SystemNodes.Max),
			"locationPolicy":    pulumi.String("BALANCED"),
		},
		"management":      pulumi.Map{"autoRepair": pulumi.Bool(true), "autoUpgrade": pulumi.Bool(true)},
		"upgradeSettings": pulumi.Map{"maxSurge": pulumi.Int(1), "maxUnavailable": pulumi.Int(0)},
		"nodeConfig": pulumi.Map{
			"machineType":            pulumi.String(g.SystemNodes.MachineType),
			"spot":                   pulumi.Bool(true),
			"serviceAccount":         nodeSA.Email,
			"oauthScopes":            pulumix.Strings([]string{cloudPlatform}),
			"workloadMetadataConfig": pulumi.Map{"mode": pulumi.String("GKE_METADATA")},
			"shieldedInstanceConfig": shielded,
			"resourceLabels":         labels,
			"labels":                 pulumi.StringMap{"runnerfleet.dev/pool": pulumi.String(SystemPool)},
			"tags":                   pulumix.Strings([]string{nw.NodeTag}),
		},
	}, e.opts(c)...)
	if err != nil {
		return nil, err
	}

	kubeconfig := pulumi.All(gke.Name, gke.Endpoint, gke.MasterAuth).ApplyT(func(a []any) (string, error) {
		ca, _ := a[2].(map[string]any)["clusterCaCertificate"].(string)
		return Kubeconfig(a[0].(string), a[1].(string), ca)
	}).(pulumi.StringOutput)
	c.Kubeconfig = pulumi.ToSecret(kubeconfig).(pulumi.StringOutput)
	c.Kubernetes, err = kube.NewProvider(ctx, name+"-kubernetes", cluster, c.Kubeconfig, pulumi.Parent(c))
	if err != nil {
		return nil, err
	}
	c.Name, c.Resource, c.SystemPool = gke.Name, &gke, pool
	return c, ctx.RegisterResourceOutputs(c, pulumi.Map{
		"name":       c.Name,
		"endpoint":   gke.Endpoint,
		"kubeconfig": c.Kubeconfig,
	})
}

// Kubeconfig is a kubeconfig for the GKE cluster at endpoint whose CA
// certificate is caData (base64 PEM, as GKE gives it), authenticating
// through gke-gcloud-auth-plugin with the caller's Google credentials.
func Kubeconfig(cluster, endpoint, caData string) (string, error) {
	if endpoint == "" || caData == "" {
		return "", fmt.Errorf("GKE cluster %s has no endpoint or CA certificate yet", cluster)
	}
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": cluster,
		"clusters": []any{map[string]any{"name": cluster, "cluster": map[string]any{
			"server":                     "https://" + endpoint,
			"certificate-authority-data": caData,
		}}},
		"contexts": []any{map[string]any{"name": cluster, "context": map[string]any{"cluster": cluster, "user": cluster}}},
		"users": []any{map[string]any{"name": cluster, "user": map[string]any{"exec": map[string]any{
			"apiVersion":         "client.authentication.k8s.io/v1beta1",
			"command":            "gke-gcloud-auth-plugin",
			"provideClusterInfo": true,
			"interactiveMode":    "Never",
			"installHint":        "Install gke-gcloud-auth-plugin: gcloud components install gke-gcloud-auth-plugin",
		}}}},
	}
	b, err := yaml.Marshal(cfg)
	return string(b), err
}

// nodeAccountID is the account ID of the nodes' service account: the cluster
// name and "-nodes" when that fits the 30 characters of an account ID,
// otherwise the name cut and a hash of the whole.
func nodeAccountID(cluster string) string {
	const suffix = "-nodes"
	if id := cluster + suffix; len(id) <= 30 {
		return id
	}
	sum := sha256.Sum256([]byte(cluster))
	head := strings.TrimRight(cluster[:30-len(suffix)-7], "-")
	return head + "-" + hex.EncodeToString(sum[:])[:6] + suffix
}

// roleSuffix turns roles/logging.logWriter into logging-logwriter, for
// resource names.
func roleSuffix(role string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(role, "roles/"), ".", "-"))
}
