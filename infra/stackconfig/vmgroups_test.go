package stackconfig

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
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

// withImageInputs gives the Windows group of v image inputs, and returns
// the same inputs as vmimage takes them.
func withImageInputs(v map[string]any) vmimage.Inputs {
	g := at(v, "sharedFleets", 0, "vmGroups", 0)
	delete(g, "image")
	g["imageInputs"] = map[string]any{"family": "wsrm", "runnerVersion": "v17.5.0", "agentVersion": "0.1.0",
		"runnerConfig": "concurrent = 4\n", "files": map[string]any{"install.ps1": "Install-Runner\n"}}
	return vmimage.Inputs{Family: "wsrm", OS: "windows", OSVersion: "2022", RunnerVersion: "17.5.0", AgentVersion: "0.1.0",
		RunnerConfig: []byte("concurrent = 4\n"), Files: map[string][]byte{"install.ps1": []byte("Install-Runner\n")}}
}

// A group with imageInputs boots the image they name (vmimage.Name): its
// image, when left out, is that name; its tags default to windows and
// windows-<version>, and declared ones are kept, sorted.
func TestAVMGroupsImageIsTheNameOfItsInputs(t *testing.T) {
	v := vmGroupStack()
	in := withImageInputs(v)
	want, err := vmimage.Name(in)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Decode(encode(t, v), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	g, _, _ := f.VMGroup("windows-2022")
	if g.Image != want || strings.Join(g.Tags, ",") != "windows,windows-2022" {
		t.Errorf("image %s, tags %v; want %s, windows,windows-2022", g.Image, g.Tags, want)
	}
	if got, _ := vmimage.Name(*VMGroupImageInputs(g)); got != want {
		t.Errorf("VMGroupImageInputs names %s, want %s", got, want)
	}
	// The image given as its name, and declared tags.
	at(v, "sharedFleets", 0, "vmGroups", 0)["image"] = want
	at(v, "sharedFleets", 0, "vmGroups", 0)["tags"] = []any{"windows-2022", "shared", "windows"}
	f, err = Decode(encode(t, v), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	if g, _, _ := f.VMGroup("windows-2022"); g.Image != want || strings.Join(g.Tags, ",") != "shared,windows,windows-2022" {
		t.Errorf("image %s, tags %v", g.Image, g.Tags)
	}
	again, err := Decode([]byte(f.JSON()), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	if g, _, _ := again.VMGroup("windows-2022"); g.Image != want {
		t.Errorf("decoded again: image %s", g.Image)
	}
}

// An image other than the one the inputs name, a version tag for another
// Windows version and a bad input are refused naming the key (and the
// expected name).
func TestAVMGroupsImageAndTagsMustAgreeWithItsInputs(t *testing.T) {
	const w = "runnerfleet:fleet.sharedFleets[0].vmGroups[0]."
	v := vmGroupStack()
	want, _ := vmimage.Name(withImageInputs(v))
	cases := []struct {
		name   string
		mutate func(g map[string]any)
		want   string
	}{
		{"another image", func(g map[string]any) { g["image"] = "wsrm-hand-built" },
			w + `image: Invalid value: "wsrm-hand-built": is not the image its imageInputs name, ` + want},
		{"a tag for another Windows version", func(g map[string]any) { g["tags"] = []any{"windows", "windows-1809"} },
			w + `tags[1]: Invalid value: "windows-1809": tag windows-1809 names windows 1809, but the image's os-version is 2022`},
		{"a tag for another Windows version without imageInputs", func(g map[string]any) {
			delete(g, "imageInputs")
			g["tags"] = []any{"windows-2019"}
		}, w + `tags[0]: Invalid value: "windows-2019"`},
		{"no runner version", func(g map[string]any) { delete(at(g, "imageInputs"), "runnerVersion") },
			w + `imageInputs.runnerVersion: Invalid value: "" is not a version`},
		{"no config.toml", func(g map[string]any) { delete(at(g, "imageInputs"), "runnerConfig") },
			w + `imageInputs.runnerConfig: Invalid value: required`},
		{"a family GCE refuses", func(g map[string]any) { at(g, "imageInputs")["family"] = "WSRM" },
			w + `imageInputs.family: Invalid value: "WSRM" is not a family name`},
		{"an OS version for Windows", func(g map[string]any) { at(g, "imageInputs")["osVersion"] = "2019" },
			w + `imageInputs.osVersion: Forbidden: a windows group's image runs its windowsVersion (2022)`},
		{"an unknown input", func(g map[string]any) { at(g, "imageInputs")["runnerVerison"] = "17.5.0" },
			w + `imageInputs.runnerVerison: Forbidden: unknown key`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := vmGroupStack()
			withImageInputs(v)
			c.mutate(at(v, "sharedFleets", 0, "vmGroups", 0))
			_, err := Decode(encode(t, v), "gke-shared")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v\nwant %q", err, c.want)
			}
		})
	}
	// A Linux group's image is named from its imageInputs.osVersion.
	v = vmGroupStack()
	lin := at(v, "sharedFleets", 1, "vmGroups", 0)
	delete(lin, "image")
	lin["imageInputs"] = map[string]any{"family": "lrm", "runnerVersion": "17.5.0", "agentVersion": "0.1.0", "runnerConfig": "concurrent = 4\n"}
	if _, err := Decode(encode(t, v), "gke-shared"); err == nil || !strings.Contains(err.Error(), "runnerfleet:fleet.sharedFleets[1].vmGroups[0].imageInputs.osVersion: Invalid value") {
		t.Fatalf("a linux image without its version: %v", err)
	}
	at(lin, "imageInputs")["osVersion"] = "debian-12"
	f, err := Decode(encode(t, v), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	if g, _, _ := f.VMGroup("linux-vm"); !strings.HasPrefix(g.Image, "lrm-") || strings.Join(g.Tags, ",") != "linux,linux-debian-12" {
		t.Errorf("linux group: image %s, tags %v", g.Image, g.Tags)
	}
}
