package gke

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func computeClass(priorities ...any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cloud.google.com/v1",
		"kind":       "ComputeClass",
		"metadata":   map[string]any{"name": "cc"},
		"spec": map[string]any{
			"priorities":           priorities,
			"nodePoolAutoCreation": map[string]any{"enabled": true},
			"whenUnsatisfiable":    "DoNotScaleUp",
		},
	}}
	return u
}

// TestTheComputeClassSchemaRefusesWhatGKERefuses: each case is a rule of
// GKE's served schema; the good class passes, so the refusals are the rules'.
func TestTheComputeClassSchemaRefusesWhatGKERefuses(t *testing.T) {
	v, err := ComputeClassValidator()
	if err != nil {
		t.Fatal(err)
	}
	good := computeClass(map[string]any{"machineFamily": "n2d", "spot": true}, map[string]any{"machineType": "c4a-standard-8", "spot": false})
	if errs := v.Validate(good); len(errs) > 0 {
		t.Fatalf("a good ComputeClass is refused: %v", errs)
	}
	cases := []struct {
		name string
		obj  *unstructured.Unstructured
		says string
	}{
		{"family longer than 10", computeClass(map[string]any{"machineFamily": "n2d-highmem"}), "may not be more than 10"},
		{"family ek", computeClass(map[string]any{"machineFamily": "ek"}), "MachineFamily cannot be equal to 'ek'"},
		{"family e4a", computeClass(map[string]any{"machineFamily": "e4a"}), "MachineFamily cannot be equal to 'e4a'"},
		{"type e4a-", computeClass(map[string]any{"machineType": "e4a-standard-4"}), "MachineType cannot start with 'e4a' prefix"},
		{"family and type", computeClass(map[string]any{"machineFamily": "n2d", "machineType": "n2d-standard-8"}), "cannot be set together"},
		{"type and minCores", computeClass(map[string]any{"machineType": "n2d-standard-8", "minCores": int64(4)}), "MinCores/MinMemoryGb"},
		{"an EC2 field", computeClass(map[string]any{"instanceType": "c7i.2xlarge"}), "spec.priorities[0].instanceType: Invalid value"},
		{"a limits field ComputeClass does not have", func() *unstructured.Unstructured {
			u := computeClass(map[string]any{"machineFamily": "n2d"})
			u.Object["spec"].(map[string]any)["limits"] = map[string]any{"cpu": "128"}
			return u
		}(), "spec.limits: Invalid value"},
		{"bad whenUnsatisfiable", func() *unstructured.Unstructured {
			u := computeClass(map[string]any{"machineFamily": "n2d"})
			u.Object["spec"].(map[string]any)["whenUnsatisfiable"] = "Wait"
			return u
		}(), "Unsupported value"},
		{"pod family on Standard", computeClass(map[string]any{"podFamily": "general-purpose-arm"}), "pod family can be used only if Autopilot"},
		{"priority scores on some", computeClass(map[string]any{"machineFamily": "n2d", "priorityScore": int64(5)}, map[string]any{"machineFamily": "c3"}), "PriorityScore must be set for all"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := v.Validate(tc.obj)
			if got := errs.ToAggregate(); got == nil || !strings.Contains(got.Error(), tc.says) {
				t.Errorf("want an error saying %q, got %v", tc.says, got)
			}
		})
	}
}
