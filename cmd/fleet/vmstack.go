package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
)

// rotateStack are fleet rotate's flags that read a VM group from a stack
// config: --stack and --config.
type rotateStack struct {
	stack, config string
}

// rotateSettings are the settings of fleet rotate that a stack's VM group
// gives: the rotation itself, the cloud, the notification and the jobs'
// timeout.
type rotateSettings struct {
	r            *vmfleet.Rotation
	cloud        *cloudFlags
	webhook      *string
	notifyFormat *string
	jobTimeout   *time.Duration
	// image is what the group says of its image, for the image and tag
	// checks.
	image *stackImage
}

// stackImage is what a stack's VM group says of its image: its inputs
// (nil without imageInputs) at key, and its runners' OS, version and tags.
type stackImage struct {
	inputs        *vmimage.Inputs
	key           string
	os, osVersion string
	tags          []string
}

// apply fills in s what the stack's VM group r.Group says, except where a
// flag was given (set, by flag name): a flag overrides the stack, and
// fleet rotate says so. What no flag sets comes from the stack alone: the
// network, the subnetwork and the service account of the new VMs, and the
// name of the group's runner token secret, which the program wrote and
// only that account may read (the token itself never passes through
// fleet).
func (o rotateStack) apply(s rotateSettings, set map[string]bool, stderr io.Writer) error {
	r := s.r
	b, err := stackConfigBytes(common{stack: o.stack, config: o.config})
	if err != nil {
		return err
	}
	v, err := parseStack(o.stack, b)
	if err != nil {
		return err
	}
	f := v.fleet
	names := f.VMGroupNames()
	if r.Group == "" {
		if len(names) == 0 {
			return fmt.Errorf("--stack %s declares no VM group (sharedFleets[].vmGroups): nothing to rotate", o.stack)
		}
		return fmt.Errorf("--stack %s needs --group, the VM group to rotate: %s", o.stack, strings.Join(names, ", "))
	}
	g, fleet, key := f.VMGroup(r.Group)
	switch {
	case key == nil && len(names) == 0:
		return fmt.Errorf("--group %s: stack %s declares no VM group (sharedFleets[].vmGroups); nothing was created or drained", r.Group, o.stack)
	case key == nil:
		return fmt.Errorf("--group %s: stack %s has no such VM group; its VM groups are %s", r.Group, o.stack, strings.Join(names, ", "))
	case set["windows"]:
		return fmt.Errorf("--windows rotates the Windows shared runners given by flags; with --stack, --group %s names the stack's group, whose os is %s: drop --windows", r.Group, g.OS)
	case set["provider"] && s.cloud.provider != "gce":
		return fmt.Errorf("--provider %s: the VM groups of stack %s run on GCE (the gke platform); drop --provider", s.cloud.provider, o.stack)
	}
	// A flag given overrides the stack's value, and is said to.
	fromKey := func(flag, keyPath, stackValue string, fill func()) {
		if set[flag] {
			fmt.Fprintf(stderr, "fleet rotate: --%s overrides %s (%s)\n", flag, keyPath, stackValue)
			return
		}
		fill()
	}
	from := func(flag, what, stackValue string, fill func()) {
		fromKey(flag, key.String()+"."+what, stackValue, fill)
	}
	fromKey("project", stackconfig.Root.Child("gcp", "project").String(), g.Project, func() { s.cloud.project = g.Project })
	from("zones", "zones", strings.Join(g.Zones, ","), func() { s.cloud.zones = strings.Join(g.Zones, ",") })
	from("zone", "zones", strings.Join(g.Zones, ","), func() { r.Zones, r.Template.Zone = g.Zones, g.Zones[0] })
	*s.image = stackImage{inputs: stackconfig.VMGroupImageInputs(g), key: key.Child("imageInputs").String(), os: g.OS, tags: g.Tags}
	if in := s.image.inputs; in != nil {
		s.image.osVersion = in.OSVersion
		for _, f := range slices.Sorted(maps.Keys(set)) {
			if strings.HasPrefix(f, "image-") {
				return fmt.Errorf("--%s: the image's inputs are %s; drop the --image-* flags (nothing was created or drained)", f, s.image.key)
			}
		}
		// The image is the name the inputs give; an --image flag must be
		// that image, which fleet rotate checks as it checks the flags'.
		if !set["image"] {
			r.Template.Image = g.Image
		}
	} else {
		s.image.osVersion = g.WindowsVersion
		from("image", "image", g.Image, func() { r.Template.Image = g.Image })
	}
	from("machine-type", "machineType", g.MachineType, func() { r.Template.MachineType = g.MachineType })
	from("count", "count", fmt.Sprint(g.Count), func() { r.Count = g.Count })
	fleetKey := stackconfig.Root.Child("sharedFleets")
	for i, sf := range f.SharedFleets {
		if sf.Name == fleet.Name {
			fleetKey = fleetKey.Index(i)
		}
	}
	fromKey("job-timeout", fleetKey.Child("jobTimeout").String(), fleet.JobTimeoutOrDefault().String(), func() { *s.jobTimeout = fleet.JobTimeoutOrDefault() })
	from("drain-timeout", "drainTimeout", g.DrainTimeoutOr(fleet.JobTimeoutOrDefault()).String(), func() {
		r.DrainTimeout = g.DrainTimeoutOr(fleet.JobTimeoutOrDefault())
	})
	s.cloud.provider = "gce"
	r.Template.Network, r.Template.Subnetwork = g.Network, g.Subnetwork
	r.Template.ServiceAccount = fleetspec.VMGroupServiceAccountEmail(g.Project, f.ClusterName, g.Name)

	r.Template.Metadata[vmfleet.RunnerTokenSecretMetadataKey] = fleetspec.VMGroupTokenSecret(g.Project, f.ClusterName, g.Name)

	if n := g.Notify; n != nil {
		from("notify-format", "notify.format", n.Format, func() { *s.notifyFormat = n.Format })
		if !set["webhook"] {
			url, err := o.webhookURL(v, n, key.Child("notify", "webhookURLConfigKey").String())
			if err != nil {
				return err
			}
			*s.webhook = url
		}
	}
	fmt.Fprintf(stderr, "fleet rotate: VM group %s of shared fleet %s (stack %s): %s %s, %d on %s in %s\n",
		g.Name, fleet.Name, o.stack, g.OS, r.Template.Image, r.Count, r.Template.MachineType, strings.Join(zonesOf(r), ", "))
	return nil
}

// zonesOf are the zones the rotation's new VMs go to.
func zonesOf(r *vmfleet.Rotation) []string {
	if len(r.Zones) > 0 {
		return r.Zones
	}
	return []string{r.Template.Zone}
}

// webhookURL is the group's notification webhook from the stack file's
// plain value of its config key; a secure value asks for --webhook.
func (o rotateStack) webhookURL(v *stackValues, n *fleetspec.VMGroupNotify, path string) (string, error) {
	if v.secure[n.WebhookURLConfigKey] {
		return "", fmt.Errorf("%s: config key runnerfleet:%s is a secret, which fleet does not decrypt: give the URL with --webhook \"$(pulumi config get %s --stack %s)\"; nothing was created or drained",
			path, n.WebhookURLConfigKey, n.WebhookURLConfigKey, o.stack)
	}
	url, ok := v.plain[n.WebhookURLConfigKey]
	if !ok || url == "" {
		return "", fmt.Errorf("%s: config key runnerfleet:%s is not set: pulumi config set --secret %s https://… --stack %s, then give it with --webhook; nothing was created or drained",
			path, n.WebhookURLConfigKey, n.WebhookURLConfigKey, o.stack)
	}
	return url, nil
}
