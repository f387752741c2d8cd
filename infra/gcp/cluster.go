package gcp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/container"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/projects"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/serviceaccount"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
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

// Upgrades of the managers' pool (docs/operations/disruptions.md).
const (
	// MaxNodePoolSoak is the longest node pool soak GKE accepts in a
	// blue-green upgrade (7 days).
	MaxNodePoolSoak = 7 * 24 * time.Hour
	// soakMargin is what the soak adds to the longest drain.
	soakMargin = time.Hour
	// AdvancedDatapath is GKE Dataplane V2, which enforces NetworkPolicy
	// (the jobs namespaces' and the shared fleets') natively.
	AdvancedDatapath = "ADVANCED_DATAPATH"
)

// ManagerPoolSoak is how long GKE keeps the old (blue) nodes of the
// managers' pool after draining them in a blue-green upgrade, before it
// deletes them: the longest a manager on them may drain plus soakMargin.
// A RunnerSet's manager drains for at most v1alpha1.MaxShutdownTimeout, a
// shared fleet's for its job timeout and sharedfleet.DrainMarginSeconds.
// A surge upgrade would give a draining manager about an hour.
func ManagerPoolSoak(fleets []fleetspec.SharedFleet) (time.Duration, error) {
	longest := v1alpha1.MaxShutdownTimeout
	for _, f := range fleets {
		longest = max(longest, f.JobTimeoutOrDefault()+sharedfleet.DrainMarginSeconds*time.Second)
	}
	soak := longest + soakMargin
	if soak > MaxNodePoolSoak {
		return 0, fmt.Errorf("a manager may drain for %s, and the managers' pool's blue-green soak (%s with its margin) would exceed GKE's %s: lower sharedFleets[].jobTimeout", longest, soak, MaxNodePoolSoak)
	}
	return soak, nil
}

// Cluster is the private regional GKE cluster with its node service account,
// its on-demand system node pool and a Kubernetes provider for it.
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

func newCluster(ctx *pulumi.Context, name string, e *platform, nw *Network, opts ...pulumi.ResourceOption) (*Cluster, error) {
	c := &Cluster{}
	if err := ctx.RegisterComponentResource("runnerfleet:gcp:Cluster", name, c, opts...); err != nil {
		return nil, err
	}
	g, cluster := e.gcp, e.args.Cluster

	nodeSA, err := serviceaccount.NewAccount(ctx, name+"-nodes", &serviceaccount.AccountArgs{
		Project:     pulumi.String(g.Project),
		AccountId:   pulumi.String(nodeAccountID(cluster)),
		DisplayName: pulumi.String("runnerfleet nodes of " + cluster),
		Description: pulumi.String("The nodes of GKE cluster " + cluster + ": logs, metrics and image pulls only."),
	}, e.opts(c)...)
	if err != nil {
		return nil, fmt.Errorf("creating the nodes' service account: %w", err)
	}
	var grants []pulumi.Resource
	for _, role := range NodeRoles {
		r, err := projects.NewIAMMember(ctx, name+"-nodes-"+RoleSuffix(role), &projects.IAMMemberArgs{
			Project: pulumi.String(g.Project),
			Role:    pulumi.String(role),
			Member:  nodeSA.Member,
		}, e.opts(c)...)
		if err != nil {
			return nil, fmt.Errorf("granting the nodes %s: %w", role, err)
		}
		grants = append(grants, r)
	}

	labels := pulumix.StringMap(e.labels)
	scopes := pulumix.Strings([]string{cloudPlatform})
	nodeTags := pulumix.Strings([]string{nw.NodeTag})
	var authorized []container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs
	for _, cidr := range g.MasterAuthorizedCIDRs {
		authorized = append(authorized, container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs{CidrBlock: pulumi.String(cidr), DisplayName: pulumi.String("stack config " + cidr)})
	}
	if authorized == nil {
		authorized = []container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs{}
	}
	gke, err := container.NewCluster(ctx, name, &container.ClusterArgs{
		Name:          pulumi.String(cluster),
		Description:   pulumi.String("runnerfleet: GitLab runners of stack " + ctx.Stack()),
		Location:      pulumi.String(g.Region),
		NodeLocations: pulumix.Strings(g.Zones),
		Network:       nw.Network,
		Subnetwork:    nw.Subnetwork,
		// Node pools are declared on their own; the default pool GKE must
		// create goes at once, but gets the least-privilege account meanwhile.
		RemoveDefaultNodePool: pulumi.Bool(true),
		InitialNodeCount:      pulumi.Int(1),
		NodeConfig: &container.ClusterNodeConfigArgs{
			ServiceAccount:         nodeSA.Email,
			OauthScopes:            scopes,
			WorkloadMetadataConfig: &container.ClusterNodeConfigWorkloadMetadataConfigArgs{Mode: pulumi.String("GKE_METADATA")},
			ShieldedInstanceConfig: &container.ClusterNodeConfigShieldedInstanceConfigArgs{EnableSecureBoot: pulumi.Bool(true), EnableIntegrityMonitoring: pulumi.Bool(true)},
			ResourceLabels:         labels,
			Tags:                   nodeTags,
		},
		NetworkingMode: pulumi.String("VPC_NATIVE"),
		// Dataplane V2: the NetworkPolicies of jobs namespaces and shared
		// fleets are enforced (GKE sets it only at creation).
		DatapathProvider: pulumi.String(AdvancedDatapath),
		IpAllocationPolicy: &container.ClusterIpAllocationPolicyArgs{
			ClusterSecondaryRangeName:  pulumi.String(PodsRange),
			ServicesSecondaryRangeName: pulumi.String(ServicesRange),
		},
		PrivateClusterConfig: &container.ClusterPrivateClusterConfigArgs{
			EnablePrivateNodes:    pulumi.Bool(true),
			EnablePrivateEndpoint: pulumi.Bool(false),
			MasterIpv4CidrBlock:   pulumi.String(g.MasterCIDR),
		},
		MasterAuthorizedNetworksConfig: &container.ClusterMasterAuthorizedNetworksConfigArgs{CidrBlocks: authorized},
		ReleaseChannel:                 &container.ClusterReleaseChannelArgs{Channel: pulumi.String(g.ReleaseChannel)},
		WorkloadIdentityConfig:         &container.ClusterWorkloadIdentityConfigArgs{WorkloadPool: pulumi.String(WorkloadPool(g.Project))},
		EnableShieldedNodes:            pulumi.Bool(true),
		// Node auto-provisioning creates the node pools of the teams'
		// ComputeClasses (nodePoolAutoCreation), within these caps.
		ClusterAutoscaling: &container.ClusterClusterAutoscalingArgs{
			Enabled:            pulumi.Bool(true),
			AutoscalingProfile: pulumi.String("OPTIMIZE_UTILIZATION"),
			ResourceLimits: []container.ClusterClusterAutoscalingResourceLimitArgs{
				{ResourceType: pulumi.String("cpu"), Minimum: pulumi.Int(0), Maximum: pulumi.Int(*g.Autoprovisioning.MaxCPU)},
				{ResourceType: pulumi.String("memory"), Minimum: pulumi.Int(0), Maximum: pulumi.Int(*g.Autoprovisioning.MaxMemoryGB)},
			},
			AutoProvisioningLocations: pulumix.Strings(g.Zones),
			AutoProvisioningDefaults: &container.ClusterClusterAutoscalingAutoProvisioningDefaultsArgs{
				ServiceAccount:         nodeSA.Email,
				OauthScopes:            scopes,
				ShieldedInstanceConfig: &container.ClusterClusterAutoscalingAutoProvisioningDefaultsShieldedInstanceConfigArgs{EnableSecureBoot: pulumi.Bool(true), EnableIntegrityMonitoring: pulumi.Bool(true)},
				Management:             &container.ClusterClusterAutoscalingAutoProvisioningDefaultsManagementArgs{AutoRepair: pulumi.Bool(true), AutoUpgrade: pulumi.Bool(true)},
			},
		},
		// Auto-provisioned pools carry the node tag too, so that the control
		// plane reaches webhooks on them.
		NodePoolAutoConfig: &container.ClusterNodePoolAutoConfigArgs{NetworkTags: &container.ClusterNodePoolAutoConfigNetworkTagsArgs{Tags: nodeTags}},
		ResourceLabels:     labels,
		DeletionProtection: pulumi.Bool(true),
	}, e.opts(c, pulumi.DependsOn(grants))...)
	if err != nil {
		return nil, fmt.Errorf("creating the GKE cluster: %w", err)
	}

	soak, err := ManagerPoolSoak(e.args.SharedFleets)
	if err != nil {
		return nil, err
	}
	taint := resources.ManagerNodeTaint()
	pool, err := container.NewNodePool(ctx, name+"-"+SystemPool, &container.NodePoolArgs{
		Name:          pulumi.String(SystemPool),
		Cluster:       gke.Name,
		Location:      pulumi.String(g.Region),
		NodeLocations: pulumix.Strings(g.Zones),
		// Per zone at creation; the autoscaler then keeps the totals.
		InitialNodeCount: pulumi.Int(1),
		Autoscaling: &container.NodePoolAutoscalingArgs{
			TotalMinNodeCount: pulumi.Int(*g.SystemNodes.Min),
			TotalMaxNodeCount: pulumi.Int(*g.SystemNodes.Max),
			LocationPolicy:    pulumi.String("BALANCED"),
		},
		Management: &container.NodePoolManagementArgs{AutoRepair: pulumi.Bool(true), AutoUpgrade: pulumi.Bool(true)},
		// Blue-green, not surge: a surge upgrade gives a draining manager
		// about an hour before it deletes the node; blue-green keeps the
		// drained nodes for the soak, longer than any manager drains. The
		// cluster autoscaler leaves the managers' nodes alone by their
		// pods' safe-to-evict (runnerset/resources), so the autoscaling
		// profile may stay OPTIMIZE_UTILIZATION for the job pools.
		UpgradeSettings: &container.NodePoolUpgradeSettingsArgs{
			Strategy: pulumi.String("BLUE_GREEN"),
			BlueGreenSettings: &container.NodePoolUpgradeSettingsBlueGreenSettingsArgs{
				NodePoolSoakDuration: pulumi.String(soakDuration(soak)),
				StandardRolloutPolicy: &container.NodePoolUpgradeSettingsBlueGreenSettingsStandardRolloutPolicyArgs{
					BatchNodeCount: pulumi.Int(1),
				},
			},
		},
		NodeConfig: &container.NodePoolNodeConfigArgs{
			MachineType: pulumi.String(g.SystemNodes.MachineType),
			// The managers' pool: on-demand (stackconfig refuses spot),
			// labelled and tainted so that managers select it and nothing
			// else lands there (runnerset/resources).
			Spot:                   pulumi.Bool(false),
			ServiceAccount:         nodeSA.Email,
			OauthScopes:            scopes,
			WorkloadMetadataConfig: &container.NodePoolNodeConfigWorkloadMetadataConfigArgs{Mode: pulumi.String("GKE_METADATA")},
			ShieldedInstanceConfig: &container.NodePoolNodeConfigShieldedInstanceConfigArgs{EnableSecureBoot: pulumi.Bool(true), EnableIntegrityMonitoring: pulumi.Bool(true)},
			ResourceLabels:         labels,
			Labels:                 pulumi.ToStringMap(resources.ManagerNodeLabels()),
			Taints: []container.NodePoolNodeConfigTaintArgs{{
				Key: pulumi.String(taint.Key), Value: pulumi.String(taint.Value), Effect: pulumi.String(pulumix.CloudTaintEffect(taint.Effect)),
			}},
			Tags: nodeTags,
		},
	}, e.opts(c)...)
	if err != nil {
		return nil, fmt.Errorf("creating the system node pool: %w", err)
	}

	ca := gke.MasterAuth.ApplyT(func(a container.ClusterMasterAuth) string {
		if a.ClusterCaCertificate == nil {
			return ""
		}
		return *a.ClusterCaCertificate
	}).(pulumi.StringOutput)
	kubeconfig := pulumi.All(gke.Name, gke.Endpoint, ca).ApplyT(func(a []any) (string, error) {
		return Kubeconfig(a[0].(string), a[1].(string), a[2].(string))
	}).(pulumi.StringOutput)
	c.Kubeconfig = pulumi.ToSecret(kubeconfig).(pulumi.StringOutput)
	c.Kubernetes, err = kube.NewProvider(ctx, name+"-kubernetes", cluster, c.Kubeconfig, pulumi.Parent(c))
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes provider: %w", err)
	}
	c.Name, c.Resource, c.SystemPool = gke.Name, gke, pool
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
	server := ""
	if endpoint != "" {
		server = "https://" + endpoint
	}
	return kube.Kubeconfig{Platform: "GKE", Cluster: cluster, Server: server, CAData: caData, Exec: kube.Exec{
		Command:            "gke-gcloud-auth-plugin",
		ProvideClusterInfo: true,
		InstallHint:        "Install gke-gcloud-auth-plugin: gcloud components install gke-gcloud-auth-plugin",
	}}.YAML()
}

// soakDuration is d as GKE's API writes a duration: whole seconds and "s".
func soakDuration(d time.Duration) string {
	return fmt.Sprintf("%ds", int64(d/time.Second))
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
