package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/api/option"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/providers"
	rfaws "github.com/runnerfleet/runnerfleet/providers/aws"
	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
)

// cloudFlags select the cloud of VM fleet commands.
type cloudFlags struct {
	provider string
	project  string
	zones    string
	region   string
	profile  string
	endpoint string
}

func (c *cloudFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&c.provider, "provider", "gce", "the cloud: gce or ec2")
	fs.StringVar(&c.project, "project", os.Getenv("GOOGLE_CLOUD_PROJECT"), "GCE project ($GOOGLE_CLOUD_PROJECT)")
	fs.StringVar(&c.zones, "zones", "", "comma-separated zones to cover (GCE; default every zone)")
	fs.StringVar(&c.region, "region", "", "EC2 region (default $AWS_REGION or the profile's)")
	fs.StringVar(&c.profile, "profile", "", "EC2: shared config profile (default $AWS_PROFILE)")
	fs.StringVar(&c.endpoint, "endpoint", "", "API endpoint instead of the cloud's own (a test server)")
}

// compute opens the cloud. GCE uses Application Default Credentials
// ($GOOGLE_APPLICATION_CREDENTIALS, gcloud's, Workload Identity, the VM's
// service account); EC2 the AWS SDK's default chain (environment, shared
// config and profiles, SSO, web identity/IRSA, container, instance role).
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
		cfg, err := rfaws.LoadConfig(ctx, rfaws.ConfigOptions{Region: c.region, Profile: c.profile, Endpoint: c.endpoint})
		if err != nil {
			return nil, fmt.Errorf("--provider ec2: %w (check --profile and $AWS_PROFILE)", err)
		}
		if cfg.Region == "" {
			return nil, errors.New("--region is required with --provider ec2 (or set AWS_REGION, or a region in the profile)")
		}
		if err := rfaws.CheckCredentials(ctx, cfg); err != nil {
			return nil, fmt.Errorf("--provider ec2: %w", err)
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
		r            = vmfleet.Rotation{Template: providers.InstanceSpec{Labels: map[string]string{}, Metadata: map[string]string{}}}
		webhook      string
		notifyFormat string
		windows      bool
		health       string
		jobTimeout   time.Duration
		glURL        string
		glTokenF     string
		glRunner     int64
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
	fs.StringVar(&health, "health", "runner", "what makes a new VM healthy: runner (its runner's metrics on :"+strconv.Itoa(gitlabrunner.MetricsPort)+" export "+vmfleet.MetricVersionInfo+" and count a job request GitLab answered) or running (the cloud says RUNNING; only for images without a runner)")
	fs.StringVar(&glURL, "gitlab-url", "", "with --gitlab-token-file and --gitlab-runner-id: a new VM is healthy only once GitLab records its runner (by the system_id its metrics carry) as an online manager of that runner that contacted GitLab after the VM was created")
	fs.StringVar(&glTokenF, "gitlab-token-file", "", "file holding a GitLab token that may read the runner (scope read_api, api or manage_runner); a file, so the token is in no shell history or process list")
	fs.Int64Var(&glRunner, "gitlab-runner-id", 0, "the runner ID the group's managers authenticate as")
	fs.DurationVar(&r.Settle, "settle", 2*time.Minute, "how long every new VM must stay healthy before the old color drains")
	fs.DurationVar(&r.HealthTimeout, "health-timeout", 15*time.Minute, "how long the new color may take to become healthy; a new VM that never does is deleted")
	fs.DurationVar(&jobTimeout, "job-timeout", 3*time.Hour, "the longest job timeout of the group's runners")
	fs.DurationVar(&r.DrainTimeout, "drain-timeout", 0, "how long the old color's jobs may take to finish (default --job-timeout + "+strconv.Itoa(gitlabrunner.DrainMarginSeconds/60)+"m; never less than --job-timeout)")
	fs.DurationVar(&r.Poll, "poll", 10*time.Second, "how often to look")
	fs.StringVar(&webhook, "webhook", "", "URL to POST the rotation's report to, on success and on failure")
	fs.StringVar(&notifyFormat, "notify-format", vmfleet.NotifyFormats[0], "the --webhook's payload: "+vmfleet.NotifySlack+" (a Slack incoming-webhook message) or "+vmfleet.NotifyJSON+" (the report as JSON)")
	var (
		imgFlags   imageFlags
		runnerTags listFlag
	)
	imgFlags.bind(fs, true)
	fs.Var(&runnerTags, "runner-tag", "with the --image-* inputs and --gitlab-*: a tag of the group's runners instead of <os> and <os>-<version> (repeatable); the runner's tags in GitLab must be the group's")
	var st rotateStack
	fs.StringVar(&st.stack, "stack", "", "read the group (--group, one of the stack's sharedFleets[].vmGroups) from this stack's config: image, machine type, zones, count, network, service account, runner token secret, drain timeout, notification; a flag given as well overrides the stack's value")
	fs.StringVar(&st.config, "config", "", "with --stack: the stack config file (default the stack's Pulumi.<stack>.yaml compiled into fleet)")
	if err := parse(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if st.stack == "" && st.config != "" {
		return fmt.Errorf("--config reads a VM group from a stack config: add --stack")
	}
	var stack stackImage
	if st.stack != "" {
		if err := st.apply(rotateSettings{r: &r, cloud: &cf, webhook: &webhook, notifyFormat: &notifyFormat, jobTimeout: &jobTimeout, image: &stack}, set, stderr); err != nil {
			return err
		}
	}
	// The image inputs (the flags', or the stack group's): --image must be
	// the image they name, and is that image when not given.
	inputs := stack.inputs
	if imgFlags.given() {
		in, err := imgFlags.inputs("")
		if err != nil {
			return fmt.Errorf("%w; nothing was created or drained", err)
		}
		inputs = &in
	} else if len(runnerTags) > 0 && inputs == nil {
		return errors.New("--runner-tag needs the image's inputs (--image-os and --image-os-version and the rest): a version tag is checked against the image's OS version")
	}
	notify, err := vmfleet.Webhook(webhook, notifyFormat, stderr)
	if err != nil {
		return fmt.Errorf("--notify-format: %w; nothing was created or drained", err)
	}
	if webhook != "" {
		r.Notify = notify
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
	for _, f := range []struct{ name, v string }{{"--group", r.Group}, {"--image", r.Template.Image}, {"--zone", r.Template.Zone}, {"--machine-type", r.Template.MachineType}} {
		if f.v == "" && (f.name != "--image" || inputs == nil) {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "fleet rotate: %s required\n", strings.Join(missing, ", "))
		return errUsage
	}
	if r.DrainTimeout == 0 {
		r.DrainTimeout = jobTimeout + gitlabrunner.DrainMargin
	}
	if r.DrainTimeout < jobTimeout {
		return fmt.Errorf("--drain-timeout %s is below the longest job timeout %s (--job-timeout): a job could still run when the wait ends; use --drain-timeout %s or more", r.DrainTimeout, jobTimeout, jobTimeout+gitlabrunner.DrainMargin)
	}
	gitlabSet := map[string]bool{"--gitlab-url": glURL != "", "--gitlab-token-file": glTokenF != "", "--gitlab-runner-id": glRunner != 0}
	var glMissing []string
	for _, f := range []string{"--gitlab-url", "--gitlab-token-file", "--gitlab-runner-id"} {
		if !gitlabSet[f] {
			glMissing = append(glMissing, f)
		}
	}
	withGitLab := len(glMissing) == 0
	if len(glMissing) > 0 && len(glMissing) < 3 {
		return fmt.Errorf("GitLab's health check needs --gitlab-url, --gitlab-token-file and --gitlab-runner-id together: add %s", strings.Join(glMissing, ", "))
	}
	if len(runnerTags) > 0 && !withGitLab {
		return errors.New("--runner-tag is checked against the group's runner in GitLab: add --gitlab-url, --gitlab-token-file and --gitlab-runner-id")
	}
	gf := gitlabFlags{url: glURL, tokenFile: glTokenF, runnerID: glRunner}
	var token string
	switch health {
	case "runner":
		r.Healthy = vmfleet.RunnerHealth{}.Check
		if withGitLab {
			if token, err = gf.token(); err != nil {
				return err
			}
			r.Healthy = vmfleet.GitLabHealth{RunnerID: glRunner, Managers: func(ctx context.Context) ([]gitlab.RunnerManager, error) {
				return gitlab.Managers(ctx, glURL, token, glRunner, gitlab.Options{})
			}}.Check
		}
	case "running":
		if withGitLab {
			return fmt.Errorf("--gitlab-* checks the runner, but --health running does not: use --health runner")
		}
		r.Healthy = nil // the cloud's state
	default:
		return fmt.Errorf("--health %q is not runner or running", health)
	}
	// The group's runners' OS, version and tags: the inputs' and
	// --runner-tag, or the stack group's.
	tagOS, tagVersion, declared := stack.os, stack.osVersion, stack.tags
	if inputs != nil {
		tagOS, tagVersion = inputs.OS, inputs.OSVersion
	}
	if len(runnerTags) > 0 {
		declared = runnerTags
	}
	if withGitLab && tagOS != "" && tagVersion != "" {
		// The runner the group adopts carries the group's tags.
		tags, err := groupTags(tagOS, tagVersion, declared)
		if err != nil {
			return fmt.Errorf("%w; nothing was created or drained", err)
		}
		if err := checkAdoptedTags(ctx, gf, token, tagOS, tagVersion, tags); err != nil {
			return fmt.Errorf("%w; nothing was created or drained", err)
		}
	}
	if r.Prefix == "" {
		r.Prefix = r.Group
	}
	c, err := cf.compute(ctx)
	if err != nil {
		return err
	}
	if inputs != nil {
		img, err := vmfleet.ResolveImage(ctx, c, r.Template.Image, *inputs)
		if err != nil {
			if inputs == stack.inputs {
				return fmt.Errorf("--image: %w (the inputs are %s); nothing was created or drained", flagError(err), stack.key)
			}
			return fmt.Errorf("--image: %w; nothing was created or drained", flagError(err))
		}
		if r.Template.Image == "" {
			// What CreateInstance takes: GCE the name, EC2 the AMI ID.
			r.Template.Image = img.Name
			if cf.provider == "ec2" {
				r.Template.Image = img.ID
			}
		}
	}
	if err := c.ImageExists(ctx, r.Template.Image); err != nil {
		if errors.Is(err, providers.ErrNotFound) {
			return fmt.Errorf("--image %s does not exist (%v); give an image or family your project has, nothing was created or drained", r.Template.Image, err)
		}
		return fmt.Errorf("--image %s: %w; nothing was created or drained", r.Template.Image, err)
	}
	r.Compute = c
	r.Progress = stdout
	rep, err := r.Run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Rotation of %s %s in %s\n", r.Group, rep.Result, rep.Duration.Round(time.Second))
	return nil
}

// gcFlags are fleet gc's flags.
type gcFlags struct {
	sources    listFlag
	kubeconfig string
	context    string
	namespaces listFlag
	output     string
	// eventCronJob names the CronJob the result is recorded on as an Event.
	eventCronJob string
}

func gc(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleet gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf cloudFlags
	cf.bind(fs)
	g := vmfleet.GC{Autoscaled: map[string]string{}}
	var (
		gf       gcFlags
		families listFlag
	)
	fs.Var(&gf.sources, "source", "where managers that own VMs run: "+vmfleet.HostKubernetes+" (the cluster of --kubeconfig/--context, or the one fleet gc runs in) or "+vmfleet.HostVM+" (VMs labelled "+vmfleet.LabelRole+"="+vmfleet.RoleManager+"); repeatable; at least one")
	fs.StringVar(&gf.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default $KUBECONFIG or ~/.kube/config; in a pod, the pod's service account)")
	fs.StringVar(&gf.context, "context", "", "kubeconfig context (default the current one)")
	fs.Var(&gf.namespaces, "namespace", "namespace of the managers (repeatable; default every namespace)")
	fs.Var(labelFlag(g.Autoscaled), "autoscaled", "key=value label of autoscaled VMs (repeatable; default "+vmfleet.LabelAutoscaled+"=true, and with --source "+vmfleet.HostKubernetes+" alone and one --namespace also "+vmfleet.LabelFleet+"=<namespace>: that fleet's VMs)")
	fs.DurationVar(&g.Grace, "grace", time.Hour, "how long a manager must be proven absent before its idle VMs go; at least its IdleTime")
	fs.DurationVar(&g.JobReportMaxAge, "job-report-max-age", 5*time.Minute, "how recent a VM's job report must be to prove it idle")
	fs.Var(&families, "image-family", "image family to prune (repeatable); its images that a VM boots and the one its --image-* inputs name are kept")
	var imgFlags imageFlags
	imgFlags.bind(fs, false)
	fs.IntVar(&g.Keep, "keep", 3, "newest images of each family to keep")
	fs.BoolVar(&g.Apply, "apply", false, "delete what was found; without it, fleet gc only shows it")
	fs.StringVar(&gf.output, "o", "table", "output: table or json")
	fs.StringVar(&gf.eventCronJob, "event-cronjob", "", "record the result as an Event on this CronJob in --namespace (needs --source kubernetes and one --namespace)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if gf.output != "table" && gf.output != "json" {
		return fmt.Errorf("-o %q is not table or json", gf.output)
	}
	if g.Grace <= 0 {
		return fmt.Errorf("--grace %s must be positive: it is how long a manager must be proven absent", g.Grace)
	}
	if len(gf.sources) == 0 {
		return fmt.Errorf("fleet gc needs a manager source: --source %s for managers in a cluster (with --kubeconfig and --context, or run in the cluster), --source %s for managers on VMs; without one every autoscaled VM would look orphaned, and nothing was deleted", vmfleet.HostKubernetes, vmfleet.HostVM)
	}
	if len(g.Autoscaled) == 0 && len(gf.namespaces) == 1 && len(gf.sources) == 1 && gf.sources[0] == vmfleet.HostKubernetes {
		// One fleet's managers are known: another fleet's VMs in the same
		// zones would look orphaned, so only this fleet's are judged.
		g.Autoscaled = vmfleet.FleetSelector(gf.namespaces[0])
	}
	g.ImageFamilies = families
	if imgFlags.given() {
		// The image the family's managers are expected to boot is kept,
		// even before a rotation boots it.
		if len(families) != 1 {
			return fmt.Errorf("the --image-* inputs name the image of one family: give exactly one --image-family with them (%d given)", len(families))
		}
		in, err := imgFlags.inputs(families[0])
		if err != nil {
			return err
		}
		name, err := vmimage.Name(in)
		if err != nil {
			return flagError(err)
		}
		g.KeepImages = append(g.KeepImages, name)
	}
	c, err := cf.compute(ctx)
	if err != nil {
		return err
	}
	g.Compute = c
	if len(families) > 0 && cf.zones != "" {
		// Images are the project's: the VMs that boot them may be in any zone.
		all := cf
		all.zones = ""
		if g.ImageUsers, err = all.compute(ctx); err != nil {
			return err
		}
	}
	if gf.eventCronJob != "" && (len(gf.namespaces) != 1 || !slices.Contains(gf.sources, vmfleet.HostKubernetes)) {
		return fmt.Errorf("--event-cronjob %s needs --source %s and exactly one --namespace, the CronJob's", gf.eventCronJob, vmfleet.HostKubernetes)
	}
	var kube *vmfleet.KubeSource
	seen := map[string]bool{}
	for _, src := range gf.sources {
		if seen[src] {
			continue
		}
		seen[src] = true
		switch src {
		case vmfleet.HostVM:
			g.Sources = append(g.Sources, &vmfleet.VMSource{Compute: c})
		case vmfleet.HostKubernetes:
			ks, err := kubeSource(gf)
			if err != nil {
				return err
			}
			kube = ks
			g.Sources = append(g.Sources, ks)
		default:
			return fmt.Errorf("--source %q is not %s or %s", src, vmfleet.HostKubernetes, vmfleet.HostVM)
		}
	}
	plan, err := g.Run(ctx)
	if gf.eventCronJob != "" {
		if eerr := recordEvent(ctx, kube, gf.namespaces[0], gf.eventCronJob, plan, err); eerr != nil {
			fmt.Fprintf(stderr, "fleet gc: recording the result on CronJob %s: %v\n", gf.eventCronJob, eerr)
		}
	}
	if errors.Is(err, vmfleet.ErrSourceUnavailable) {
		return fmt.Errorf("fleet gc --apply refused: %w (fix the source, e.g. --kubeconfig/--context, or rerun without --apply to see the plan)", err)
	}
	if plan.Rows != nil || err == nil {
		if gf.output == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if jerr := enc.Encode(plan); jerr != nil {
				return jerr
			}
		} else {
			plan.WriteTable(stdout)
		}
	}
	return err
}

// recordEvent records gc's result as an Event on the CronJob that ran it:
// Normal GarbageCollected, or Warning OrphanedVMs (orphans it could not
// delete) or GCFailed.
func recordEvent(ctx context.Context, ks *vmfleet.KubeSource, ns, cronJob string, plan vmfleet.Plan, runErr error) error {
	w, ok := ks.Client.(client.Writer)
	if !ok {
		return errors.New("the cluster client cannot write")
	}
	deleted := 0
	for _, r := range plan.Rows {
		if r.Deleted {
			deleted++
		}
	}
	typ, reason := corev1.EventTypeNormal, "GarbageCollected"
	msg := fmt.Sprintf("%d autoscaled VMs judged: %d deleted, %d orphans left (%d busy or unproven idle, %d waiting for the grace), %d unknown", len(plan.Rows), deleted, plan.Orphans(),
		plan.Count(vmfleet.VerdictBusy), plan.Count(vmfleet.VerdictNoted)+plan.Count(vmfleet.VerdictWaiting), plan.Count(vmfleet.VerdictUnknown))
	switch {
	case runErr != nil:
		typ, reason, msg = corev1.EventTypeWarning, "GCFailed", runErr.Error()
	case plan.Count(vmfleet.VerdictBusy)+plan.Count(vmfleet.VerdictDeleteFail) > 0:
		typ, reason = corev1.EventTypeWarning, "OrphanedVMs"
	}
	now := metav1.Now()
	return w.Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: cronJob + "-", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{APIVersion: "batch/v1", Kind: "CronJob", Name: cronJob, Namespace: ns},
		Type:           typ, Reason: reason, Message: msg,
		Source:         corev1.EventSource{Component: "fleet-gc"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	})
}

// kubeSource opens the cluster of --kubeconfig/--context (or the pod's).
func kubeSource(gf gcFlags) (*vmfleet.KubeSource, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	where := "the current context"
	if gf.kubeconfig != "" {
		if _, err := os.Stat(gf.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig %s cannot be read: %w; give the kubeconfig of the cluster the managers run in", gf.kubeconfig, err)
		}
		rules.ExplicitPath = gf.kubeconfig
	}
	if gf.context != "" {
		where = "context " + gf.context
	}
	var cfg *rest.Config
	var err error
	if gf.kubeconfig == "" && gf.context == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg, err = rest.InClusterConfig()
		where = "the cluster fleet gc runs in"
	} else {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: gf.context}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig/--context: the cluster's config cannot be loaded: %w; give a readable kubeconfig and a context it has (--source %s needs the cluster the managers run in)", err, vmfleet.HostKubernetes)
	}
	cfg.Timeout = 30 * time.Second
	cl, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig/--context: %w", err)
	}
	return &vmfleet.KubeSource{Client: cl, Namespaces: gf.namespaces, Where: where}, nil
}
