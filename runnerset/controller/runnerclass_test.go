package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
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
