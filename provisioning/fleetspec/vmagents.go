package fleetspec

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
)

// FleetImages are the images of what runnerfleet runs for a shared fleet
// beside its managers: the stack config's sharedFleets[].images, each a
// repository with a tag or a digest. An empty one is DefaultFleetImages'.
type FleetImages struct {
	// GC is the fleet binary's image: fleet gc's CronJob and the
	// quota-exporter container of the fleet's Prometheus pod run it.
	GC string `json:"gc,omitempty"`
	// JobReporter is the image of the job reporter every docker+machine
	// VM runs (its entrypoint fleet-agent).
	JobReporter string `json:"jobReporter,omitempty"`
	// NodeExporter is the image of the node_exporter every docker+machine
	// VM runs for the fleet's Prometheus.
	NodeExporter string `json:"nodeExporter,omitempty"`
}

// DefaultNodeExporterImage is Prometheus's node_exporter image at the
// release this tree pins (the Go module github.com/prometheus/node_exporter
// of the same version).
const DefaultNodeExporterImage = "quay.io/prometheus/node-exporter:v1.12.1"

// DefaultFleetImages are the images a fleet runs when the stack config
// names none: the release's fleet and fleet-agent images and the pinned
// node_exporter. This is the one place they are defined.
var DefaultFleetImages = FleetImages{
	GC:           version.Image("fleet"),
	JobReporter:  version.Image("fleet-agent"),
	NodeExporter: DefaultNodeExporterImage,
}

// OrDefault is i with every empty image DefaultFleetImages'.
func (i FleetImages) OrDefault() FleetImages {
	or := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	return FleetImages{
		GC:           or(i.GC, DefaultFleetImages.GC),
		JobReporter:  or(i.JobReporter, DefaultFleetImages.JobReporter),
		NodeExporter: or(i.NodeExporter, DefaultFleetImages.NodeExporter),
	}
}

// DefaultNodeExporterPort is node_exporter's own default port, where the
// fleet's Prometheus scrapes the VMs when the stack config names no other
// (sharedFleets[].monitoring.nodeExporterPort).
const DefaultNodeExporterPort = 9100

// NodeExporter is the node_exporter a docker+machine VM runs. Its Port is
// the one definition of where it listens (Args), where the fleet's
// Prometheus scrapes the VMs (provisioning/sharedfleet's GCE discovery)
// and what the fleet's firewall opens to Prometheus (VMIngress).
type NodeExporter struct {
	Image string
	Port  int
}

// OrDefault is e with an empty image or port the default's.
func (e NodeExporter) OrDefault() NodeExporter {
	if e.Image == "" {
		e.Image = DefaultFleetImages.NodeExporter
	}
	if e.Port == 0 {
		e.Port = DefaultNodeExporterPort
	}
	return e
}

// Args are node_exporter's arguments on a VM whose root file system is
// mounted at /host: the host's metrics, served on every address at Port.
// Flags and values are separate words, never flag=value: the VM's startup
// script reaches docker-machine as one key=value flag (vmfleet).
func (e NodeExporter) Args() []string {
	return []string{"--path.rootfs", "/host", "--web.listen-address", ":" + strconv.Itoa(e.Port)}
}

// VMAgents are what a group's docker+machine VMs run beside the jobs,
// started by their startup script: fleet gc's job reporter and the
// fleet's node_exporter. SharedFleet.Effective fills them from the
// fleet (SharedFleet.VMAgents).
type VMAgents struct {
	JobReporterImage string
	NodeExporter     NodeExporter
}

// OrDefault is a with every empty field the default's.
func (a VMAgents) OrDefault() VMAgents {
	if a.JobReporterImage == "" {
		a.JobReporterImage = DefaultFleetImages.JobReporter
	}
	a.NodeExporter = a.NodeExporter.OrDefault()
	return a
}

// NodeExporterPort is the fleet's node_exporter port.
func (s SharedFleet) NodeExporterPort() int {
	return NodeExporter{Port: s.Monitoring.NodeExporterPort}.OrDefault().Port
}

// VMAgents are what the fleet's docker+machine VMs run beside the jobs.
func (s SharedFleet) VMAgents() VMAgents {
	images := s.Images.OrDefault()
	return VMAgents{
		JobReporterImage: images.JobReporter,
		NodeExporter:     NodeExporter{Image: images.NodeExporter, Port: s.NodeExporterPort()},
	}
}

// RunsNodeExporter reports whether the group's VMs run the fleet's
// node_exporter: docker+machine's do, from their startup script. A
// docker-autoscaler group's VMs boot the group's own image, which the
// program does not start anything on.
func (g ManagerGroup) RunsNodeExporter() bool { return g.access() == AccessDockerMachine }

// Consumers of a fleet's VM ports.
const (
	// ConsumerManagers are the fleet's managers (docker+machine's Docker
	// and SSH, the fleeting connector's SSH or WinRM).
	ConsumerManagers = "managers"
	// ConsumerPrometheus is the fleet's Prometheus (node_exporter).
	ConsumerPrometheus = "prometheus"
)

// VMIngress is one consumer's way into some of a fleet's VMs: the VMs
// tagged Tag, on Ports, from Consumer alone. One firewall rule each.
type VMIngress struct {
	Consumer string
	Tag      string
	Ports    []int
}

// FirewallName is the rule that admits the ingress in cluster's VPC. The
// managers' rules keep the names they had before Prometheus had one;
// Prometheus's end in "-prom" (a GCE name has at most 63 characters, and
// the fleet's namespace is in it).
func (i VMIngress) FirewallName(cluster string) string {
	if i.Consumer == ConsumerPrometheus {
		return VMFirewallName(cluster, i.Tag) + "-prom"
	}
	return VMFirewallName(cluster, i.Tag)
}

// VMIngress is every port a consumer needs on the fleet's VMs, and
// nothing else: for each VM tag the managers' ports of the groups that
// carry it (ManagerGroup.VMPorts), and for the tags of VMs that run
// node_exporter its port for the fleet's Prometheus. Ordered by tag, then
// consumer.
func (s SharedFleet) VMIngress() []VMIngress {
	managers := map[string][]int{}
	exporters := map[string]bool{}
	for _, g := range s.Groups {
		tag := VMNetworkTag(s.Namespace, g.access())
		managers[tag] = g.VMPorts()
		exporters[tag] = exporters[tag] || g.RunsNodeExporter()
	}
	var out []VMIngress
	for tag, ports := range managers {
		out = append(out, VMIngress{Consumer: ConsumerManagers, Tag: tag, Ports: ports})
		if exporters[tag] {
			out = append(out, VMIngress{Consumer: ConsumerPrometheus, Tag: tag, Ports: []int{s.NodeExporterPort()}})
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Tag != out[b].Tag {
			return out[a].Tag < out[b].Tag
		}
		return out[a].Consumer < out[b].Consumer
	})
	return out
}

// SessionPort is where a shared-fleet manager's session server listens
// (the web terminal).
const SessionPort = 8093

// ReservedPorts are the ports node_exporter may not take, and whose they
// are: the runner's metrics and session server, and every port a manager
// uses on a VM (node_exporter shares the VM's network).
func ReservedPorts() map[int]string {
	return map[int]string{
		gitlabrunner.MetricsPort: "gitlab-runner's metrics (listen_address)",
		SessionPort:              "the managers' session server (web terminal)",
		SSHPort:                  "SSH, which the managers use on the VMs",
		DockerPort:               "docker+machine's Docker daemon on the VMs",
		WinRMPort:                "fleeting's WinRM (HTTP) on Windows VMs",
		WinRMSPort:               "fleeting's WinRM (HTTPS) on Windows VMs",
	}
}

// NodeExporterPortProblem says what is wrong with port as node_exporter's,
// and the fix; "" when nothing is.
func NodeExporterPortProblem(port int) string {
	if port < 1024 || port > 65535 {
		return fmt.Sprintf("must be a port from 1024 to 65535 (node_exporter's own default is %d)", DefaultNodeExporterPort)
	}
	if whose, ok := ReservedPorts()[port]; ok {
		return fmt.Sprintf("is %s; choose another port, such as node_exporter's own %d", whose, DefaultNodeExporterPort)
	}
	return ""
}
