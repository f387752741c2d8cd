package stackconfig

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/internal/imageref"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

// GCPNetworkName is the name of the VPC the gke platform declares for
// cluster: its nodes, pods and the shared fleets' VMs live in it.
func GCPNetworkName(cluster string) string { return cluster }

// maxGCEName is the longest name of a GCE subnetwork, router or firewall rule.
const maxGCEName = 63

// maxReleaseName keeps <manager>-<n> within Helm's 53-character release
// names.
const maxReleaseName = 53

// GCPNetworkPath is the resource path of the VPC of cluster in project.
func GCPNetworkPath(project, cluster string) string {
	return fmt.Sprintf("projects/%s/global/networks/%s", project, GCPNetworkName(cluster))
}

// FleetPlatform is what the stack gives its shared fleets
// (fleetspec.SharedFleet.Effective): its GitLab instance and, with a gcp
// section, the project, region, cluster and VPC.
func (f *Fleet) FleetPlatform() fleetspec.Platform {
	p := fleetspec.Platform{GitLabURL: f.GitLabURL, Cluster: f.ClusterName}
	if f.Platform == PlatformLocal {
		g := LocalSharedFleetGCP()
		p.Project, p.Region, p.Network, p.Zones = g.Project, g.Region, GCPNetworkPath(g.Project, f.ClusterName), g.Zones
	} else if f.GCP != nil {
		p.Project, p.Region, p.Network = f.GCP.Project, f.GCP.Region, GCPNetworkPath(f.GCP.Project, f.ClusterName)
		p.Zones = f.GCP.Zones
	}
	return p
}

// setSharedFleetDefaults makes every shared fleet its Effective fleet.
// Validate calls it (Decode's setDefaults predates the shared fleets); it
// is idempotent.
func (f *Fleet) setSharedFleetDefaults() {
	p := f.FleetPlatform()
	for i := range f.SharedFleets {
		f.SharedFleets[i] = f.SharedFleets[i].Effective(p)
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
	if f.Platform == PlatformLocal {
		if errs := f.validateLocalSharedFleets(p); len(errs) > 0 {
			return errs
		}
		// The rest is checked as on gke, against the project and region
		// the local platform's fleets name (LocalSharedFleetGCP).
		f.GCP = LocalSharedFleetGCP()
		defer func() { f.GCP = nil }()
	} else if f.Platform != PlatformGKE {
		return append(errs, field.Forbidden(p, "shared fleets run on the gke platform (their jobs run on GCE VMs) and, for the end-to-end proof, on the local one; remove them or set platform: gke"))
	}
	if f.GCP == nil {
		return nil // platform gke already asks for the gcp section
	}
	f.setSharedFleetDefaults()
	taken := map[string]string{
		fleetspec.MonitoringNamespace: "the central Prometheus's namespace",
		f.Controller.Namespace:        "the controller's namespace",
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
		errs = append(errs, validateSharedFleet(s, sp, f)...)
	}
	return append(errs, f.validateVMGroups(p)...)
}

func dns1035(p *field.Path, v string) field.ErrorList {
	var errs field.ErrorList
	for _, m := range validation.IsDNS1035Label(v) {
		errs = append(errs, field.Invalid(p, v, m))
	}
	return errs
}

func validateSharedFleet(s *fleetspec.SharedFleet, p *field.Path, f *Fleet) field.ErrorList {
	var errs field.ErrorList
	if !strings.HasPrefix(s.GitLabURL, "https://") && !strings.HasPrefix(s.GitLabURL, "http://") {
		errs = append(errs, field.Invalid(p.Child("gitlabURL"), s.GitLabURL, "the GitLab instance's URL, for example https://gitlab.example.com"))
	}
	needsImage := false
	for _, g := range s.Groups {
		needsImage = needsImage || g.Executor == fleetspec.ExecutorDockerMachine
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
	errs = append(errs, validateFleetImages(s.Images, p.Child("images"))...)
	if msg := fleetspec.NodeExporterPortProblem(s.Monitoring.NodeExporterPort); msg != "" {
		errs = append(errs, field.Invalid(p.Child("monitoring", "nodeExporterPort"), s.Monitoring.NodeExporterPort, msg))
	}
	if s.Monitoring.VMQuota < 0 {
		errs = append(errs, field.Invalid(p.Child("monitoring", "vmQuota"), s.Monitoring.VMQuota, "the VM quota of the fleet's project and region, or leave it out"))
	}
	if t := s.JobTimeoutOrDefault(); t < fleetspec.MinSharedJobTimeout {
		errs = append(errs, field.Invalid(p.Child("jobTimeout"), t.String(), fmt.Sprintf("at least %s: shared-fleet jobs may run that long, and a manager drains for as long as its jobs may run", fleetspec.MinSharedJobTimeout)))
	} else if t > fleetspec.MaxSharedJobTimeout {
		errs = append(errs, field.Invalid(p.Child("jobTimeout"), t.String(), fmt.Sprintf("at most %s: a manager drains for as long as its jobs may run, and GKE keeps a draining manager's node through an upgrade for at most 7 days", fleetspec.MaxSharedJobTimeout)))
	}
	if s.CacheBucket != "" && !gcsBucket.MatchString(s.CacheBucket) {
		errs = append(errs, field.Invalid(p.Child("cacheBucket"), s.CacheBucket, "a GCS bucket name, or leave it out for the platform's cache bucket"))
	}
	if w := s.WebTerminal; w != nil {
		errs = append(errs, validateWebTerminal(w, p.Child("webTerminal"))...)
	}
	if len(s.Groups) == 0 {
		errs = append(errs, field.Required(p.Child("groups"), "at least one manager group"))
	}
	for k, z := range s.RetiredZones {
		in := slices.ContainsFunc(s.Groups, func(g fleetspec.ManagerGroup) bool {
			return strings.HasPrefix(z, g.Region+"-") && len(z) == len(g.Region)+2
		})
		if !in {
			errs = append(errs, field.Invalid(p.Child("retiredZones").Index(k), z, "a zone of a group's region where the fleet's groups ran VMs, such as europe-west1-b; fleet gc keeps deleting the fleet's VMs there"))
		}
	}
	groups := map[string]int{}
	for j, g := range s.Groups {
		gp := p.Child("groups").Index(j)
		if k, ok := groups[g.Name]; ok {
			errs = append(errs, field.Duplicate(gp.Child("name"), fmt.Sprintf("%s: also groups[%d]'s name", g.Name, k)))
		}
		groups[g.Name] = j
		errs = append(errs, validateGroup(s, gp, f, j)...)
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
	for _, r := range f.GCP.ranges() {
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
		long := len(s.Namespace) > fleetspec.MaxFleetNameForTags
		longest := fleetspec.VMFirewallName(f.ClusterName, fleetspec.VMNetworkTag(s.Namespace, fleetspec.AccessWinRM))
		for _, in := range s.VMIngress() {
			name := in.FirewallName(f.ClusterName)
			long = long || len(name) > maxGCEName
			if len(name) > len(longest) {
				longest = name
			}
		}
		if n.CIDR != "" {
			long = long || len(fleetspec.VMSubnetworkName(f.ClusterName, s.Namespace)) > maxGCEName
		}
		if long {
			errs = append(errs, field.Invalid(nsPath, s.Namespace, fmt.Sprintf(
				"names the fleet's VM network tags (%s), firewall rules (%s) and subnetwork (%s), which GCE allows up to %d characters; shorten the fleet's namespace (at most %d) or the clusterName",
				fleetspec.VMNetworkTag(s.Namespace, fleetspec.AccessWinRM), longest, fleetspec.VMSubnetworkName(f.ClusterName, s.Namespace), maxGCEName, fleetspec.MaxFleetNameForTags)))
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

// validateFleetImages checks the fleet's images as internal/imageref does
// (go-containerregistry's parser, strictly: a registry, a repository and a
// tag or digest, nothing left to a default). Each image reaches a VM's
// startup script or a CronJob as it is.
func validateFleetImages(i fleetspec.FleetImages, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, c := range []struct{ key, image, example string }{
		{"gc", i.GC, fleetspec.DefaultFleetImages.GC},
		{"jobReporter", i.JobReporter, fleetspec.DefaultFleetImages.JobReporter},
		{"nodeExporter", i.NodeExporter, fleetspec.DefaultFleetImages.NodeExporter},
	} {
		if err := imageref.Check(c.image, c.example); err != nil {
			errs = append(errs, field.Invalid(p.Child(c.key), c.image, err.Error()+", or leave it out for that default"))
		}
	}
	return errs
}

func validateWebTerminal(w *fleetspec.WebTerminal, p *field.Path) field.ErrorList {
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

func validateGroup(s *fleetspec.SharedFleet, p *field.Path, f *Fleet, j int) field.ErrorList {
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
	case sc.MaxManagers > fleetspec.MaxManagersPerGroup:
		errs = append(errs, field.Invalid(p.Child("scaling", "maxManagers"), sc.MaxManagers, fmt.Sprintf("at most %d managers per group (one Helm release each); add a group", fleetspec.MaxManagersPerGroup)))
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
		errs = append(errs, groupErrors(p, g, err)...)
	}
	return errs
}

// groupErrors moves the renderer's messages, which name keys as
// fleets.<fleet>.groups.<group>.<key>, under the stack config's paths.
func groupErrors(p *field.Path, g fleetspec.ManagerGroup, err error) field.ErrorList {
	var errs field.ErrorList
	prefix := g.Key("")
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

// LocalSharedFleetGCP is the GCP section the local platform's shared
// fleets are rendered and checked against: their docker+machine
// config.toml names this project and region, where no VM is ever made
// (the local stand-in runner runs each job itself, localstack/standin).
func LocalSharedFleetGCP() *GCP {
	g := &GCP{Project: "runnerfleet-local", Region: "us-east1"}
	g.setDefaults()
	return g
}

// validateLocalSharedFleets refuses what the local platform's shared fleets
// cannot have: the local platform declares only their Kubernetes half
// (namespace, token and config Secrets, state claims, the managers' Helm
// releases from local.chartRepository), for the proof of a change while
// jobs run (docs/concepts/shared-fleet.md, Generations); VMs, their
// network, identities, web terminals, KEDA scaling and the fleets'
// Prometheus are the gke platform's.
func (f *Fleet) validateLocalSharedFleets(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if f.Local == nil || f.Local.ChartRepository == "" {
		errs = append(errs, field.Required(Root.Child("local", "chartRepository"), "the local platform's shared fleets take their chart from a loopback chart repository (localstack/chartrepo): set its URL, e.g. http://127.0.0.1:8930"))
	} else if u, err := url.Parse(f.Local.ChartRepository); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, field.Invalid(Root.Child("local", "chartRepository"), f.Local.ChartRepository, "an http(s) URL of a Helm chart repository, e.g. http://127.0.0.1:8930"))
	}
	for i, s := range f.SharedFleets {
		sp := p.Index(i)
		if len(s.VMGroups) > 0 {
			errs = append(errs, field.Forbidden(sp.Child("vmGroups"), "the local platform makes no VMs; remove vmGroups or set platform: gke"))
		}
		if s.WebTerminal != nil {
			errs = append(errs, field.Forbidden(sp.Child("webTerminal"), "the local platform has no load balancers for terminals; remove webTerminal or set platform: gke"))
		}
		for j, g := range s.Groups {
			gp := sp.Child("groups").Index(j)
			if g.Executor != "" && g.Executor != fleetspec.ExecutorDockerMachine {
				errs = append(errs, field.NotSupported(gp.Child("executor"), g.Executor, []string{fleetspec.ExecutorDockerMachine}))
			}
			if g.Scaling.MaxManagers > g.Scaling.MinManagers && g.Scaling.MaxManagers > 1 {
				errs = append(errs, field.Forbidden(gp.Child("scaling", "maxManagers"), "the local platform has no KEDA to scale managers above minManagers; set maxManagers to minManagers or set platform: gke"))
			}
		}
	}
	return errs
}
