package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
)

const (
	vmStack   = "ci-test"
	vmProject = "ci-test-project"
)

// vmStackFile writes a gke stack config with a Windows VM group in its
// production fleet. The group's runner token is a secret (secure), as in
// a real stack; with webhook, its notification URL is a plain value, or a
// secret when secureWebhook.
func vmStackFile(t *testing.T, webhook string, secureWebhook bool) string {
	t.Helper()
	token := "runnerfleet:windowsRunnerToken:\n    secure: AAABAJ1n0tRe4l"
	notify := ""
	if webhook != "" {
		notify = "\n            notify: {webhookURLConfigKey: rotationWebhook}"
		if secureWebhook {
			token += "\n  runnerfleet:rotationWebhook:\n    secure: AAABAHo0kN0tRe4l"
		} else {
			token += "\n  runnerfleet:rotationWebhook: " + webhook
		}
	}
	yaml := `config:
  ` + token + `
  runnerfleet:alertWebhookURL: https://hooks.example.com/alerts/not-real
  runnerfleet:sharedLinux: glrt-sharedLinuxNotReal-1234
  runnerfleet:fleet:
    platform: gke
    clusterName: ci-test
    gitlabURL: https://gitlab.example.com
    controller: {image: registry.example.com/runnerset-controller:v1}
    gcp: {project: ` + vmProject + `, region: us-east1, zones: [us-east1-b, us-east1-c]}
    alerting: {receiver: {webhookURLConfigKey: alertWebhookURL}}
    sharedFleets:
      - name: production
        managerImage: registry.example.com/ci/gitlab-runner-docker-machine:v19.4.0
        vmNetwork: {cidr: 10.30.0.0/20}
        groups:
          - {name: linux, tokenConfigKey: sharedLinux, zone: us-east1-b, machineType: n2d-standard-4, image: runner-vm, maxVMs: 10}
        vmGroups:
          - name: windows-2022
            os: windows
            windowsVersion: "2022"
            machineType: n2d-standard-8
            image: wsrm-2022-12
            zones: [us-east1-b, us-east1-c]
            count: 2
            tokenConfigKey: windowsRunnerToken
            adminSourceRanges: [203.0.113.0/24]` + notify + `
`
	path := filepath.Join(t.TempDir(), "Pulumi."+vmStack+".yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// windowsGroup is a loopback GCE project whose Windows group runs one old
// (blue) manager that has drained, and the group's new image.
func windowsGroup(t *testing.T) *gcetest.Server {
	srv := gcetest.New(gcetest.WithProject(vmProject))
	t.Cleanup(srv.Close)
	srv.AddImage(gcetest.Image{Name: "wsrm-2022-11"})
	srv.AddImage(gcetest.Image{Name: "wsrm-2022-12"})
	srv.AddInstance(gcetest.Instance{Name: "windows-2022-blue-1", Zone: "us-east1-b", MachineType: "n2d-standard-8", SourceImage: "wsrm-2022-11",
		Labels: map[string]string{vmfleet.LabelGroup: "windows-2022", vmfleet.LabelColor: "blue", vmfleet.LabelGeneration: "1", vmfleet.LabelRole: vmfleet.RoleManager}})
	for k, v := range map[string]string{providers.GCEGuestPhaseKey: string(providers.DrainDone), providers.GCEGuestJobsLeftKey: "0"} {
		if err := srv.SetGuestAttribute("us-east1-b", "windows-2022-blue-1", providers.GCEGuestNamespace+"/"+k, v); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

// fleet rotate --stack --group rotates a VM group from the stack config
// alone (no --image, --zone, --machine-type or --project), against the
// loopback GCE: the new color has the stack's image, machine type, count,
// zones, subnetwork and service account, is told the name of the group's
// runner token secret (which the program wrote and only that account may
// read: the token never passes through fleet), and the notification goes
// to the stack's webhook.
func TestFleetRotateRotatesAVMGroupFromTheStackAlone(t *testing.T) {
	srv := windowsGroup(t)
	var mu sync.Mutex
	var posted []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posted = append(posted, string(b))
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	cfg := vmStackFile(t, hook.URL+"/hooks/rotations", false)

	out, err := fleetCmd(t, "rotate", "--stack", vmStack, "--config", cfg, "--group", "windows-2022", "--endpoint", srv.URL(),
		// The fake VMs run no runner to ask (vmfleet's tests check --health runner).
		"--health", "running", "--settle", "0s", "--poll", "50ms")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"VM group windows-2022 of shared fleet production (stack ci-test): windows wsrm-2022-12, 2 on n2d-standard-8 in us-east1-b, us-east1-c",
		"Deleted windows-2022-blue-1", "Rotation of windows-2022 succeeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	account := fleetspec.VMGroupServiceAccountEmail(vmProject, "ci-test", "windows-2022")
	zones := map[string]string{}
	for _, in := range srv.Instances() {
		if in.Labels[vmfleet.LabelColor] != "green" {
			t.Errorf("%s (%s) is left", in.Name, in.Labels[vmfleet.LabelColor])
			continue
		}
		zones[in.Name] = in.Zone
		res := srv.InstanceResource(in.Zone, in.Name)
		if sa := res.GetServiceAccounts(); len(sa) != 1 || sa[0].GetEmail() != account {
			t.Errorf("%s runs as %v, want %s", in.Name, sa, account)
		}
		nic := res.GetNetworkInterfaces()[0]
		if !strings.HasSuffix(nic.GetNetwork(), "/global/networks/ci-test") || !strings.HasSuffix(nic.GetSubnetwork(), "/regions/us-east1/subnetworks/ci-test-production-vms") {
			t.Errorf("%s is in %s %s, want the fleet's VM subnetwork of the cluster's VPC", in.Name, nic.GetNetwork(), nic.GetSubnetwork())
		}
		if got := in.Metadata[vmfleet.RunnerTokenSecretMetadataKey]; got != "projects/ci-test-project/secrets/ci-test-windows-2022-runner-token" || in.MachineType != "n2d-standard-8" || !strings.HasSuffix(in.SourceImage, "wsrm-2022-12") {
			t.Errorf("%s: machine type %s, image %s, token secret %q", in.Name, in.MachineType, in.SourceImage, got)
		}
	}
	if zones["windows-2022-green-1"] != "us-east1-b" || zones["windows-2022-green-2"] != "us-east1-c" {
		t.Errorf("new VMs by zone %v, want one in each of the group's zones", zones)
	}
	mu.Lock()
	defer mu.Unlock()
	var msg struct {
		Text   string           `json:"text"`
		Blocks []map[string]any `json:"blocks"`
	}
	if len(posted) != 1 || json.Unmarshal([]byte(posted[0]), &msg) != nil || !strings.Contains(msg.Text, "windows-2022") || len(msg.Blocks) == 0 {
		t.Errorf("the stack's webhook got %q, want one Slack message on windows-2022", posted)
	}
}

// A flag overrides the stack's value and says so; a group the stack lacks,
// a secret webhook without --webhook, --windows or --provider ec2 with
// --stack are refused naming the key or flag, before anything is created
// or drained.
func TestFleetRotateFromAStackTakesFlagsOverItAndRefusesBadInput(t *testing.T) {
	srv := windowsGroup(t)
	base := []string{"rotate", "--stack", vmStack, "--endpoint", srv.URL(), "--health", "running", "--settle", "0s", "--poll", "50ms"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no such group", []string{"--config", vmStackFile(t, "", false), "--group", "windows-2019"},
			"--group windows-2019: stack ci-test has no such VM group; its VM groups are windows-2022"},
		{"no group", []string{"--config", vmStackFile(t, "", false)}, "--stack ci-test needs --group, the VM group to rotate: windows-2022"},
		{"a secret webhook without --webhook", []string{"--config", vmStackFile(t, "https://hooks.example.com/x", true), "--group", "windows-2022"},
			"runnerfleet:fleet.sharedFleets[0].vmGroups[0].notify.webhookURLConfigKey: config key runnerfleet:rotationWebhook is a secret, which fleet does not decrypt: give the URL with --webhook"},
		{"--windows", []string{"--config", vmStackFile(t, "", false), "--group", "windows-2022", "--windows"}, "drop --windows"},
		{"--provider ec2", []string{"--config", vmStackFile(t, "", false), "--group", "windows-2022", "--provider", "ec2"}, "--provider ec2: the VM groups of stack ci-test run on GCE"},
		{"--config without --stack", []string{"--config", vmStackFile(t, "", false)}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{}, base...), c.args...)
			if c.want == "" {
				args = append([]string{"rotate", "--group", "windows-2022"}, c.args...)
				c.want = "--config reads a VM group from a stack config: add --stack"
			}
			out, err := fleetCmd(t, args...)
			if err == nil || !strings.Contains(err.Error()+out, c.want) {
				t.Fatalf("error %v, want %q\n%s", err, c.want, out)
			}
			if n := len(srv.Calls(http.MethodPost, "/zones/*/instances")); n != 0 {
				t.Errorf("%d instances created", n)
			}
		})
	}

	// The image flag wins over the stack's, and --webhook over its secret.
	var posted atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { posted.Add(1) }))
	t.Cleanup(hook.Close)
	srv.AddImage(gcetest.Image{Name: "wsrm-2022-12-hotfix"})
	out, err := fleetCmd(t, append(base, "--config", vmStackFile(t, "https://hooks.example.com/x", true), "--group", "windows-2022",
		"--image", "wsrm-2022-12-hotfix", "--webhook", hook.URL)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "--image overrides runnerfleet:fleet.sharedFleets[0].vmGroups[0].image (wsrm-2022-12)") {
		t.Errorf("the override is not said:\n%s", out)
	}
	for _, in := range srv.Instances() {
		if !strings.HasSuffix(in.SourceImage, "wsrm-2022-12-hotfix") {
			t.Errorf("%s boots %s", in.Name, in.SourceImage)
		}
	}
	if n := posted.Load(); n != 1 {
		t.Errorf("--webhook got %d notifications, want 1", n)
	}
}

// vmStackFileWithInputs is vmStackFile whose group carries its image's
// inputs instead of its image (the config.toml inline) and declares tags,
// and the same inputs as vmimage takes them.
func vmStackFileWithInputs(t *testing.T, tags string) (string, vmimage.Inputs) {
	t.Helper()
	path := vmStackFile(t, "", false)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	inputs := `imageInputs:
              family: wsrm
              runnerVersion: 17.5.0
              agentVersion: 0.1.0
              runnerConfig: |
                concurrent = 4
            tags: ` + tags
	yaml := strings.Replace(string(b), "image: wsrm-2022-12", inputs, 1)
	if yaml == string(b) {
		t.Fatal("the stack has no image to replace")
	}
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, vmimage.Inputs{Family: "wsrm", OS: "windows", OSVersion: "2022", RunnerVersion: "17.5.0", AgentVersion: "0.1.0", RunnerConfig: []byte("concurrent = 4\n")}
}

// fleet rotate --stack boots the image the group's imageInputs name: an
// --image of another name is refused naming the expected name and the key,
// as are the --image-* flags beside the stack's inputs and an adopted
// runner tagged for another Windows version, before anything is created
// or drained; without --image the group rotates to the inputs' image.
func TestFleetRotateFromAStackBootsOnlyTheImageOfItsInputs(t *testing.T) {
	srv := windowsGroup(t)
	cfg, in := vmStackFileWithInputs(t, "[windows, windows-2022, shared]")
	want, err := vmimage.Name(in)
	if err != nil {
		t.Fatal(err)
	}
	srv.AddImage(gcetest.Image{Name: want, Family: "wsrm"})
	srv.AddImage(gcetest.Image{Name: "wsrm-hand-built", Family: "wsrm"})
	base := []string{"rotate", "--stack", vmStack, "--config", cfg, "--group", "windows-2022", "--endpoint", srv.URL(), "--settle", "0s", "--poll", "50ms"}
	const key = "runnerfleet:fleet.sharedFleets[0].vmGroups[0].imageInputs"

	_, err = fleetCmd(t, append(base, "--health", "running", "--image", "wsrm-hand-built")...)
	if err == nil || !strings.Contains(err.Error(), "--image: image wsrm-hand-built is not the image its inputs name: they name "+want) ||
		!strings.Contains(err.Error(), "(the inputs are "+key+")") || !strings.Contains(err.Error(), "nothing was created or drained") {
		t.Fatalf("another image: %v", err)
	}
	if _, err := fleetCmd(t, append(base, "--health", "running", "--image-runner-version", "17.6.0")...); err == nil ||
		!strings.HasPrefix(err.Error(), "--image-runner-version: the image's inputs are "+key) {
		t.Fatalf("--image-* beside the stack's inputs: %v", err)
	}
	// The group's tags are checked against the adopted runner's in GitLab.
	gl := gitlabserver.New()
	t.Cleanup(gl.Close)
	gl.AddUser("glpat-reader", gitlabserver.User{Admin: true, Scopes: []string{gitlabserver.ScopeReadAPI}})
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("glpat-reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := gl.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"windows", "windows-1809"}})
	id := strconv.FormatInt(old.ID, 10)
	_, err = fleetCmd(t, append(base, "--gitlab-url", gl.URL(), "--gitlab-token-file", tokenFile, "--gitlab-runner-id", id)...)
	if err == nil || !strings.Contains(err.Error(), "--gitlab-runner-id "+id) || !strings.Contains(err.Error(), "windows-1809") || !strings.Contains(err.Error(), "nothing was created") {
		t.Fatalf("a windows-1809 runner for the group's 2022 image: %v", err)
	}
	if n := len(srv.Calls(http.MethodPost, "/zones/*/instances")); n != 0 {
		t.Fatalf("a refused rotation created %d instances", n)
	}

	out, err := fleetCmd(t, append(base, "--health", "running")...)
	if err != nil || !strings.Contains(out, "windows "+want+", 2 on n2d-standard-8") || !strings.Contains(out, "Rotation of windows-2022 succeeded") {
		t.Fatalf("the inputs' image: %v\n%s", err, out)
	}
	for _, vm := range srv.Instances() {
		if vm.Labels[vmfleet.LabelColor] == "green" && !strings.HasSuffix(vm.SourceImage, "/"+want) && vm.SourceImage != want {
			t.Errorf("%s boots %s, want %s", vm.Name, vm.SourceImage, want)
		}
	}
}
