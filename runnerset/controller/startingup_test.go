package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// A new RunnerSet's first status waits for its managers' first rollout, and
// for nothing else: once the pass sees them available, it writes the status
// at once. (It used to wait firstStatusWithin even then: every new
// RunnerSet took 10 s to Ready, whatever the rollout took.)
func TestANewRunnerSetsFirstStatusWaitsOnlyForARolloutInProgress(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	r := &Reconciler{Now: func() time.Time { return now }}
	pass := func(managers metav1.ConditionStatus, reason string, since time.Duration, hadStatus bool) bool {
		before := &v1alpha1.RunnerSet{}
		if hadStatus {
			before.SetCondition(v1alpha1.ConditionClassAccepted, metav1.ConditionTrue, v1alpha1.ReasonReconciled, "")
		}
		rs := &v1alpha1.RunnerSet{}
		for _, c := range v1alpha1.DependentConditions {
			rs.SetCondition(c, metav1.ConditionTrue, v1alpha1.ReasonReconciled, "")
		}
		rs.SetCondition(v1alpha1.ConditionManagersAvailable, managers, reason, "")
		rs.RollUpReady()
		return r.startingUp(before, rs, &state{managersSince: now.Add(-since)})
	}
	for _, tc := range []struct {
		name      string
		managers  metav1.ConditionStatus
		reason    string
		since     time.Duration
		hadStatus bool
		want      bool
	}{
		{"managers rolling out, Deployment a second old: wait", metav1.ConditionFalse, v1alpha1.ReasonRollingOut, time.Second, false, true},
		{"managers available: write now", metav1.ConditionTrue, v1alpha1.ReasonManagersAvailable, time.Second, false, false},
		{"rolling out for longer than firstStatusWithin: write now", metav1.ConditionFalse, v1alpha1.ReasonRollingOut, firstStatusWithin, false, false},
		{"a status written before: write now", metav1.ConditionFalse, v1alpha1.ReasonRollingOut, time.Second, true, false},
		{"managers failing otherwise: write now", metav1.ConditionFalse, v1alpha1.ReasonInvalidImage, time.Second, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pass(tc.managers, tc.reason, tc.since, tc.hadStatus); got != tc.want {
				t.Errorf("startingUp = %v, want %v", got, tc.want)
			}
		})
	}
}
