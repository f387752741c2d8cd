package sharedfleet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// kedaVersion's CRDs are read from KEDA's own module, as it ships them.
const kedaVersion = "v2.21.0"

func kedaCRDs(t *testing.T) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/kedacore/keda/v2@"+kedaVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("downloading KEDA %s for its CRDs: %v", kedaVersion, err)
	}
	var dir string
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), `"Dir": "`); ok {
			dir = strings.TrimSuffix(v, `",`)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "config", "crd", "bases", "keda.sh_scaledobjects.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	return []*apiextensionsv1.CustomResourceDefinition{crd}
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
	s := Scaling{MinManagers: 2, MaxManagers: 10}
	so, err := g.ScaledObject(g.ManagerName()+"-gitlab-runner", s)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{g.MetricsService(), g.PodDisruptionBudget(s), so} {
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
	for _, s := range []Scaling{{MinManagers: 0, MaxManagers: 3}, {MinManagers: 4, MaxManagers: 3}, {MinManagers: 1, MaxManagers: 3, TargetUtilization: 1.5}} {
		if _, err := g.ScaledObject("d", s); err == nil || !strings.Contains(err.Error(), "fleets.production.groups.shared-gce.scaling") {
			t.Errorf("%+v: %v", s, err)
		}
	}
	so, err := g.ScaledObject("d", Scaling{MinManagers: 1, MaxManagers: 5})
	if err != nil {
		t.Fatal(err)
	}
	trig := so.Object["spec"].(map[string]any)["triggers"].([]any)[0].(map[string]any)["metadata"].(map[string]any)
	if trig["threshold"] != "70" || !strings.Contains(trig["query"].(string), `manager="production-shared-gce"`) {
		t.Errorf("trigger %v", trig)
	}
}
