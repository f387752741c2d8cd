package crds

import (
	"testing"

	karpapis "sigs.k8s.io/karpenter/pkg/apis"

	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// The CEL rules that keep a team's job pod labels and annotations off
// runnerfleet's own keys are kubebuilder markers, which cannot name a Go
// constant: they must spell the keys of runnerset/naming's labels.go.
func TestTheReservedJobPodKeysAreTheKeysOfLabelsGo(t *testing.T) {
	all, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	notOurs := func(prefix string) string { return "!k.startsWith('" + prefix + "')" }
	for field, want := range map[string]string{
		"podAnnotations": "self.all(k, " + notOurs(naming.KeyPrefix) + " && " + notOurs(karpapis.Group+"/") +
			" && k != '" + naming.AnnotationSafeToEvict + "')",
		"podLabels": "self.all(k, " + notOurs(naming.KeyPrefix) + " && " + notOurs(karpapis.Group+"/") +
			" && k != '" + naming.LabelComponent + "' && k != '" + naming.LabelManagedBy + "')",
	} {
		found := false
		for _, crd := range all {
			if crd.Spec.Names.Kind != "RunnerSet" {
				continue
			}
			for _, v := range crd.Spec.Versions {
				jobs := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["jobs"]
				p, ok := jobs.Properties[field]
				if !ok {
					t.Fatalf("%s: no spec.jobs.%s", v.Name, field)
				}
				if len(p.XValidations) != 1 || p.XValidations[0].Rule != want {
					t.Errorf("%s spec.jobs.%s: rules %+v, want the one rule\n%s", v.Name, field, p.XValidations, want)
				}
				found = true
			}
		}
		if !found {
			t.Errorf("no RunnerSet CRD with spec.jobs.%s", field)
		}
	}
}
