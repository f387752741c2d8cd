package fleetspec

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
)

// A group's account ID is a valid GCE service account ID for every group
// name the stack config allows, and differs between groups and clusters.
func TestVMGroupServiceAccountIDsAreValidAndDistinct(t *testing.T) {
	accountID := regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)
	seen := map[string]string{}
	for _, cluster := range []string{"ci-shared", "runnerfleet-gke-shared"} {
		for _, name := range []string{"w", "windows-2022", "windows-2022-", "a-group-name-of-exactly-forty-characters"[:40], "linux-vm"} {
			id := VMGroupServiceAccountID(cluster, name)
			if !accountID.MatchString(id) {
				t.Errorf("%s/%s: %q is not a service account ID", cluster, name, id)
			}
			if other, ok := seen[id]; ok {
				t.Errorf("%s/%s and %s share the account %s", cluster, name, other, id)
			}
			seen[id] = cluster + "/" + name
		}
	}
}

// The ports of a group are defined once and differ by OS: Prometheus
// reaches the runner's metrics and the host exporter; the admin ranges
// WinRM or SSH and the same; RDP only on Windows and only when listed.
func TestVMGroupIngressByOS(t *testing.T) {
	win := VMGroup{Name: "w", OS: OSWindows, AdminSourceRanges: []string{"203.0.113.0/24"}, RDPSourceRanges: []string{"198.51.100.0/28"}}
	lin := VMGroup{Name: "l", OS: OSLinux}
	got := func(g VMGroup) string {
		var out []string
		for _, in := range g.Ingress() {
			out = append(out, fmt.Sprintf("%s%v%v", in.Consumer, in.Ports, in.Sources))
		}
		return fmt.Sprint(out)
	}
	if s := got(win); s != "[prom[9252 9182][] admin[5985 5986 9252 9182][203.0.113.0/24] rdp[3389][198.51.100.0/28]]" {
		t.Errorf("windows: %s", s)
	}
	if s := got(lin); s != "[prom[9252 9100][]]" {
		t.Errorf("linux: %s", s)
	}
	lin.AdminSourceRanges = []string{"203.0.113.0/24"}
	if ports := lin.Ingress()[1].Ports; !slices.Equal(ports, []int{SSHPort, 9252, DefaultNodeExporterPort}) {
		t.Errorf("linux admin ports %v", ports)
	}
}
