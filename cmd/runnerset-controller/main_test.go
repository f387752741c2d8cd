package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// What main registers runs every controller: a RunnerSet gets the RunnerSet
// controller's finalizer and status, and its RunnerClass, created after it,
// the RunnerClass controller's finalizer and a count of that RunnerSet (read
// through the className index); the class brings the RunnerSet back (the
// RunnerSet controller's class watch, through the same index).
func TestMainRegistersEveryControllerAndTheIndexesTheyShare(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Cache: controller.CacheOptions(env.Scheme, mapper),
		Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := register(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	k8s, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}))
	rs := &v1alpha1.RunnerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "build"},
		Spec: v1alpha1.RunnerSetSpec{ClassName: "kwok", Tags: []string{"build"},
			GitLab: v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "build-token"}}},
	}
	must(t, k8s.Create(ctx, rs))
	eventually(t, "the RunnerSet controller's finalizer and status", func() error {
		cur := &v1alpha1.RunnerSet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), cur); err != nil {
			return err
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionClassAccepted)
		if !controllerutil.ContainsFinalizer(cur, controller.Finalizer) || c == nil || c.Reason != v1alpha1.ReasonRunnerClassNotFound {
			return fmt.Errorf("finalizers %v, ClassAccepted %+v", cur.Finalizers, c)
		}
		return nil
	})

	class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "kwok"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
	must(t, k8s.Create(ctx, class))
	eventually(t, "the RunnerClass controller's finalizer and count", func() error {
		cur := &v1alpha1.RunnerClass{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), cur); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(cur, v1alpha1.ClassFinalizer) || cur.Status.RunnerSets != 1 {
			return fmt.Errorf("finalizers %v, %d RunnerSets counted", cur.Finalizers, cur.Status.RunnerSets)
		}
		return nil
	})
	eventually(t, "the RunnerSet brought back by its class", func() error {
		cur := &v1alpha1.RunnerSet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), cur); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionClassAccepted); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("ClassAccepted %+v", c)
		}
		return nil
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
