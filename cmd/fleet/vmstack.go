package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
)

// rotateStack are fleet rotate's flags that read a VM group from a stack
// config: --stack, --config and --runner-token-file.
type rotateStack struct {
	stack, config, tokenFile string
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
}

// apply fills in s what the stack's VM group r.Group says, except where a
// flag was given (set, by flag name): a flag overrides the stack, and
// fleet rotate says so. What no flag sets comes from the stack alone: the
// network, the subnetwork and the service account of the new VMs, and the
// runner token (--runner-token-file when the stack's is a secret fleet
// cannot decrypt).
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
	from := func(flag, what, stackValue string, fill func()) {
		if set[flag] {
			fmt.Fprintf(stderr, "fleet rotate: --%s overrides %s.%s (%s)\n", flag, key, what, stackValue)
			return
		}
		fill()
	}
	from("project", "project (gcp.project)", g.Project, func() { s.cloud.project = g.Project })
	from("zones", "zones", strings.Join(g.Zones, ","), func() { s.cloud.zones = strings.Join(g.Zones, ",") })
	from("zone", "zones", strings.Join(g.Zones, ","), func() { r.Zones, r.Template.Zone = g.Zones, g.Zones[0] })
	from("image", "image", g.Image, func() { r.Template.Image = g.Image })
	from("machine-type", "machineType", g.MachineType, func() { r.Template.MachineType = g.MachineType })
	from("count", "count", fmt.Sprint(g.Count), func() { r.Count = g.Count })
	from("job-timeout", "jobTimeout of its fleet", fleet.JobTimeoutOrDefault().String(), func() { *s.jobTimeout = fleet.JobTimeoutOrDefault() })
	from("drain-timeout", "drainTimeout", g.DrainTimeoutOr(fleet.JobTimeoutOrDefault()).String(), func() {
		r.DrainTimeout = g.DrainTimeoutOr(fleet.JobTimeoutOrDefault())
	})
	s.cloud.provider = "gce"
	r.Template.Network, r.Template.Subnetwork = g.Network, g.Subnetwork
	r.Template.ServiceAccount = fleetspec.VMGroupServiceAccountEmail(g.Project, f.ClusterName, g.Name)

	token, err := o.runnerToken(v, g, key.Child("tokenConfigKey").String())
	if err != nil {
		return err
	}
	r.Template.Metadata[vmfleet.RunnerTokenMetadataKey] = token

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

// runnerToken is the group's runner token: --runner-token-file, else the
// stack file's plain value of its config key. A secure value is not
// decrypted: fleet asks for the file.
func (o rotateStack) runnerToken(v *stackValues, g fleetspec.VMGroup, path string) (string, error) {
	var token string
	switch {
	case o.tokenFile != "":
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--runner-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		path = "--runner-token-file " + o.tokenFile
	case v.secure[g.TokenConfigKey]:
		return "", fmt.Errorf("%s: config key runnerfleet:%s is a secret, which fleet does not decrypt: give the token in a file, "+
			"fleet rotate --runner-token-file <(pulumi config get %s --stack %s) …; nothing was created or drained", path, g.TokenConfigKey, g.TokenConfigKey, o.stack)
	default:
		t, ok := v.plain[g.TokenConfigKey]
		if !ok {
			return "", fmt.Errorf("%s: config key runnerfleet:%s is not set: pulumi config set --secret %s <glrt-token> --stack %s, then give it with --runner-token-file; nothing was created or drained",
				path, g.TokenConfigKey, g.TokenConfigKey, o.stack)
		}
		token = t
	}
	if !gitlabrunner.TokenFormat.MatchString(token) {
		return "", fmt.Errorf("%s: not a runner token (8 to 512 letters, digits, '.', '_' or '-', such as glrt-…); nothing was created or drained", path)
	}
	return token, nil
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
