package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"google.golang.org/api/option"

	"github.com/runnerfleet/runnerfleet/providers"
	rfaws "github.com/runnerfleet/runnerfleet/providers/aws"
	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// cloudFlags select the cloud of VM fleet commands.
type cloudFlags struct {
	provider string
	project  string
	zones    string
	region   string
	endpoint string
}

func (c *cloudFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&c.provider, "provider", "gce", "the cloud: gce or ec2")
	fs.StringVar(&c.project, "project", os.Getenv("GOOGLE_CLOUD_PROJECT"), "GCE project ($GOOGLE_CLOUD_PROJECT)")
	fs.StringVar(&c.zones, "zones", "", "comma-separated zones to cover (GCE; default every zone)")
	fs.StringVar(&c.region, "region", os.Getenv("AWS_REGION"), "EC2 region ($AWS_REGION)")
	fs.StringVar(&c.endpoint, "endpoint", "", "API endpoint instead of the cloud's own (a test server)")
}

// compute opens the cloud. GCE uses Application Default Credentials; EC2
// takes $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY and $AWS_SESSION_TOKEN.
func (c *cloudFlags) compute(ctx context.Context) (providers.Compute, error) {
	switch c.provider {
	case "gce":
		if c.project == "" {
			return nil, errors.New("--project is required with --provider gce (or set GOOGLE_CLOUD_PROJECT)")
		}
		var opts []option.ClientOption
		if c.endpoint != "" {
			opts = append(opts, option.WithEndpoint(c.endpoint), option.WithoutAuthentication())
		}
		var zones []string
		if c.zones != "" {
			zones = strings.Split(c.zones, ",")
		}
		return gcp.New(ctx, c.project, zones, opts...)
	case "ec2":
		if c.region == "" {
			return nil, errors.New("--region is required with --provider ec2 (or set AWS_REGION)")
		}
		id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		if id == "" || secret == "" {
			return nil, errors.New("--provider ec2 needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials)")
		}
		creds := aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: os.Getenv("AWS_SESSION_TOKEN"), Source: "environment"}
		cfg := aws.Config{Region: c.region, Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds, nil })}
		if c.endpoint != "" {
			cfg.BaseEndpoint = aws.String(c.endpoint)
		}
		return rfaws.New(cfg), nil
	}
	return nil, fmt.Errorf("--provider %q is not one of gce, ec2", c.provider)
}

// labelFlag collects repeated key=value flags.
type labelFlag map[string]string

func (l labelFlag) String() string { return fmt.Sprint(map[string]string(l)) }

func (l labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", v)
	}
	l[k] = val
	return nil
}

// listFlag collects repeated values.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func rotate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleet rotate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf cloudFlags
	cf.bind(fs)
	var (
		r       = vmfleet.Rotation{Template: providers.InstanceSpec{Labels: map[string]string{}, Metadata: map[string]string{}}}
		webhook string
		windows bool
	)
	fs.StringVar(&r.Group, "group", "", "the manager group to rotate (its VMs carry "+vmfleet.LabelGroup+"=<group>)")
	fs.StringVar(&r.Prefix, "prefix", "", "prefix of the new VMs' names (default: the group)")
	fs.BoolVar(&windows, "windows", false, "Windows shared runner managers: group "+vmfleet.WindowsGroup+", prefix "+vmfleet.WindowsPrefix)
	fs.StringVar(&r.Template.Image, "image", "", "the image the new color boots (GCE image or EC2 AMI ID)")
	fs.StringVar(&r.Template.MachineType, "machine-type", "", "machine type of the new color (GCE) or instance type (EC2)")
	fs.StringVar(&r.Template.Zone, "zone", "", "zone of the new color")
	fs.BoolVar(&r.Template.Spot, "spot", false, "run the new managers on spot capacity (managers rarely should)")
	fs.Var(labelFlag(r.Template.Labels), "label", "key=value label of the new VMs (repeatable)")
	fs.Var(labelFlag(r.Template.Metadata), "metadata", "key=value metadata of the new VMs, e.g. startup-script or user-data (repeatable)")
	fs.IntVar(&r.Count, "count", 0, "number of new managers (default: as many as the old color has)")
	fs.DurationVar(&r.HealthTimeout, "health-timeout", 15*time.Minute, "how long the new color may take to come up")
	fs.DurationVar(&r.DrainTimeout, "drain-timeout", 2*time.Hour, "how long the old color's jobs may take to finish")
	fs.DurationVar(&r.Poll, "poll", 10*time.Second, "how often to look")
	fs.StringVar(&webhook, "webhook", "", "URL to POST the rotation's report to, on success and on failure")
	if err := parse(fs, args); err != nil {
		return err
	}
	if windows {
		if r.Group == "" {
			r.Group = vmfleet.WindowsGroup
		}
		if r.Prefix == "" {
			r.Prefix = vmfleet.WindowsPrefix
		}
	}
	var missing []string
	for flagName, v := range map[string]string{"--group": r.Group, "--image": r.Template.Image, "--zone": r.Template.Zone, "--machine-type": r.Template.MachineType} {
		if v == "" {
			missing = append(missing, flagName)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "fleet rotate: %s required\n", strings.Join(missing, ", "))
		return errUsage
	}
	if r.Prefix == "" {
		r.Prefix = r.Group
	}
	c, err := cf.compute(ctx)
	if err != nil {
		return err
	}
	r.Compute = c
	r.Progress = stdout
	if webhook != "" {
		r.Notify = vmfleet.Webhook(webhook, stderr)
	}
	rep, err := r.Run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Rotation of %s %s in %s\n", r.Group, rep.Result, rep.Duration.Round(time.Second))
	return nil
}

func gc(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleet gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf cloudFlags
	cf.bind(fs)
	g := vmfleet.GC{Autoscaled: map[string]string{}}
	var (
		pattern  string
		managers listFlag
		families listFlag
	)
	fs.Var(labelFlag(g.Autoscaled), "autoscaled", "key=value label of autoscaled VMs (repeatable; default runnerfleet-autoscaled=true)")
	fs.StringVar(&pattern, "name-pattern", `^runner-[a-z0-9]+-(.+)-\d+-\d+$`, "regexp naming autoscaled VMs without a manager label; its first group is the manager")
	fs.Var(&managers, "manager", "a manager that exists besides the VMs labelled "+vmfleet.LabelRole+"="+vmfleet.RoleManager+" (repeatable), e.g. a Kubernetes manager")
	fs.DurationVar(&g.Grace, "grace", time.Hour, "spare VMs younger than this")
	fs.Var(&families, "image-family", "image family to prune (repeatable)")
	fs.IntVar(&g.Keep, "keep", 3, "newest images of each family to keep")
	fs.BoolVar(&g.Apply, "apply", false, "delete what was found; without it, fleet gc only shows it")
	if err := parse(fs, args); err != nil {
		return err
	}
	if len(g.Autoscaled) == 0 {
		g.Autoscaled["runnerfleet-autoscaled"] = "true"
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return fmt.Errorf("--name-pattern: %w", err)
	}
	if re.NumSubexp() < 1 {
		return errors.New("--name-pattern needs a group that captures the manager's name")
	}
	g.NamePattern = re
	g.ImageFamilies = families
	c, err := cf.compute(ctx)
	if err != nil {
		return err
	}
	g.Compute = c
	g.Progress = stdout
	g.Managers = func(ctx context.Context) (map[string]bool, error) {
		out := map[string]bool{}
		for _, m := range managers {
			out[m] = true
		}
		vms, err := c.ListInstances(ctx, map[string]string{vmfleet.LabelRole: vmfleet.RoleManager})
		if err != nil {
			return nil, err
		}
		for _, vm := range vms {
			out[vm.Name] = true
		}
		return out, nil
	}
	_, err = g.Run(ctx)
	return err
}
