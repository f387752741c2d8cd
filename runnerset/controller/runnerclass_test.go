package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// The controller writes a RunnerClass's status: Accepted, and how many
// RunnerSets use it and how many of those are Ready, recounted every 30 s.
func TestRunnerClassStatusSaysAcceptedAndCountsItsRunnerSets(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "ready-token", token)
	ready := runnerSet(ns, "ready", class.Name)
	must(t, k8s.Create(ctx, ready))
	stuck := runnerSet(ns, "stuck", class.Name) // its token Secret never comes
	must(t, k8s.Create(ctx, stuck))

	status := func(wantSets, wantReady int32) func() error {
		return func() error {
			c := &v1alpha1.RunnerClass{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), c); err != nil {
				return err
			}
			acc := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ClassConditionAccepted)
			if acc == nil || acc.Status != metav1.ConditionTrue || acc.Reason != v1alpha1.ReasonAccepted || acc.ObservedGeneration != c.Generation {
				return fmt.Errorf("Accepted = %+v", acc)
			}
			if c.Status.RunnerSets != wantSets || c.Status.ReadyRunnerSets != wantReady {
				return fmt.Errorf("runnerSets %d ready %d, want %d and %d", c.Status.RunnerSets, c.Status.ReadyRunnerSets, wantSets, wantReady)
			}
			return nil
		}
	}
	eventuallyWithin(t, 75*time.Second, "class accepted with 2 RunnerSets, 1 Ready", status(2, 1))
	must(t, k8s.Delete(ctx, stuck))
	eventuallyWithin(t, 75*time.Second, "class counts 1 RunnerSet once the other is gone", status(1, 1))
}

// A RunnerClass still used by RunnerSets is not deleted: its node class,
// which their NodePools share, would go with it, and Karpenter drains and
// terminates every node of a deleted node class. It says why it stays, and
// goes once its last RunnerSet is gone.
func TestARunnerClassInUseStaysUntilItsLastRunnerSetIsGone(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "kept-token", token)
	rs := runnerSet(ns, "kept", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	eventually(t, "the class's finalizer", func() error {
		c := &v1alpha1.RunnerClass{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), c); err != nil {
			return err
		}
		if !slices.Contains(c.Finalizers, v1alpha1.ClassFinalizer) {
			return fmt.Errorf("finalizers %v", c.Finalizers)
		}
		return nil
	})

	must(t, k8s.Delete(ctx, class))
	eventually(t, "the class in use says why it stays", func() error {
		c := &v1alpha1.RunnerClass{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), c); err != nil {
			return fmt.Errorf("the class in use is gone: %w", err)
		}
		acc := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ClassConditionAccepted)
		if acc == nil || acc.Reason != v1alpha1.ReasonInUse || !strings.Contains(acc.Message, ns+"/kept") {
			return fmt.Errorf("Accepted = %+v", acc)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // still there a while later, node class and all
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(class), &v1alpha1.RunnerClass{}))
	get(t, "", naming.ClassCapacity(class.Name), &kwokv1alpha1.KWOKNodeClass{})

	must(t, k8s.Delete(ctx, rs))
	eventuallyWithin(t, time.Minute, "the class gone after its last RunnerSet", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(class), &v1alpha1.RunnerClass{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}
