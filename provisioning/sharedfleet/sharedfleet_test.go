package sharedfleet

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

func production() fleetspec.ManagerGroup {
	return fleetspec.ManagerGroup{
		Fleet: "production", Name: "shared-gce", GitLabURL: "https://gitlab.example.com",
		Project: "ci-prod", Region: "us-east1", Zone: "us-east1-c", MachineType: "n2d-standard-2",
		Image: "projects/ci-prod/global/images/family/runner-vm", Spot: ptr.To(true), NetworkTags: []string{"ci-runner"},
		MaxVMs: 100, IdleCount: 20, IdleTime: metav1.Duration{Duration: 30 * time.Minute}, MaxBuilds: 1, CacheBucket: "ci-prod-cache",
		Network: "projects/ci-prod/global/networks/ci", Subnetwork: "projects/ci-prod/regions/us-east1/subnetworks/ci-production-vms",
		Periods: []fleetspec.Period{{Periods: []string{"* * 0-7,19-23 * * mon-fri *", "* * * * * sat,sun *"}, Timezone: "UTC", IdleCount: 5, IdleTime: metav1.Duration{Duration: 10 * time.Minute}}},
	}
}

// autoscaler is production() on docker-autoscaler, with its periods in
// fleeting's 5-field format.
func autoscaler() fleetspec.ManagerGroup {
	g := production()
	g.Executor = fleetspec.ExecutorDockerAutoscaler
	g.Periods[0].Periods = []string{"* 0-7,19-23 * * mon-fri", "* * * * sat,sun"}
	return g
}

func TestEveryExecutorsConfigIsAcceptedByGitLabRunnersOwnStructsAndParsers(t *testing.T) {
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	values, err := schema.Values()
	if err != nil {
		t.Fatal(err)
	}
	windows := autoscaler()
	windows.Name, windows.Windows = "windows", true
	for name, g := range map[string]fleetspec.ManagerGroup{"docker+machine": production(), "docker-autoscaler": autoscaler(), "windows": windows} {
		t.Run(name, func(t *testing.T) {
			c, err := Config(g)
			if err != nil {
				t.Fatal(err)
			}
			out, err := runnerconfig.Render(c)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Check(out); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if err := values.Check(out); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

func TestDockerMachineVMsAreInternalSpotAndNameTheirManager(t *testing.T) {
	c, err := Config(production())
	if err != nil {
		t.Fatal(err)
	}
	r := c.Runners[0]
	opts := strings.Join(r.Machine.MachineOptions, " ")
	for _, want := range []string{"google-use-internal-ip-only=true", "google-preemptible=true", "google-zone=us-east1-c",
		"google-machine-type=n2d-standard-2", "google-label=runnerfleet-manager:production-shared-gce",
		"google-tags=runnerfleet-production-dm,ci-runner", "google-skip-firewall-create=true",
		"google-network=projects/ci-prod/global/networks/ci", "google-subnetwork=projects/ci-prod/regions/us-east1/subnetworks/ci-production-vms"} {
		if !strings.Contains(opts, want) {
			t.Errorf("MachineOptions lack %s: %v", want, r.Machine.MachineOptions)
		}
	}
	if strings.Contains(opts, "google-service-account") {
		t.Errorf("a VM account without vmServiceAccount: %v", r.Machine.MachineOptions)
	}
	g := production()
	g.VMServiceAccount = "ci-vms@ci-prod.iam.gserviceaccount.com"
	if c, err := Config(g); err != nil || !slices.Contains(c.Runners[0].Machine.MachineOptions, "google-service-account=ci-vms@ci-prod.iam.gserviceaccount.com") {
		t.Errorf("the VMs do not run as vmServiceAccount: %v", err)
	}
	if c.Concurrent != fleetspec.DefaultConcurrent || r.Limit != 100 || r.Executor != "docker+machine" || c.LogFormat != "json" ||
		r.Machine.IdleCount != 20 || r.Machine.IdleTime != 1800 || r.Machine.MaxBuilds != 1 || len(r.Machine.Autoscaling) != 1 ||
		r.Cache.GCS.BucketName != "ci-prod-cache" || !strings.Contains(r.Machine.MachineName, "%s") {
		t.Errorf("config %+v / %+v", c, r.Machine)
	}
}

// Every docker+machine VM starts fleet gc's job reporter (fleet-agent
// --report-jobs from the release's fleet-agent image) and allows the guest
// attributes it writes: without them gc can never prove a VM idle. The
// script must reach docker-machine as one key=value metadata item.
func TestDockerMachineVMsStartTheJobReporter(t *testing.T) {
	c, err := Config(production())
	if err != nil {
		t.Fatal(err)
	}
	opts := c.Runners[0].Machine.MachineOptions
	if !slices.Contains(opts, "google-metadata=enable-guest-attributes=TRUE") {
		t.Errorf("the VMs do not allow guest attributes: %v", opts)
	}
	var scripts []string
	for _, o := range opts {
		if s, ok := strings.CutPrefix(o, "google-metadata=startup-script="); ok {
			scripts = append(scripts, s)
		}
	}
	if len(scripts) != 1 {
		t.Fatalf("%d startup scripts in %v, want 1", len(scripts), opts)
	}
	script := scripts[0]
	run := "docker run --detach --name " + vmfleet.JobReporterContainer + " --restart always --network host --user 0 --volume /var/run/docker.sock:/var/run/docker.sock " +
		version.Image("fleet-agent") + " --provider gce --report-jobs\n"
	if !strings.HasPrefix(script, "#!/bin/sh\n") || !strings.Contains(script, "until docker info") || !strings.Contains(script, run) {
		t.Errorf("the startup script does not run the job reporter (%s):\n%s", run, script)
	}
	// And node_exporter, from the pinned image, on the fleet's port.
	exporter := "docker run --detach --name " + vmfleet.NodeExporterContainer + " --restart always --network host --pid host --volume /:/host:ro " +
		fleetspec.DefaultNodeExporterImage + " --path.rootfs /host --web.listen-address :9100\n"
	if !strings.Contains(script, exporter) {
		t.Errorf("the startup script does not run node_exporter (%s):\n%s", exporter, script)
	}
	if strings.ContainsAny(script, "=,") {
		t.Errorf("the startup script holds '=' or ',', which a key=value metadata flag may split:\n%s", script)
	}
	// The script reaches gitlab-runner as written: config.toml, decoded
	// (TestEveryExecutorsConfigIsAcceptedByGitLabRunnersOwnStructsAndParsers
	// checks it against gitlab-runner's structs and the driver's flags).
	b, err := runnerconfig.Render(c)
	if err != nil {
		t.Fatal(err)
	}
	var back runnerconfig.Config
	if _, err := toml.Decode(string(b), &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(back.Runners[0].Machine.MachineOptions, "google-metadata=startup-script="+script) {
		t.Errorf("the script does not survive config.toml:\n%s", b)
	}
}

func TestBadGroupsAreRefusedNamingTheKey(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*fleetspec.ManagerGroup)
		says   []string
	}{
		{"machine type format", func(g *fleetspec.ManagerGroup) { g.MachineType = "n2d_standard_4" }, []string{"fleets.production.groups.shared-gce.machineType", "n2d-standard-4"}},
		{"zone outside the region", func(g *fleetspec.ManagerGroup) { g.Zone = "europe-west1-b" }, []string{".zone", "not a zone of region us-east1"}},
		{"idle above the VM limit", func(g *fleetspec.ManagerGroup) { g.IdleCount = 150 }, []string{".idleCount", "between 0 and maxVMs (100)"}},
		{"idle above the limit in a period", func(g *fleetspec.ManagerGroup) { g.Periods[0].IdleCount = 101 }, []string{".periods[0].idleCount"}},
		{"bad cron", func(g *fleetspec.ManagerGroup) { g.Periods[0].Periods = []string{"* * 25 * * mon-fri *"} }, []string{".periods[0].periods[0]", "not a cron expression"}},
		{"bad time zone", func(g *fleetspec.ManagerGroup) { g.Periods[0].Timezone = "Mars/Olympus" }, []string{".periods[0].timezone"}},
		{"unknown executor", func(g *fleetspec.ManagerGroup) { g.Executor = "shell" }, []string{".executor", `"shell" is not docker+machine or docker-autoscaler`}},
		{"7-field periods on docker-autoscaler", func(g *fleetspec.ManagerGroup) { g.Executor = fleetspec.ExecutorDockerAutoscaler }, []string{".periods[0].periods[0]", "has 7 fields", "5-field unix cron"}},
		{"period active one second a minute", func(g *fleetspec.ManagerGroup) { g.Periods[0].Periods = []string{"0 * 9-17 * * mon-fri *"} }, []string{".periods[0].periods[0]", `the seconds field must be "*"`}},
		{"windows on docker+machine", func(g *fleetspec.ManagerGroup) { g.Windows = true }, []string{".executor", "Windows managers need docker-autoscaler"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := production()
			tc.mutate(&g)
			_, err := Config(g)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not say %q: %v", s, err)
				}
			}
		})
	}
}

func TestMachineTypesThatExistAreAccepted(t *testing.T) {
	for _, mt := range []string{"e2-small", "e2-micro", "n2d-standard-4", "c3-highcpu-8", "custom-4-16384", "n2-custom-2-4096", "c3d-standard-8-lssd"} {
		g := production()
		g.MachineType = mt
		if err := g.Validate(); err != nil {
			t.Errorf("%s: %v", mt, err)
		}
	}
}

func TestWindowsManagersAreWinRMAutoscalersWith400Jobs(t *testing.T) {
	g := production()
	g.Windows = true
	if err := g.Validate(); err == nil || !strings.Contains(err.Error(), "Windows managers need docker-autoscaler") {
		t.Fatalf("windows on docker+machine: %v", err)
	}
	g = autoscaler()
	g.Windows = true
	c, err := Config(g)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Runners[0]
	cc := r.Autoscaler.ConnectorConfig
	if c.Concurrent != 400 || cc.OS != "windows" || cc.Protocol != "winrm" {
		t.Errorf("concurrent %d, connector %+v", c.Concurrent, cc)
	}
	// Windows defaults: a Windows job image, PowerShell, a Windows cache path.
	if r.Docker.Image != WindowsJobImage || r.Shell != "pwsh" || len(r.Docker.Volumes) != 1 || r.Docker.Volumes[0] != `C:\cache` {
		t.Errorf("windows job defaults: image %s, shell %q, volumes %v", r.Docker.Image, r.Shell, r.Docker.Volumes)
	}
	if ports := g.VMPorts(); len(ports) != 2 || ports[0] != fleetspec.WinRMPort || ports[1] != fleetspec.WinRMSPort {
		t.Errorf("windows VM ports %v, want WinRM's", ports)
	}
}

// BenchmarkOraclesPerConfig renders one manager's config.toml and checks it
// with both oracles (keys and values), as every rendered config is.
func BenchmarkOraclesPerConfig(b *testing.B) {
	schema, err := oracle.Load(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	values, err := schema.Values()
	if err != nil {
		b.Fatal(err)
	}
	for name, g := range map[string]fleetspec.ManagerGroup{"docker+machine": production(), "docker-autoscaler": autoscaler()} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, err := Config(g)
				if err != nil {
					b.Fatal(err)
				}
				out, err := runnerconfig.Render(c)
				if err != nil {
					b.Fatal(err)
				}
				if err := schema.Check(out); err != nil {
					b.Fatal(err)
				}
				if err := values.Check(out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
