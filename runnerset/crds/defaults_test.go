package crds

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// The API server defaults a RunnerClass from the kubebuilder markers, which
// can only hold literals; v1alpha1.Effective defaults what the API server
// did not (objects built in Go). Both must give the same value.
func TestCRDDefaultsAreTheBuiltInDefaults(t *testing.T) {
	all, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	for _, crd := range all {
		if crd.Spec.Names.Kind != "RunnerClass" {
			continue
		}
		b, err := json.Marshal(crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatal(err)
		}
	}
	if spec == nil {
		t.Fatal("no RunnerClass CRD")
	}
	defaultAt := func(path string) any {
		var node any = spec
		for _, p := range strings.Split(path, ".") {
			node = node.(map[string]any)["properties"].(map[string]any)[p]
			if node == nil {
				t.Fatalf("no field %s in the RunnerClass schema", path)
			}
		}
		return node.(map[string]any)["default"]
	}
	for path, want := range map[string]any{
		"gitlabURL":                    v1alpha1.DefaultGitLabURL,
		"defaults.managerImage":        string(v1alpha1.DefaultManagerImage),
		"defaults.jobImage":            string(v1alpha1.DefaultJobImage),
		"karpenter.amiAlias":           v1alpha1.DefaultAMIAlias,
		"computeClass.machineFamilies": []any{v1alpha1.DefaultMachineFamily},
	} {
		got, _ := json.Marshal(defaultAt(path))
		w, _ := json.Marshal(want)
		if string(got) != string(w) {
			t.Errorf("the CRD defaults %s to %s, Effective to %s", path, got, w)
		}
	}
}
