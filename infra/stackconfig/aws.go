package stackconfig

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// AWS is the eks platform: a VPC, an EKS cluster with Karpenter, IRSA
// roles per team and an S3 cache bucket.
type AWS struct {
	// Region, for example eu-west-1.
	Region string `json:"region"`
	// Zones are the availability zones of the region to spread subnets over
	// (at least two, for EKS).
	Zones []string `json:"zones"`
	// VPCCIDR is the VPC's range; default 10.0.0.0/16.
	VPCCIDR string `json:"vpcCIDR,omitempty"`
	// PublicSubnetCIDRs and PrivateSubnetCIDRs, one per zone; default cut
	// from VPCCIDR: a private subnet of an eighth of the VPC per zone, and a
	// public one of a 256th (only the NAT gateway and load balancers live
	// there) from the VPC's last eighth.
	PublicSubnetCIDRs  []string `json:"publicSubnetCIDRs,omitempty"`
	PrivateSubnetCIDRs []string `json:"privateSubnetCIDRs,omitempty"`
	// KubernetesVersion of the EKS control plane, for example "1.35".
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// EndpointPublicAccessCIDRs may reach the Kubernetes API from the
	// internet; empty means private endpoint only (pulumi up must then run
	// from inside the VPC or a network peered with it).
	EndpointPublicAccessCIDRs []string `json:"endpointPublicAccessCIDRs,omitempty"`
	// SystemNodes is the small on-demand managed node group for the
	// managers and the platform's pods (the controller, Karpenter):
	// labelled and tainted as the managers' pool (runnerset/resources), so
	// that managers, which must drain rather than die, never run on spot.
	SystemNodes NodeGroup `json:"systemNodes,omitempty"`
	// KarpenterVersion is the Karpenter chart version.
	KarpenterVersion string `json:"karpenterVersion,omitempty"`
	// Tags are added to every AWS resource (the stack tag always is).
	Tags map[string]string `json:"tags,omitempty"`
}

// NodeGroup is a managed node group.
type NodeGroup struct {
	// InstanceTypes, all of one CPU architecture; several, so that the
	// group finds capacity when one type runs short in a zone.
	InstanceTypes []string `json:"instanceTypes,omitempty"`
	Min           int      `json:"min,omitempty"`
	Max           int      `json:"max,omitempty"`
	// Desired is the node count the group starts with (nothing scales a
	// managed node group here); default 2 bounded by min and max.
	Desired int `json:"desired,omitempty"`
	// CapacityType is on-demand, the default and the only value: the
	// managers run here. It does not depend on capacity.allowOnDemand,
	// which is about the teams' job capacity.
	CapacityType string `json:"capacityType,omitempty"`
}

// Defaults of the aws section.
const (
	DefaultVPCCIDR           = "10.0.0.0/16"
	DefaultKubernetesVersion = "1.35"
	// DefaultKarpenterVersion is the chart of the Karpenter release whose
	// APIs (NodePool, EC2NodeClass) runnerset/capacity is built against:
	// keep it equal to github.com/aws/karpenter-provider-aws in go.mod (a
	// test checks).
	DefaultKarpenterVersion = "1.15.0"
	DefaultSystemMin        = 1
	DefaultSystemMax        = 3
	DefaultSystemDesired    = 2

	CapacityTypeSpot     = "spot"
	CapacityTypeOnDemand = "on-demand"
)

// DefaultSystemInstanceTypes are the system nodes' types: two vCPUs and 8
// GiB each, five x86 types.
var DefaultSystemInstanceTypes = []string{"m7i.large", "m6i.large", "m6a.large", "m5.large", "m5a.large"}

// maxDefaultZones is how many zones default subnets can be cut for: the VPC
// is split in eighths, one private eighth per zone and the last eighth for
// the public subnets.
const maxDefaultZones = 7

func (a *AWS) setDefaults() {
	if a.VPCCIDR == "" {
		a.VPCCIDR = DefaultVPCCIDR
	}
	if a.KubernetesVersion == "" {
		a.KubernetesVersion = DefaultKubernetesVersion
	}
	if a.KarpenterVersion == "" {
		a.KarpenterVersion = DefaultKarpenterVersion
	}
	if len(a.PublicSubnetCIDRs) == 0 && len(a.PrivateSubnetCIDRs) == 0 {
		if pub, priv, err := CutSubnets(a.VPCCIDR, len(a.Zones)); err == nil {
			a.PublicSubnetCIDRs, a.PrivateSubnetCIDRs = pub, priv
		}
	}
	n := &a.SystemNodes
	if len(n.InstanceTypes) == 0 {
		n.InstanceTypes = append([]string(nil), DefaultSystemInstanceTypes...)
	}
	if n.Min == 0 {
		n.Min = DefaultSystemMin
	}
	if n.Max == 0 {
		n.Max = max(DefaultSystemMax, n.Min)
	}
	if n.Desired == 0 {
		n.Desired = min(max(DefaultSystemDesired, n.Min), n.Max)
	}
	if n.CapacityType == "" {
		n.CapacityType = CapacityTypeOnDemand
	}
}

// CutSubnets cuts one public and one private subnet per zone from vpc: the
// private subnets are the VPC's first eighths, the public ones /8 bits
// smaller than the VPC, from its last eighth.
func CutSubnets(vpc string, zones int) (public, private []string, err error) {
	p, err := netip.ParsePrefix(vpc)
	if err != nil || !p.Addr().Is4() {
		return nil, nil, fmt.Errorf("%q is not an IPv4 CIDR", vpc)
	}
	if zones < 1 || zones > maxDefaultZones {
		return nil, nil, fmt.Errorf("default subnets can be cut for 1 to %d zones, not %d", maxDefaultZones, zones)
	}
	if p.Bits()+8 > 28 {
		return nil, nil, fmt.Errorf("vpcCIDR /%d is too small to cut a /%d public subnet per zone from (AWS subnets are /28 at the smallest); use /20 or larger", p.Bits(), p.Bits()+8)
	}
	p = p.Masked()
	for i := range zones {
		private = append(private, subnet(p, 3, i).String())
	}
	last := subnet(p, 3, 7)
	for i := range zones {
		public = append(public, subnet(last, 5, i).String())
	}
	return public, private, nil
}

// subnet returns the i-th subnet of p that is bits longer.
func subnet(p netip.Prefix, bits, i int) netip.Prefix {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= uint32(i) << (32 - p.Bits() - bits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), p.Bits()+bits)
}

var (
	regionRE       = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	kubeVersionRE  = regexp.MustCompile(`^1\.[0-9]{2}$`)
	semverRE       = regexp.MustCompile(`^([0-9]+)\.[0-9]+\.[0-9]+$`)
	instanceTypeRE = regexp.MustCompile(`^([a-z]+)-?([0-9]+)([a-z]*)([a-z0-9-]*)\.[a-z0-9-]+$`)
)

// Architecture of an instance type: arm64 for Graviton (a1, and families
// with a g after the generation: m7g, c7gn, im4gn), amd64 for the rest.
// ok is false when it is not an instance type name.
func Architecture(instanceType string) (arch string, ok bool) {
	m := instanceTypeRE.FindStringSubmatch(instanceType)
	if m == nil {
		return "", false
	}
	if m[1] == "a" && m[2] == "1" || strings.Contains(m[3], "g") {
		return "arm64", true
	}
	return "amd64", true
}

// Validate checks the aws section.
func (a *AWS) Validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case a.Region == "":
		errs = append(errs, field.Required(p.Child("region"), "the AWS region to deploy to, for example eu-west-1"))
	case !regionRE.MatchString(a.Region):
		errs = append(errs, field.Invalid(p.Child("region"), a.Region, "an AWS region code such as eu-west-1 or us-east-2 (lower case, not a zone)"))
	}
	errs = append(errs, a.validateZones(p.Child("zones"))...)

	vpc, err := netip.ParsePrefix(a.VPCCIDR)
	vpcOK := err == nil && vpc.Addr().Is4()
	switch {
	case !vpcOK:
		errs = append(errs, field.Invalid(p.Child("vpcCIDR"), a.VPCCIDR, "an IPv4 CIDR such as 10.0.0.0/16"))
	case vpc.Masked() != vpc:
		errs = append(errs, field.Invalid(p.Child("vpcCIDR"), a.VPCCIDR, fmt.Sprintf("host bits are set: write the network address, %s", vpc.Masked())))
		vpcOK = false
	case vpc.Bits() < 16 || vpc.Bits() > 24:
		errs = append(errs, field.Invalid(p.Child("vpcCIDR"), a.VPCCIDR, "AWS allows VPCs from /16 to /28, and a cluster needs room for its pods' IPs: use /16 to /24, for example 10.0.0.0/16"))
		vpcOK = false
	}
	errs = append(errs, a.validateSubnets(p, vpc, vpcOK)...)

	if !kubeVersionRE.MatchString(a.KubernetesVersion) {
		errs = append(errs, field.Invalid(p.Child("kubernetesVersion"), a.KubernetesVersion, "an EKS Kubernetes minor version such as "+DefaultKubernetesVersion+" (no patch, no v)"))
	}
	for i, c := range a.EndpointPublicAccessCIDRs {
		ip := p.Child("endpointPublicAccessCIDRs").Index(i)
		cp, err := netip.ParsePrefix(c)
		switch {
		case err != nil || !cp.Addr().Is4():
			errs = append(errs, field.Invalid(ip, c, "an IPv4 CIDR such as 203.0.113.0/24 (your office or VPN egress)"))
		case cp.Masked() != cp:
			errs = append(errs, field.Invalid(ip, c, fmt.Sprintf("host bits are set: write the network address, %s", cp.Masked())))
		case cp.Bits() == 0:
			errs = append(errs, field.Forbidden(ip, "0.0.0.0/0 opens the Kubernetes API to the whole internet: list the ranges that deploy (office, VPN, CI egress), or remove endpointPublicAccessCIDRs for a private endpoint"))
		}
	}
	errs = append(errs, a.SystemNodes.validate(p.Child("systemNodes"))...)

	if m := semverRE.FindStringSubmatch(a.KarpenterVersion); m == nil {
		errs = append(errs, field.Invalid(p.Child("karpenterVersion"), a.KarpenterVersion, "a Karpenter chart version such as "+DefaultKarpenterVersion+" (no v)"))
	} else if major, _ := strconv.Atoi(m[1]); major < 1 {
		errs = append(errs, field.Invalid(p.Child("karpenterVersion"), a.KarpenterVersion, "Karpenter 1.0 or later: runner capacity uses the karpenter.sh/v1 NodePool and karpenter.k8s.aws/v1 EC2NodeClass APIs; for example "+DefaultKarpenterVersion))
	}
	errs = append(errs, validateTags(p.Child("tags"), a.Tags)...)
	return errs
}

func (a *AWS) validateZones(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(a.Zones) < 2 {
		errs = append(errs, field.Required(p, fmt.Sprintf("at least two availability zones of the region (EKS needs subnets in two), for example [%sa, %sb, %sc]", a.exampleRegion(), a.exampleRegion(), a.exampleRegion())))
	}
	seen := map[string]int{}
	for i, z := range a.Zones {
		if j, ok := seen[z]; ok {
			errs = append(errs, field.Duplicate(p.Index(i), fmt.Sprintf("%s is also zones[%d]: list each zone once", z, j)))
		}
		seen[z] = i
		if !regionRE.MatchString(a.Region) {
			continue // the region's error comes first
		}
		suffix, ok := strings.CutPrefix(z, a.Region)
		if !ok || len(suffix) != 1 || suffix[0] < 'a' || suffix[0] > 'z' {
			errs = append(errs, field.Invalid(p.Index(i), z, fmt.Sprintf("a zone of region %s: the region followed by one letter, like %sa", a.Region, a.Region)))
		}
	}
	return errs
}

func (a *AWS) exampleRegion() string {
	if regionRE.MatchString(a.Region) {
		return a.Region
	}
	return "eu-west-1"
}

func (a *AWS) validateSubnets(p *field.Path, vpc netip.Prefix, vpcOK bool) field.ErrorList {
	var errs field.ErrorList
	if len(a.PublicSubnetCIDRs) == 0 && len(a.PrivateSubnetCIDRs) == 0 {
		if !vpcOK || len(a.Zones) == 0 {
			return nil // the vpcCIDR or zones error says what to fix
		}
		_, _, err := CutSubnets(a.VPCCIDR, len(a.Zones))
		msg := "no default subnets could be cut from vpcCIDR"
		if err != nil {
			msg += ": " + err.Error()
		}
		return field.ErrorList{field.Required(p.Child("privateSubnetCIDRs"), msg+"; list one public and one private subnet CIDR per zone in publicSubnetCIDRs and privateSubnetCIDRs")}
	}
	type named struct {
		path *field.Path
		p    netip.Prefix
	}
	var all []named
	for _, list := range []struct {
		key   string
		cidrs []string
	}{{"publicSubnetCIDRs", a.PublicSubnetCIDRs}, {"privateSubnetCIDRs", a.PrivateSubnetCIDRs}} {
		lp := p.Child(list.key)
		if len(list.cidrs) != len(a.Zones) {
			errs = append(errs, field.Invalid(lp, list.cidrs, fmt.Sprintf("one subnet per zone, in the order of zones: %d zones but %d subnets; add or remove subnets, or leave out both subnet lists to have them cut from vpcCIDR", len(a.Zones), len(list.cidrs))))
		}
		for i, c := range list.cidrs {
			ip := lp.Index(i)
			sp, err := netip.ParsePrefix(c)
			switch {
			case err != nil || !sp.Addr().Is4():
				errs = append(errs, field.Invalid(ip, c, "an IPv4 CIDR such as 10.0.0.0/19"))
				continue
			case sp.Masked() != sp:
				errs = append(errs, field.Invalid(ip, c, fmt.Sprintf("host bits are set: write the network address, %s", sp.Masked())))
				continue
			case sp.Bits() > 28:
				errs = append(errs, field.Invalid(ip, c, "AWS subnets are /28 at the smallest; use a shorter prefix"))
			}
			if vpcOK && (sp.Bits() < vpc.Bits() || !vpc.Contains(sp.Addr())) {
				errs = append(errs, field.Invalid(ip, c, fmt.Sprintf("outside vpcCIDR %s: every subnet must lie inside the VPC; pick a range inside it or widen vpcCIDR", vpc)))
			}
			for _, o := range all {
				if o.p.Overlaps(sp) {
					errs = append(errs, field.Invalid(ip, c, fmt.Sprintf("overlaps %s (%s): subnets may not share addresses; pick disjoint ranges", o.path, o.p)))
				}
			}
			all = append(all, named{ip, sp})
		}
	}
	return errs
}

func (n *NodeGroup) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(n.InstanceTypes) < 2 {
		errs = append(errs, field.Invalid(p.Child("instanceTypes"), n.InstanceTypes, fmt.Sprintf("at least two instance types, so that the group finds capacity when one type runs short; for example %v", DefaultSystemInstanceTypes)))
	}
	seen := map[string]int{}
	archs := map[string]string{}
	for i, t := range n.InstanceTypes {
		ip := p.Child("instanceTypes").Index(i)
		if j, ok := seen[t]; ok {
			errs = append(errs, field.Duplicate(ip, fmt.Sprintf("%s is also instanceTypes[%d]: list each type once", t, j)))
		}
		seen[t] = i
		arch, ok := Architecture(t)
		if !ok {
			errs = append(errs, field.Invalid(ip, t, "an EC2 instance type such as m6i.large or c7g.xlarge (family.size, lower case)"))
			continue
		}
		if _, ok := archs[arch]; !ok {
			archs[arch] = t
		}
	}
	if len(archs) > 1 {
		errs = append(errs, field.Invalid(p.Child("instanceTypes"), n.InstanceTypes, fmt.Sprintf("mixes arm64 (%s) and amd64 (%s) types: a managed node group runs one AMI type; list types of one architecture", archs["arm64"], archs["amd64"])))
	}
	if n.Min < 1 {
		errs = append(errs, field.Invalid(p.Child("min"), n.Min, "at least 1: the controller, Karpenter and the managers run on these nodes"))
	}
	if n.Max > 100 {
		errs = append(errs, field.Invalid(p.Child("max"), n.Max, "at most 100: system nodes carry only the controller, Karpenter and the managers; job capacity comes from Karpenter"))
	}
	if n.Min > n.Max {
		errs = append(errs, field.Invalid(p.Child("min"), n.Min, fmt.Sprintf("greater than max (%d): raise max or lower min", n.Max)))
	} else if n.Desired < n.Min || n.Desired > n.Max {
		errs = append(errs, field.Invalid(p.Child("desired"), n.Desired, fmt.Sprintf("between min (%d) and max (%d)", n.Min, n.Max)))
	}
	errs = append(errs, checkManagersPool(p.Child("capacityType"), n.CapacityType)...)
	return errs
}

// checkManagersPool refuses a managers' pool without on-demand capacity:
// a spot preemption kills every job of the managers on the node.
func checkManagersPool(p *field.Path, capacityType string) field.ErrorList {
	switch capacityType {
	case CapacityTypeOnDemand:
		return nil
	case CapacityTypeSpot:
		return field.ErrorList{field.Forbidden(p, "the managers run on these nodes and must drain their jobs, which a spot preemption (2 minutes' notice on EC2, 30 seconds on GKE) does not allow; remove capacityType (on-demand is the default) or set it to on-demand. Job capacity stays spot whatever this says")}
	}
	return field.ErrorList{field.NotSupported(p, capacityType, []string{CapacityTypeOnDemand})}
}

// CheckManagersPool refuses system nodes that are not on-demand; p is the
// aws section's path. Decode checks it, and the platform checks it again
// for a Fleet built without Decode.
func (a *AWS) CheckManagersPool(p *field.Path) field.ErrorList {
	return checkManagersPool(p.Child("systemNodes", "capacityType"), a.SystemNodes.CapacityType)
}

// reservedTagPrefixes are tag keys AWS, Karpenter or runnerfleet set.
var reservedTagPrefixes = []string{"aws:", "runnerfleet:", "kubernetes.io/cluster/", "karpenter.sh/", "karpenter.k8s.aws/", "eks:"}

// maxUserTags leaves room for runnerfleet's own tags on Karpenter's nodes
// (an EC2NodeClass takes at most 32 tags).
const maxUserTags = 28

func validateTags(p *field.Path, tags map[string]string) field.ErrorList {
	var errs field.ErrorList
	if len(tags) > maxUserTags {
		errs = append(errs, field.TooMany(p, len(tags), maxUserTags))
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		v, kp := tags[k], p.Key(k)
		for _, r := range reservedTagPrefixes {
			if strings.HasPrefix(strings.ToLower(k), r) {
				errs = append(errs, field.Invalid(kp, k, fmt.Sprintf("tag keys starting with %s are set by AWS, Karpenter or runnerfleet; rename the tag", r)))
			}
		}
		if k == "" || len(k) > 128 {
			errs = append(errs, field.Invalid(kp, k, "tag keys are 1 to 128 characters"))
		}
		if len(v) > 256 {
			errs = append(errs, field.Invalid(kp, v, "tag values are at most 256 characters"))
		}
	}
	return errs
}
