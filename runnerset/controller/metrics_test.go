package controller_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// A step that fails with an error worth a retry is counted under its
// condition in runnerfleet_reconcile_errors_total; one that only sets its
// condition False (a missing class) is not an error.
func TestAFailedStepIsCountedUnderItsCondition(t *testing.T) {
	rs := &v1alpha1.RunnerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build", Finalizers: []string{controller.Finalizer}},
		Spec:       v1alpha1.RunnerSetSpec{ClassName: "broken", Tags: []string{"a"}, GitLab: v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "t"}}},
	}
	apiDown := errors.New("the API server is down")
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(rs).WithStatusSubresource(rs).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.RunnerClass); ok && key.Name == "broken" {
				return apiDown
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	r := controller.New(c, c, events.NewFakeRecorder(100))
	counter := metrics.ReconcileErrors.WithLabelValues(v1alpha1.ConditionClassAccepted)
	before := testutil.ToFloat64(counter)
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "build"}}); err == nil {
		t.Fatal("the reconcile did not fail")
	}
	if got := testutil.ToFloat64(counter) - before; got != 1 {
		t.Errorf("%s{step=%s} rose by %v, want 1", metrics.ReconcileErrorsTotal, v1alpha1.ConditionClassAccepted, got)
	}

	// A class that does not exist is the team's to fix, not an error.
	missing := rs.DeepCopy()
	missing.Name, missing.ResourceVersion, missing.Spec.ClassName = "lost", "", "nowhere"
	if err := c.Create(context.Background(), missing); err != nil {
		t.Fatal(err)
	}
	before = testutil.ToFloat64(counter)
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "lost"}}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(counter) - before; got != 0 {
		t.Errorf("a missing class counted %v errors", got)
	}
}
