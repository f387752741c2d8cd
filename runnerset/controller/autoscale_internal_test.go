package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// In a cluster without KEDA's CRDs, an autoscaled RunnerSet's pass goes on: ConditionAutoscaling
// says to install KEDA, naming the version, and the pass reports no
// error (which would retry it with backoff forever and mark the managers'
// condition WriteFailed).
func TestWithoutKEDAAutoscalingSaysToInstallIt(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// The fake client takes any kind: it answers for ScaledObjects as a
	// real client's REST mapper does where the CRD is missing.
	noKEDA := func(obj client.Object) error {
		if gvk := obj.GetObjectKind().GroupVersionKind(); gvk == resources.ScaledObjectGVK {
			return &meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
		}
		return nil
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := noKEDA(obj); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := noKEDA(obj); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	step := managersStep{&writer{Client: c, APIReader: c, created: &createdObjects{}, secrets: &writtenSecrets{}, now: time.Now}}
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build", UID: "u1"}}
	rs.Spec.Managers.Autoscale = &v1alpha1.ManagerAutoscale{MinReplicas: 1, MaxReplicas: 3, TargetRunningJobs: 4}
	class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	class.Spec.Prometheus = &v1alpha1.PrometheusEndpoint{Address: "http://prometheus:9090"}
	if err := step.autoscale(context.Background(), &state{rs: rs, class: class}); err != nil {
		t.Fatalf("the pass fails without KEDA: %v", err)
	}
	got := meta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionAutoscaling)
	if got == nil || got.Status != metav1.ConditionFalse || got.Reason != v1alpha1.ReasonKEDANotInstalled ||
		!strings.Contains(got.Message, "install KEDA v2.21.0") || !strings.Contains(got.Message, "spec.managers.autoscale") {
		t.Errorf("Autoscaling %+v", got)
	}
}

// A ScaledObject's update brings its RunnerSet back when KEDA's Ready or
// Active changes, not when KEDA only stamps lastActiveTime (every poll
// while active).
func TestOnlyKEDAsConditionsBringAPass(t *testing.T) {
	so := func(ready, active, lastActive string) *unstructured.Unstructured {
		u := scaledObjectOf(&v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}})
		u.Object["status"] = map[string]any{
			"lastActiveTime": lastActive,
			"conditions": []any{
				map[string]any{"type": "Ready", "status": ready, "reason": "R", "message": "m"},
				map[string]any{"type": "Active", "status": active, "reason": "A", "message": "m"},
			},
		}
		return u
	}
	for _, c := range []struct {
		name     string
		old, new *unstructured.Unstructured
		want     bool
	}{
		{"lastActiveTime only", so("True", "True", "t1"), so("True", "True", "t2"), false},
		{"Active flips", so("True", "False", "t1"), so("True", "True", "t1"), true},
		{"Ready fails", so("True", "True", "t1"), so("False", "True", "t1"), true},
	} {
		if got := kedaStatusChanged(event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.new}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
