package stackconfig

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// GCP is the gke platform: a VPC with Cloud NAT, a GKE cluster with
// Workload Identity and node auto-provisioning, Google service accounts per
// team and a GCS cache bucket.
type GCP struct {
	// Project is the Google Cloud project ID.
	Project string `json:"project"`
	// Region, for example europe-west1.
	Region string `json:"region"`
	// Zones of the region the node pools use; default the region's b, c, d.
	Zones []string `json:"zones,omitempty"`
	// SubnetCIDR is the nodes' range; PodsCIDR and ServicesCIDR are the
	// subnet's secondary ranges; MasterCIDR is the private control plane's
	// /28. None may overlap. Defaults: 10.10.0.0/20, 10.20.0.0/14,
	// 10.24.0.0/20, 172.16.0.0/28.
	SubnetCIDR   string `json:"subnetCIDR,omitempty"`
	PodsCIDR     string `json:"podsCIDR,omitempty"`
	ServicesCIDR string `json:"servicesCIDR,omitempty"`
	MasterCIDR   string `json:"masterCIDR,omitempty"`
	// ReleaseChannel is RAPID, REGULAR (the default), STABLE or EXTENDED.
	ReleaseChannel string `json:"releaseChannel,omitempty"`
	// MasterAuthorizedCIDRs may reach the Kubernetes API's public endpoint;
	// empty means no address outside the VPC may.
	MasterAuthorizedCIDRs []string `json:"masterAuthorizedCIDRs,omitempty"`
	// SystemNodes is the on-demand node pool of the managers and the
	// platform's pods (the controller, KEDA, Prometheus): labelled and
	// tainted as the managers' pool (runnerset/resources), so that
	// managers, which must drain rather than die, never run on spot.
	SystemNodes GKENodePool `json:"systemNodes,omitempty"`
	// Autoprovisioning caps node auto-provisioning.
	Autoprovisioning Autoprovisioning `json:"autoprovisioning,omitempty"`
	// MachineFamilies are the machine families of the teams' ComputeClasses
	// when a team names none, in order of preference; default n2d, n2, e2.
	MachineFamilies []string `json:"machineFamilies,omitempty"`
	// Labels are added to every GCP resource (the stack label always is).
	Labels map[string]string `json:"labels,omitempty"`
}

// GKENodePool is a GKE node pool. Min and Max count nodes across all its
// zones.
type GKENodePool struct {
	// MachineType, default e2-standard-4.
	MachineType string `json:"machineType,omitempty"`
	// Min, default 1: the controller always needs a node.
	Min *int `json:"min,omitempty"`
	// Max, default 3 (or Min, if larger).
	Max *int `json:"max,omitempty"`
	// CapacityType is on-demand, the default and the only value: the
	// managers run here. It does not depend on capacity.allowOnDemand,
	// which is about the teams' job capacity.
	CapacityType string `json:"capacityType,omitempty"`
}

// Autoprovisioning caps GKE node auto-provisioning: the whole cluster's
// nodes, the system pool's included, stay within them.
type Autoprovisioning struct {
	// MaxCPU is the most vCPUs; default 512.
	MaxCPU *int `json:"maxCPU,omitempty"`
	// MaxMemoryGB is the most memory in GB; default 2048.
	MaxMemoryGB *int `json:"maxMemoryGB,omitempty"`
}

// Defaults of the gcp section.
const (
	DefaultGCPSubnetCIDR        = "10.10.0.0/20"
	DefaultGCPPodsCIDR          = "10.20.0.0/14"
	DefaultGCPServicesCIDR      = "10.24.0.0/20"
	DefaultGCPMasterCIDR        = "172.16.0.0/28"
	DefaultGCPReleaseChannel    = "REGULAR"
	DefaultGCPSystemMachineType = "e2-standard-4"
	DefaultGCPSystemMin         = 1
	DefaultGCPSystemMax         = 3
	DefaultGCPMaxCPU            = 512
	DefaultGCPMaxMemoryGB       = 2048
	defaultGCPZoneSuffixes      = "bcd"
)

// Labels runnerfleet puts on every labelable GCP resource, besides the
// stack's own labels.
const (
	GCPLabelStack   = "runnerfleet-stack"
	GCPLabelCluster = "runnerfleet-cluster"
)

// DefaultGCPMachineFamilies are the ComputeClass machine families tried when
// neither the team nor the stack names any: several, so that spot capacity
// is found when one family runs short.
var DefaultGCPMachineFamilies = []string{"n2d", "n2", "e2"}

// GCPReleaseChannels are the GKE release channels a stack may choose.
var GCPReleaseChannels = []string{"RAPID", "REGULAR", "STABLE", "EXTENDED"}

func (g *GCP) setDefaults() {
	if len(g.Zones) == 0 && g.Region != "" {
		for _, z := range defaultGCPZoneSuffixes {
			g.Zones = append(g.Zones, g.Region+"-"+string(z))
		}
	}
	for _, d := range []struct {
		v   *string
		def string
	}{
		{&g.SubnetCIDR, DefaultGCPSubnetCIDR},
		{&g.PodsCIDR, DefaultGCPPodsCIDR},
		{&g.ServicesCIDR, DefaultGCPServicesCIDR},
		{&g.MasterCIDR, DefaultGCPMasterCIDR},
		{&g.ReleaseChannel, DefaultGCPReleaseChannel},
		{&g.SystemNodes.MachineType, DefaultGCPSystemMachineType},
	} {
		if *d.v == "" {
			*d.v = d.def
		}
	}
	if g.SystemNodes.CapacityType == "" {
		g.SystemNodes.CapacityType = CapacityTypeOnDemand
	}
	if g.SystemNodes.Min == nil {
		g.SystemNodes.Min = ptr(DefaultGCPSystemMin)
	}
	if g.SystemNodes.Max == nil {
		g.SystemNodes.Max = ptr(max(DefaultGCPSystemMax, *g.SystemNodes.Min))
	}
	if g.Autoprovisioning.MaxCPU == nil {
		g.Autoprovisioning.MaxCPU = ptr(DefaultGCPMaxCPU)
	}
	if g.Autoprovisioning.MaxMemoryGB == nil {
		g.Autoprovisioning.MaxMemoryGB = ptr(DefaultGCPMaxMemoryGB)
	}
	if len(g.MachineFamilies) == 0 {
		g.MachineFamilies = slices.Clone(DefaultGCPMachineFamilies)
	}
}

func ptr[T any](v T) *T { return &v }

var (
	gcpProject       = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)
	gcpRegion        = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]{1,2}$`)
	gcpMachineType   = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)+$`)
	gcpMachineFamily = regexp.MustCompile(`^[a-z][a-z0-9]*$`)
	gcpLabelKey      = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	gcpLabelValue    = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
	gcpAccountID     = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)
)

// Validate checks the gcp section.
func (g *GCP) Validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case g.Project == "":
		errs = append(errs, field.Required(p.Child("project"), "the Google Cloud project ID, for example my-ci-project"))
	case !gcpProject.MatchString(g.Project):
		errs = append(errs, field.Invalid(p.Child("project"), g.Project, "a project ID (not its name or number): 6 to 30 lower-case letters, digits and '-', starting with a letter, for example my-ci-project"))
	}
	switch {
	case g.Region == "":
		errs = append(errs, field.Required(p.Child("region"), "the region to deploy to, for example europe-west1"))
	case !gcpRegion.MatchString(g.Region):
		errs = append(errs, field.Invalid(p.Child("region"), g.Region, "a region such as europe-west1 or us-central1 (not a zone)"))
	}
	if gcpRegion.MatchString(g.Region) {
		errs = append(errs, g.validateZones(p.Child("zones"))...)
	}
	errs = append(errs, g.validateCIDRs(p)...)
	if !slices.Contains(GCPReleaseChannels, g.ReleaseChannel) {
		errs = append(errs, field.NotSupported(p.Child("releaseChannel"), g.ReleaseChannel, GCPReleaseChannels))
	}
	errs = append(errs, g.SystemNodes.validate(p.Child("systemNodes"))...)
	if m := g.SystemNodes.Max; m != nil && *m >= 1 && *m < len(g.Zones) {
		errs = append(errs, field.Invalid(p.Child("systemNodes", "max"), *m, fmt.Sprintf("the pool starts with one node in each of its %d zones; raise max to at least %d or list fewer zones", len(g.Zones), len(g.Zones))))
	}
	for _, c := range []struct {
		name string
		v    *int
	}{{"maxCPU", g.Autoprovisioning.MaxCPU}, {"maxMemoryGB", g.Autoprovisioning.MaxMemoryGB}} {
		if c.v != nil && *c.v <= 0 {
			errs = append(errs, field.Invalid(p.Child("autoprovisioning", c.name), *c.v, "a cap above 0 on the whole cluster's nodes; leave it out for the default"))
		}
	}
	for i, mf := range g.MachineFamilies {
		if !gcpMachineFamily.MatchString(mf) {
			errs = append(errs, field.Invalid(p.Child("machineFamilies").Index(i), mf, "a machine family such as n2d, n2 or e2 (not a machine type)"))
		}
	}
	errs = append(errs, validateGCPLabels(p.Child("labels"), g.Labels)...)
	return errs
}

func (g *GCP) validateZones(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(g.Zones) == 0 {
		errs = append(errs, field.Required(p, "at least one zone of the region, for example "+g.Region+"-b"))
	}
	seen := map[string]bool{}
	for i, z := range g.Zones {
		rest, ok := strings.CutPrefix(z, g.Region+"-")
		if !ok || len(rest) != 1 || rest[0] < 'a' || rest[0] > 'z' {
			errs = append(errs, field.Invalid(p.Index(i), z, fmt.Sprintf("a zone of region %s, for example %s-b", g.Region, g.Region)))
		} else if seen[z] {
			errs = append(errs, field.Duplicate(p.Index(i), z))
		}
		seen[z] = true
	}
	return errs
}

// gcpRange is one of the network's ranges, by its key.
type gcpRange struct{ key, value string }

// ranges are the four ranges of the cluster's network, by key: the one
// list of them (the checks of the gcp section and of the shared fleets'
// VM ranges, which must clear them, read it).
func (g *GCP) ranges() []gcpRange {
	return []gcpRange{
		{"subnetCIDR", g.SubnetCIDR},
		{"podsCIDR", g.PodsCIDR},
		{"servicesCIDR", g.ServicesCIDR},
		{"masterCIDR", g.MasterCIDR},
	}
}

// validateCIDRs checks the four ranges of the network and that no two of
// them overlap, and the authorized networks of the control plane.
func (g *GCP) validateCIDRs(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	type named struct {
		key    string
		prefix netip.Prefix
	}
	var ranges []named
	for _, r := range g.ranges() {
		pfx, msg := parseCIDR(r.value)
		if msg != "" {
			errs = append(errs, field.Invalid(p.Child(r.key), r.value, msg))
			continue
		}
		if r.key == "masterCIDR" && pfx.Bits() != 28 {
			errs = append(errs, field.Invalid(p.Child(r.key), r.value, "GKE's private control plane takes exactly a /28, for example "+DefaultGCPMasterCIDR))
			continue
		}
		for _, o := range ranges {
			if o.prefix.Overlaps(pfx) {
				errs = append(errs, field.Invalid(p.Child(r.key), r.value, fmt.Sprintf("overlaps %s (%s): the nodes', pods', services' and control plane's ranges must not overlap; choose another range", o.key, o.prefix)))
			}
		}
		ranges = append(ranges, named{r.key, pfx})
	}
	for i, c := range g.MasterAuthorizedCIDRs {
		ip := p.Child("masterAuthorizedCIDRs").Index(i)
		if pfx, msg := parseCIDR(c); msg != "" {
			errs = append(errs, field.Invalid(ip, c, msg))
		} else if pfx.Bits() == 0 {
			errs = append(errs, field.Forbidden(ip, c+" opens the Kubernetes API to the whole internet: list the ranges that deploy (office, VPN, CI egress), or remove masterAuthorizedCIDRs so that only the VPC reaches it"))
		}
	}
	return errs
}

// parseCIDR parses an IPv4 CIDR, returning why it is refused.
func parseCIDR(s string) (netip.Prefix, string) {
	pfx, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return pfx, "an IPv4 CIDR such as 10.10.0.0/20"
	case !pfx.Addr().Is4():
		return pfx, "an IPv4 CIDR: the network is IPv4 only"
	case pfx.Masked() != pfx:
		return pfx, fmt.Sprintf("host bits are set; did you mean %s?", pfx.Masked())
	}
	return pfx, ""
}

func (n GKENodePool) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !gcpMachineType.MatchString(n.MachineType) {
		errs = append(errs, field.Invalid(p.Child("machineType"), n.MachineType, "a Compute Engine machine type such as e2-standard-4 or n2d-standard-8"))
	}
	if n.Min != nil && *n.Min < 1 {
		errs = append(errs, field.Invalid(p.Child("min"), *n.Min, "at least 1: the runnerset-controller and the managers run on these nodes"))
	}
	if n.Max != nil && *n.Max < 1 {
		errs = append(errs, field.Invalid(p.Child("max"), *n.Max, "at least 1"))
	}
	if n.Min != nil && n.Max != nil && *n.Min > *n.Max {
		errs = append(errs, field.Invalid(p.Child("min"), *n.Min, fmt.Sprintf("more than max (%d); lower min or raise max", *n.Max)))
	}
	errs = append(errs, checkManagersPool(p.Child("capacityType"), n.CapacityType)...)
	return errs
}

func validateGCPLabels(p *field.Path, labels map[string]string) field.ErrorList {
	var errs field.ErrorList
	if len(labels) > 60 {
		errs = append(errs, field.TooMany(p, len(labels), 60))
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := labels[k]
		switch {
		case k == GCPLabelStack || k == GCPLabelCluster:
			errs = append(errs, field.Forbidden(p.Key(k), "runnerfleet sets this label itself; remove it"))
		case !gcpLabelKey.MatchString(k):
			errs = append(errs, field.Invalid(p.Key(k), k, "a GCP label key: lower-case letters, digits, '_' and '-', starting with a letter, at most 63 characters"))
		}
		if !gcpLabelValue.MatchString(v) {
			errs = append(errs, field.Invalid(p.Key(k), v, "a GCP label value: lower-case letters, digits, '_' and '-', at most 63 characters"))
		}
	}
	return errs
}

// ValidateGKETeams checks what the gke platform needs of the teams: each team
// with an identity gets a Google service account named by
// naming.GCPServiceAccountID, whose 30-character limit bounds the namespace.
// It sees the whole fleet, which GCP.Validate does not; the gke platform
// calls it before declaring any resource.
func ValidateGKETeams(f *Fleet) field.ErrorList {
	if f.Platform != PlatformGKE {
		return nil
	}
	var errs field.ErrorList
	ids := map[string]int{}
	for i, t := range f.Teams {
		if !t.WantsIdentity(f.Platform) {
			continue
		}
		tp := Root.Child("teams").Index(i)
		id := naming.For(t.Namespace, t.Name).GCPServiceAccountID(f.ClusterName)
		if !gcpAccountID.MatchString(id) {
			errs = append(errs, field.Invalid(tp.Child("namespace"), t.Namespace, fmt.Sprintf(
				"the team's Google service account is named <namespace>-<hash>, which allows a namespace of at most %d characters starting with a letter; use a shorter namespace, or set identity: false",
				naming.MaxGCPNamespace)))
			continue
		}
		if j, ok := ids[id]; ok {
			errs = append(errs, field.Duplicate(tp.Child("name"), fmt.Sprintf("%s/%s: its service account ID %s is also teams[%d]'s; rename the RunnerSet", t.Namespace, t.Name, id, j)))
		}
		ids[id] = i
	}
	return errs
}
