package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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
