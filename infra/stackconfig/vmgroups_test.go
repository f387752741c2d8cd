package stackconfig

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

// vmGroupStack is sharedFleetStack with a Windows VM group in production
// and a Linux one in staging.
func vmGroupStack() map[string]any {
	v := sharedFleetStack()
	at(v, "sharedFleets", 0)["vmGroups"] = []any{map[string]any{
		"name": "windows-2022", "os": "windows", "windowsVersion": "2022",
		"machineType": "n2d-standard-8", "image": "family/wsrm-2022", "tokenConfigKey": "windowsRunnerToken",
		"adminSourceRanges": []any{"203.0.113.0/24"}, "rdpSourceRanges": []any{"198.51.100.0/28"},
		"notify": map[string]any{"webhookURLConfigKey": "rotationWebhook"},
	}}
	at(v, "sharedFleets", 1)["vmGroups"] = []any{map[string]any{
		"name": "linux-vm", "os": "linux", "machineType": "e2-standard-4", "image": "runner-manager",
		"tokenConfigKey": "linuxVMToken", "zones": []any{"europe-west1-c", "europe-west1-d"}, "count": 2, "drainTimeout": "5h",
	}}
	return v
}

func TestVMGroupsDecodeWithDefaultsDefinedOnce(t *testing.T) {
	f, err := Decode(encode(t, vmGroupStack()), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	win, fleet, key := f.VMGroup("windows-2022")
	if key == nil || key.String() != "runnerfleet:fleet.sharedFleets[0].vmGroups[0]" {
		t.Fatalf("group windows-2022 at %v", key)
	}
	if _, _, key := f.VMGroup("windows-2019"); key != nil {
		t.Errorf("a group that is not there found at %s", key)
	}
	if fleet.Name != "production" || win.Fleet != "production" {
		t.Errorf("fleet %q, group's fleet %q", fleet.Name, win.Fleet)
	}
	// The defaults: one manager in the gcp section's first zone, drained
	// for the fleet's job timeout and gitlab-runner's margin, Slack.
	if win.Count != fleetspec.DefaultVMGroupCount || strings.Join(win.Zones, ",") != "europe-west1-b" {
		t.Errorf("count %d, zones %v", win.Count, win.Zones)
	}
	if win.DrainTimeout.Duration != 3*time.Hour+10*time.Minute || win.Notify.Format != fleetspec.NotifySlack {
		t.Errorf("drain timeout %s, notify %+v", win.DrainTimeout.Duration, win.Notify)
	}
	if win.Project != "ci-project-1" || win.Network != "projects/ci-project-1/global/networks/runnerfleet-gke-shared" ||
		win.Subnetwork != "projects/ci-project-1/regions/europe-west1/subnetworks/runnerfleet-gke-shared-production-vms" {
		t.Errorf("project %q, network %q, subnetwork %q", win.Project, win.Network, win.Subnetwork)
	}
	lin, _, _ := f.VMGroup("linux-vm")
	if lin.Count != 2 || strings.Join(lin.Zones, ",") != "europe-west1-c,europe-west1-d" || lin.DrainTimeout.Duration != 5*time.Hour || lin.Notify != nil {
		t.Errorf("linux group %+v", lin)
	}
	if got := strings.Join(f.VMGroupNames(), ","); got != "windows-2022,linux-vm" {
		t.Errorf("names %s", got)
	}
	// The runner tokens and the webhook are config secrets, checked before
	// anything is declared.
	var keys []string
	for _, s := range f.ConfigSecrets() {
		if strings.Contains(s.Path.String(), "vmGroups") {
			keys = append(keys, s.Path.String()+"="+s.Key)
		}
	}
	want := "runnerfleet:fleet.sharedFleets[0].vmGroups[0].tokenConfigKey=windowsRunnerToken," +
		"runnerfleet:fleet.sharedFleets[0].vmGroups[0].notify.webhookURLConfigKey=rotationWebhook," +
		"runnerfleet:fleet.sharedFleets[1].vmGroups[0].tokenConfigKey=linuxVMToken"
	if strings.Join(keys, ",") != want {
		t.Errorf("config secrets\n %s\nwant\n %s", strings.Join(keys, ","), want)
	}
	// Decoding the decoded groups again changes nothing: the defaults are
	// resolved once.
	again, err := Decode([]byte(f.JSON()), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.SharedFleets {
		a, _ := json.Marshal(f.SharedFleets[i].VMGroups)
		b, _ := json.Marshal(again.SharedFleets[i].VMGroups)
		if string(a) != string(b) {
			t.Errorf("decoding the decoded groups changed them:\n%s\n%s", a, b)
		}
	}
}

func TestBadVMGroupsAreRefusedNamingTheKey(t *testing.T) {
	win := func(v map[string]any) map[string]any { return at(v, "sharedFleets", 0, "vmGroups", 0) }
	lin := func(v map[string]any) map[string]any { return at(v, "sharedFleets", 1, "vmGroups", 0) }
	const w = "runnerfleet:fleet.sharedFleets[0].vmGroups[0]."
	const l = "runnerfleet:fleet.sharedFleets[1].vmGroups[0]."
	cases := []struct {
		name   string
		mutate func(v map[string]any)
		want   []string
	}{
		{"WinRM and metrics open to the internet", func(v map[string]any) { win(v)["adminSourceRanges"] = []any{"203.0.113.0/24", "0.0.0.0/0"} },
			[]string{w + "adminSourceRanges[1]: Forbidden: 0.0.0.0/0 would open WinRM, the runner's metrics and windows_exporter to the whole internet"}},
		{"SSH and metrics open to every IPv6 address", func(v map[string]any) { lin(v)["adminSourceRanges"] = []any{"::/0"} },
			[]string{l + "adminSourceRanges[0]: Forbidden: ::/0 would open SSH, the runner's metrics and node_exporter to the whole internet"}},
		{"a Windows group without its version", func(v map[string]any) { delete(win(v), "windowsVersion") },
			[]string{w + "windowsVersion: Required value: the Windows Server version"}},
		{"a Linux group with a Windows version", func(v map[string]any) { lin(v)["windowsVersion"] = "2022" },
			[]string{l + "windowsVersion: Forbidden: only for os: windows"}},
		{"RDP to Linux", func(v map[string]any) { lin(v)["rdpSourceRanges"] = []any{"198.51.100.0/28"} },
			[]string{l + "rdpSourceRanges: Forbidden: Linux managers have no Remote Desktop"}},
		{"an unknown OS", func(v map[string]any) { win(v)["os"] = "macos" },
			[]string{w + `os: Unsupported value: "macos": supported values: "windows", "linux"`}},
		{"no OS", func(v map[string]any) { delete(win(v), "os") }, []string{w + "os: Required value: windows or linux"}},
		{"a range with host bits", func(v map[string]any) { win(v)["rdpSourceRanges"] = []any{"198.51.100.7/28"} },
			[]string{w + `rdpSourceRanges[0]: Invalid value: "198.51.100.7/28": host bits are set; did you mean 198.51.100.0/28?`}},
		{"not a range", func(v map[string]any) { win(v)["adminSourceRanges"] = []any{"office"} },
			[]string{w + `adminSourceRanges[0]: Invalid value: "office": a CIDR`}},
		{"a zone of another region", func(v map[string]any) { lin(v)["zones"] = []any{"us-east1-b"} },
			[]string{l + `zones[0]: Invalid value: "us-east1-b": a zone of region europe-west1`}},
		{"no token", func(v map[string]any) { delete(win(v), "tokenConfigKey") },
			[]string{w + "tokenConfigKey: Required value"}},
		{"a drain shorter than the fleet's jobs", func(v map[string]any) { lin(v)["drainTimeout"] = "1h" },
			[]string{l + `drainTimeout: Invalid value: "1h0m0s": below the fleet's jobTimeout (3h0m0s)`}},
		{"a notify format nobody reads", func(v map[string]any) { at(win(v), "notify")["format"] = "teams" },
			[]string{w + `notify.format: Unsupported value: "teams"`}},
		{"a notify without its secret", func(v map[string]any) { win(v)["notify"] = map[string]any{"format": "json"} },
			[]string{w + "notify.webhookURLConfigKey: Required value"}},
		{"too many managers", func(v map[string]any) { lin(v)["count"] = 51 },
			[]string{l + "count: Invalid value: 51: between 1 and 50"}},
		{"two groups of one name", func(v map[string]any) { lin(v)["name"] = "windows-2022" },
			[]string{l + "name: Duplicate value: \"windows-2022: also runnerfleet:fleet.sharedFleets[0].vmGroups[0]'s name"}},
		{"a name too long for its VMs", func(v map[string]any) { lin(v)["name"] = "linux-managers-of-the-platform-team-abc" },
			[]string{l + `name: Invalid value: "linux-managers-of-the-platform-team-abc"`}},
		{"an unknown key", func(v map[string]any) { win(v)["rdpSourceRange"] = []any{"198.51.100.0/28"} },
			[]string{w + `rdpSourceRange: Forbidden: unknown key; did you mean "rdpSourceRanges"?`}},
		{"no machine type", func(v map[string]any) { delete(win(v), "machineType") },
			[]string{w + `machineType: Invalid value: "": a Compute Engine machine type`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := vmGroupStack()
			c.mutate(v)
			_, err := Decode(encode(t, v), "gke-shared")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range c.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}
