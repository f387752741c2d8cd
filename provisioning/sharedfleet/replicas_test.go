package sharedfleet

import (
	"io"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

// renderedDeployment renders the reference gitlab-runner chart with vals as
// helm template does (the Helm SDK's client-only install) and returns its
// Deployment, decoded strictly.
func renderedDeployment(t *testing.T, vals map[string]any) *appsv1.Deployment {
	t.Helper()
	dir, searched := referenceChart(t)
	if dir == "" {
		t.Fatalf("the reference copy of the gitlab-runner chart is not beside this checkout (looked in %s): see TestChartValuesAreReadByTheChartsTemplates", strings.Join(searched, ", "))
	}
	ch, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "m", "runners"
	rel, err := inst.Run(ch, vals)
	if err != nil {
		t.Fatalf("the chart does not render the values: %v", err)
	}
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		if !strings.Contains(doc, "\nkind: Deployment\n") {
			continue
		}
		d := &appsv1.Deployment{}
		if err := yaml.UnmarshalStrict([]byte(doc), d); err != nil {
			t.Fatalf("the rendered Deployment: %v", err)
		}
		return d
	}
	t.Fatalf("the chart rendered no Deployment:\n%s", rel.Manifest)
	return nil
}

// A manager KEDA scales has no replicas in its Deployment as the pinned
// chart renders it, so a Helm upgrade (a three-way merge of the old and new
// manifests with the live object) never writes over the replicas KEDA set;
// a fixed manager runs one. The negative control: the values with replicas
// set, as before, render a count that every upgrade would write back.
func TestAScaledManagersReleaseLeavesItsReplicasToKEDA(t *testing.T) {
	s := ReleaseSettings{GitLabURL: "https://gitlab.example.com", ManagerImage: "registry.example.com/ci/runner:v1", GraceSeconds: 11400}
	g := production()
	g.Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 2}
	rels := Releases(g, "")
	if len(rels) != 2 || rels[0].Scaled() || !rels[1].Scaled() {
		t.Fatalf("releases %+v: want a fixed manager and a scaled one", rels)
	}
	fixed := renderedDeployment(t, rels[0].Values(s, "config", "script", "hash", "claim"))
	if fixed.Spec.Replicas == nil || *fixed.Spec.Replicas != 1 {
		t.Errorf("the fixed manager's Deployment has replicas %v, want 1", fixed.Spec.Replicas)
	}
	v := rels[1].Values(s, "config", "script", "hash", "claim")
	if scaled := renderedDeployment(t, v); scaled.Spec.Replicas != nil {
		t.Errorf("the scaled manager's Deployment sets replicas %d: every Helm upgrade would write it over KEDA's", *scaled.Spec.Replicas)
	}
	v["replicas"] = 0
	if d := renderedDeployment(t, v); d.Spec.Replicas == nil {
		t.Error("negative control: with replicas set the chart still renders none, so the check above proves nothing")
	}
}
