package stackconfig

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// gkeFleet returns a valid gke fleet as JSON, with gcp merged over the
// minimal gcp section and extra keys set at the top.
func gkeFleet(t *testing.T, gcp map[string]any, extra map[string]any) []byte {
	t.Helper()
	return fleetJSON(t, "gke", "gcp", map[string]any{"project": "ci-project-1", "region": "europe-west1"}, gcp, extra)
}

func TestGCPDefaultsFillEverythingButProjectAndRegion(t *testing.T) {
	f, err := Decode(gkeFleet(t, nil, nil), "dev")
	if err != nil {
		t.Fatal(err)
	}
	g := f.GCP
	if want := []string{"europe-west1-b", "europe-west1-c", "europe-west1-d"}; !slices.Equal(g.Zones, want) {
		t.Errorf("zones %v, want %v", g.Zones, want)
	}
	for got, want := range map[string]string{
		g.SubnetCIDR:              "10.10.0.0/20",
		g.PodsCIDR:                "10.20.0.0/14",
		g.ServicesCIDR:            "10.24.0.0/20",
		g.MasterCIDR:              "172.16.0.0/28",
		g.ReleaseChannel:          "REGULAR",
		g.SystemNodes.MachineType: "e2-standard-4",
		// The managers' pool, whatever capacity.allowOnDemand says.
		g.SystemNodes.CapacityType: "on-demand",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if *g.SystemNodes.Min != 1 || *g.SystemNodes.Max != 3 {
		t.Errorf("system nodes min %d max %d, want 1 and 3", *g.SystemNodes.Min, *g.SystemNodes.Max)
	}
	if *g.Autoprovisioning.MaxCPU <= 0 || *g.Autoprovisioning.MaxMemoryGB <= 0 {
		t.Errorf("autoprovisioning caps not defaulted: %d CPU, %d GB", *g.Autoprovisioning.MaxCPU, *g.Autoprovisioning.MaxMemoryGB)
	}
	if len(g.MachineFamilies) == 0 {
		t.Error("no default machine families")
	}
}

func TestGCPSystemNodesMaxDefaultsToAtLeastMin(t *testing.T) {
	f, err := Decode(gkeFleet(t, map[string]any{"systemNodes": map[string]any{"min": 5}}, nil), "dev")
	if err != nil {
		t.Fatal(err)
	}
	if *f.GCP.SystemNodes.Max != 5 {
		t.Errorf("max %d, want 5", *f.GCP.SystemNodes.Max)
	}
}

// problems decodes raw and returns the keys its problems name.
func problems(t *testing.T, raw []byte) (keys []string, msg string) {
	t.Helper()
	_, err := Decode(raw, "dev")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want a stack config *Error, got %v", err)
	}
	for _, x := range e.List {
		keys = append(keys, x.Field)
	}
	return keys, err.Error()
}

func TestGCPValidationNamesTheBadKey(t *testing.T) {
	const g = "runnerfleet:fleet.gcp."
	for _, c := range []struct {
		name string
		gcp  map[string]any
		key  string
		says string
	}{
		{"missing project", map[string]any{"project": nil}, g + "project", "project ID"},
		{"project name, not ID", map[string]any{"project": "My CI Project"}, g + "project", "project ID"},
		{"project too short", map[string]any{"project": "ci"}, g + "project", "6 to 30"},
		{"missing region", map[string]any{"region": nil}, g + "region", "europe-west1"},
		{"zone as region", map[string]any{"region": "europe-west1-b"}, g + "region", "not a zone"},
		{"zone outside the region", map[string]any{"zones": []string{"europe-west1-b", "us-central1-a"}}, g + "zones[1]", "zone of region europe-west1"},
		{"duplicate zone", map[string]any{"zones": []string{"europe-west1-b", "europe-west1-b"}}, g + "zones[1]", "Duplicate"},
		{"subnet not a CIDR", map[string]any{"subnetCIDR": "10.10.0.0"}, g + "subnetCIDR", "IPv4 CIDR"},
		{"subnet with host bits", map[string]any{"subnetCIDR": "10.10.0.1/20"}, g + "subnetCIDR", "did you mean 10.10.0.0/20"},
		{"IPv6 pods", map[string]any{"podsCIDR": "fd00::/64"}, g + "podsCIDR", "IPv4"},
		{"pods overlap subnet", map[string]any{"podsCIDR": "10.8.0.0/14"}, g + "podsCIDR", "overlaps subnetCIDR"},
		{"services overlap pods", map[string]any{"servicesCIDR": "10.21.0.0/20"}, g + "servicesCIDR", "overlaps podsCIDR"},
		{"master overlaps subnet", map[string]any{"masterCIDR": "10.10.0.0/28"}, g + "masterCIDR", "overlaps subnetCIDR"},
		{"master not a /28", map[string]any{"masterCIDR": "172.16.0.0/24"}, g + "masterCIDR", "/28"},
		{"bad authorized network", map[string]any{"masterAuthorizedCIDRs": []string{"203.0.113.0/24", "office"}}, g + "masterAuthorizedCIDRs[1]", "IPv4 CIDR"},
		{"unknown release channel", map[string]any{"releaseChannel": "regular"}, g + "releaseChannel", "REGULAR"},
		{"bad machine type", map[string]any{"systemNodes": map[string]any{"machineType": "E2 standard 4"}}, g + "systemNodes.machineType", "e2-standard-4"},
		{"machine family, not type", map[string]any{"systemNodes": map[string]any{"machineType": "e2"}}, g + "systemNodes.machineType", "machine type"},
		{"min above max", map[string]any{"systemNodes": map[string]any{"min": 4, "max": 2}}, g + "systemNodes.min", "more than max"},
		{"max below the zones", map[string]any{"systemNodes": map[string]any{"max": 2}}, g + "systemNodes.max", "one node in each of its 3 zones"},
		{"no system nodes", map[string]any{"systemNodes": map[string]any{"min": 0}}, g + "systemNodes.min", "at least 1"},
		{"spot managers' pool", map[string]any{"systemNodes": map[string]any{"capacityType": "spot"}}, g + "systemNodes.capacityType", "remove capacityType (on-demand is the default) or set it to on-demand"},
		{"zero CPU cap", map[string]any{"autoprovisioning": map[string]any{"maxCPU": 0}}, g + "autoprovisioning.maxCPU", "above 0"},
		{"negative memory cap", map[string]any{"autoprovisioning": map[string]any{"maxMemoryGB": -1}}, g + "autoprovisioning.maxMemoryGB", "above 0"},
		{"machine type as family", map[string]any{"machineFamilies": []string{"n2-standard-4"}}, g + "machineFamilies[0]", "machine family"},
		{"upper-case label", map[string]any{"labels": map[string]string{"Team": "ci"}}, g + "labels[Team]", "label key"},
		{"bad label value", map[string]any{"labels": map[string]string{"owner": "CI Team"}}, g + "labels[owner]", "label value"},
		{"runnerfleet's own label", map[string]any{"labels": map[string]string{"runnerfleet-stack": "x"}}, g + "labels[runnerfleet-stack]", "sets this label itself"},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys, msg := problems(t, gkeFleet(t, c.gcp, nil))
			if !slices.Contains(keys, c.key) {
				t.Fatalf("no problem named %s; got %v:\n%s", c.key, keys, msg)
			}
			if !strings.Contains(msg, c.says) {
				t.Errorf("the message does not say %q:\n%s", c.says, msg)
			}
		})
	}
}

func TestGKETeamsNamespaceMustFitTheServiceAccountID(t *testing.T) {
	team := func(ns string, identity *bool) map[string]any {
		m := map[string]any{"namespace": ns, "name": "build", "tags": []string{ns}, "tokenConfigKey": "token"}
		if identity != nil {
			m["identity"] = *identity
		}
		return m
	}
	no := false
	for _, c := range []struct {
		name  string
		team  map[string]any
		valid bool
	}{
		{"23 characters fit", team(strings.Repeat("a", 23), nil), true},
		{"24 characters do not", team(strings.Repeat("a", 24), nil), false},
		{"a leading digit does not", team("1team", nil), false},
		{"without an identity any namespace does", team(strings.Repeat("a", 40), &no), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(gkeFleet(t, nil, map[string]any{"teams": []any{c.team}}), "dev")
			if c.valid {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("Decode = %v, want a stack config error", err)
			}
			errs := se.List
			if len(errs) != 1 || errs[0].Field != "runnerfleet:fleet.teams[0].namespace" || !strings.Contains(errs[0].Error(), "at most 23") {
				t.Fatalf("want one problem naming teams[0].namespace and its limit, got %v", errs)
			}
		})
	}
}
