package controller_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Where the API server serves MutatingAdmissionPolicy (envtest's does, and
// the suite installs install.AdmissionPolicies as every install path
// does), a RunnerSet has the drain finalizer from its creation: the
// create's response carries it, and a finalizer the creator set stays
// beside it. The controller then writes nothing for it.
func TestANewRunnerSetHasTheDrainFinalizerFromItsCreation(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "held-token", token)
	rs := runnerSet(ns, "held", class.Name)
	rs.Finalizers = []string{"example.com/theirs"}
	must(t, k8s.Create(ctx, rs))
	if !slices.Contains(rs.Finalizers, controller.Finalizer) || !slices.Contains(rs.Finalizers, "example.com/theirs") {
		t.Fatalf("the create's response has finalizers %v, want %s beside the creator's", rs.Finalizers, controller.Finalizer)
	}
	cur := waitReady(t, rs)
	if !slices.Contains(cur.Finalizers, controller.Finalizer) {
		t.Errorf("finalizers %v after the first pass", cur.Finalizers)
	}
	// Let go of the creator's finalizer, as its owner would.
	update(t, cur, func(r *v1alpha1.RunnerSet) {
		r.Finalizers = slices.DeleteFunc(r.Finalizers, func(f string) bool { return f == "example.com/theirs" })
	})
	deleteAndWaitGone(t, rs)
}

// On an API server that does not serve the policy (before Kubernetes 1.36,
// or installed without it), the controller adds the finalizer itself on
// the RunnerSet's first pass, before it writes anything for it, and the
// RunnerSet is still held until its managers have drained: correctness
// never rests on the policy, only a write does.
func TestWithoutTheAdmissionPolicyTheControllerAddsTheFinalizer(t *testing.T) {
	binding := install.FinalizerPolicyBinding(install.Defaults())
	must(t, k8s.Delete(ctx, binding))
	must(t, waitForFinalizerPolicy(ctx, false))
	t.Cleanup(func() {
		must(t, k8s.Create(ctx, install.FinalizerPolicyBinding(install.Defaults())))
		must(t, waitForFinalizerPolicy(ctx, true))
	})

	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "unheld-token", token)
	rs := runnerSet(ns, "unheld", class.Name)
	start := writeLog.len()
	must(t, k8s.Create(ctx, rs))
	if slices.Contains(rs.Finalizers, controller.Finalizer) {
		t.Fatalf("the create's response has the finalizer without the policy: %v", rs.Finalizers)
	}
	cur := waitReady(t, rs)
	if !slices.Contains(cur.Finalizers, controller.Finalizer) {
		t.Fatalf("Ready without the drain finalizer: %v", cur.Finalizers)
	}
	entries, _ := writeLog.since(start)
	patches := 0
	for _, e := range entries {
		if e.kind == "PATCH runnersets" && e.namespace == ns && e.name == rs.Name {
			patches++
		}
	}
	if patches != 1 {
		t.Errorf("%d patches of the RunnerSet, want 1: the finalizer, added by the controller", patches)
	}
	// Held until the managers have drained.
	must(t, k8s.Delete(ctx, cur))
	n := naming.For(ns, rs.Name)
	eventually(t, "managers scaled to zero", func() error {
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Managers()}, d); err != nil {
			return err
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			return fmt.Errorf("replicas %v", d.Spec.Replicas)
		}
		return nil
	})
	waitGone(t, rs)
}

// The policy matches creates only: the controller removes the finalizer
// with an update once the RunnerSet has drained, and a policy that added
// it back on updates would hold every RunnerSet forever.
func TestTheFinalizerPolicyMatchesCreatesOnly(t *testing.T) {
	p := install.FinalizerPolicy(install.Defaults())
	var ops []admissionregistrationv1.OperationType
	for _, r := range p.Spec.MatchConstraints.ResourceRules {
		ops = append(ops, r.Operations...)
		if !slices.Equal(r.Resources, []string{"runnersets"}) || !slices.Equal(r.APIGroups, []string{v1alpha1.GroupVersion.Group}) {
			t.Errorf("the policy matches %v of %v, want runnersets of %s only", r.Resources, r.APIGroups, v1alpha1.GroupVersion.Group)
		}
	}
	if !slices.Equal(ops, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
		t.Errorf("the policy matches %v, want CREATE only", ops)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("failurePolicy %v, want Ignore: the controller adds the finalizer when the policy does not", p.Spec.FailurePolicy)
	}
}

func deleteAndWaitGone(t *testing.T, rs *v1alpha1.RunnerSet) {
	t.Helper()
	must(t, k8s.Delete(ctx, rs))
	waitGone(t, rs)
}

func waitGone(t *testing.T, rs *v1alpha1.RunnerSet) {
	t.Helper()
	eventuallyWithin(t, time.Minute, "RunnerSet "+rs.Name+" gone", func() error {
		cur := &v1alpha1.RunnerSet{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), cur)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there, finalizers %v, deleting since %v", cur.Finalizers, cur.DeletionTimestamp)
	})
}
