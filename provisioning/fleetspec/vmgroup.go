package fleetspec

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
)

// Operating systems of a VM manager group.
const (
	OSWindows = "windows"
	OSLinux   = "linux"
)

// VMGroupOSes are the operating systems a VM group may run.
var VMGroupOSes = []string{OSWindows, OSLinux}

// Ports of a VM manager, beside gitlab-runner's metrics
// (gitlabrunner.MetricsPort) and the admin ports (WinRM, SSH) the
// managers of the shared fleets use too.
const (
	// WindowsExporterPort is windows_exporter's own default port, where a
	// Windows manager's host metrics are scraped.
	WindowsExporterPort = 9182
	// RDPPort is Remote Desktop, opened only to a group's rdpSourceRanges.
	RDPPort = 3389
)

// VMGroup is a group of manager VMs of a shared fleet: gitlab-runner (and
// fleet-agent, the drain agent) installed on each VM's image rather than
// run in Kubernetes, as Windows managers are. The program declares the
// group's identity, its firewall rules and its monitoring (by the fleet's
// Prometheus); the VMs themselves are made and replaced, blue/green, by
// fleet rotate --stack <stack> --group <name>, which reads the group from
// here. The stack config's sharedFleets[].vmGroups[] decode into it.
type VMGroup struct {
	// Name names the group: its VMs carry the label runnerfleet-group=<name>
	// (vmfleet.LabelGroup) and are named <name>-<color>-<n>. Unique in the
	// stack.
	Name string `json:"name"`
	// OS is windows or linux.
	OS string `json:"os"`
	// WindowsVersion is the Windows Server version of the image (2019,
	// 2022, 2025, …); required for windows, refused for linux.
	WindowsVersion string `json:"windowsVersion,omitempty"`
	// MachineType of the VMs, such as n2d-standard-8.
	MachineType string `json:"machineType"`
	// Zones of the region the VMs are spread over, in turn; default the
	// gcp section's first zone.
	Zones []string `json:"zones,omitempty"`
	// Count of managers; default DefaultVMGroupCount.
	Count int `json:"count,omitempty"`
	// Image the managers boot (an image name, family/<family>, or a
	// resource path), as fleet rotate's --image takes it.
	//
	// With ImageInputs it may be left out: it is then the name the inputs
	// give; given, it must be that name.
	Image string `json:"image"`
	// ImageInputs are what goes into the group's image (vmimage.Inputs;
	// the OS and its version are the group's os and windowsVersion):
	// the stack config names the image from them, and fleet rotate
	// --stack boots only the image of that name.
	ImageInputs *VMImageInputs `json:"imageInputs,omitempty"`
	// Tags are the tags of the group's runners; default <os> and
	// <os>-<version> (windows, windows-2022). A version tag
	// (windows-<digit>…) must name the group's version. The stack config
	// fills the default and sorts them; fleet rotate --stack checks an
	// adopted runner's tags in GitLab against them.
	Tags []string `json:"tags,omitempty"`
	// TokenConfigKey names the stack config secret holding the runner's
	// authentication token (glrt-…): pulumi config set --secret <key> glrt-…
	// The program keeps it in a Secret Manager secret only the group's
	// account may read (VMGroupTokenSecretID).
	TokenConfigKey string `json:"tokenConfigKey"`
	// AdminSourceRanges may reach the managers' WinRM (windows) or SSH
	// (linux), gitlab-runner's metrics and the host exporter's port,
	// beside the fleet's Prometheus: the operators' and fleet rotate's
	// addresses (its health check reads the runner's metrics). Never
	// 0.0.0.0/0.
	AdminSourceRanges []string `json:"adminSourceRanges,omitempty"`
	// RDPSourceRanges may reach Remote Desktop (3389) on Windows managers;
	// without it no rule opens RDP.
	RDPSourceRanges []string `json:"rdpSourceRanges,omitempty"`
	// DrainTimeout is how long fleet rotate waits for the old managers'
	// jobs; default the fleet's jobTimeout plus gitlab-runner's drain
	// margin, and never less than the jobTimeout.
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`
	// Notify is where fleet rotate reports each rotation; none without it.
	Notify *VMGroupNotify `json:"notify,omitempty"`

	// Fleet (the fleet's namespace), Project, Network and Subnetwork (the
	// fleet's VM subnetwork, resource paths) come from the fleet and the
	// stack: the fleet's Effective fills them.
	Fleet      string `json:"-"`
	Project    string `json:"-"`
	Network    string `json:"-"`
	Subnetwork string `json:"-"`
}

// VMImageInputs are the inputs of a VM group's image a stack config
// carries. The files are inline text, not paths: the stack config is
// decoded from its bytes alone (by the program, and by fleet from the
// stack file compiled into it), so it reads no other file.
type VMImageInputs struct {
	// Family is the image family, the name's prefix (wsrm).
	Family string `json:"family"`
	// OSVersion is the Linux base (debian-12) of a linux group's image;
	// a windows group's is its windowsVersion.
	OSVersion string `json:"osVersion,omitempty"`
	// RunnerVersion is the gitlab-runner version the image installs.
	RunnerVersion string `json:"runnerVersion"`
	// AgentVersion is the fleet-agent version the image installs.
	AgentVersion string `json:"agentVersion"`
	// RunnerConfig is the config.toml the image installs, as text: its
	// template, never a token.
	RunnerConfig string `json:"runnerConfig"`
	// Files are other files the image build installs or runs (its install
	// script, say), by name, as text.
	Files map[string]string `json:"files,omitempty"`
}

// VMGroupNotify is the webhook fleet rotate reports a group's rotations
// to, on success and on failure.
type VMGroupNotify struct {
	// WebhookURLConfigKey names the stack config secret holding the
	// webhook's URL (Slack's incoming webhook URL, say): pulumi config set
	// --secret <key> https://…
	WebhookURLConfigKey string `json:"webhookURLConfigKey"`
	// Format is the payload: slack (the default) or json.
	Format string `json:"format,omitempty"`
}

// VM group defaults.
const (
	// DefaultVMGroupCount is a group's managers when it does not say.
	DefaultVMGroupCount = 1
	// MaxVMGroupCount caps a group's managers.
	MaxVMGroupCount = 50
)

// The payloads of fleet rotate's notifications (vmfleet.Webhook): Slack's
// incoming-webhook message, or the rotation's report as JSON.
const (
	NotifySlack = "slack"
	NotifyJSON  = "json"
	// DefaultNotifyFormat is a group's when it does not say.
	DefaultNotifyFormat = NotifySlack
)

// NotifyFormats are the payloads there are, the default first.
var NotifyFormats = []string{NotifySlack, NotifyJSON}

// IsWindows reports whether the group's managers run Windows.
func (g VMGroup) IsWindows() bool { return g.OS == OSWindows }

// ExporterPort is where the managers' host exporter listens:
// windows_exporter's on Windows, node_exporter's on Linux.
func (g VMGroup) ExporterPort() int {
	if g.IsWindows() {
		return WindowsExporterPort
	}
	return DefaultNodeExporterPort
}

// Exporter names the host exporter the managers run.
func (g VMGroup) Exporter() string {
	if g.IsWindows() {
		return "windows_exporter"
	}
	return "node_exporter"
}

// MetricsPorts are the ports the fleet's Prometheus scrapes on each
// manager: gitlab-runner's metrics and the host exporter's.
func (g VMGroup) MetricsPorts() []int {
	return []int{gitlabrunner.MetricsPort, g.ExporterPort()}
}

// AdminPorts are the ports the group's adminSourceRanges reach: WinRM
// (HTTP and HTTPS) on Windows, SSH on Linux, and the metrics ports.
func (g VMGroup) AdminPorts() []int {
	admin := []int{SSHPort}
	if g.IsWindows() {
		admin = []int{WinRMPort, WinRMSPort}
	}
	return append(admin, g.MetricsPorts()...)
}

// ConcurrentOrDefault is the concurrent jobs of each manager, as its
// saturation alert reads it: WindowsConcurrent on Windows,
// DefaultConcurrent on Linux.
func (g VMGroup) ConcurrentOrDefault() int {
	if g.IsWindows() {
		return WindowsConcurrent
	}
	return DefaultConcurrent
}

// DrainTimeoutOr is the group's drain timeout for a fleet whose jobs run
// at most jobTimeout.
func (g VMGroup) DrainTimeoutOr(jobTimeout time.Duration) time.Duration {
	if g.DrainTimeout != nil {
		return g.DrainTimeout.Duration
	}
	return jobTimeout + gitlabrunner.DrainMargin
}

// NotifyFormat is the group's notification payload.
func (g VMGroup) NotifyFormat() string {
	if g.Notify == nil || g.Notify.Format == "" {
		return DefaultNotifyFormat
	}
	return g.Notify.Format
}

// VMGroupServiceAccountID is the account ID of the Google service account
// the managers of group name in cluster run as: the group's name (cut to
// 21 characters) and 8 hex digits of a hash of cluster and name, within
// GCE's 6 to 30 characters and unique per cluster and group. The program
// creates it, and fleet rotate runs the group's VMs as it.
func VMGroupServiceAccountID(cluster, name string) string {
	sum := sha256.Sum256([]byte(cluster + "/" + name))
	short := name
	if len(short) > 21 {
		short = short[:21]
	}
	for len(short) > 0 && short[len(short)-1] == '-' {
		short = short[:len(short)-1]
	}
	return short + "-" + hex.EncodeToString(sum[:])[:8]
}

// VMGroupServiceAccountEmail is that account's email in project.
func VMGroupServiceAccountEmail(project, cluster, name string) string {
	return VMGroupServiceAccountID(cluster, name) + "@" + project + ".iam.gserviceaccount.com"
}

// VMGroupRoles are the project roles of a group's service account, and
// nothing else: its managers write their logs and metrics to Cloud
// Logging and Monitoring (the Ops Agent, a runner's log shipping). The
// drain agent needs no role: it reads the drain request from the VM's
// metadata server and reports through guest attributes, which the VM
// itself writes without IAM. The one other grant is RunnerTokenSecretRole
// on the group's own runner token secret.
var VMGroupRoles = []string{"roles/logging.logWriter", "roles/monitoring.metricWriter"}

// RunnerTokenSecretRole lets a group's account read its runner token
// secret (VMGroupTokenSecretID), granted on that secret alone.
const RunnerTokenSecretRole = "roles/secretmanager.secretAccessor"

// VMGroupTokenSecretID is the Secret Manager secret, in the group's
// project, that holds the runner token of group name in cluster: the
// program writes it from the group's tokenConfigKey, the group's account
// alone may read it, and fleet rotate tells the new VMs its name.
func VMGroupTokenSecretID(cluster, name string) string { return cluster + "-" + name + "-runner-token" }

// VMGroupTokenSecret is that secret's resource name in project.
func VMGroupTokenSecret(project, cluster, name string) string {
	return "projects/" + project + "/secrets/" + VMGroupTokenSecretID(cluster, name)
}

// Consumers of a VM group's ports.
const (
	// VMConsumerPrometheus is the fleet's Prometheus (runner metrics and
	// the host exporter), from the cluster's pods range.
	VMConsumerPrometheus = "prom"
	// VMConsumerAdmin are the group's adminSourceRanges (WinRM or SSH,
	// and the metrics ports).
	VMConsumerAdmin = "admin"
	// VMConsumerRDP are the group's rdpSourceRanges (Remote Desktop).
	VMConsumerRDP = "rdp"
)

// VMGroupIngress is one consumer's way into a VM group's managers: one
// firewall rule, targeting the group's service account.
type VMGroupIngress struct {
	Consumer string
	Ports    []int
	// Sources are the consumer's ranges; nil for VMConsumerPrometheus,
	// whose range is the cluster's pods range (the program's to know).
	Sources []string
}

// FirewallName is the rule of the ingress in cluster's VPC.
func (i VMGroupIngress) FirewallName(cluster, group string) string {
	return cluster + "-" + group + "-" + i.Consumer
}

// Ingress is every way into the group's managers, and nothing else: the
// fleet's Prometheus to the metrics ports, the admin ranges (when listed)
// to the admin ports, and the RDP ranges (when listed) to RDP.
func (g VMGroup) Ingress() []VMGroupIngress {
	out := []VMGroupIngress{{Consumer: VMConsumerPrometheus, Ports: g.MetricsPorts()}}
	if len(g.AdminSourceRanges) > 0 {
		out = append(out, VMGroupIngress{Consumer: VMConsumerAdmin, Ports: g.AdminPorts(), Sources: slices.Clone(g.AdminSourceRanges)})
	}
	if len(g.RDPSourceRanges) > 0 {
		out = append(out, VMGroupIngress{Consumer: VMConsumerRDP, Ports: []int{RDPPort}, Sources: slices.Clone(g.RDPSourceRanges)})
	}
	return out
}

// effective is g with its defaults and what it takes from fleet s and
// platform p.
func (g VMGroup) effective(s SharedFleet, p Platform, firstZone string) VMGroup {
	if g.Count == 0 {
		g.Count = DefaultVMGroupCount
	}
	if len(g.Zones) == 0 && firstZone != "" {
		g.Zones = []string{firstZone}
	}
	g.Zones = slices.Clone(g.Zones)
	g.Tags = slices.Clone(g.Tags)
	if g.DrainTimeout == nil {
		g.DrainTimeout = &metav1.Duration{Duration: g.DrainTimeoutOr(s.JobTimeoutOrDefault())}
	}
	if g.Notify != nil {
		n := *g.Notify
		n.Format = g.NotifyFormat()
		g.Notify = &n
	}
	g.Fleet = s.Namespace
	if p.Project != "" {
		g.Project = p.Project
	}
	if p.Network != "" {
		g.Network = p.Network
	}
	if p.Project != "" && p.Region != "" {
		g.Subnetwork = s.VMSubnetwork(p.Project, p.Region, p.Cluster)
	}
	return g
}
