package sharedfleet

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

// The fleet's cost rules count its running VMs per group and machine type,
// mark a group's capacity type from its spot setting and price them by the
// table WithPrices gives PlanFleet: promtool test rules on the up series of
// the VMs job. The negative control: the on-demand group taken for spot
// fails the same test.
func TestTheFleetsCostRulesCountAndPriceItsVMsPerGroup(t *testing.T) {
	linux := production()
	linux.Name, linux.MachineType = "linux", "n2d-standard-4"
	windows := production()
	windows.Name, windows.MachineType, windows.Spot = "windows", "n2d-standard-8", ptr.To(false)
	spec := fleetspec.SharedFleet{Name: "production", Namespace: "production", GitLabURL: linux.GitLabURL,
		ManagerImage: "registry.example.com/ci/runner:v1", Groups: []fleetspec.ManagerGroup{linux, windows}}
	prices := cost.Table{Currency: "EUR", Prices: []cost.Price{
		{InstanceType: "n2d-standard-4", OnDemand: ptr.To(120.0), Spot: ptr.To(60.0)},
		{InstanceType: "n2d-standard-8", OnDemand: ptr.To(240.0), Spot: ptr.To(120.0)},
	}}
	plan := func(s fleetspec.SharedFleet) Fleet {
		t.Helper()
		for i := range s.Groups {
			s.Groups[i].Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 1, TargetUtilization: 0.7}
		}
		p, err := PlanFleet(s, "sharedFleets[0]", fleetspec.Platform{Project: "ci-prod", Cluster: "ci"}, WithPrices(prices))
		if err != nil {
			t.Fatal(err)
		}
		return p.Monitoring
	}
	f := plan(spec)

	// The VMs job labels each VM with its group and machine type, as
	// the rules select them: Prometheus anchors a relabel regex.
	var group, machine bool
	for _, r := range f.PrometheusConfig().ScrapeConfigs[1].RelabelConfigs {
		switch r.TargetLabel {
		case monitoring.LabelGroup:
			group = len(r.SourceLabels) == 1 && r.SourceLabels[0] == gceLabel(vmfleet.LabelManagerGroup)
		case metrics.LabelInstanceType:
			m := regexp.MustCompile("^(?:" + r.Regex + ")$").FindStringSubmatch("https://www.googleapis.com/compute/v1/projects/ci-prod/zones/us-east1-c/machineTypes/n2d-standard-4")
			machine = len(r.SourceLabels) == 1 && r.SourceLabels[0] == "__meta_gce_machine_type" && m != nil && strings.ReplaceAll(r.Replacement, "$1", m[1]) == "n2d-standard-4"
		}
	}
	if !group || !machine {
		t.Errorf("the VMs job labels group %v, machine type %v", group, machine)
	}

	vm := func(g, machineType, name string) string {
		return fmt.Sprintf(`up{job=%q, instance=%q, manager="production-%s", group=%q, instance_type=%q}`, VMsJob, name, g, g, machineType)
	}
	test := fmt.Sprintf(`rule_files: [recording.yml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  # Two linux VMs, one for half an hour; a Windows VM whose node_exporter
  # does not answer (it still runs, and is billed).
  - series: '%s'
    values: '1x60'
  - series: '%s'
    values: '1x29 stale'
  - series: '%s'
    values: '0x60'
  promql_expr_test:
  - expr: '%s'
    eval_time: 60m
    exp_samples:
    - labels: '{fleet="production", group="linux", capacity_type="spot", instance_type="n2d-standard-4"}'
      value: %d
    - labels: '{fleet="production", group="windows", capacity_type="on-demand", instance_type="n2d-standard-8"}'
      value: %d
  - expr: '%s'
    eval_time: 60m
    exp_samples:
    - labels: '{fleet="production", group="linux", currency="EUR"}'
      value: %d
    - labels: '{fleet="production", group="windows", currency="EUR"}'
      value: %d
`, vm("linux", "n2d-standard-4", "runner-a"), vm("linux", "n2d-standard-4", "runner-b"), vm("windows", "n2d-standard-8", "runner-c"),
		monitoring.VMSeconds("", "fleet, group, capacity_type, instance_type", "2h"), (61+30)*60, 61*60,
		// 60 an hour is 1 a minute; 240 an hour is 4.
		monitoring.VMSpent("", "fleet, group", "2h"), 61+30, 61*4)

	run := func(f Fleet) (string, error) {
		dir := t.TempDir()
		rules, err := yaml.Marshal(f.RecordingRules())
		if err != nil {
			t.Fatal(err)
		}
		if err := (prometheus.Files{"recording.yml": rules, "cost.test.yml": []byte(test)}).Write(dir); err != nil {
			t.Fatal(err)
		}
		if out, err := prometheus.Promtool(dir, "check", "rules", "recording.yml"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return prometheus.Promtool(dir, "test", "rules", "cost.test.yml")
	}
	if out, err := run(f); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
	spot := spec
	spot.Groups = []fleetspec.ManagerGroup{linux, windows}
	spot.Groups[1].Spot = nil
	if out, err := run(plan(spot)); err == nil {
		t.Errorf("promtool passed the tests with the on-demand group priced as spot:\n%s", out)
	}

	// The central Prometheus federates the recorded cost series.
	central := CentralConfig(f).ScrapeConfigs[0].Params["match[]"]
	if !strings.Contains(strings.Join(central, " "), monitoring.RecordVMCost) {
		t.Errorf("the central Prometheus federates %v, not %s", central, monitoring.RecordVMCost)
	}
}
