package infra_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra"
	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/sharedfleet"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// gkeShared is the gke-shared example stack's config with its fleet object
// changed by edit (the decoded runnerfleet:fleet JSON).
func gkeShared(t *testing.T, edit func(fleet map[string]any)) (map[string]string, []string) {
	t.Helper()
	cfg, keys := stackConfig(t, "gke-shared", stackSecrets["gke-shared"])
	var fleet map[string]any
	if err := json.Unmarshal([]byte(cfg[stackconfig.Root.String()]), &fleet); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(fleet)
	}
	raw, err := json.Marshal(fleet)
	if err != nil {
		t.Fatal(err)
	}
	cfg[stackconfig.Root.String()] = string(raw)
	return cfg, keys
}

// sharedFleet is the shared fleet named name of the fleet object.
func sharedFleet(t *testing.T, fleet map[string]any, name string) map[string]any {
	t.Helper()
	for _, s := range fleet["sharedFleets"].([]any) {
		if s := s.(map[string]any); s["name"] == name {
			return s
		}
	}
	t.Fatalf("the gke-shared stack has no shared fleet %s", name)
	return nil
}

// deployed are the stack outputs a deployment of cfg leaves, as the next
// update's StackReference to the stack reads them: the program's
// sharedfleet.FootprintOutput of its fleets, deployed at at.
func deployed(t *testing.T, cfg map[string]string, at time.Time) resource.PropertyMap {
	t.Helper()
	f, err := stackconfig.Decode([]byte(cfg[stackconfig.Root.String()]), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	v, err := sharedfleet.FootprintValue(f.SharedFleets, nil, at)
	if err != nil {
		t.Fatal(err)
	}
	return resource.NewPropertyMapFromMap(map[string]any{sharedfleet.FootprintOutput: v})
}

// t0 is when the tests' previous deployments ran.
var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// staging is the gke-shared stack's staging fleet, decoded.
func staging(t *testing.T) fleetspec.SharedFleet {
	t.Helper()
	cfg, _ := gkeShared(t, nil)
	f, err := stackconfig.Decode([]byte(cfg[stackconfig.Root.String()]), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.SharedFleets {
		if s.Name == "staging" {
			return s
		}
	}
	t.Fatal("no staging fleet")
	return fleetspec.SharedFleet{}
}

// A change of the shared fleets that would orphan the VMs the previous
// deployment left (the fleet's namespace, or a zone, gone from fleet gc)
// is refused before anything is declared, naming the key and the fix; the
// fix (retired, retiredZones) is accepted, and what it retired may go
// after its retire wait, not before; so are a first deployment and an
// unchanged stack.
func TestAChangeThatWouldOrphanVMsIsRefused(t *testing.T) {
	// production's groups run in europe-west1-b and -c; moving its
	// fleeting group to -b leaves -c to no group.
	dropZone := func(fleet map[string]any) {
		for _, g := range sharedFleet(t, fleet, "production")["groups"].([]any) {
			if g := g.(map[string]any); g["name"] == "fleeting" {
				g["zone"] = "europe-west1-b"
			}
		}
	}
	removeStaging := func(fleet map[string]any) {
		var keep []any
		for _, s := range fleet["sharedFleets"].([]any) {
			if s.(map[string]any)["name"] != "staging" {
				keep = append(keep, s)
			}
		}
		fleet["sharedFleets"] = keep
	}
	retire := func(name string) func(map[string]any) {
		return func(fleet map[string]any) { sharedFleet(t, fleet, name)["retired"] = true }
	}
	dropIntoRetired := func(fleet map[string]any) {
		dropZone(fleet)
		sharedFleet(t, fleet, "production")["retiredZones"] = []any{"europe-west1-c"}
	}
	renameStaging := func(fleet map[string]any) { sharedFleet(t, fleet, "staging")["namespace"] = "staging-2" }
	// A retire wait is a few hours (3h jobs, the drain margin, gc's
	// grace and two runs); a month is past any.
	const soon, later = time.Hour, 30 * 24 * time.Hour
	cases := []struct {
		name string
		// before is the previous deployment's config edit, nil for the
		// example stack; first is a stack deployed never (or before the
		// footprint output existed).
		before func(map[string]any)
		first  bool
		now    func(map[string]any)
		// after is the time since the previous deployment.
		after time.Duration
		// want are what the refusal names, empty for an accepted change.
		want []string
	}{
		{name: "first deployment", first: true, now: removeStaging},
		{name: "unchanged"},
		{name: "fleet removed", now: removeStaging, after: later, want: []string{
			"runnerfleet:fleet.sharedFleets: Forbidden: shared fleet staging (namespace staging) of the previous deployment is gone",
			"runnerfleet-fleet=staging", "with retired: true", "docs/tasks/retire-a-shared-fleet.md"}},
		{name: "namespace changed", now: renameStaging, after: later, want: []string{
			"runnerfleet:fleet.sharedFleets[1].namespace: Forbidden: shared fleet staging ran in namespace staging in the previous deployment",
			"keep namespace staging and set runnerfleet:fleet.sharedFleets[1].retired: true"}},
		{name: "zone dropped", now: dropZone, after: later, want: []string{
			"runnerfleet:fleet.sharedFleets[0].groups: Forbidden: no group of shared fleet production runs in zone europe-west1-c any more",
			"Add europe-west1-c to runnerfleet:fleet.sharedFleets[0].retiredZones"}},
		{name: "project changed", now: func(fleet map[string]any) {
			// Another project's VMs live in a Shared VPC subnetwork.
			prod := sharedFleet(t, fleet, "production")
			prod["vmNetwork"] = map[string]any{"subnetwork": "projects/ci-platform-example/regions/europe-west1/subnetworks/shared-vms"}
			for _, g := range prod["groups"].([]any) {
				g.(map[string]any)["project"] = "ci-platform-other"
			}
		}, after: later, want: []string{
			"runnerfleet:fleet.sharedFleets[0].groups: Forbidden: shared fleet production's groups ran VMs in project ci-platform-example in the previous deployment and now in ci-platform-other",
			"set runnerfleet:fleet.sharedFleets[0].retired: true on this one"}},
		{name: "retired fleet removed within its wait", before: retire("staging"), now: removeStaging, after: soon, want: []string{
			"runnerfleet:fleet.sharedFleets: Forbidden: shared fleet staging (namespace staging) of the previous deployment is gone",
			"it is retired, and its managers may drain and its fleet gc delete the VMs they leave until " + t0.Add(shared.RetireWait(staging(t))).Format(time.RFC3339)}},
		{name: "retired fleet's namespace changed within its wait", before: retire("staging"), now: renameStaging, after: soon, want: []string{
			"runnerfleet:fleet.sharedFleets[1].namespace: Forbidden", "keep namespace staging until"}},
		{name: "retired fleet removed after its wait", before: retire("staging"), now: removeStaging, after: later},
		{name: "retired fleet's namespace changed after its wait", before: retire("staging"), now: renameStaging, after: later},
		{name: "zone dropped into retiredZones", now: dropIntoRetired, after: soon},
		{name: "retired zone dropped within its wait", before: dropIntoRetired, now: dropZone, after: soon, want: []string{
			"runnerfleet:fleet.sharedFleets[0].retiredZones: Forbidden: zone europe-west1-c of shared fleet production is retired"}},
		{name: "retired zone dropped after its wait", before: dropIntoRetired, now: dropZone, after: later},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := infratest.NewMocks(t)
			if !c.first {
				before, _ := gkeShared(t, c.before)
				m.StackOutputs = deployed(t, before, t0)
			}
			cfg, keys := gkeShared(t, c.now)
			program := infra.ProgramWith(infra.Options{Now: func() time.Time { return t0.Add(c.after) }})
			err := infratest.Run(m, "gke-shared", cfg, keys, program)
			refs := m.ByToken(infratest.StackReferenceToken)
			if len(refs) != 1 || refs[0].Input("name").StringValue() != "organization/runnerfleet/gke-shared" {
				t.Errorf("the program read %d stack references (%v), want one, to itself", len(refs), refs)
			}
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("the change was accepted")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
			for _, r := range m.Resources() {
				if !r.Read {
					t.Errorf("%s %s was declared before the refusal", r.Token, r.Name)
				}
			}
		})
	}
}

// What the fixes do: a retired fleet keeps its fleet gc but declares no
// manager, and fleet gc keeps covering a retired zone.
func TestRetiredFleetsAndZonesKeepTheirGC(t *testing.T) {
	m := infratest.NewMocks(t)
	cfg, keys := gkeShared(t, func(fleet map[string]any) {
		sharedFleet(t, fleet, "staging")["retired"] = true
		sharedFleet(t, fleet, "production")["retiredZones"] = []any{"europe-west1-d"}
	})
	if err := infratest.Run(m, "gke-shared", cfg, keys, infra.Program); err != nil {
		t.Fatal(err)
	}
	releases := map[string]int{}
	for _, r := range m.ByToken("kubernetes:helm.sh/v3:Release") {
		for _, f := range []string{"production", "staging"} {
			if strings.HasPrefix(r.Name, "shared-"+f+"-") {
				releases[f]++
			}
		}
	}
	if releases["staging"] != 0 || releases["production"] == 0 {
		t.Errorf("manager releases by fleet: %v, want none of retired staging's and production's", releases)
	}
	for f, zones := range map[string]string{"staging": "europe-west1-b,europe-west1-c", "production": "europe-west1-b,europe-west1-c,europe-west1-d"} {
		cj := m.Get(t, "kubernetes:batch/v1:CronJob", "shared-"+f+"-gc")
		args := cj.Input("spec.jobTemplate.spec.template.spec").ObjectValue()["containers"].ArrayValue()[0].ObjectValue()["args"].ArrayValue()
		var got []string
		for _, a := range args {
			got = append(got, a.StringValue())
		}
		if !strings.Contains(strings.Join(got, " "), "--zones "+zones+" ") {
			t.Errorf("fleet gc of %s runs %v, want --zones %s", f, got, zones)
		}
	}
}

// pulumi preview checks the same: a StackReference output the stack lacks
// is unknown in a preview (the SDK cannot tell it will stay absent), which
// is nothing to compare, and one it has is compared. (The check alone runs:
// the mocks cannot preview the whole program, whose unknown outputs the
// schema check refuses as missing.)
func TestAPreviewChecksTheFootprintToo(t *testing.T) {
	now, _ := gkeShared(t, func(fleet map[string]any) { fleet["sharedFleets"] = fleet["sharedFleets"].([]any)[:1] })
	f, err := stackconfig.Decode([]byte(now[stackconfig.Root.String()]), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.SharedFleets) != 1 || f.SharedFleets[0].Name != "production" {
		t.Fatalf("fleets %v, want production alone", f.SharedFleets)
	}
	check := func(ctx *pulumi.Context) error {
		_, err := sharedfleet.CheckFootprint(ctx, f.SharedFleets, t0)
		return err
	}
	for _, deployedBefore := range []bool{false, true} {
		m := infratest.NewMocks(t)
		if deployedBefore {
			before, _ := gkeShared(t, nil)
			m.StackOutputs = deployed(t, before, t0)
		}
		err := pulumi.RunErr(check, pulumi.WithMocks(infratest.Project, "gke-shared", m), func(info *pulumi.RunInfo) { info.DryRun = true })
		switch {
		case deployedBefore && (err == nil || !strings.Contains(err.Error(), "runnerfleet:fleet.sharedFleets: Forbidden: shared fleet staging")):
			t.Errorf("a preview of a removed fleet: %v, want the refusal", err)
		case !deployedBefore && err != nil:
			t.Errorf("a preview of a stack without the output: %v, want no refusal", err)
		}
	}
}
