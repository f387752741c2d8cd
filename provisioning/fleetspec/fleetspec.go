// Package fleetspec is the model of the shared fleets and nothing else:
// SharedFleet (the stack config's sharedFleets[] decode into it, with its
// VM network, web terminal and monitoring), ManagerGroup (its groups[]),
// Alerting (the stack's alert receiver), their defaults, the group's checks
// (naming the key and the fix), and the names and VM facts derived from
// them (manager names, VM network tags, ports, subnetwork and firewall
// names). It renders nothing and builds no Kubernetes object:
// provisioning/sharedfleet renders a group's config.toml, chart values,
// Kubernetes objects and monitoring from it, infra/sharedfleet declares
// them, and infra/stackconfig decodes and checks the stack config with it
// alone, without importing a renderer (internal/layering holds it to that).
package fleetspec

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

// Executors of a manager group.
const (
	ExecutorDockerMachine    = "docker+machine"
	ExecutorDockerAutoscaler = "docker-autoscaler"
)

// Concurrent jobs of a manager when the group does not say.
const (
	// DefaultConcurrent is a shared-fleet manager's concurrent jobs.
	DefaultConcurrent = 100
	// WindowsConcurrent is a Windows manager's (GitLab.com's Windows
	// shared runners run 400 jobs per manager), on VMs (fleet rotate's
	// groups) or in a shared fleet.
	WindowsConcurrent = 400
)

// Period is an autoscaling period: while one of its cron expressions
// matches, IdleCount VMs wait idle for IdleTime.
type Period struct {
	// Periods are cron expressions in the executor's own format:
	// docker+machine's have 7 fields, seconds first and "*" (gitlab-runner's
	// cronexpr), such as "* * 9-17 * * mon-fri *"; docker-autoscaler's are
	// 5-field unix cron (fleeting's taskscaler), such as "* 9-17 * * mon-fri".
	Periods   []string        `json:"periods"`
	Timezone  string          `json:"timezone,omitempty"`
	IdleCount int             `json:"idleCount"`
	IdleTime  metav1.Duration `json:"idleTime"`
}

// ManagerGroup is one group of managers of a shared fleet (production,
// staging, …): the same config.toml, one Helm release per manager. It is the
// one model of a group: the stack config (infra/stackconfig, the
// sharedFleets[].groups[] keys) decodes into it and fills its defaults, and
// every builder of provisioning/sharedfleet reads it.
type ManagerGroup struct {
	// Name names the group; its managers are <namespace>-<name>-<n>.
	Name string `json:"name"`
	// Executor is docker+machine (the default) or docker-autoscaler.
	Executor string `json:"executor,omitempty"`
	// TokenConfigKey names the stack config secret holding the runner's
	// authentication token (glrt-…): pulumi config set --secret <key> glrt-…
	TokenConfigKey string `json:"tokenConfigKey"`
	// Concurrent jobs per manager; default DefaultConcurrent
	// (WindowsConcurrent for Windows): ConcurrentOrDefault.
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
	// Windows managers run Windows VMs through docker-autoscaler (WinRM),
	// default to WindowsConcurrent jobs and to Windows job defaults
	// (sharedfleet.WindowsJobImage, pwsh, sharedfleet.WindowsCacheDir).
	Windows bool `json:"windows,omitempty"`
	// JobImage is the default image of jobs; default
	// sharedfleet.DefaultJobImage (sharedfleet.WindowsJobImage for Windows).
	JobImage string `json:"jobImage,omitempty"`
	// Scaling bounds the group's managers.
	Scaling Scaling `json:"scaling,omitempty"`

	// Fleet (the fleet's namespace), GitLabURL, Region, CacheBucket, the
	// VMs' Network and Subnetwork (resource paths) and VMServiceAccount
	// come from the fleet and the stack, not from keys of the group: the
	// fleet's Effective fills them.
	Fleet       string `json:"-"`
	GitLabURL   string `json:"-"`
	Region      string `json:"-"`
	CacheBucket string `json:"-"`
	Network     string `json:"-"`
	Subnetwork  string `json:"-"`
	// VMServiceAccount is the Google service account the docker+machine
	// VMs run as; "" leaves it to the driver (the project's Compute
	// Engine default account).
	VMServiceAccount string `json:"-"`
	// VMAgents are what the group's docker+machine VMs run beside the
	// jobs (the fleet's images and node_exporter port): Agents.
	VMAgents VMAgents `json:"-"`
}

// Agents are what the group's docker+machine VMs run beside the jobs:
// VMAgents, defaults filled.
func (g ManagerGroup) Agents() VMAgents { return g.VMAgents.OrDefault() }

// Ports the managers reach their VMs on.
const (
	// DockerPort is docker+machine's Docker daemon (TLS).
	DockerPort = 2376
	// SSHPort is docker+machine's provisioning and fleeting's ssh connector.
	SSHPort = 22
	// WinRMPort and WinRMSPort are fleeting's winrm connector (HTTP and HTTPS).
	WinRMPort  = 5985
	WinRMSPort = 5986
)

// VMPorts are the TCP ports the group's managers open on its VMs: Docker
// and SSH for docker+machine, the connector's for docker-autoscaler.
func (g ManagerGroup) VMPorts() []int {
	switch g.access() {
	case AccessWinRM:
		return []int{WinRMPort, WinRMSPort}
	case AccessSSH:
		return []int{SSHPort}
	}
	return []int{SSHPort, DockerPort}
}

// VM access kinds: which ports a group's managers use on its VMs, and so
// which of the fleet's firewall rules admits them.
const (
	AccessDockerMachine = "dm"
	AccessSSH           = "ssh"
	AccessWinRM         = "winrm"
)

func (g ManagerGroup) access() string {
	switch {
	case g.Executor == ExecutorDockerAutoscaler && g.Windows:
		return AccessWinRM
	case g.Executor == ExecutorDockerAutoscaler:
		return AccessSSH
	}
	return AccessDockerMachine
}

// VMNetworkTag is the network tag of the group's VMs, which one firewall
// rule of the fleet targets with exactly the ports of VMPorts: the groups of
// a fleet whose managers use the same ports share it.
func (g ManagerGroup) VMNetworkTag() string { return VMNetworkTag(g.Fleet, g.access()) }

// VMNetworkTag is the tag of fleet's VMs of access kind access.
func VMNetworkTag(fleet, access string) string { return "runnerfleet-" + fleet + "-" + access }

// MaxFleetNameForTags is the longest fleet namespace whose VM tags are GCE
// network tags (at most 63 characters).
const MaxFleetNameForTags = 63 - len("runnerfleet-") - len("-"+AccessWinRM)

// InstanceGroupName is the zonal managed instance group of manager, a
// docker-autoscaler manager: fleeting's googlecloud plugin wants one group
// per manager, whose size it alone sets.
func InstanceGroupName(manager string) string { return manager }

// SpotVMs reports whether the group's VMs are spot VMs (the default).
func (g ManagerGroup) SpotVMs() bool { return g.Spot == nil || *g.Spot }

var (
	machineTypeRE = regexp.MustCompile(`^([a-z][a-z0-9]*-(standard|highmem|highcpu|micro|small|medium|ultramem|megamem|hypermem|highgpu|ultragpu|megagpu|edgegpu|custom)(-[0-9]+(-lssd)?)?|custom-[0-9]+-[0-9]+(-ext)?|[a-z][a-z0-9]*-custom-[0-9]+-[0-9]+)$`)
	regionRE      = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)
	nameRE        = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$`)
)

// Key names a field of the group in the terms of Validate's messages:
// fleets.<fleet>.groups.<group>.<field>; Key("") is the prefix of them all.
func (g ManagerGroup) Key(field string) string {
	return fmt.Sprintf("fleets.%s.groups.%s.%s", g.Fleet, g.Name, field)
}

// Validate refuses what gitlab-runner or GCE would refuse later, or what
// would quietly misbehave, naming the key and the fix.
func (g ManagerGroup) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", g.Key(field), fmt.Sprintf(format, args...)))
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
			check, fix := oracle.MachinePeriod, "write it as docker+machine reads it"
			if g.Executor == ExecutorDockerAutoscaler {
				check, fix = oracle.PolicyPeriod, "docker-autoscaler reads 5-field unix cron; drop the seconds and year fields"
			}
			if err := check(c); err != nil {
				bad(fmt.Sprintf("%s.periods[%d]", field, j), "%v; %s", err, fix)
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
// which is its VMs' runnerfleet-manager label (vmfleet.LabelManager).
func (g ManagerGroup) ManagerName() string { return ManagerName(g.Fleet, g.Name) }

// ManagerName is the name the managers of group of the fleet in namespace
// fleet share (<fleet>-<group>), defined once for the stack config and the
// builders.
func ManagerName(fleet, group string) string { return fleet + "-" + group }

// ConcurrentOrDefault is the concurrent jobs of each of the group's
// managers: Concurrent, or the default for its kind.
func (g ManagerGroup) ConcurrentOrDefault() int {
	switch {
	case g.Concurrent != 0:
		return g.Concurrent
	case g.Windows:
		return WindowsConcurrent
	}
	return DefaultConcurrent
}

// ManagerNames are the group's managers, one Helm release each:
// <fleet>-<group>-<n> for n below Scaling.MaxManagers.
func (g ManagerGroup) ManagerNames() []string {
	out := make([]string, max(g.Scaling.MaxManagers, 0))
	for i := range out {
		out[i] = g.ManagerName() + "-" + strconv.Itoa(i)
	}
	return out
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

// Scaling bounds the manager replicas of a group. Managers scale on the jobs
// they run with KEDA's Prometheus scaler, reading the fleet's own
// Prometheus: no metrics adapter to run and register as the cluster's single
// external-metrics API (which an HPA would need), scale-to-a-floor and
// per-group queries in one object, and KEDA drives a plain HPA underneath.
type Scaling struct {
	MinManagers int32 `json:"minManagers"`
	MaxManagers int32 `json:"maxManagers"`
	// TargetUtilization of concurrent per manager before another is added;
	// default DefaultTargetUtilization.
	TargetUtilization float64 `json:"targetUtilization,omitempty"`
}

// DefaultTargetUtilization is Scaling.TargetUtilization's default.
const DefaultTargetUtilization = 0.7
