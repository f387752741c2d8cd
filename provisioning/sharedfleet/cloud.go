package sharedfleet

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// CloudPlan is a fleet's cloud side as plain values, which
// infra/sharedfleet declares on the gke platform: the VMs' subnetwork,
// their firewall rules, the docker-autoscaler managers' instance templates
// and groups, and fleet gc's Google service account and roles.
type CloudPlan struct {
	// VMSubnetwork is the resource path of the VMs' subnetwork.
	VMSubnetwork string
	// Subnetwork is the subnetwork the program declares for the VMs; nil
	// when the fleet names an existing one.
	Subnetwork *SubnetworkPlan
	// Firewalls admit each consumer to the VMs of one tag on its ports
	// (fleetspec.SharedFleet.VMIngress).
	Firewalls []FirewallPlan
	// InstanceGroups are the docker-autoscaler managers' templates and
	// groups, one per manager.
	InstanceGroups []InstanceGroupPlan
	// GC is fleet gc's cloud identity.
	GC GCIdentityPlan
	// Grants are what the fleet's Google service accounts are granted
	// (besides gc's own, in GC), in a stable order; infra/sharedfleet
	// declares each grant two fleets share once.
	Grants []GrantPlan
	// VMGroups are the fleet's VM manager groups' identities and firewall
	// rules, in stack order.
	VMGroups []VMGroupPlan
}

// VMGroupPlan is a VM manager group's cloud side: the Google service
// account its managers run as (fleet rotate makes them so), its project
// roles (fleetspec.VMGroupRoles), its runner token's secret and its
// firewall rules, each targeting
// the account, so that they admit to the group's managers and to no other
// VM.
type VMGroupPlan struct {
	Group                                      fleetspec.VMGroup
	AccountID, Email, DisplayName, Description string
	Roles                                      []string
	// TokenSecretID is the Secret Manager secret of the group's runner
	// token, which the account alone may read.
	TokenSecretID string
	Firewalls     []VMGroupFirewallPlan
}

// VMGroupFirewallPlan is one rule of a VM group (fleetspec.VMGroupIngress).
type VMGroupFirewallPlan struct {
	fleetspec.VMGroupIngress
	// Name is the rule's GCE name; Ports the ports as GCE takes them.
	Name, Description string
	Ports             []string
}

// planVMGroup plans VM group g of the Effective fleet s on cluster.
func planVMGroup(s fleetspec.SharedFleet, g fleetspec.VMGroup, cluster string) VMGroupPlan {
	p := VMGroupPlan{
		Group:         g,
		AccountID:     fleetspec.VMGroupServiceAccountID(cluster, g.Name),
		Email:         fleetspec.VMGroupServiceAccountEmail(g.Project, cluster, g.Name),
		DisplayName:   "runnerfleet VM group " + g.Name,
		Description:   "the " + g.OS + " manager VMs of group " + g.Name + " of shared fleet " + s.Namespace + " on GKE cluster " + cluster + ": writes their logs and metrics, reads their runner token.",
		Roles:         slices.Clone(fleetspec.VMGroupRoles),
		TokenSecretID: fleetspec.VMGroupTokenSecretID(cluster, g.Name),
	}
	for _, in := range g.Ingress() {
		ports := portStrings(in.Ports)
		from := "the fleet's Prometheus (the cluster's pods)"
		if in.Sources != nil {
			from = strings.Join(in.Sources, ", ")
		}
		p.Firewalls = append(p.Firewalls, VMGroupFirewallPlan{
			VMGroupIngress: in, Name: in.FirewallName(cluster, g.Name), Ports: ports,
			Description: "runnerfleet: " + from + " reach the managers of VM group " + g.Name + " of shared fleet " + s.Namespace + " on tcp " + strings.Join(ports, ", "),
		})
	}
	return p
}

func portStrings(ports []int) []string {
	out := make([]string, 0, len(ports))
	for _, p := range ports {
		out = append(out, strconv.Itoa(p))
	}
	return out
}

// monitoredProjects are the projects the fleet's Prometheus discovers VMs
// in: its groups' and its VM groups', sorted.
func monitoredProjects(s fleetspec.SharedFleet) []string {
	out := VMProjects(s)
	for _, g := range s.VMGroups {
		if !slices.Contains(out, g.Project) {
			out = append(out, g.Project)
		}
	}
	slices.Sort(out)
	return out
}

// What a GrantPlan grants.
const (
	// GrantWorkloadIdentity lets the Kubernetes ServiceAccount
	// Namespace/ServiceAccount act as Account.
	GrantWorkloadIdentity = "workload-identity"
	// GrantManagerCompute lets Account (the managers') create and delete
	// VMs in project On.
	GrantManagerCompute = "manager-compute"
	// GrantPrometheusCompute lets Account (the fleet Prometheus's) list
	// VMs in project On.
	GrantPrometheusCompute = "prometheus-compute"
	// GrantCache lets Account use cache bucket On ("" the platform's).
	GrantCache = "cache"
	// GrantSigner lets Account sign as itself (the cache URLs).
	GrantSigner = "signer"
	// GrantVMUser lets Account (the managers', gc's) act as the VMs'
	// account On.
	GrantVMUser = "vm-user"
)

// GrantPlan is one grant to one Google service account.
type GrantPlan struct {
	What    string
	Account string
	// On is the project, bucket or service account granted on.
	On string
	// Namespace and ServiceAccount name the Kubernetes ServiceAccount of
	// a GrantWorkloadIdentity.
	Namespace, ServiceAccount string
}

// VMProjects are the projects the Effective fleet s's groups run VMs in,
// sorted.
func VMProjects(s fleetspec.SharedFleet) []string {
	var out []string
	for _, g := range s.Groups {
		if !slices.Contains(out, g.Project) {
			out = append(out, g.Project)
		}
	}
	slices.Sort(out)
	return out
}

// planGrants are the grants of fleet s, whose gc acts as gcEmail, in the
// order they were always declared: the managers' (their ServiceAccounts'
// Workload Identity, compute in the VM projects, the cache bucket, signing
// as themselves), actAs on the VMs' account (gc's, then the managers'),
// the Prometheus's (Workload Identity, compute viewer in the projects of
// the VMs it scrapes).
// cacheBucket is the fleet's own bucket, "" for the platform's.
func planGrants(s fleetspec.SharedFleet, gcEmail, cacheBucket string) []GrantPlan {
	var out []GrantPlan
	ns := Namespace(s)
	if gsa := s.GCPServiceAccount; gsa != "" {
		for _, g := range s.Groups {
			out = append(out, GrantPlan{What: GrantWorkloadIdentity, Account: gsa, Namespace: ns, ServiceAccount: ManagerServiceAccount(g)})
		}
		for _, p := range VMProjects(s) {
			out = append(out, GrantPlan{What: GrantManagerCompute, Account: gsa, On: p})
		}
		out = append(out, GrantPlan{What: GrantCache, Account: gsa, On: cacheBucket}, GrantPlan{What: GrantSigner, Account: gsa, On: gsa})
	}
	if vmsa := s.VMServiceAccount; vmsa != "" {
		users := []string{gcEmail}
		if s.GCPServiceAccount != "" {
			users = append(users, s.GCPServiceAccount)
		}
		for _, u := range users {
			out = append(out, GrantPlan{What: GrantVMUser, Account: u, On: vmsa})
		}
	}
	if gsa := s.Monitoring.GCPServiceAccount; gsa != "" {
		out = append(out, GrantPlan{What: GrantWorkloadIdentity, Account: gsa, Namespace: ns, ServiceAccount: PrometheusServiceAccount})
		for _, p := range monitoredProjects(s) {
			out = append(out, GrantPlan{What: GrantPrometheusCompute, Account: gsa, On: p})
		}
	}
	return out
}

// SubnetworkPlan is a VM subnetwork the program declares (with its own
// Cloud NAT of the same name).
type SubnetworkPlan struct {
	Name, CIDR, Description string
	// NATDescription describes its Cloud NAT.
	NATDescription string
}

// FirewallPlan is one VM ingress rule.
type FirewallPlan struct {
	fleetspec.VMIngress
	// Name is the rule's GCE name; Ports the ports as GCE takes them.
	Name, Description string
	Ports             []string
}

// InstanceGroupPlan is a docker-autoscaler manager's instance template and
// zonal managed instance group, which its fleeting plugin sizes.
type InstanceGroupPlan struct {
	Manager string
	// TemplatePrefix is the templates' name prefix (a new one is made for
	// every change); Group the group's name.
	TemplatePrefix, Group string
	Description           string
	Project, Zone         string
	MachineType           string
	Image                 string
	Spot                  bool
	// Tags are the VMs' network tags: the group's VM tag, then its own.
	Tags []string
	// Labels are the VMs' and their disks' labels (InstanceTemplateLabels).
	Labels map[string]string
}

// GCIdentityPlan is fleet gc's Google service account, in the platform's
// project, and what it is granted in the project its groups run VMs in:
// ListPermissions there, InstancePermissions under Condition.
type GCIdentityPlan struct {
	AccountID, Email, DisplayName, Description string
	// ServiceAccount is the Kubernetes ServiceAccount, in the fleet's
	// namespace, that alone may act as it.
	ServiceAccount string
	// Project and Zones are gc's scope (GCScope).
	Project string
	Zones   []string
	// ListRoleID and InstanceRoleID are the custom roles' IDs in Project.
	ListRoleID, InstanceRoleID string
	Condition                  string
}

// fleet gc's permissions: exactly the calls providers/gcp.Compute makes
// for it (fleet gc --apply --provider gce, as the fleet's CronJob runs it).
var (
	// GCListPermissions are granted on the project without a condition:
	// listing is checked on the project, not on an instance, so no
	// condition on an instance's name can hold for it; reading a zone
	// operation is how gc waits for its deletes and metadata writes.
	GCListPermissions = []string{"compute.instances.list", "compute.zoneOperations.get"}
	// GCInstancePermissions are granted on the fleet's docker+machine VMs
	// only (GCInstanceCondition): get and getGuestAttributes read a VM's
	// job report, setMetadata writes and removes gc's orphan note, delete
	// deletes an orphan proven idle.
	GCInstancePermissions = []string{"compute.instances.delete", "compute.instances.get", "compute.instances.getGuestAttributes", "compute.instances.setMetadata"}
)

// GCRoleID is the ID of gc's custom role of kind (List or Instance) for
// the shared fleets of cluster: per cluster, since two stacks may share a
// VM project.
func GCRoleID(kind, cluster string) string {
	return "runnerfleetGC" + kind + "_" + strings.ReplaceAll(cluster, "-", "_")
}

// GCInstanceCondition is the IAM condition of gc's instance permissions
// for fleet gc in project and zones: the resource is a Compute Engine
// instance in one of the zones whose name docker+machine gave it
// (vmfleet.MachineVMNamePrefix). It is as tight as IAM conditions allow:
// they see an instance's type and name (and Resource Manager tags, which
// docker+machine cannot attach), not its labels, and the rest of a
// docker+machine name begins with the runner token's characters, which
// the program does not know. That a VM is the fleet's own, by its
// runnerfleet-fleet label, is proven by gc itself before any call.
func GCInstanceCondition(project string, zones []string) string {
	var names []string
	for _, z := range zones {
		names = append(names, fmt.Sprintf("resource.name.startsWith(%q)", "projects/"+project+"/zones/"+z+"/instances/"+vmfleet.MachineVMNamePrefix))
	}
	return `resource.type == "compute.googleapis.com/Instance" && (` + strings.Join(names, " || ") + ")"
}

// planCloud plans the Effective fleet s's cloud side on platform on.
func planCloud(s fleetspec.SharedFleet, on fleetspec.Platform) (CloudPlan, error) {
	fleet, cluster := s.Namespace, on.Cluster
	c := CloudPlan{VMSubnetwork: s.VMSubnetwork(on.Project, on.Region, cluster)}
	if cidr := s.VMNetwork.CIDR; cidr != "" {
		c.Subnetwork = &SubnetworkPlan{
			Name: fleetspec.VMSubnetworkName(cluster, fleet), CIDR: cidr,
			Description:    "runnerfleet: the job VMs of shared fleet " + fleet,
			NATDescription: "runnerfleet: Cloud NAT of the job VMs of shared fleet " + fleet,
		}
	}
	for _, in := range s.VMIngress() {
		ports := make([]string, 0, len(in.Ports))
		for _, p := range in.Ports {
			ports = append(ports, strconv.Itoa(p))
		}
		c.Firewalls = append(c.Firewalls, FirewallPlan{
			VMIngress: in, Name: in.FirewallName(cluster), Ports: ports,
			Description: "runnerfleet: the " + in.Consumer + " of shared fleet " + fleet + " (the cluster's pods) reach its job VMs tagged " + in.Tag + " on tcp " + strings.Join(ports, ", "),
		})
	}
	for _, g := range s.Groups {
		if g.Executor != fleetspec.ExecutorDockerAutoscaler {
			continue
		}
		for _, manager := range g.ManagerNames() {
			c.InstanceGroups = append(c.InstanceGroups, InstanceGroupPlan{
				Manager: manager, TemplatePrefix: manager + "-", Group: fleetspec.InstanceGroupName(manager),
				Description: "runnerfleet: job VMs of docker-autoscaler manager " + manager,
				Project:     g.Project, Zone: g.Zone, MachineType: g.MachineType, Image: g.Image, Spot: g.SpotVMs(),
				Tags:   append([]string{g.VMNetworkTag()}, g.NetworkTags...),
				Labels: InstanceTemplateLabels(g, manager),
			})
		}
	}
	project, zones, err := GCScope(s)
	if err != nil {
		return CloudPlan{}, err
	}
	c.GC = GCIdentityPlan{
		AccountID: GCAccountID(cluster, fleet), Email: GCAccountEmail(on.Project, cluster, fleet),
		DisplayName:    "runnerfleet gc " + fleet,
		Description:    "fleet gc of shared fleet " + fleet + " on GKE cluster " + cluster + ": lists the fleet's VMs and deletes the orphans among them.",
		ServiceAccount: GCName(fleet), Project: project, Zones: zones,
		ListRoleID: GCRoleID("List", cluster), InstanceRoleID: GCRoleID("Instance", cluster),
		Condition: GCInstanceCondition(project, zones),
	}
	bucket := s.CacheBucket
	if bucket == on.CacheBucket {
		bucket = ""
	}
	c.Grants = planGrants(s, c.GC.Email, bucket)
	for _, g := range s.VMGroups {
		c.VMGroups = append(c.VMGroups, planVMGroup(s, g, cluster))
	}
	return c, nil
}
