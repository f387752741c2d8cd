package fleetspec

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SharedFleet is one of the platform's own shared runner fleets for a whole
// GitLab instance (production, staging, …): manager groups in a namespace of
// their own, whose jobs run on autoscaled GCE VMs. A staging fleet is simply
// another entry with less capacity.
type SharedFleet struct {
	// Name names the fleet and, by default, its namespace.
	Name string `json:"name"`
	// Namespace is the fleet's namespace; default the name. It also names
	// the fleet's managers (<namespace>-<group>) and is the
	// runnerfleet-fleet label of its VMs.
	Namespace string `json:"namespace,omitempty"`
	// GitLabURL is the instance the fleet serves; default the stack's
	// gitlabURL.
	GitLabURL string `json:"gitlabURL,omitempty"`
	// ManagerImage is the gitlab-runner image of the managers. docker+machine
	// groups need one that also holds GitLab's docker-machine fork (the
	// stock gitlab-runner image does not); docker-autoscaler groups default
	// to the chart's image.
	ManagerImage string `json:"managerImage,omitempty"`
	// GCPServiceAccount is the Google service account the managers act as
	// through Workload Identity, to create VMs and use the cache bucket.
	GCPServiceAccount string `json:"gcpServiceAccount,omitempty"`
	// VMServiceAccount is the Google service account the fleet's
	// docker+machine VMs run as (made outside this stack; best one with no
	// roles: the jobs' cache goes through URLs the managers sign). The
	// program lets the managers' gcpServiceAccount and fleet gc's account,
	// and no one else, act as it (roles/iam.serviceAccountUser on it
	// alone): GCE asks for that to create a VM that runs as an account and
	// to set its metadata. Without it the VMs run as the project's Compute
	// Engine default account, on which both must be granted that role by
	// hand.
	VMServiceAccount string `json:"vmServiceAccount,omitempty"`
	// JobTimeout is the longest a job may run on this fleet, and so how long
	// a manager may drain; default and minimum 3h, at most 144h.
	JobTimeout *metav1.Duration `json:"jobTimeout,omitempty"`
	// CacheBucket is the GCS cache bucket; default the platform's.
	CacheBucket string `json:"cacheBucket,omitempty"`
	// Monitoring is the fleet's own Prometheus.
	Monitoring SharedFleetMonitoring `json:"monitoring,omitempty"`
	// Images are the images of fleet gc and of what the docker+machine
	// VMs run beside the jobs; default DefaultFleetImages.
	Images FleetImages `json:"images,omitempty"`
	// WebTerminal exposes every manager's session server, for GitLab's
	// interactive web terminals; without it the managers run none.
	WebTerminal *WebTerminal `json:"webTerminal,omitempty"`
	// VMNetwork is where the fleet's VMs live, in the cluster's VPC.
	VMNetwork VMNetwork `json:"vmNetwork"`
	// Groups are the fleet's manager groups (ManagerGroup, the one model
	// of a group, decoded from the stack config as it is).
	Groups []ManagerGroup `json:"groups"`
	// Retired retires the fleet: its managers are no longer declared (they
	// drain and go), while its namespace, fleet gc and the rest stay, so
	// that gc deletes the VMs they leave once idle. A fleet may leave the
	// stack or change its namespace only after its retire wait from the
	// deployment that retired it (provisioning/sharedfleet.RetireWait,
	// CheckFootprints): gc finds a fleet's VMs by its namespace, and no one
	// else deletes them.
	Retired bool `json:"retired,omitempty"`
	// RetiredZones are zones the fleet's groups no longer use but fleet gc
	// still covers (GCScope), until the VMs left there are gone: a zone
	// the groups used in the previous deployment may leave them only into
	// this list, and leave the list after its retire wait.
	RetiredZones []string `json:"retiredZones,omitempty"`
	// VMGroups are the fleet's manager groups on VMs of their own
	// (Windows managers, say), which fleet rotate replaces blue/green;
	// the fleet's Prometheus scrapes them and its firewall admits it.
	VMGroups []VMGroup `json:"vmGroups,omitempty"`
}

// VMNetwork is the subnetwork of a fleet's VMs: one the program declares
// (CIDR), with Private Google Access and a Cloud NAT of its own, or an
// existing one of the cluster's VPC (Subnetwork) whose egress is its
// owner's. Either way the program declares the firewall rule that lets the
// cluster's pod range, and nothing else, reach the VMs' ports.
type VMNetwork struct {
	// CIDR is the range of the subnetwork the program declares, such as
	// 10.30.0.0/20; it may not overlap the cluster's ranges or another
	// fleet's.
	CIDR string `json:"cidr,omitempty"`
	// Subnetwork names an existing subnetwork of the cluster's VPC in the
	// region instead: projects/<project>/regions/<region>/subnetworks/<name>.
	Subnetwork string `json:"subnetwork,omitempty"`
}

// VMSubnetworkName is the subnetwork the program declares for the VMs of
// the fleet in namespace fleet of cluster.
func VMSubnetworkName(cluster, fleet string) string { return cluster + "-" + fleet + "-vms" }

// VMFirewallName is the firewall rule that lets the managers reach the
// VMs tagged tag (ManagerGroup.VMNetworkTag) in cluster's VPC; other
// consumers' rules add their name (VMIngress.FirewallName).
func VMFirewallName(cluster, tag string) string { return cluster + "-" + tag }

// VMSubnetwork is the resource path of the fleet's VM subnetwork in
// project and region of cluster.
func (s SharedFleet) VMSubnetwork(project, region, cluster string) string {
	if s.VMNetwork.Subnetwork != "" {
		return s.VMNetwork.Subnetwork
	}
	return fmt.Sprintf("projects/%s/regions/%s/subnetworks/%s", project, region, VMSubnetworkName(cluster, s.Namespace))
}

// SharedFleetMonitoring is a fleet's own Prometheus.
type SharedFleetMonitoring struct {
	// VMQuota is the VM quota of the fleet's project and region, for the
	// VMCountNearQuota alert; default the sum of the groups' maxVMs times
	// their maxManagers.
	VMQuota int `json:"vmQuota,omitempty"`
	// GCPServiceAccount is the Google service account Prometheus's GCE
	// discovery acts as through Workload Identity (compute.instances.list).
	GCPServiceAccount string `json:"gcpServiceAccount,omitempty"`
	// NodeExporterPort is where the docker+machine VMs' node_exporter
	// listens, the port the fleet's Prometheus scrapes them on and the
	// fleet's firewall opens to it; default DefaultNodeExporterPort.
	NodeExporterPort int `json:"nodeExporterPort,omitempty"`
}

// WebTerminal is how GitLab reaches the managers' session servers.
type WebTerminal struct {
	// Domain is the DNS domain of the managers' hostnames:
	// <manager>.<domain>, one per manager.
	Domain string `json:"domain"`
	// AllowedCIDRs are the GitLab instance's ranges, the only sources that
	// may reach a session server: each manager's passthrough load balancer
	// admits only them (loadBalancerSourceRanges), and so does the
	// managers' NetworkPolicy.
	AllowedCIDRs []string `json:"allowedCIDRs"`
}

// Shared-fleet defaults and limits.
const (
	// MinSharedJobTimeout is the shortest job timeout of a shared fleet:
	// managers drain for as long as jobs may run.
	MinSharedJobTimeout = 3 * time.Hour
	// MaxSharedJobTimeout is the longest: the GKE managers' pool keeps a
	// draining manager's node through an upgrade for at most 7 days (its
	// blue-green soak, infra/gcp.ManagerPoolSoak), drain margins included.
	MaxSharedJobTimeout = 6 * 24 * time.Hour
	// MaxManagersPerGroup caps a group's managers (one Helm release each).
	MaxManagersPerGroup = 20
	// MonitoringNamespace holds the central Prometheus.
	MonitoringNamespace = "monitoring"
)

// JobTimeoutOrDefault is the fleet's job timeout.
func (s SharedFleet) JobTimeoutOrDefault() time.Duration {
	if s.JobTimeout == nil {
		return MinSharedJobTimeout
	}
	return s.JobTimeout.Duration
}
