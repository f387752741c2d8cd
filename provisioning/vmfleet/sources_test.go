package vmfleet

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// A manager pod's incarnation is its pod's name, unless its state lives on
// a volume of its own (PodLabelIncarnation): then every pod that mounts it,
// the one before a restart and the one after, is the same incarnation, and
// fleet gc never counts the VMs it created as orphans.
func TestKubeSourceReadsTheStateVolumesIncarnation(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "production"}}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "production", Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "runner:v1"}}},
		}
	}
	for _, p := range []*corev1.Pod{
		pod("production-linux-0-5d4c-abcde", map[string]string{PodLabelManager: "production-linux-0", PodLabelIncarnation: "production-linux-0-state"}),
		pod("production-fleeting-0-7f8e-vwxyz", map[string]string{PodLabelManager: "production-fleeting-0"}),
	} {
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := (&KubeSource{Client: env.Client, Namespaces: []string{"production"}, Where: "envtest"}).Managers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range ms {
		if m.Incarnation != "" {
			got[m.Name] = m.Incarnation
		}
	}
	if got["production-linux-0"] != "production-linux-0-state" {
		t.Errorf("the stateful manager's incarnation is %q, want its claim", got["production-linux-0"])
	}
	if got["production-fleeting-0"] != IncarnationOfPod("production-fleeting-0-7f8e-vwxyz") {
		t.Errorf("the stateless manager's incarnation is %q, want its pod's name", got["production-fleeting-0"])
	}
	if !slices.ContainsFunc(ms, func(m Manager) bool { return m.Name == "production-linux-0" }) {
		t.Errorf("managers %+v", ms)
	}
}
