package sharedfleet

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

func production() ManagerGroup {
	return ManagerGroup{
		Fleet: "production", Name: "shared-gce", GitLabURL: "https://gitlab.example.com",
		Project: "ci-prod", Region: "us-east1", Zone: "us-east1-c", MachineType: "n2d-standard-2",
		Image: "projects/ci-prod/global/images/family/runner-vm", Spot: ptr.To(true), NetworkTags: []string{"ci-runner"},
		MaxVMs: 100, IdleCount: 20, IdleTime: metav1.Duration{Duration: 30 * time.Minute}, MaxBuilds: 1, CacheBucket: "ci-prod-cache",
		Periods: []Period{{Periods: []string{"* * 0-7,19-23 * * mon-fri *", "* * * * * sat,sun *"}, Timezone: "UTC", IdleCount: 5, IdleTime: metav1.Duration{Duration: 10 * time.Minute}}},
	}
}

func TestEveryExecutorsConfigIsAcceptedByGitLabRunnersOwnStructs(t *testing.T) {
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	autoscaler := production()
	autoscaler.Executor, autoscaler.InstanceGroup = ExecutorDockerAutoscaler, "ci-prod-runners"
	windows := autoscaler
	windows.Name, windows.Windows, windows.InstanceGroup = "windows", true, "ci-prod-windows"
	for name, g := range map[string]ManagerGroup{"docker+machine": production(), "docker-autoscaler": autoscaler, "windows": windows} {
		t.Run(name, func(t *testing.T) {
			c, err := g.Config()
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
		})
	}
}

func TestDockerMachineVMsAreInternalSpotAndNameTheirManager(t *testing.T) {
	c, err := production().Config()
	if err != nil {
		t.Fatal(err)
	}
	r := c.Runners[0]
	opts := strings.Join(r.Machine.MachineOptions, " ")
	for _, want := range []string{"google-use-internal-ip-only=true", "google-preemptible=true", "google-zone=us-east1-c",
		"google-machine-type=n2d-standard-2", "google-label=runnerfleet-manager:production-shared-gce", "google-tags=ci-runner"} {
		if !strings.Contains(opts, want) {
			t.Errorf("MachineOptions lack %s: %v", want, r.Machine.MachineOptions)
		}
	}
	if c.Concurrent != DefaultConcurrent || r.Limit != 100 || r.Executor != "docker+machine" || c.LogFormat != "json" ||
		r.Machine.IdleCount != 20 || r.Machine.IdleTime != 1800 || r.Machine.MaxBuilds != 1 || len(r.Machine.Autoscaling) != 1 ||
		r.Cache.GCS.BucketName != "ci-prod-cache" || !strings.Contains(r.Machine.MachineName, "%s") {
		t.Errorf("config %+v / %+v", c, r.Machine)
	}
}

func TestBadGroupsAreRefusedNamingTheKey(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*ManagerGroup)
		says   []string
	}{
		{"machine type format", func(g *ManagerGroup) { g.MachineType = "n2d_standard_4" }, []string{"fleets.production.groups.shared-gce.machineType", "n2d-standard-4"}},
		{"zone outside the region", func(g *ManagerGroup) { g.Zone = "europe-west1-b" }, []string{".zone", "not a zone of region us-east1"}},
		{"idle above the VM limit", func(g *ManagerGroup) { g.IdleCount = 150 }, []string{".idleCount", "between 0 and maxVMs (100)"}},
		{"idle above the limit in a period", func(g *ManagerGroup) { g.Periods[0].IdleCount = 101 }, []string{".periods[0].idleCount"}},
		{"bad cron", func(g *ManagerGroup) { g.Periods[0].Periods = []string{"* * 25 * * mon-fri *"} }, []string{".periods[0].periods[0]", "not a cron expression"}},
		{"bad time zone", func(g *ManagerGroup) { g.Periods[0].Timezone = "Mars/Olympus" }, []string{".periods[0].timezone"}},
		{"unknown executor", func(g *ManagerGroup) { g.Executor = "shell" }, []string{".executor", `"shell" is not docker+machine or docker-autoscaler`}},
		{"autoscaler without a group", func(g *ManagerGroup) { g.Executor = ExecutorDockerAutoscaler }, []string{".instanceGroup"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := production()
			tc.mutate(&g)
			_, err := g.Config()
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
	g.Executor, g.InstanceGroup = ExecutorDockerAutoscaler, "wsrm-vms"
	c, err := g.Config()
	if err != nil {
		t.Fatal(err)
	}
	cc := c.Runners[0].Autoscaler.ConnectorConfig
	if c.Concurrent != 400 || cc.OS != "windows" || cc.Protocol != "winrm" {
		t.Errorf("concurrent %d, connector %+v", c.Concurrent, cc)
	}
}
