// Package sharedfleet builds the config.toml of the shared fleet's manager
// groups: gitlab-runner managers whose jobs run on autoscaled GCE VMs, with
// the docker+machine executor (google driver) or the docker-autoscaler
// executor with the fleeting googlecloud plugin (a managed instance group).
// docker+machine is deprecated upstream and due for removal in runner 20.0;
// docker-autoscaler is its successor.
package sharedfleet

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gorhill/cronexpr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// Executors of a manager group.
const (
	ExecutorDockerMachine    = "docker+machine"
	ExecutorDockerAutoscaler = "docker-autoscaler"
)

// DefaultConcurrent is a shared-fleet manager's concurrent jobs.
const DefaultConcurrent = 100

// Period is an autoscaling period: while one of its cron expressions
// matches, IdleCount VMs wait idle for IdleTime.
type Period struct {
	// Periods are cron expressions with seconds, such as "* * 9-17 * * mon-fri *".
	Periods   []string        `json:"periods"`
	Timezone  string          `json:"timezone,omitempty"`
	IdleCount int             `json:"idleCount"`
	IdleTime  metav1.Duration `json:"idleTime"`
}

// ManagerGroup is one group of managers of a shared fleet (production,
// staging, …): the same config.toml, one Helm release per manager. It is the
// one model of a group: the stack config (infra/stackconfig, the
// sharedFleets[].groups[] keys) decodes into it and fills its defaults, and
// every builder here reads it.
type ManagerGroup struct {
	// Name names the group; its managers are <namespace>-<name>-<n>.
	Name string `json:"name"`
	// Executor is docker+machine (the default) or docker-autoscaler.
	Executor string `json:"executor,omitempty"`
	// TokenConfigKey names the stack config secret holding the runner's
	// authentication token (glrt-…): pulumi config set --secret <key> glrt-…
	TokenConfigKey string `json:"tokenConfigKey"`
	// Concurrent jobs per manager; default DefaultConcurrent
	// (vmfleet.WindowsConcurrent for Windows).
	Concurrent int `json:"concurrent,omitempty"`
	// Project is the VMs' GCP project; default gcp.project.
	Project string `json:"project,omitempty"`
	// Zone is the VMs' zone, in the region.
	Zone string `json:"zone"`
	// MachineType of the VMs, such as n2d-standard-4.
	MachineType string `json:"machineType"`
	// Image is the VMs' image (name, family or URL).
	Image string `json:"image"`
	// Spot runs the VMs as spot (preemptible) VMs; default true (SpotVMs).
	Spot *bool `json:"spot,omitempty"`
	// NetworkTags of the VMs, for firewall rules.
	NetworkTags []string `json:"networkTags,omitempty"`
	// MaxVMs caps the autoscaled VMs of one manager (the runner's limit).
	MaxVMs int `json:"maxVMs"`
	// IdleCount VMs wait idle for IdleTime, per manager.
	IdleCount int             `json:"idleCount,omitempty"`
	IdleTime  metav1.Duration `json:"idleTime,omitempty"`
	// MaxBuilds recycles a VM after this many jobs (docker+machine).
	MaxBuilds int `json:"maxBuilds,omitempty"`
	// Periods change IdleCount and IdleTime while a cron expression matches.
	Periods []Period `json:"periods,omitempty"`
	// InstanceGroup is docker-autoscaler's managed instance group.
	InstanceGroup string `json:"instanceGroup,omitempty"`
	// Windows managers run Windows VMs through docker-autoscaler (WinRM)
	// and default to vmfleet.WindowsConcurrent jobs.
	Windows bool `json:"windows,omitempty"`
	// JobImage is the default image of jobs.
	JobImage string `json:"jobImage,omitempty"`
	// Scaling bounds the group's managers.
	Scaling Scaling `json:"scaling,omitempty"`

	// Fleet (the fleet's namespace), GitLabURL, Region and CacheBucket come
	// from the fleet and the stack, not from keys of the group: the stack
	// config's defaults fill them.
	Fleet       string `json:"-"`
	GitLabURL   string `json:"-"`
	Region      string `json:"-"`
	CacheBucket string `json:"-"`
}

// SpotVMs reports whether the group's VMs are spot VMs (the default).
func (g ManagerGroup) SpotVMs() bool { return g.Spot == nil || *g.Spot }

var (
	machineTypeRE = regexp.MustCompile(`^([a-z][a-z0-9]*-(standard|highmem|highcpu|micro|small|medium|ultramem|megamem|hypermem|highgpu|ultragpu|megagpu|edgegpu|custom)(-[0-9]+(-lssd)?)?|custom-[0-9]+-[0-9]+(-ext)?|[a-z][a-z0-9]*-custom-[0-9]+-[0-9]+)$`)
	regionRE      = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)
	nameRE        = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$`)
)

// key names a field of the group in stack-config terms.
func (g ManagerGroup) key(field string) string {
	return fmt.Sprintf("fleets.%s.groups.%s.%s", g.Fleet, g.Name, field)
}

// Validate refuses what gitlab-runner or GCE would refuse later, or what
// would quietly misbehave, naming the key and the fix.
func (g ManagerGroup) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", g.key(field), fmt.Sprintf(format, args...)))
	}
	if !nameRE.MatchString(g.Name) {
		bad("name", "%q must be lower-case letters, digits and dashes, at most 40, starting with a letter (it names VMs)", g.Name)
	}
	switch g.Executor {
	case "", ExecutorDockerMachine:
		if g.Windows {
			bad("executor", "Windows managers need docker-autoscaler: docker+machine has no Windows VMs")
		}
	case ExecutorDockerAutoscaler:
		if g.InstanceGroup == "" {
			bad("instanceGroup", "docker-autoscaler needs the managed instance group its VMs come from")
		}
	default:
		bad("executor", "%q is not %s or %s", g.Executor, ExecutorDockerMachine, ExecutorDockerAutoscaler)
	}
	if !strings.HasPrefix(g.GitLabURL, "https://") && !strings.HasPrefix(g.GitLabURL, "http://") {
		bad("gitlabURL", "%q must be an http(s) URL such as https://gitlab.example.com", g.GitLabURL)
	}
	if g.Project == "" {
		bad("project", "the GCP project of the VMs is required")
	}
	if !machineTypeRE.MatchString(g.MachineType) {
		bad("machineType", "%q is not a GCE machine type such as n2d-standard-4, e2-small or custom-4-16384", g.MachineType)
	}
	if !regionRE.MatchString(g.Region) {
		bad("region", "%q is not a GCE region such as us-east1", g.Region)
	} else if !strings.HasPrefix(g.Zone, g.Region+"-") || len(g.Zone) != len(g.Region)+2 {
		bad("zone", "%q is not a zone of region %s; use one such as %s-b", g.Zone, g.Region, g.Region)
	}
	if g.Image == "" {
		bad("image", "the VM image is required (an image name or URL)")
	}
	if g.MaxVMs < 1 {
		bad("maxVMs", "must be at least 1: it caps the VMs one manager may run")
	}
	if g.IdleCount < 0 || g.IdleCount > g.MaxVMs {
		bad("idleCount", "%d must be between 0 and maxVMs (%d): idle VMs count against the limit", g.IdleCount, g.MaxVMs)
	}
	if g.IdleTime.Duration < 0 {
		bad("idleTime", "must not be negative")
	}
	if g.Concurrent < 0 {
		bad("concurrent", "must not be negative (0 means %d)", DefaultConcurrent)
	}
	for i, p := range g.Periods {
		field := fmt.Sprintf("periods[%d]", i)
		if len(p.Periods) == 0 {
			bad(field+".periods", "needs at least one cron expression, such as \"* * 9-17 * * mon-fri *\"")
		}
		for j, c := range p.Periods {
			if _, err := cronexpr.Parse(c); err != nil {
				bad(fmt.Sprintf("%s.periods[%d]", field, j), "%q is not a cron expression (%v); gitlab-runner reads seconds, minutes, hours, days, months, weekdays and an optional year, such as \"* * 9-17 * * mon-fri *\"", c, err)
			}
		}
		if p.Timezone != "" {
			if _, err := time.LoadLocation(p.Timezone); err != nil {
				bad(field+".timezone", "%q is not a time zone such as Europe/Berlin", p.Timezone)
			}
		}
		if p.IdleCount < 0 || p.IdleCount > g.MaxVMs {
			bad(field+".idleCount", "%d must be between 0 and maxVMs (%d)", p.IdleCount, g.MaxVMs)
		}
	}
	return errors.Join(errs...)
}

// ManagerName names the group's managers together: their headless
// Service and the pod label LabelManagerPod that joins their metrics.
// Each manager has a name of its own (a Helm release, <ManagerName>-<n>),
// which is its VMs' vmfleet.LabelManager.
func (g ManagerGroup) ManagerName() string { return ManagerName(g.Fleet, g.Name) }

// ManagerName is the name the managers of group of the fleet in namespace
// fleet share (<fleet>-<group>), defined once for the stack config and the
// builders.
func ManagerName(fleet, group string) string { return fleet + "-" + group }

// Owner is the owner manager gives its autoscaled VMs: fleet, group,
// manager, hosted in Kubernetes, and the incarnation the start script fills
// in. fleet gc reads the same labels back (vmfleet.OwnerOf).
func (g ManagerGroup) Owner(manager string) vmfleet.Owner {
	return vmfleet.Owner{
		Fleet: g.Fleet, Group: g.Name, Manager: manager, Host: vmfleet.HostKubernetes,
		Incarnation: vmfleet.IncarnationPlaceholder,
	}
}

// LongestIdleTime is the longest time a manager of the group leaves a VM
// idle: IdleTime or a period's.
func (g ManagerGroup) LongestIdleTime() time.Duration {
	d := g.IdleTime.Duration
	for _, p := range g.Periods {
		d = max(d, p.IdleTime.Duration)
	}
	return d
}

// Config is the config.toml of the group's manager named ManagerName(); see
// ConfigFor.
func (g ManagerGroup) Config() (runnerconfig.Config, error) { return g.ConfigFor(g.ManagerName()) }

// ConfigFor is the config.toml of the group's manager named manager. The
// token is runnerconfig.TokenPlaceholder, the incarnation
// vmfleet.IncarnationPlaceholder.
func (g ManagerGroup) ConfigFor(manager string) (runnerconfig.Config, error) {
	if err := g.Validate(); err != nil {
		return runnerconfig.Config{}, err
	}
	owner := g.Owner(manager)
	if err := owner.Validate(); err != nil {
		return runnerconfig.Config{}, fmt.Errorf("%s: %w", g.key("name"), err)
	}
	concurrent := g.Concurrent
	switch {
	case concurrent != 0:
	case g.Windows:
		concurrent = vmfleet.WindowsConcurrent
	default:
		concurrent = DefaultConcurrent
	}
	jobImage := g.JobImage
	if jobImage == "" {
		jobImage = "alpine:3.22"
	}
	r := runnerconfig.Runner{
		Name:               manager,
		URL:                g.GitLabURL,
		Token:              runnerconfig.TokenPlaceholder,
		Limit:              g.MaxVMs,
		RequestConcurrency: min(concurrent, 10),
		Docker:             &runnerconfig.Docker{Image: jobImage, Volumes: []string{"/cache"}, ShmSize: 0},
	}
	if g.CacheBucket != "" {
		r.Cache = &runnerconfig.Cache{Type: "gcs", Path: g.Fleet, Shared: true, GCS: &runnerconfig.CacheGCS{BucketName: g.CacheBucket}}
	}
	labels := owner.Labels()
	switch g.Executor {
	case "", ExecutorDockerMachine:
		r.Executor = ExecutorDockerMachine
		opts := []string{
			"google-project=" + g.Project,
			"google-zone=" + g.Zone,
			"google-machine-type=" + g.MachineType,
			"google-machine-image=" + g.Image,
			"google-use-internal-ip-only=true",
			fmt.Sprintf("google-preemptible=%t", g.SpotVMs()),
		}
		if len(g.NetworkTags) > 0 {
			opts = append(opts, "google-tags="+strings.Join(g.NetworkTags, ","))
		}
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			opts = append(opts, "google-label="+k+":"+labels[k])
		}
		m := &runnerconfig.Machine{
			IdleCount:      g.IdleCount,
			IdleTime:       int(g.IdleTime.Seconds()),
			MaxBuilds:      g.MaxBuilds,
			MachineDriver:  "google",
			MachineName:    vmfleet.MachineName(manager),
			MachineOptions: opts,
		}
		for _, p := range g.Periods {
			m.Autoscaling = append(m.Autoscaling, runnerconfig.MachineAutoscaling{
				Periods: p.Periods, Timezone: p.Timezone, IdleCount: p.IdleCount, IdleTime: int(p.IdleTime.Seconds()),
			})
		}
		r.Machine = m
	case ExecutorDockerAutoscaler:
		r.Executor = ExecutorDockerAutoscaler
		a := &runnerconfig.Autoscaler{
			Plugin:              "googlecloud",
			CapacityPerInstance: 1,
			MaxUseCount:         g.MaxBuilds,
			MaxInstances:        g.MaxVMs,
			PluginConfig:        map[string]string{"name": g.InstanceGroup, "project": g.Project, "zone": g.Zone},
			ConnectorConfig:     &runnerconfig.ConnectorConfig{OS: "linux", Protocol: "ssh", Username: "runner", UseExternalAddr: false},
			Policy:              []runnerconfig.AutoscalerPolicy{{Periods: []string{"* * * * *"}, IdleCount: g.IdleCount, IdleTime: runnerconfig.Duration(g.IdleTime.Duration)}},
		}
		for _, p := range g.Periods {
			a.Policy = append(a.Policy, runnerconfig.AutoscalerPolicy{
				Periods: p.Periods, Timezone: p.Timezone, IdleCount: p.IdleCount, IdleTime: runnerconfig.Duration(p.IdleTime.Duration),
			})
		}
		if g.Windows {
			a.ConnectorConfig.OS, a.ConnectorConfig.Protocol, a.ConnectorConfig.Username = "windows", "winrm", "gitlab-runner"
		}
		r.Autoscaler = a
	}
	return runnerconfig.Config{
		Concurrent:      concurrent,
		CheckInterval:   3,
		LogFormat:       "json",
		ListenAddress:   gitlabrunner.ListenAddress,
		ShutdownTimeout: runnerconfig.ForcedShutdownTimeout,
		Runners:         []runnerconfig.Runner{r},
	}, nil
}
