package oracle

import (
	"slices"
	"strings"
	"testing"
)

func loadValues(t *testing.T) *Values {
	t.Helper()
	v, err := loadSchema(t).Values()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The enums come from gitlab-runner's own source, and hold what a reader
// of its documentation expects (and nothing invented).
func TestValuesAreReadFromGitLabRunnersSource(t *testing.T) {
	v := loadValues(t)
	for _, c := range []struct {
		what string
		got  []string
		want []string
	}{
		{"executors", v.Executors, []string{"custom", "docker", "docker+machine", "docker-autoscaler", "docker-windows", "instance", "kubernetes", "parallels", "shell", "ssh", "virtualbox"}},
		{"cache types", v.CacheTypes, []string{"azure", "gcs", "gcsv2", "s3", "s3v2"}},
		{"log formats", v.LogFormats, []string{"json", "runner", "text"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	for _, l := range []string{"debug", "info", "warn", "warning", "error"} {
		if !slices.Contains(v.LogLevels, l) {
			t.Errorf("log levels %v lack %s", v.LogLevels, l)
		}
	}
	for _, s := range []string{"bash", "sh", "pwsh", "powershell"} {
		if !slices.Contains(v.Shells, s) {
			t.Errorf("shells %v lack %s", v.Shells, s)
		}
	}
}

// The reference configs (real shapes of each executor) pass: the checks
// refuse no value gitlab-runner takes.
func TestReferenceConfigsPassTheValueChecks(t *testing.T) {
	v := loadValues(t)
	for _, name := range []string{"docker-machine.toml", "docker-autoscaler.toml", "kubernetes.toml"} {
		if err := v.Check(readTestdata(t, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

const goodValues = `concurrent = 10
log_format = "json"
log_level = "info"
listen_address = "0.0.0.0:9252"
shutdown_timeout = 30
[machine.shutdown_drain]
  enabled = true
  retry_backoff = "5s"
[[runners]]
  name = "m"
  url = "https://gitlab.example.com"
  token = "glrt-x"
  executor = "docker+machine"
  shell = "bash"
  limit = 4
  [runners.cache]
    Type = "gcs"
  [runners.machine]
    IdleTime = 600
    MachineDriver = "google"
    MachineName = "m-%s"
    MachineOptions = ["google-project=ci-prod", "google-zone=europe-west1-b", "google-preemptible=true", "google-tags=a,b", "google-label=runnerfleet-manager:m", "google-subnetwork=projects/ci-prod/regions/europe-west1/subnetworks/vms", "google-use-internal-ip-only"]
    [[runners.machine.autoscaling]]
      Periods = ["* * 9-17 * * mon-fri *"]
      Timezone = "Europe/Berlin"
      IdleTime = 60
[[runners]]
  name = "a"
  url = "https://gitlab.example.com"
  token = "glrt-y"
  executor = "docker-autoscaler"
  [runners.autoscaler]
    plugin = "googlecloud"
    capacity_per_instance = 1
    max_instances = 5
    [runners.autoscaler.connector_config]
      os = "windows"
      protocol = "winrm"
      protocol_port = 5986
      timeout = "1m"
    [[runners.autoscaler.policy]]
      periods = ["* 9-17 * * mon-fri"]
      timezone = "UTC"
      idle_time = "20m0s"
  [[runners.monitoring.job_queuing_durations]]
    periods = ["* * * * * * *"]
    timezone = "Etc/UTC"
    threshold = "5m0s"
    jobs_running_for_project = "^[0-3]$"
`

// Each check catches a wrong value: one edit of the good config each, and
// the problem names the key. The good config passes (the negative control).
func TestEachValueCheckCatchesAWrongValue(t *testing.T) {
	v := loadValues(t)
	if err := v.Check([]byte(goodValues)); err != nil {
		t.Fatalf("the good config is refused: %v", err)
	}
	cases := []struct{ name, from, to, key, says string }{
		{"executor", `executor = "docker+machine"`, `executor = "docker-machine"`, "runners[0].executor", "not one of gitlab-runner's"},
		{"log_format", `log_format = "json"`, `log_format = "JSON"`, "log_format", "not one of"},
		{"log_level", `log_level = "info"`, `log_level = "verbose"`, "log_level", "not one of"},
		{"shell", `shell = "bash"`, `shell = "zsh"`, "runners[0].shell", "not one of"},
		{"cache Type", `Type = "gcs"`, `Type = "gcp"`, "runners[0].cache.Type", "not one of"},
		{"concurrent", `concurrent = 10`, `concurrent = 0`, "concurrent", "below 1"},
		{"listen_address", `listen_address = "0.0.0.0:9252"`, `listen_address = "9252"`, "listen_address", "not host:port"},
		{"drain backoff", `retry_backoff = "5s"`, `retry_backoff = "5 seconds"`, "machine.shutdown_drain.retry_backoff", "not a duration"},
		{"machine name", `MachineName = "m-%s"`, `MachineName = "m"`, "runners[0].machine.MachineName", "%s exactly once"},
		{"machine period with 6 fields", `"* * 9-17 * * mon-fri *"`, `"* 9-17 * * mon-fri *"`, "runners[0].machine.autoscaling[0].Periods[0]", "has 6 fields"},
		{"machine period seconds", `"* * 9-17 * * mon-fri *"`, `"0 * 9-17 * * mon-fri *"`, "runners[0].machine.autoscaling[0].Periods[0]", `seconds field must be "*"`},
		{"machine period syntax", `"* * 9-17 * * mon-fri *"`, `"* * 9-27 * * mon-fri *"`, "runners[0].machine.autoscaling[0].Periods[0]", "not a cron expression"},
		{"machine timezone", `Timezone = "Europe/Berlin"`, `Timezone = "Europe/Atlantis"`, "runners[0].machine.autoscaling[0].Timezone", "not a time zone"},
		{"policy period with 7 fields", `"* 9-17 * * mon-fri"`, `"* * 9-17 * * mon-fri *"`, "runners[1].autoscaler.policy[0].periods[0]", "has 7 fields"},
		{"policy period syntax", `"* 9-17 * * mon-fri"`, `"* 9-17 * * monday-friday"`, "runners[1].autoscaler.policy[0].periods[0]", "not a 5-field cron"},
		{"policy idle_time", `idle_time = "20m0s"`, `idle_time = "500ms"`, "runners[1].autoscaler.policy[0].idle_time", "below gitlab-runner's minimum of 1s"},
		{"policy idle_time syntax", `idle_time = "20m0s"`, `idle_time = "20 minutes"`, "runners[1].autoscaler.policy[0].idle_time", "not a duration"},
		{"connector protocol", `protocol = "winrm"`, `protocol = "rdp"`, "runners[1].autoscaler.connector_config.protocol", "not one of ssh, winrm"},
		{"connector os", `os = "windows"`, `os = "win"`, "runners[1].autoscaler.connector_config.os", "not one of"},
		{"connector port", `protocol_port = 5986`, `protocol_port = 70000`, "runners[1].autoscaler.connector_config.protocol_port", "not a port"},
		{"connector timeout", `timeout = "1m"`, `timeout = "1 minute"`, "runners[1].autoscaler.connector_config.timeout", "not a duration"},
		{"plugin", `plugin = "googlecloud"`, `plugin = ""`, "runners[1].autoscaler.plugin", "is required"},
		{"google flag", `"google-tags=a,b"`, `"google-network-tags=a,b"`, "runners[0].machine.MachineOptions[3]", "no flag google-network-tags"},
		{"google zone", `"google-zone=europe-west1-b"`, `"google-zone=europe-west1"`, "runners[0].machine.MachineOptions[1]", "not a GCE zone"},
		{"google bool", `"google-preemptible=true"`, `"google-preemptible=yes"`, "runners[0].machine.MachineOptions[2]", "boolean flag"},
		{"google tag", `"google-tags=a,b"`, `"google-tags=a,B_b"`, "runners[0].machine.MachineOptions[3]", "not a GCE network tag"},
		{"google label shape", `"google-label=runnerfleet-manager:m"`, `"google-label=runnerfleet-manager=m"`, "runners[0].machine.MachineOptions[4]", "key:value"},
		{"google label value", `"google-label=runnerfleet-manager:m"`, `"google-label=runnerfleet-manager:M"`, "runners[0].machine.MachineOptions[4]", "not a GCE label value"},
		{"google subnetwork", `subnetworks/vms"`, `subnets/vms"`, "runners[0].machine.MachineOptions[5]", "not a subnetwork"},
		{"queuing period with 6 fields", `"* * * * * * *"`, `"* * * * * *"`, "runners[1].monitoring.job_queuing_durations[0].periods[0]", "has 6 fields"},
		{"queuing period seconds", `"* * * * * * *"`, `"0 * * * * * *"`, "runners[1].monitoring.job_queuing_durations[0].periods[0]", `seconds field must be "*"`},
		{"queuing period syntax", `"* * * * * * *"`, `"* * 25 * * * *"`, "runners[1].monitoring.job_queuing_durations[0].periods[0]", "not a cron expression"},
		{"queuing no periods", `periods = ["* * * * * * *"]`, `periods = []`, "runners[1].monitoring.job_queuing_durations[0].periods", "never applies"},
		{"queuing timezone", `timezone = "Etc/UTC"`, `timezone = "Etc/Nowhere"`, "runners[1].monitoring.job_queuing_durations[0].timezone", "not a time zone"},
		{"queuing threshold zero", `threshold = "5m0s"`, `threshold = "0s"`, "runners[1].monitoring.job_queuing_durations[0].threshold", "0 or below"},
		{"queuing threshold syntax", `threshold = "5m0s"`, `threshold = "5 minutes"`, "runners[1].monitoring.job_queuing_durations[0].threshold", "not a duration"},
		{"queuing no threshold", `threshold = "5m0s"`, ``, "runners[1].monitoring.job_queuing_durations[0].threshold", "is required"},
		{"queuing project regexp", `"^[0-3]$"`, `"^[0-3$"`, "runners[1].monitoring.job_queuing_durations[0].jobs_running_for_project", "not a Go regular expression"},
		{"limit zero", `limit = 4`, `limit = 0`, "runners[0].limit", "without any limit"},
		{"limit negative", `limit = 4`, `limit = -2`, "runners[0].limit", "without any limit"},
		{"google flag twice", `"google-use-internal-ip-only"]`, `"google-use-internal-ip-only", "google-zone=europe-west1-c"]`, "runners[0].machine.MachineOptions[7]", "given again"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(goodValues, c.from) {
				t.Fatalf("the good config has no %s", c.from)
			}
			err := v.Check([]byte(strings.Replace(goodValues, c.from, c.to, 1)))
			ps := Problems(err)
			if len(ps) != 1 || ps[0].Path != c.key || !strings.Contains(ps[0].Message, c.says) {
				t.Errorf("want one problem at %s saying %q, got %v", c.key, c.says, err)
			}
		})
	}
}

// BenchmarkValuesCheck checks the values of one config with both executors.
func BenchmarkValuesCheck(b *testing.B) {
	s, err := Load(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	v, err := s.Values()
	if err != nil {
		b.Fatal(err)
	}
	cfg := []byte(goodValues)
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Check(cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValuesFromDir reads the enums from gitlab-runner's source.
func BenchmarkValuesFromDir(b *testing.B) {
	s, err := Load(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ValuesFromDir(s.ModuleDir); err != nil {
			b.Fatal(err)
		}
	}
}
