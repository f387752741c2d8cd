package stackconfig

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

var (
	vmGroupName    = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$`)
	windowsVersion = regexp.MustCompile(`^[0-9a-z]([0-9a-z._-]{0,30}[0-9a-z])?$`)
)

// VMGroup finds the VM group name of the stack's shared fleets: the
// group, its fleet and its key (nil when there is no such group).
func (f *Fleet) VMGroup(name string) (fleetspec.VMGroup, fleetspec.SharedFleet, *field.Path) {
	for i, s := range f.SharedFleets {
		for j, g := range s.VMGroups {
			if g.Name == name {
				return g, s, Root.Child("sharedFleets").Index(i).Child("vmGroups").Index(j)
			}
		}
	}
	return fleetspec.VMGroup{}, fleetspec.SharedFleet{}, nil
}

// VMGroupNames are the names of the stack's VM groups, in stack order.
func (f *Fleet) VMGroupNames() []string {
	var out []string
	for _, s := range f.SharedFleets {
		for _, g := range s.VMGroups {
			out = append(out, g.Name)
		}
	}
	return out
}

// validateVMGroups checks every fleet's vmGroups (their defaults are
// filled: setSharedFleetDefaults ran) and that their names are unique in
// the stack: fleet rotate --group finds a group by its name alone, and its
// VMs' runnerfleet-group label is the name.
func (f *Fleet) validateVMGroups(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]string{}
	for i, s := range f.SharedFleets {
		for j := range s.VMGroups {
			gp := p.Index(i).Child("vmGroups").Index(j)
			if osVersionValid(s.VMGroups[j]) {
				errs = append(errs, resolveVMGroupImage(&f.SharedFleets[i].VMGroups[j], gp)...)
			}
			g := f.SharedFleets[i].VMGroups[j]
			if other, ok := seen[g.Name]; ok && g.Name != "" {
				errs = append(errs, field.Duplicate(gp.Child("name"), fmt.Sprintf("%s: also %s's name; fleet rotate --group finds a group by its name, so give each its own", g.Name, other)))
			}
			seen[g.Name] = gp.String()
			errs = append(errs, f.validateVMGroup(s, g, gp)...)
		}
	}
	return errs
}

// osVersionValid reports whether g's os, and its windowsVersion on
// windows, are valid (validateVMGroup refuses them otherwise).
func osVersionValid(g fleetspec.VMGroup) bool {
	switch g.OS {
	case fleetspec.OSWindows:
		return windowsVersion.MatchString(g.WindowsVersion)
	case fleetspec.OSLinux:
		return g.WindowsVersion == ""
	}
	return false
}

func (f *Fleet) validateVMGroup(s fleetspec.SharedFleet, g fleetspec.VMGroup, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case g.Name == "":
		errs = append(errs, field.Required(p.Child("name"), "the group's name, for example windows-2022: its VMs are <name>-<color>-<n>, labelled runnerfleet-group=<name>"))
	case !vmGroupName.MatchString(g.Name):
		errs = append(errs, field.Invalid(p.Child("name"), g.Name, "lower-case letters, digits and '-', starting with a letter, at most 40 characters (it names VMs, a label and firewall rules)"))
	default:
		for _, in := range g.Ingress() {
			if n := in.FirewallName(f.ClusterName, g.Name); len(n) > maxGCEName {
				errs = append(errs, field.Invalid(p.Child("name"), g.Name, fmt.Sprintf("names the firewall rule %s, which GCE allows up to %d characters; shorten the group's name or the clusterName", n, maxGCEName)))
				break
			}
		}
	}
	switch g.OS {
	case fleetspec.OSWindows:
		switch {
		case g.WindowsVersion == "":
			errs = append(errs, field.Required(p.Child("windowsVersion"), "the Windows Server version the group's image runs, for example 2022 (its runners' tags and images are named from it)"))
		case !windowsVersion.MatchString(g.WindowsVersion):
			errs = append(errs, field.Invalid(p.Child("windowsVersion"), g.WindowsVersion, "a Windows Server version such as 2019, 2022 or 2025 (lower-case letters, digits, '.', '_' and '-')"))
		}
	case fleetspec.OSLinux:
		if g.WindowsVersion != "" {
			errs = append(errs, field.Forbidden(p.Child("windowsVersion"), "only for os: windows; remove it"))
		}
		if len(g.RDPSourceRanges) > 0 {
			errs = append(errs, field.Forbidden(p.Child("rdpSourceRanges"), "Linux managers have no Remote Desktop; remove it (adminSourceRanges reach SSH)"))
		}
	case "":
		errs = append(errs, field.Required(p.Child("os"), "windows or linux"))
	default:
		errs = append(errs, field.NotSupported(p.Child("os"), g.OS, fleetspec.VMGroupOSes))
	}
	if !gcpMachineType.MatchString(g.MachineType) {
		errs = append(errs, field.Invalid(p.Child("machineType"), g.MachineType, "a Compute Engine machine type such as n2d-standard-8"))
	}
	if g.Image == "" && g.ImageInputs == nil {
		errs = append(errs, field.Required(p.Child("image"), "the image the managers boot: an image name, family/<family>, or projects/<project>/global/images/<image>"))
	}
	if g.Count < 1 || g.Count > fleetspec.MaxVMGroupCount {
		errs = append(errs, field.Invalid(p.Child("count"), g.Count, fmt.Sprintf("between 1 and %d managers; leave it out for %d", fleetspec.MaxVMGroupCount, fleetspec.DefaultVMGroupCount)))
	}
	if len(g.Zones) == 0 {
		errs = append(errs, field.Required(p.Child("zones"), "at least one zone of the region (the gcp section's zones give the default)"))
	}
	seen := map[string]bool{}
	for k, z := range g.Zones {
		rest, ok := strings.CutPrefix(z, f.GCP.Region+"-")
		switch {
		case !ok || len(rest) != 1 || rest[0] < 'a' || rest[0] > 'z':
			errs = append(errs, field.Invalid(p.Child("zones").Index(k), z, fmt.Sprintf("a zone of region %s, for example %s-b: the VMs live in the fleet's subnetwork there", f.GCP.Region, f.GCP.Region)))
		case seen[z]:
			errs = append(errs, field.Duplicate(p.Child("zones").Index(k), z))
		}
		seen[z] = true
	}
	switch {
	case g.TokenConfigKey == "":
		errs = append(errs, field.Required(p.Child("tokenConfigKey"), "the config secret holding the runner's authentication token: pulumi config set --secret <key> glrt-…"))
	case !configKey.MatchString(g.TokenConfigKey):
		errs = append(errs, field.Invalid(p.Child("tokenConfigKey"), g.TokenConfigKey, "a config key name such as windowsRunnerToken (letters, digits, '-' and '_'), set with pulumi config set --secret"))
	}
	errs = append(errs, validateSourceRanges(p.Child("adminSourceRanges"), g.AdminSourceRanges,
		"would open "+adminWhat(g)+" to the whole internet: list the operators' and fleet rotate's ranges (a VPN, a bastion, CI egress)")...)
	errs = append(errs, validateSourceRanges(p.Child("rdpSourceRanges"), g.RDPSourceRanges, "")...)
	if d := g.DrainTimeout; d != nil && d.Duration < s.JobTimeoutOrDefault() {
		errs = append(errs, field.Invalid(p.Child("drainTimeout"), d.Duration.String(), fmt.Sprintf(
			"below the fleet's jobTimeout (%s): a job could still run when fleet rotate stops waiting; leave it out for %s", s.JobTimeoutOrDefault(), g.DrainTimeoutOr(s.JobTimeoutOrDefault()))))
	}
	if n := g.Notify; n != nil {
		switch {
		case n.WebhookURLConfigKey == "":
			errs = append(errs, field.Required(p.Child("notify", "webhookURLConfigKey"), "the config secret holding the webhook's URL: pulumi config set --secret <key> https://hooks.slack.com/…"))
		case !configKey.MatchString(n.WebhookURLConfigKey):
			errs = append(errs, field.Invalid(p.Child("notify", "webhookURLConfigKey"), n.WebhookURLConfigKey, "a config key name such as rotationWebhookURL (letters, digits, '-' and '_'), set with pulumi config set --secret"))
		}
		if !slices.Contains(fleetspec.NotifyFormats, n.Format) {
			errs = append(errs, field.NotSupported(p.Child("notify", "format"), n.Format, fleetspec.NotifyFormats))
		}
	}
	return errs
}

// adminWhat says what a group's admin ranges reach.
func adminWhat(g fleetspec.VMGroup) string {
	if g.IsWindows() {
		return "WinRM, the runner's metrics and windows_exporter"
	}
	return "SSH, the runner's metrics and node_exporter"
}

// validateSourceRanges checks firewall source ranges (IPv4 or IPv6 CIDRs);
// everywhere, when not "", is the message refusing 0.0.0.0/0 and ::/0.
func validateSourceRanges(p *field.Path, ranges []string, everywhere string) field.ErrorList {
	var errs field.ErrorList
	for i, c := range ranges {
		pfx, err := netip.ParsePrefix(c)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p.Index(i), c, "a CIDR such as 203.0.113.0/24 or 2001:db8::/48"))
		case pfx.Masked() != pfx:
			errs = append(errs, field.Invalid(p.Index(i), c, fmt.Sprintf("host bits are set; did you mean %s?", pfx.Masked())))
		case pfx.Bits() == 0 && everywhere != "":
			errs = append(errs, field.Forbidden(p.Index(i), c+" "+everywhere))
		}
	}
	return errs
}
