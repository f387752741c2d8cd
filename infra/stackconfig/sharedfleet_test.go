package stackconfig

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// sharedFleetStack is a gke stack with a production fleet (both executors)
// and a staging fleet of less capacity, as a generic JSON tree that cases
// mutate.
func sharedFleetStack() map[string]any {
	var v map[string]any
	if err := json.Unmarshal([]byte(`{
  "platform": "gke",
  "gitlabURL": "https://gitlab.example.com",
  "controller": {"image": "example.invalid/runnerset-controller:v1"},
  "gcp": {"project": "ci-project-1", "region": "europe-west1"},
  "teams": [{"namespace": "team-a", "name": "build", "tags": ["a"], "tokenConfigKey": "teamA"}],
  "alerting": {"receiver": {"webhookURLConfigKey": "alertWebhookURL"}},
  "sharedFleets": [
    {
      "name": "production",
      "managerImage": "registry.example.com/ci/gitlab-runner-docker-machine:v19.4.0",
      "gcpServiceAccount": "ci-shared@ci-project-1.iam.gserviceaccount.com",
      "monitoring": {"vmQuota": 500},
      "webTerminal": {"domain": "terminals.ci.example.com", "allowedCIDRs": ["203.0.113.10/32", "198.51.100.0/28"]},
      "vmNetwork": {"cidr": "10.30.0.0/20"},
      "groups": [
        {
          "name": "linux", "tokenConfigKey": "sharedProductionLinux",
          "zone": "europe-west1-b", "machineType": "n2d-standard-4",
          "image": "projects/ci-project-1/global/images/family/runner-vm",
          "maxVMs": 100, "idleCount": 10, "idleTime": "30m", "maxBuilds": 1,
          "periods": [{"periods": ["* * 0-7,19-23 * * mon-fri *"], "timezone": "Europe/Berlin", "idleCount": 2, "idleTime": "10m"}],
          "scaling": {"minManagers": 2, "maxManagers": 6}
        },
        {
          "name": "autoscaler", "executor": "docker-autoscaler", "tokenConfigKey": "sharedProductionAutoscaler",
          "zone": "europe-west1-c", "machineType": "n2d-standard-8", "image": "runner-vm",
          "periods": [{"periods": ["* 0-7,19-23 * * mon-fri"], "idleCount": 1, "idleTime": "10m"}],
          "maxVMs": 50, "idleCount": 5, "idleTime": "20m"
        }
      ]
    },
    {
      "name": "staging",
      "managerImage": "registry.example.com/ci/gitlab-runner-docker-machine:v19.4.0",
      "vmNetwork": {"cidr": "10.30.16.0/20"},
      "groups": [
        {
          "name": "linux", "tokenConfigKey": "sharedStagingLinux",
          "zone": "europe-west1-b", "machineType": "e2-standard-2", "image": "runner-vm",
          "maxVMs": 10, "idleCount": 1, "idleTime": "10m"
        }
      ]
    }
  ]
}`), &v); err != nil {
		panic(err)
	}
	return v
}

func encode(t *testing.T, v map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// at walks a JSON tree by keys and indexes.
func at(v any, path ...any) map[string]any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			v = v.(map[string]any)[k]
		case int:
			v = v.([]any)[k]
		}
	}
	return v.(map[string]any)
}

func TestSharedFleetsDecodeWithDefaults(t *testing.T) {
	f, err := Decode(encode(t, sharedFleetStack()), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	prod, staging := f.SharedFleets[0], f.SharedFleets[1]
	if prod.Namespace != "production" || staging.Namespace != "staging" || prod.GitLabURL != "https://gitlab.example.com" {
		t.Errorf("namespace %q/%q, gitlabURL %q", prod.Namespace, staging.Namespace, prod.GitLabURL)
	}
	if prod.JobTimeoutOrDefault() != 3*time.Hour {
		t.Errorf("job timeout %s, want 3h", prod.JobTimeoutOrDefault())
	}
	linux, auto := prod.Groups[0], prod.Groups[1]
	if linux.Executor != "docker+machine" || linux.Project != "ci-project-1" || linux.Concurrent != 100 {
		t.Errorf("group defaults %+v", linux)
	}
	if auto.Scaling.MinManagers != 1 || auto.Scaling.MaxManagers != 1 || auto.Scaling.TargetUtilization != 0.7 {
		t.Errorf("scaling defaults %+v", auto.Scaling)
	}
	if got := linux.ManagerNames(); strings.Join(got, ",") != "production-linux-0,production-linux-1,production-linux-2,production-linux-3,production-linux-4,production-linux-5" {
		t.Errorf("managers %v", got)
	}
	// The decoded group is the renderer's, with what it takes from the
	// fleet and the stack filled in.
	if g := linux; g.Region != "europe-west1" || !g.SpotVMs() || g.Fleet != "production" || g.GitLabURL == "" || g.IdleTime.Duration != 30*time.Minute || g.Periods[0].IdleTime.Duration != 10*time.Minute {
		t.Errorf("renderer's group %+v", g)
	}
	if _, err := sharedfleet.Config(linux); err != nil {
		t.Errorf("the renderer refuses a group the stack config accepted: %v", err)
	}
	// Images and the exporter's port default to the release's, defined once.
	if prod.Images != fleetspec.DefaultFleetImages || prod.Monitoring.NodeExporterPort != fleetspec.DefaultNodeExporterPort {
		t.Errorf("images %+v, node_exporter port %d; want %+v and %d", prod.Images, prod.Monitoring.NodeExporterPort, fleetspec.DefaultFleetImages, fleetspec.DefaultNodeExporterPort)
	}
	// A tag or a digest, and a port of the stack's, are taken as given.
	v := sharedFleetStack()
	images := map[string]any{
		"gc":           "registry.example.com/mirror/fleet@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"jobReporter":  "registry.example.com:5000/mirror/fleet-agent:v0.1.0",
		"nodeExporter": "registry.example.com/mirror/node-exporter:v1.12.1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	}
	at(v, "sharedFleets", 1)["images"] = images
	pinned := "registry.example.com/mirror/runnerset-controller@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	v["controller"] = map[string]any{"image": pinned}
	at(v, "sharedFleets", 1)["monitoring"] = map[string]any{"nodeExporterPort": 9200}
	f, err = Decode(encode(t, v), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.SharedFleets[1]; got.Images.GC != images["gc"] || got.Images.JobReporter != images["jobReporter"] || got.Images.NodeExporter != images["nodeExporter"] || got.NodeExporterPort() != 9200 {
		t.Errorf("staging's images %+v, port %d", got.Images, got.NodeExporterPort())
	}
	if f.Controller.Image != pinned {
		t.Errorf("controller image %q, want the pinned %s", f.Controller.Image, pinned)
	}
}

func TestBadSharedFleetsAreRefusedNamingTheKey(t *testing.T) {
	group := func(v map[string]any) map[string]any { return at(v, "sharedFleets", 0, "groups", 0) }
	cases := []struct {
		name   string
		mutate func(v map[string]any)
		want   []string
	}{
		{"machine type format", func(v map[string]any) { group(v)["machineType"] = "n2d_standard_4" },
			[]string{`runnerfleet:fleet.sharedFleets[0].groups[0].machineType: Invalid value: "n2d_standard_4" is not a GCE machine type`}},
		{"zone outside the region", func(v map[string]any) { group(v)["zone"] = "us-east1-b" },
			[]string{`runnerfleet:fleet.sharedFleets[0].groups[0].zone: Invalid value: "us-east1-b" is not a zone of region europe-west1`}},
		{"idle VMs above the limit", func(v map[string]any) { group(v)["idleCount"] = 150 },
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].idleCount: Invalid value: 150 must be between 0 and maxVMs (100)"}},
		{"bad cron period", func(v map[string]any) {
			at(group(v), "periods", 0)["periods"] = []any{"* * 0-7 * * mon-fri *", "* * 25 * * mon-fri *"}
		}, []string{"runnerfleet:fleet.sharedFleets[0].groups[0].periods[0].periods[1]: Invalid value:", "is not a cron expression"}},
		{"bad time zone", func(v map[string]any) { at(group(v), "periods", 0)["timezone"] = "Mars/Olympus" },
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].periods[0].timezone"}},
		{"unknown executor", func(v map[string]any) { group(v)["executor"] = "shell" },
			[]string{`runnerfleet:fleet.sharedFleets[0].groups[0].executor: Invalid value: "shell" is not docker+machine or docker-autoscaler`}},
		{"an instance group named: the program declares them", func(v map[string]any) { at(v, "sharedFleets", 0, "groups", 1)["instanceGroup"] = "ci-runners-c" },
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[1].instanceGroup: Forbidden: unknown key"}},
		{"zone outside the region", func(v map[string]any) { group(v)["zone"] = "us-east1-b" },
			[]string{`runnerfleet:fleet.sharedFleets[0].groups[0].zone: Invalid value: "us-east1-b" is not a zone of region europe-west1; use one such as europe-west1-b`}},
		{"VM range overlapping the pods'", func(v map[string]any) { at(v, "sharedFleets", 0)["vmNetwork"] = map[string]any{"cidr": "10.21.0.0/20"} },
			[]string{`runnerfleet:fleet.sharedFleets[0].vmNetwork.cidr: Invalid value: "10.21.0.0/20": overlaps gcp.podsCIDR (10.20.0.0/14); choose a range clear of`}},
		{"VM ranges of two fleets overlapping", func(v map[string]any) { at(v, "sharedFleets", 1)["vmNetwork"] = map[string]any{"cidr": "10.30.8.0/21"} },
			[]string{`runnerfleet:fleet.sharedFleets[1].vmNetwork.cidr: Invalid value: "10.30.8.0/21": overlaps sharedFleets[0].vmNetwork.cidr (10.30.0.0/20)`}},
		{"no VM network", func(v map[string]any) { delete(at(v, "sharedFleets", 1), "vmNetwork") },
			[]string{"runnerfleet:fleet.sharedFleets[1].vmNetwork: Required value: the subnetwork of the fleet's VMs: cidr"}},
		{"an existing subnetwork of another region", func(v map[string]any) {
			at(v, "sharedFleets", 1)["vmNetwork"] = map[string]any{"subnetwork": "projects/ci-project-1/regions/us-east1/subnetworks/vms"}
		}, []string{"runnerfleet:fleet.sharedFleets[1].vmNetwork.subnetwork", "is in region us-east1; the fleet's VMs run in the cluster's region europe-west1"}},
		{"VMs in another project without a shared subnetwork", func(v map[string]any) { group(v)["project"] = "ci-other-project" },
			[]string{`runnerfleet:fleet.sharedFleets[0].groups[0].project: Invalid value: "ci-other-project": the program puts the VMs in a subnetwork of the cluster's VPC`}},
		{"7-field period on docker-autoscaler", func(v map[string]any) {
			at(v, "sharedFleets", 0, "groups", 1)["periods"] = []any{map[string]any{"periods": []any{"* * 0-7 * * mon-fri *"}, "idleCount": 1, "idleTime": "10m"}}
		}, []string{"runnerfleet:fleet.sharedFleets[0].groups[1].periods[0].periods[0]", "has 7 fields; docker-autoscaler policy periods are 5-field unix cron", "drop the seconds and year fields"}},
		{"5-field period on docker+machine", func(v map[string]any) {
			group(v)["periods"] = []any{map[string]any{"periods": []any{"* 0-7 * * mon-fri"}, "idleCount": 1, "idleTime": "10m"}}
		}, []string{"runnerfleet:fleet.sharedFleets[0].groups[0].periods[0].periods[0]", "docker+machine periods have 7"}},
		{"fleet name too long for its VM tags", func(v map[string]any) {
			at(v, "sharedFleets", 1)["namespace"] = "staging-fleet-with-a-namespace-of-46-character"
		}, []string{`runnerfleet:fleet.sharedFleets[1].namespace: Invalid value: "staging-fleet-with-a-namespace-of-46-character": names the fleet's VM network tags`, "at most 45"}},
		{"Windows group on docker+machine", func(v map[string]any) { group(v)["windows"] = true },
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].executor", "Windows managers need docker-autoscaler"}},
		{"more managers at least than at most", func(v map[string]any) { group(v)["scaling"] = map[string]any{"minManagers": 4, "maxManagers": 3} },
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].scaling.maxManagers: Invalid value: 3: below minManagers (4)"}},
		{"utilization above one", func(v map[string]any) { group(v)["scaling"] = map[string]any{"targetUtilization": 1.5} },
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].scaling.targetUtilization"}},
		{"too many managers", func(v map[string]any) { group(v)["scaling"] = map[string]any{"maxManagers": 21} },
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].scaling.maxManagers: Invalid value: 21: at most 20"}},
		{"VM account not an email", func(v map[string]any) { at(v, "sharedFleets", 0)["vmServiceAccount"] = "ci-vms" },
			[]string{`runnerfleet:fleet.sharedFleets[0].vmServiceAccount: Invalid value: "ci-vms": a Google service account email`}},
		{"gc image without a registry", func(v map[string]any) { at(v, "sharedFleets", 0)["images"] = map[string]any{"gc": "fleet:v0.1.0"} },
			[]string{`runnerfleet:fleet.sharedFleets[0].images.gc: Invalid value: "fleet:v0.1.0": is not an image reference`, "registry/repository:tag or registry/repository@sha256:<digest>", "or leave it out"}},
		{"controller image without a registry", func(v map[string]any) { v["controller"] = map[string]any{"image": "runnerset-controller@sha256:0123"} },
			[]string{`runnerfleet:fleet.controller.image: Invalid value: "runnerset-controller@sha256:0123": is not an image reference`, "such as ghcr.io/runnerfleet/runnerset-controller:v", "or leave it out for the release's"}},
		{"job reporter image without a tag or digest", func(v map[string]any) {
			at(v, "sharedFleets", 0)["images"] = map[string]any{"jobReporter": "registry.example.com/ci/fleet-agent"}
		}, []string{`runnerfleet:fleet.sharedFleets[0].images.jobReporter: Invalid value: "registry.example.com/ci/fleet-agent": is not an image reference`}},
		{"node_exporter image with a shell word", func(v map[string]any) {
			at(v, "sharedFleets", 1)["images"] = map[string]any{"nodeExporter": "registry.example.com/node-exporter:v1;reboot"}
		}, []string{"runnerfleet:fleet.sharedFleets[1].images.nodeExporter", "is not an image reference"}},
		{"node_exporter on the runner's metrics port", func(v map[string]any) { at(v, "sharedFleets", 0, "monitoring")["nodeExporterPort"] = 9252 },
			[]string{"runnerfleet:fleet.sharedFleets[0].monitoring.nodeExporterPort: Invalid value: 9252: is gitlab-runner's metrics (listen_address); choose another port, such as node_exporter's own 9100"}},
		{"node_exporter on the session server's port", func(v map[string]any) { at(v, "sharedFleets", 0, "monitoring")["nodeExporterPort"] = 8093 },
			[]string{"runnerfleet:fleet.sharedFleets[0].monitoring.nodeExporterPort: Invalid value: 8093: is the managers' session server"}},
		{"node_exporter on Docker's port", func(v map[string]any) { at(v, "sharedFleets", 0, "monitoring")["nodeExporterPort"] = 2376 },
			[]string{"runnerfleet:fleet.sharedFleets[0].monitoring.nodeExporterPort: Invalid value: 2376: is docker+machine's Docker daemon"}},
		{"node_exporter on no port", func(v map[string]any) { at(v, "sharedFleets", 0, "monitoring")["nodeExporterPort"] = 70000 },
			[]string{"runnerfleet:fleet.sharedFleets[0].monitoring.nodeExporterPort: Invalid value: 70000: must be a port from 1024 to 65535"}},
		{"no token", func(v map[string]any) { delete(group(v), "tokenConfigKey") },
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].tokenConfigKey: Required value"}},
		{"docker+machine without its image", func(v map[string]any) { delete(at(v, "sharedFleets", 1), "managerImage") },
			[]string{"runnerfleet:fleet.sharedFleets[1].managerImage: Required value: docker+machine managers need an image"}},
		{"job timeout below 3h", func(v map[string]any) { at(v, "sharedFleets", 0)["jobTimeout"] = "1h" },
			[]string{`runnerfleet:fleet.sharedFleets[0].jobTimeout: Invalid value: "1h0m0s": at least 3h0m0s`}},
		{"job timeout above 144h", func(v map[string]any) { at(v, "sharedFleets", 0)["jobTimeout"] = "145h" },
			[]string{`runnerfleet:fleet.sharedFleets[0].jobTimeout: Invalid value: "145h0m0s": at most 144h0m0s`}},
		{"retired zone outside the groups' regions", func(v map[string]any) {
			at(v, "sharedFleets", 0)["retiredZones"] = []any{"europe-west1-d", "us-east1-b", "europe-west1"}
		}, []string{
			`runnerfleet:fleet.sharedFleets[0].retiredZones[1]: Invalid value: "us-east1-b": a zone of a group's region`,
			`runnerfleet:fleet.sharedFleets[0].retiredZones[2]: Invalid value: "europe-west1": a zone of a group's region`}},
		{"terminal open to the world", func(v map[string]any) {
			at(v, "sharedFleets", 0, "webTerminal")["allowedCIDRs"] = []any{"0.0.0.0/0"}
		}, []string{"runnerfleet:fleet.sharedFleets[0].webTerminal.allowedCIDRs[0]"}},
		{"terminal without ranges", func(v map[string]any) { delete(at(v, "sharedFleets", 0, "webTerminal"), "allowedCIDRs") },
			[]string{"runnerfleet:fleet.sharedFleets[0].webTerminal.allowedCIDRs: Required value"}},
		{"a team's namespace", func(v map[string]any) { at(v, "sharedFleets", 1)["namespace"] = "team-a" },
			[]string{`runnerfleet:fleet.sharedFleets[1].namespace: Invalid value: "team-a": is a team's namespace`}},
		{"two fleets of one name", func(v map[string]any) { at(v, "sharedFleets", 1)["name"] = "production" },
			[]string{"runnerfleet:fleet.sharedFleets[1].name: Duplicate value"}},
		{"names too long for Helm", func(v map[string]any) {
			group(v)["name"] = "a-group-with-a-name-long-enough-to-overflow"
		}, []string{"runnerfleet:fleet.sharedFleets[0].groups[0].name", "Helm's 53-character release names"}},
		{"misspelt key", func(v map[string]any) { group(v)["idlecount"] = 3 },
			[]string{`runnerfleet:fleet.sharedFleets[0].groups[0].idlecount: Forbidden: unknown key; did you mean "idleCount"?`}},
		{"no alert receiver", func(v map[string]any) { delete(v, "alerting") },
			[]string{"runnerfleet:fleet.alerting: Required value: the shared fleets' alerts need a receiver: add alerting.receiver"}},
		{"two alert receivers", func(v map[string]any) { at(v, "alerting", "receiver")["pagerDutyRoutingKeyConfigKey"] = "pd" },
			[]string{"runnerfleet:fleet.alerting.receiver: Invalid value: 2: give exactly one of"}},
		{"alert secret that is no config key", func(v map[string]any) {
			at(v, "alerting", "receiver")["webhookURLConfigKey"] = "https://hooks.example.com/x"
		},
			[]string{"runnerfleet:fleet.alerting.receiver.webhookURLConfigKey: Invalid value", "a config key name"}},
		{"terminal through an ingress controller", func(v map[string]any) { at(v, "sharedFleets", 0, "webTerminal")["ingressClass"] = "nginx" },
			[]string{"runnerfleet:fleet.sharedFleets[0].webTerminal.ingressClass: Forbidden: unknown key"}},
		{"not on gke", func(v map[string]any) {
			v["platform"] = "eks"
			delete(v, "gcp")
		}, []string{"runnerfleet:fleet.sharedFleets: Forbidden: shared fleets run on the gke platform"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := sharedFleetStack()
			c.mutate(v)
			_, err := Decode(encode(t, v), "gke-shared")
			if err == nil {
				t.Fatal("accepted")
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("not a stack config error: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// localSharedFleetStack is a local stack with a shared fleet of one
// docker+machine group, as the end-to-end proof of a change while jobs
// run declares it.
func localSharedFleetStack() map[string]any {
	var v map[string]any
	if err := json.Unmarshal([]byte(`{
  "platform": "local",
  "gitlabURL": "http://10.213.0.1:8929",
  "local": {"chartRepository": "http://127.0.0.1:8930"},
  "sharedFleets": [
    {
      "name": "local-shared",
      "managerImage": "runnerfleet.local/gitlab-runner-standin:local",
      "vmNetwork": {"cidr": "10.30.0.0/20"},
      "groups": [
        {
          "name": "linux", "tokenConfigKey": "sharedLocalLinux", "zone": "us-east1-b",
          "machineType": "n2d-standard-2", "image": "runner-vm",
          "maxVMs": 2, "idleCount": 0, "idleTime": "10m"
        }
      ]
    }
  ]
}`), &v); err != nil {
		panic(err)
	}
	return v
}

// The local platform takes a shared fleet's Kubernetes half and refuses,
// naming the key, what it cannot do.
func TestLocalPlatformSharedFleets(t *testing.T) {
	f, err := Decode(encode(t, localSharedFleetStack()), "local")
	if err != nil {
		t.Fatalf("a local shared fleet of one docker+machine group: %v", err)
	}
	if f.GCP != nil {
		t.Errorf("the local stack got a gcp section: %+v", f.GCP)
	}
	if p := f.FleetPlatform(); p.Project != LocalSharedFleetGCP().Project || p.Region != LocalSharedFleetGCP().Region {
		t.Errorf("the local fleets' platform is %+v; want LocalSharedFleetGCP's project and region", p)
	}
	group := func(v map[string]any) map[string]any { return at(v, "sharedFleets", 0, "groups", 0) }
	cases := []struct {
		name   string
		mutate func(map[string]any)
		want   []string
	}{
		{"no chart repository", func(v map[string]any) { delete(v, "local") },
			[]string{"runnerfleet:fleet.local.chartRepository: Required value"}},
		{"a chart repository that is no URL", func(v map[string]any) { v["local"] = map[string]any{"chartRepository": "127.0.0.1:8930"} },
			[]string{"runnerfleet:fleet.local.chartRepository: Invalid value"}},
		{"VM groups", func(v map[string]any) {
			at(v, "sharedFleets", 0)["vmGroups"] = []any{map[string]any{"name": "w", "os": "windows", "tokenConfigKey": "w"}}
		}, []string{"runnerfleet:fleet.sharedFleets[0].vmGroups: Forbidden: the local platform makes no VMs"}},
		{"a web terminal", func(v map[string]any) {
			at(v, "sharedFleets", 0)["webTerminal"] = map[string]any{"domain": "t.example.com", "allowedCIDRs": []any{"203.0.113.10/32"}}
		}, []string{"runnerfleet:fleet.sharedFleets[0].webTerminal: Forbidden"}},
		{"docker-autoscaler", func(v map[string]any) { group(v)["executor"] = "docker-autoscaler" },
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].executor: Unsupported value"}},
		{"KEDA scaling", func(v map[string]any) { group(v)["scaling"] = map[string]any{"minManagers": 1, "maxManagers": 3} },
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].scaling.maxManagers: Forbidden: the local platform has no KEDA"}},
		{"alerting", func(v map[string]any) {
			v["alerting"] = map[string]any{"receiver": map[string]any{"webhookURLConfigKey": "hook"}}
		},
			[]string{"runnerfleet:fleet.alerting: Forbidden: the local platform declares no Alertmanager"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := localSharedFleetStack()
			c.mutate(v)
			_, err := Decode(encode(t, v), "local")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}
