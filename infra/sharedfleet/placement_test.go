package sharedfleet

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/internal/schedtest"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// managersNode is a node of the managers' on-demand pool as infra/gcp
// declares it (its test checks the pool carries these labels and taint).
func managersNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "managers", Labels: resources.ManagerNodeLabels()},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{resources.ManagerNodeTaint()}},
	}
}

// spotNode is a node of GKE's spot capacity with no taint: what a pod
// without a nodeSelector could land on.
func spotNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot", Labels: map[string]string{"cloud.google.com/gke-spot": "true"}}}
}

// podSpecOf decodes the pod template of a declared workload.
func podSpecOf(t *testing.T, r infratest.Resource) corev1.PodSpec {
	t.Helper()
	v := r.Input("spec.template.spec")
	if !v.IsObject() {
		t.Fatalf("%s %s has no pod template", r.Token, r.Name)
	}
	b, err := json.Marshal(v.ObjectValue().Mappable())
	if err != nil {
		t.Fatal(err)
	}
	var spec corev1.PodSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatalf("%s %s: %v", r.Token, r.Name, err)
	}
	return spec
}

// Every manager, and every pod the fleet runs beside them, lands on the
// managers' on-demand pool and nowhere else, by the scheduler's own rules.
func TestManagersAndTheirMonitoringRunOnlyOnTheOnDemandPool(t *testing.T) {
	m := deployedStack(t)
	specs := map[string]corev1.PodSpec{}
	for _, r := range m.ByToken(tokRelease) {
		spec, err := r.PodPlacement("")
		if err != nil {
			t.Fatal(err)
		}
		specs["release "+r.Name] = spec
	}
	for _, r := range m.ByToken(tokDeployment) {
		specs["Deployment "+r.Name] = podSpecOf(t, r)
	}
	managers := 0
	for name, spec := range specs {
		if strings.HasPrefix(name, "release ") {
			managers++
		}
		if err := schedtest.Fits(spec, managersNode()); err != nil {
			t.Errorf("%s does not fit the managers' pool: %v", name, err)
		}
		if err := schedtest.Fits(spec, spotNode()); err == nil {
			t.Errorf("%s fits a spot node: a preemption would kill it", name)
		}
	}
	if managers < 7 {
		t.Errorf("%d manager releases checked, want every one of the stack's 7", managers)
	}
}
