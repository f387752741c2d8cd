package fleetspec

import (
	"reflect"
	"strings"
	"testing"
)

// Every consumer of the VMs gets exactly its ports, one entry per VM tag:
// the managers their executor's, the fleet's Prometheus node_exporter's
// port on the VMs that run it (docker+machine's), at the fleet's port.
func TestVMIngressIsEveryConsumersPortsAndNoMore(t *testing.T) {
	s := SharedFleet{Namespace: "prod", Monitoring: SharedFleetMonitoring{NodeExporterPort: 9300}, Groups: []ManagerGroup{
		{Name: "linux"}, {Name: "linux-2"},
		{Name: "fleeting", Executor: ExecutorDockerAutoscaler},
		{Name: "windows", Executor: ExecutorDockerAutoscaler, Windows: true},
	}}
	want := []VMIngress{
		{ConsumerManagers, "runnerfleet-prod-dm", []int{22, 2376}},
		{ConsumerPrometheus, "runnerfleet-prod-dm", []int{9300}},
		{ConsumerManagers, "runnerfleet-prod-ssh", []int{22}},
		{ConsumerManagers, "runnerfleet-prod-winrm", []int{5985, 5986}},
	}
	if got := s.VMIngress(); !reflect.DeepEqual(got, want) {
		t.Errorf("VMIngress:\n%v\nwant\n%v", got, want)
	}
	if got := want[1].FirewallName("c"); got != "c-runnerfleet-prod-dm-prom" {
		t.Errorf("Prometheus's rule is %s", got)
	}
	if got := want[0].FirewallName("c"); got != VMFirewallName("c", "runnerfleet-prod-dm") {
		t.Errorf("the managers' rule is %s, not the name it had", got)
	}
	// A fleet without docker+machine VMs opens no exporter port.
	s.Groups = s.Groups[2:]
	for _, in := range s.VMIngress() {
		if in.Consumer == ConsumerPrometheus {
			t.Errorf("docker-autoscaler VMs run no node_exporter, but %v", in)
		}
	}
}

// The port is one definition: the exporter's flags, the fleet's port and
// the defaults agree.
func TestNodeExporterListensOnTheFleetsPort(t *testing.T) {
	s := SharedFleet{Monitoring: SharedFleetMonitoring{NodeExporterPort: 9300}}
	a := s.VMAgents()
	if got := strings.Join(a.NodeExporter.Args(), " "); got != "--path.rootfs /host --web.listen-address :9300" {
		t.Errorf("node_exporter %s", got)
	}
	if a.NodeExporter.Image != DefaultNodeExporterImage || a.JobReporterImage != DefaultFleetImages.JobReporter {
		t.Errorf("agents %+v, want the default images", a)
	}
	if got := (SharedFleet{}).VMAgents().NodeExporter.Port; got != DefaultNodeExporterPort {
		t.Errorf("default port %d", got)
	}
	if got := (ManagerGroup{}).Agents(); got != (SharedFleet{}).VMAgents() {
		t.Errorf("a group without agents runs %+v, not the fleet's defaults", got)
	}
	images := FleetImages{JobReporter: "r.example.com/agent:v2"}.OrDefault()
	if images.JobReporter != "r.example.com/agent:v2" || images.GC != DefaultFleetImages.GC || images.NodeExporter != DefaultFleetImages.NodeExporter {
		t.Errorf("OrDefault %+v", images)
	}
}

func TestNodeExporterPortProblems(t *testing.T) {
	for port, says := range map[int]string{
		9252: "gitlab-runner's metrics", 8093: "session server", 22: "from 1024", 2376: "Docker daemon",
		5985: "WinRM", 5986: "WinRM", 80: "from 1024", 70000: "from 1024", -1: "from 1024",
	} {
		if got := NodeExporterPortProblem(port); !strings.Contains(got, says) || !strings.Contains(got, "9100") {
			t.Errorf("port %d: %q, want it to say %q and name the default", port, got, says)
		}
	}
	for _, port := range []int{9100, 9200, 19100} {
		if got := NodeExporterPortProblem(port); got != "" {
			t.Errorf("port %d: %q", port, got)
		}
	}
}
