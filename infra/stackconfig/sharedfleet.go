package stackconfig

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
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
	// a manager may drain; default and minimum 3h.
	JobTimeout *metav1.Duration `json:"jobTimeout,omitempty"`
	// CacheBucket is the GCS cache bucket; default the platform's.
	CacheBucket string `json:"cacheBucket,omitempty"`
	// Monitoring is the fleet's own Prometheus.
	Monitoring SharedFleetMonitoring `json:"monitoring,omitempty"`
	// WebTerminal exposes every manager's session server, for GitLab's
	// interactive web terminals; without it the managers run none.
	WebTerminal *WebTerminal `json:"webTerminal,omitempty"`
	// VMNetwork is where the fleet's VMs live, in the cluster's VPC.
	VMNetwork VMNetwork `json:"vmNetwork"`
	// Groups are the fleet's manager groups (sharedfleet.ManagerGroup, the
	// one model of a group, decoded from the stack config as it is).
	Groups []sharedfleet.ManagerGroup `json:"groups"`
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

// GCPNetworkName is the name of the VPC the gke platform declares for
// cluster: its nodes, pods and the shared fleets' VMs live in it.
func GCPNetworkName(cluster string) string { return cluster }

// VMSubnetworkName is the subnetwork the program declares for the VMs of
// the fleet in namespace fleet of cluster.
func VMSubnetworkName(cluster, fleet string) string { return cluster + "-" + fleet + "-vms" }

// VMFirewallName is the firewall rule that lets the managers reach the
// VMs tagged tag (sharedfleet.ManagerGroup.VMNetworkTag) in cluster's VPC.
func VMFirewallName(cluster, tag string) string { return cluster + "-" + tag }

// maxGCEName is the longest name of a GCE subnetwork, router or firewall rule.
const maxGCEName = 63

// VMSubnetwork is the resource path of the fleet's VM subnetwork.
// in project and region of cluster.
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
	// MaxManagersPerGroup caps a group's managers (one Helm release each).
	MaxManagersPerGroup = 20
	// MonitoringNamespace holds the central Prometheus.
	MonitoringNamespace = "monitoring"
	// maxReleaseName keeps <manager>-<n> within Helm's 53-character
	// release names.
	maxReleaseName = 53
)

// JobTimeoutOrDefault is the fleet's job timeout.
func (s SharedFleet) JobTimeoutOrDefault() time.Duration {
	if s.JobTimeout == nil {
		return MinSharedJobTimeout
	}
	return s.JobTimeout.Duration
}

// setSharedFleetDefaults fills the shared fleets' defaults. Validate calls
// it (Decode's setDefaults predates the shared fleets); it is idempotent.
func (f *Fleet) setSharedFleetDefaults() {
	for i := range f.SharedFleets {
		s := &f.SharedFleets[i]
		if s.Namespace == "" {
			s.Namespace = s.Name
		}
		if s.GitLabURL == "" {
			s.GitLabURL = f.GitLabURL
		}
		for j := range s.Groups {
			g := &s.Groups[j]
			if g.Executor == "" {
				g.Executor = sharedfleet.ExecutorDockerMachine
			}
			if g.Project == "" && f.GCP != nil {
				g.Project = f.GCP.Project
			}
			if g.Concurrent == 0 {
				g.Concurrent = sharedfleet.DefaultConcurrent
				if g.Windows {
					g.Concurrent = vmfleet.WindowsConcurrent
				}
			}
			if g.Scaling.MinManagers == 0 {
				g.Scaling.MinManagers = 1
			}
			if g.Scaling.MaxManagers == 0 {
				g.Scaling.MaxManagers = g.Scaling.MinManagers
			}
			if g.Scaling.TargetUtilization == 0 {
				g.Scaling.TargetUtilization = 0.7
			}
			// What the group takes from its fleet and the stack.
			g.Fleet, g.GitLabURL, g.CacheBucket, g.VMServiceAccount = s.Namespace, s.GitLabURL, s.CacheBucket, s.VMServiceAccount
			if f.GCP != nil {
				g.Region = f.GCP.Region
				g.Network = fmt.Sprintf("projects/%s/global/networks/%s", f.GCP.Project, GCPNetworkName(f.ClusterName))
				g.Subnetwork = s.VMSubnetwork(f.GCP.Project, f.GCP.Region, f.ClusterName)
			}
		}
	}
}

var (
	gcsBucket      = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$`)
	gcpSAEmail     = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]@[a-z][-a-z0-9]{4,28}[a-z0-9]\.iam\.gserviceaccount\.com$`)
	imageReference = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(\.[a-z0-9-]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// validateSharedFleets checks the sharedFleets section. The groups' VM
// settings are checked by the renderer's own rules (machine type format,
// zone in the region, idle VMs within the limit, cron periods, executors),
// whose messages are moved under the keys they name.
func (f *Fleet) validateSharedFleets(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(f.SharedFleets) == 0 {
		return nil
	}
	if f.Platform != PlatformGKE {
		return append(errs, field.Forbidden(p, "shared fleets run on the gke platform (their jobs run on GCE VMs); remove them or set platform: gke"))
	}
	if f.GCP == nil {
		return nil // platform gke already asks for the gcp section
	}
	f.setSharedFleetDefaults()
	taken := map[string]string{
		MonitoringNamespace:    "the central Prometheus's namespace",
		f.Controller.Namespace: "the controller's namespace",
	}
	for _, t := range f.Teams {
		taken[t.Namespace] = "a team's namespace"
	}
	names := map[string]int{}
	errs = append(errs, f.validateVMNetworks(p)...)
	for i := range f.SharedFleets {
		s := &f.SharedFleets[i]
		sp := p.Index(i)
		if j, ok := names[s.Name]; ok {
			errs = append(errs, field.Duplicate(sp.Child("name"), fmt.Sprintf("%s: also sharedFleets[%d]'s name; give each fleet its own", s.Name, j)))
		}
		names[s.Name] = i
		errs = append(errs, dns1035(sp.Child("name"), s.Name)...)
		nsPath := sp.Child("namespace")
		if s.Namespace == s.Name {
			nsPath = sp.Child("name")
		} else {
			errs = append(errs, dns1035(nsPath, s.Namespace)...)
		}
		if what, ok := taken[s.Namespace]; ok {
			errs = append(errs, field.Invalid(nsPath, s.Namespace, fmt.Sprintf("is %s; a shared fleet needs a namespace of its own (set namespace)", what)))
		}
		taken[s.Namespace] = fmt.Sprintf("sharedFleets[%d]'s namespace", i)
		errs = append(errs, s.validate(sp, f)...)
	}
	return errs
}

func dns1035(p *field.Path, v string) field.ErrorList {
	var errs field.ErrorList
	for _, m := range validation.IsDNS1035Label(v) {
		errs = append(errs, field.Invalid(p, v, m))
	}
	return errs
}

func (s *SharedFleet) validate(p *field.Path, f *Fleet) field.ErrorList {
	var errs field.ErrorList
	if !strings.HasPrefix(s.GitLabURL, "https://") && !strings.HasPrefix(s.GitLabURL, "http://") {
		errs = append(errs, field.Invalid(p.Child("gitlabURL"), s.GitLabURL, "the GitLab instance's URL, for example https://gitlab.example.com"))
	}
	needsImage := false
	for _, g := range s.Groups {
		needsImage = needsImage || g.Executor == sharedfleet.ExecutorDockerMachine
	}
	switch {
	case s.ManagerImage == "" && needsImage:
		errs = append(errs, field.Required(p.Child("managerImage"), "docker+machine managers need an image with gitlab-runner and GitLab's docker-machine fork (the stock gitlab-runner image has no docker-machine), for example registry.example.com/ci/gitlab-runner-docker-machine:v19.4.0"))
	case s.ManagerImage != "" && !imageReference.MatchString(s.ManagerImage):
		errs = append(errs, field.Invalid(p.Child("managerImage"), s.ManagerImage, "an image as registry/repository:tag, for example registry.example.com/ci/gitlab-runner-docker-machine:v19.4.0 (the chart takes registry, repository and tag)"))
	}
	if s.GCPServiceAccount != "" && !gcpSAEmail.MatchString(s.GCPServiceAccount) {
		errs = append(errs, field.Invalid(p.Child("gcpServiceAccount"), s.GCPServiceAccount, "a Google service account email such as ci-shared@my-project.iam.gserviceaccount.com"))
	}
	if s.VMServiceAccount != "" && !gcpSAEmail.MatchString(s.VMServiceAccount) {
		errs = append(errs, field.Invalid(p.Child("vmServiceAccount"), s.VMServiceAccount, "a Google service account email such as ci-vms@my-project.iam.gserviceaccount.com"))
	}
	if s.Monitoring.GCPServiceAccount != "" && !gcpSAEmail.MatchString(s.Monitoring.GCPServiceAccount) {
		errs = append(errs, field.Invalid(p.Child("monitoring", "gcpServiceAccount"), s.Monitoring.GCPServiceAccount, "a Google service account email such as ci-prometheus@my-project.iam.gserviceaccount.com"))
	}
	if s.Monitoring.VMQuota < 0 {
		errs = append(errs, field.Invalid(p.Child("monitoring", "vmQuota"), s.Monitoring.VMQuota, "the VM quota of the fleet's project and region, or leave it out"))
	}
	if t := s.JobTimeoutOrDefault(); t < MinSharedJobTimeout {
		errs = append(errs, field.Invalid(p.Child("jobTimeout"), t.String(), fmt.Sprintf("at least %s: shared-fleet jobs may run that long, and a manager drains for as long as its jobs may run", MinSharedJobTimeout)))
	}
	if s.CacheBucket != "" && !gcsBucket.MatchString(s.CacheBucket) {
		errs = append(errs, field.Invalid(p.Child("cacheBucket"), s.CacheBucket, "a GCS bucket name, or leave it out for the platform's cache bucket"))
	}
	if w := s.WebTerminal; w != nil {
		errs = append(errs, w.validate(p.Child("webTerminal"))...)
	}
	if len(s.Groups) == 0 {
		errs = append(errs, field.Required(p.Child("groups"), "at least one manager group"))
	}
	groups := map[string]int{}
	for j, g := range s.Groups {
		gp := p.Child("groups").Index(j)
		if k, ok := groups[g.Name]; ok {
			errs = append(errs, field.Duplicate(gp.Child("name"), fmt.Sprintf("%s: also groups[%d]'s name", g.Name, k)))
		}
		groups[g.Name] = j
		errs = append(errs, s.validateGroup(gp, f, j)...)
	}
	return errs
}

var subnetworkPath = regexp.MustCompile(`^projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/regions/([a-z]+-[a-z]+[0-9]+)/subnetworks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// validateVMNetworks checks each fleet's vmNetwork: one of cidr or
// subnetwork, a range that overlaps none of the cluster's ranges and no
// other fleet's, a subnetwork in the region.
func (f *Fleet) validateVMNetworks(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	type taken struct {
		what string
		pfx  netip.Prefix
	}
	var ranges []taken
	for _, r := range []struct{ key, value string }{
		{"subnetCIDR", f.GCP.SubnetCIDR}, {"podsCIDR", f.GCP.PodsCIDR}, {"servicesCIDR", f.GCP.ServicesCIDR}, {"masterCIDR", f.GCP.MasterCIDR},
	} {
		if pfx, msg := parseCIDR(r.value); msg == "" {
			ranges = append(ranges, taken{"gcp." + r.key, pfx})
		}
	}
	for i, s := range f.SharedFleets {
		np := p.Index(i).Child("vmNetwork")
		n := s.VMNetwork
		nsPath := p.Index(i).Child("namespace")
		if s.Namespace == s.Name {
			nsPath = p.Index(i).Child("name")
		}
		long := len(s.Namespace) > sharedfleet.MaxFleetNameForTags
		for _, g := range s.Groups {
			long = long || len(VMFirewallName(f.ClusterName, g.VMNetworkTag())) > maxGCEName
		}
		if n.CIDR != "" {
			long = long || len(VMSubnetworkName(f.ClusterName, s.Namespace)) > maxGCEName
		}
		if long {
			errs = append(errs, field.Invalid(nsPath, s.Namespace, fmt.Sprintf(
				"names the fleet's VM network tags (%s), firewall rules (%s) and subnetwork (%s), which GCE allows up to %d characters; shorten the fleet's namespace (at most %d) or the clusterName",
				sharedfleet.VMNetworkTag(s.Namespace, sharedfleet.AccessWinRM), VMFirewallName(f.ClusterName, sharedfleet.VMNetworkTag(s.Namespace, sharedfleet.AccessWinRM)), VMSubnetworkName(f.ClusterName, s.Namespace), maxGCEName, sharedfleet.MaxFleetNameForTags)))
		}
		switch {
		case n.CIDR == "" && n.Subnetwork == "":
			errs = append(errs, field.Required(np, "the subnetwork of the fleet's VMs: cidr for one the program declares (for example {cidr: 10.30.0.0/20}, clear of the cluster's ranges), or subnetwork for an existing one of the cluster's VPC"))
		case n.CIDR != "" && n.Subnetwork != "":
			errs = append(errs, field.Invalid(np, n.CIDR+" and "+n.Subnetwork, "set cidr (the program declares the subnetwork) or subnetwork (an existing one), not both"))
		case n.Subnetwork != "":
			m := subnetworkPath.FindStringSubmatch(n.Subnetwork)
			switch {
			case m == nil:
				errs = append(errs, field.Invalid(np.Child("subnetwork"), n.Subnetwork, "a subnetwork as projects/<project>/regions/<region>/subnetworks/<name>"))
			case m[1] != f.GCP.Region:
				errs = append(errs, field.Invalid(np.Child("subnetwork"), n.Subnetwork, fmt.Sprintf("is in region %s; the fleet's VMs run in the cluster's region %s", m[1], f.GCP.Region)))
			}
		default:
			pfx, msg := parseCIDR(n.CIDR)
			if msg != "" {
				errs = append(errs, field.Invalid(np.Child("cidr"), n.CIDR, msg))
				continue
			}
			if pfx.Bits() > 29 {
				errs = append(errs, field.Invalid(np.Child("cidr"), n.CIDR, "GCE subnetworks are at most /29; the fleet's VMs need room, for example a /20"))
			}
			for _, t := range ranges {
				if t.pfx.Overlaps(pfx) {
					errs = append(errs, field.Invalid(np.Child("cidr"), n.CIDR, fmt.Sprintf("overlaps %s (%s); choose a range clear of the cluster's and the other fleets' ranges", t.what, t.pfx)))
				}
			}
			ranges = append(ranges, taken{fmt.Sprintf("sharedFleets[%d].vmNetwork.cidr", i), pfx})
		}
	}
	return errs
}

func (w *WebTerminal) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, m := range validation.IsDNS1123Subdomain(w.Domain) {
		errs = append(errs, field.Invalid(p.Child("domain"), w.Domain, m+"; for example terminals.ci.example.com"))
	}
	if len(w.AllowedCIDRs) == 0 {
		errs = append(errs, field.Required(p.Child("allowedCIDRs"), "the GitLab instance's ranges, the only sources that may open a terminal, for example [203.0.113.10/32]"))
	}
	for i, c := range w.AllowedCIDRs {
		pfx, err := netip.ParsePrefix(c)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p.Child("allowedCIDRs").Index(i), c, "a CIDR such as 203.0.113.10/32"))
		case pfx.Masked() != pfx:
			errs = append(errs, field.Invalid(p.Child("allowedCIDRs").Index(i), c, fmt.Sprintf("host bits are set; did you mean %s?", pfx.Masked())))
		case pfx.Bits() == 0:
			errs = append(errs, field.Invalid(p.Child("allowedCIDRs").Index(i), c, "would let anyone reach the managers' session servers; list the GitLab instance's ranges"))
		}
	}
	return errs
}

func (s *SharedFleet) validateGroup(p *field.Path, f *Fleet, j int) field.ErrorList {
	var errs field.ErrorList
	g := s.Groups[j]
	switch {
	case g.TokenConfigKey == "":
		errs = append(errs, field.Required(p.Child("tokenConfigKey"), "the config secret holding the runner's authentication token: pulumi config set --secret <key> glrt-…"))
	case !configKey.MatchString(g.TokenConfigKey):
		errs = append(errs, field.Invalid(p.Child("tokenConfigKey"), g.TokenConfigKey, "a config key name such as sharedProductionToken (letters, digits, '-' and '_'), set with pulumi config set --secret"))
	}
	sc := g.Scaling
	switch {
	case sc.MinManagers < 1:
		errs = append(errs, field.Invalid(p.Child("scaling", "minManagers"), sc.MinManagers, "at least 1: the group's floor of managers"))
	case sc.MaxManagers < sc.MinManagers:
		errs = append(errs, field.Invalid(p.Child("scaling", "maxManagers"), sc.MaxManagers, fmt.Sprintf("below minManagers (%d); raise it or lower minManagers", sc.MinManagers)))
	case sc.MaxManagers > MaxManagersPerGroup:
		errs = append(errs, field.Invalid(p.Child("scaling", "maxManagers"), sc.MaxManagers, fmt.Sprintf("at most %d managers per group (one Helm release each); add a group", MaxManagersPerGroup)))
	}
	if sc.TargetUtilization <= 0 || sc.TargetUtilization > 1 {
		errs = append(errs, field.Invalid(p.Child("scaling", "targetUtilization"), sc.TargetUtilization, "a share of concurrent in (0, 1], such as 0.7"))
	}
	if g.Project != "" && g.Project != f.GCP.Project && s.VMNetwork.Subnetwork == "" {
		errs = append(errs, field.Invalid(p.Child("project"), g.Project, fmt.Sprintf(
			"the program puts the VMs in a subnetwork of the cluster's VPC in project %s; leave project out, or name a Shared VPC subnetwork in vmNetwork.subnetwork that project %s may use", f.GCP.Project, g.Project)))
	}
	if sc.MaxManagers >= 1 {
		names := g.ManagerNames()
		if last := names[len(names)-1]; len(last) > maxReleaseName {
			errs = append(errs, field.Invalid(p.Child("name"), g.Name, fmt.Sprintf(
				"its managers' names (%s) would exceed Helm's %d-character release names; shorten the group's name or the fleet's namespace", last, maxReleaseName)))
		}
	}
	if err := g.Validate(); err != nil {
		errs = append(errs, s.groupErrors(p, g, err)...)
	}
	return errs
}

// groupErrors moves the renderer's messages, which name keys as
// fleets.<fleet>.groups.<group>.<key>, under the stack config's paths.
func (s *SharedFleet) groupErrors(p *field.Path, g sharedfleet.ManagerGroup, err error) field.ErrorList {
	var errs field.ErrorList
	prefix := fmt.Sprintf("fleets.%s.groups.%s.", s.Namespace, g.Name)
	for _, line := range strings.Split(err.Error(), "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		key, msg, found := strings.Cut(rest, ": ")
		if !ok || !found {
			errs = append(errs, field.Invalid(p, field.OmitValueType{}, line))
			continue
		}
		switch {
		case key == "region" || key == "gitlabURL":
			continue // the gcp section's and the fleet's own checks name these
		case key == "project" && g.Project == "":
			continue // gcp.project is empty, and named there
		}
		errs = append(errs, field.Invalid(keyPath(p, key), field.OmitValueType{}, msg))
	}
	return errs
}

// keyPath turns "periods[0].periods[1]" into a path under p.
func keyPath(p *field.Path, key string) *field.Path {
	for _, part := range strings.Split(key, ".") {
		name, idx, _ := strings.Cut(part, "[")
		p = p.Child(name)
		for idx != "" {
			n, rest, _ := strings.Cut(idx, "]")
			i, err := strconv.Atoi(n)
			if err != nil {
				break
			}
			p = p.Index(i)
			idx = strings.TrimPrefix(rest, "[")
		}
	}
	return p
}
