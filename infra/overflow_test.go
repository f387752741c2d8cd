package infra_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/runnerfleet/runnerfleet/infra"
	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// overflowStack is eks-dev moved to another region as the overflow stack of
// acme/runnerfleet/eks-eu: its team is an overflow of the primary's build.
func overflowStack(t *testing.T) (map[string]string, []string) {
	t.Helper()
	cfg, secretKeys := stackConfig(t, "eks-dev", stackSecrets["eks-dev"])
	var f map[string]any
	if err := json.Unmarshal([]byte(cfg["runnerfleet:fleet"]), &f); err != nil {
		t.Fatal(err)
	}
	f["prometheus"] = map[string]any{"address": "http://prometheus-operated.monitoring:9090"}
	f["overflowOf"] = map[string]any{"stack": "acme/runnerfleet/eks-eu"}
	team := f["teams"].([]any)[0].(map[string]any)
	team["name"] = "build-overflow"
	team["managers"] = map[string]any{"concurrent": 4, "autoscale": map[string]any{"minReplicas": 0, "maxReplicas": 3, "targetRunningJobs": 2}}
	team["overflow"] = map[string]any{"primary": "build", "queueTime": map[string]any{"threshold": "2m"}}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg["runnerfleet:fleet"] = string(b)
	return cfg, secretKeys
}

func primaryOutput(t *testing.T, p stackconfig.PrimaryTeams) resource.PropertyMap {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return resource.NewPropertyMapFromMap(map[string]any{stackconfig.PrimaryOutput: v})
}

// An overflow stack in another region reads its primary's stack (a
// StackReference to overflowOf.stack) before it declares anything: its
// overflow's RunnerSet reads the primary's queue time from the primary's
// Prometheus, and waits for the read of KEDA's CRD. A primary that is not a
// team there, or has other tags, is refused naming the key, and nothing is
// declared.
func TestAnOverflowStackReadsItsPrimaryFromTheStackReference(t *testing.T) {
	cfg, secretKeys := overflowStack(t)
	var tags []string
	{
		var f stackconfig.Fleet
		if err := json.Unmarshal([]byte(cfg["runnerfleet:fleet"]), &f); err != nil {
			t.Fatal(err)
		}
		tags = f.Teams[0].Tags
	}
	ns := "team-a"
	m := infratest.NewMocks(t)
	m.StackOutputs = primaryOutput(t, stackconfig.PrimaryTeams{PrometheusAddress: "http://prometheus.eu.ci.internal:9090",
		Teams: []stackconfig.PrimaryTeam{{Namespace: ns, Name: "build", Tags: tags}}})
	if err := infratest.Run(m, "eks-us", cfg, secretKeys, infra.Program); err != nil {
		t.Fatal(err)
	}
	refs := m.ByToken(infratest.StackReferenceToken)
	if len(refs) != 1 || refs[0].Input("name").StringValue() != "acme/runnerfleet/eks-eu" {
		t.Fatalf("stack references %+v, want one to acme/runnerfleet/eks-eu", refs)
	}
	var rs infratest.Resource
	for _, r := range m.ByToken(tokRunnerSet) {
		if r.Input("metadata.name").StringValue() == "build-overflow" {
			rs = r
		}
	}
	if rs.URN == "" {
		t.Fatal("no RunnerSet build-overflow declared")
	}
	if v := rs.Input("spec.overflow.prometheus.address"); v.StringValue() != "http://prometheus.eu.ci.internal:9090" {
		t.Errorf("the overflow reads the primary's queue time from %v, want the primary stack's prometheus.remoteAddress", v)
	}
	if v := rs.Input("spec.overflow.primary"); v.StringValue() != "build" {
		t.Errorf("spec.overflow.primary = %v", v)
	}
	var keda string
	for _, r := range m.Resources() {
		if r.Read && r.ID == kube.KEDAScaledObjectCRD {
			keda = r.URN
		}
	}
	// What the RunnerSet waits for, directly or through what it waits for.
	byURN := map[string]infratest.Resource{}
	for _, r := range m.Resources() {
		byURN[r.URN] = r
	}
	waits := map[string]bool{}
	var walk func(urns []string)
	walk = func(urns []string) {
		for _, u := range urns {
			if !waits[u] {
				waits[u] = true
				walk(byURN[u].DependsOn)
			}
		}
	}
	walk(rs.DependsOn)
	if keda == "" || !waits[keda] {
		t.Errorf("the overflow RunnerSet does not wait for the read of KEDA's CRD (%q): depends on %v", keda, rs.DependsOn)
	}
	class := m.ByToken(tokRunnerClass)
	if len(class) != 1 || class[0].Input("spec.prometheus.address").StringValue() != "http://prometheus-operated.monitoring:9090" {
		t.Errorf("the RunnerClass's spec.prometheus: %v", class)
	}

	for _, c := range []struct {
		name    string
		primary resource.PropertyMap
		want    string
	}{
		{"no primary output", nil, `runnerfleet:fleet.overflowOf.stack: Invalid value: "acme/runnerfleet/eks-eu": the stack exports no overflowPrimary`},
		{"no such team", primaryOutput(t, stackconfig.PrimaryTeams{PrometheusAddress: "http://p:9090", Teams: []stackconfig.PrimaryTeam{{Namespace: ns, Name: "deploy", Tags: tags}}}),
			`runnerfleet:fleet.teams[0].overflow.primary: Not found: "team-a/build is not a team of stack acme/runnerfleet/eks-eu`},
		{"other tags", primaryOutput(t, stackconfig.PrimaryTeams{PrometheusAddress: "http://p:9090", Teams: []stackconfig.PrimaryTeam{{Namespace: ns, Name: "build", Tags: []string{"gpu"}}}}),
			`runnerfleet:fleet.teams[0].overflow.primary: Invalid value: "build": its tags in stack acme/runnerfleet/eks-eu are [gpu]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := infratest.NewMocks(t)
			m.StackOutputs = c.primary
			err := infratest.Run(m, "eks-us", cfg, secretKeys, infra.Program)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v\nwant %q", err, c.want)
			}
			for _, r := range m.Resources() {
				if r.Token != infratest.StackReferenceToken {
					t.Errorf("%s %s was declared before the overflow was refused", r.Token, r.Name)
				}
			}
		})
	}
}

// The local stack with an overflow team: the RunnerClass names the
// Prometheus fleet up passes (KEDA's serverAddress), the overflow's
// RunnerSet carries its region label beside the stack's labels, and the
// RunnerSets wait for the read of KEDA's CRD.
func TestALocalOverflowTeamNamesItsRegionAndTheLocalPrometheus(t *testing.T) {
	cfg, secretKeys := stackConfig(t, "local", nil)
	var f map[string]any
	if err := json.Unmarshal([]byte(cfg["runnerfleet:fleet"]), &f); err != nil {
		t.Fatal(err)
	}
	primary := f["teams"].([]any)[0].(map[string]any)
	f["teams"] = append(f["teams"].([]any), map[string]any{
		"namespace": primary["namespace"], "name": "build-overflow", "tags": primary["tags"], "tokenConfigKey": "overflowToken", "region": "local-b",
		"managers": map[string]any{"concurrent": 2, "autoscale": map[string]any{"minReplicas": 0, "maxReplicas": 2, "targetRunningJobs": 1}},
		"overflow": map[string]any{"primary": primary["name"], "queueTime": map[string]any{"threshold": "15s"}},
	})
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg["runnerfleet:fleet"] = string(b)
	cfg["runnerfleet:overflowToken"] = "glrt-overflow-not-real"
	m := infratest.NewMocks(t)
	if err := infratest.Run(m, "local", cfg, secretKeys, infra.ProgramWith(infra.Options{Kubeconfig: kubeconfig(t), PrometheusAddress: "http://127.0.0.1:9090"})); err != nil {
		t.Fatal(err)
	}
	class := m.Get(t, tokRunnerClass, "local-class")
	if v := class.Input("spec.prometheus.address"); v.StringValue() != "http://127.0.0.1:9090" {
		t.Errorf("the local RunnerClass's spec.prometheus.address = %v, want the address fleet up passed", v)
	}
	rs := m.Get(t, tokRunnerSet, "local/team-a/build-overflow")
	labels := rs.Input("metadata.labels")
	if !labels.IsObject() || labels.ObjectValue()[naming.LabelRegion].StringValue() != "local-b" || labels.ObjectValue()[naming.LabelStack].StringValue() != "local" {
		t.Errorf("the overflow's labels %v, want its region local-b beside the stack's", labels)
	}
	if v := m.Get(t, tokRunnerSet, "local/team-a/build").Input("metadata.labels"); v.ObjectValue()[naming.LabelRegion].IsString() {
		t.Errorf("the primary, which names no region, is labelled %v", v)
	}
	read := false
	for _, r := range m.Resources() {
		read = read || r.Read && r.ID == kube.KEDAScaledObjectCRD
	}
	if !read {
		t.Error("a local stack whose teams autoscale does not read KEDA's CRD first")
	}
}
