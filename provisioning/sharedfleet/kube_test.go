package sharedfleet

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

func kedaCRDs(t *testing.T) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	c, err := testenv.KEDACRDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The manager group's Kubernetes objects are accepted by a real
// kube-apiserver with KEDA's own ScaledObject CRD.
func TestManagerObjectsAreAcceptedByTheAPIServerAndKEDAsSchema(t *testing.T) {
	env, err := testenv.Start(testenv.WithCRDs(kedaCRDs(t)...))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	g := production()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: g.Fleet}}); err != nil {
		t.Fatal(err)
	}
	s := fleetspec.Scaling{MinManagers: 2, MaxManagers: 10}
	so, err := ScaledObject(g, g.ManagerName()+"-gitlab-runner", s)
	if err != nil {
		t.Fatal(err)
	}
	g.Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 1}
	r := Releases(g, "terminals.example.com")[0]
	claim := r.StateClaim(g.Fleet)
	claim.Name = StateClaimName(r.ReleaseName()) + "-abcd1234" // as the Pulumi provider names it
	objs := []client.Object{MetricsService(g), PodDisruptionBudget(g, s), so, ServiceAccount(g, "ci@ci-prod.iam.gserviceaccount.com"), r.SessionService(g.Fleet), claim}
	for _, obj := range objs {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Errorf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: g.Fleet, Name: g.ManagerName()}, svc); err != nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Ports[0].Name != "metrics" {
		t.Errorf("headless metrics Service: %v %+v", err, svc.Spec)
	}
}

func TestScalingBoundsAreChecked(t *testing.T) {
	g := production()
	for _, s := range []fleetspec.Scaling{{MinManagers: 0, MaxManagers: 3}, {MinManagers: 4, MaxManagers: 3}, {MinManagers: 1, MaxManagers: 3, TargetUtilization: 1.5}} {
		if _, err := ScaledObject(g, "d", s); err == nil || !strings.Contains(err.Error(), "fleets.production.groups.shared-gce.scaling") {
			t.Errorf("%+v: %v", s, err)
		}
	}
	so, err := ScaledObject(g, "d", fleetspec.Scaling{MinManagers: 1, MaxManagers: 5})
	if err != nil {
		t.Fatal(err)
	}
	trig := so.Object["spec"].(map[string]any)["triggers"].([]any)[0].(map[string]any)["metadata"].(map[string]any)
	if trig["threshold"] != "70" || !strings.Contains(trig["query"].(string), `manager="production-shared-gce"`) {
		t.Errorf("trigger %v", trig)
	}
}
