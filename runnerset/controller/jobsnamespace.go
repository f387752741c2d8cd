package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// jobsNamespaceStep creates the namespace the RunnerSet's jobs run in
// (spec.jobs.namespace, or the one derived from the RunnerSet) and its
// NetworkPolicy. It runs before anything else is written: a namespace that
// exists and is not this RunnerSet's (another team's jobs namespace, or one
// runnerfleet did not create) stops the pass with nothing created, neither
// a runner in GitLab nor capacity.
type jobsNamespaceStep struct{ *writer }

func (r jobsNamespaceStep) run(ctx context.Context, s *state) (bool, time.Duration, error) {
	name := s.settings.JobsNamespace
	live, err := r.applyAndGet(ctx, s.rs, resources.JobsNamespace(s.rs, name))
	var itw *InTheWay
	if errors.As(err, &itw) {
		s.rs.SetCondition(v1alpha1.ConditionJobsNamespaceReady, metav1.ConditionFalse, v1alpha1.ReasonJobsNamespaceTaken,
			jobsNamespaceTaken(s.rs, name, itw.Owner))
		return false, inTheWayRecheck, nil
	}
	if err != nil {
		return false, 0, err
	}
	if ns, ok := live.(*corev1.Namespace); ok && !ns.DeletionTimestamp.IsZero() {
		s.rs.SetCondition(v1alpha1.ConditionJobsNamespaceReady, metav1.ConditionFalse, v1alpha1.ReasonJobsNamespaceTaken, fmt.Sprintf(
			"jobs namespace %s is still being deleted (a RunnerSet of this name was deleted before); it is created again once it is gone", name))
		return false, drainPoll, nil
	}
	if err := r.apply(ctx, s.rs, resources.JobsNetworkPolicy(s.rs, name)); err != nil {
		return false, 0, err
	}
	s.rs.Status.JobsNamespace = name
	s.rs.SetCondition(v1alpha1.ConditionJobsNamespaceReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled,
		fmt.Sprintf("jobs run in namespace %s", name))
	return true, 0, nil
}

// jobsNamespaceTaken says which field chose the jobs namespace that is
// taken, by whom, and what to do.
func jobsNamespaceTaken(rs *v1alpha1.RunnerSet, name, owner string) string {
	field := fmt.Sprintf("jobs namespace %s (derived from this RunnerSet; spec.jobs.namespace is empty)", name)
	if rs.Spec.Jobs.Namespace != "" {
		field = fmt.Sprintf("spec.jobs.namespace: namespace %s", name)
	}
	who := "was not created by runnerfleet for this RunnerSet"
	if owner != "" {
		who = "is the jobs namespace of " + owner
	}
	return fmt.Sprintf("%s exists and %s: runnerfleet never runs jobs in, or takes over, a namespace it did not create for this RunnerSet. "+
		"Delete namespace %s if nothing uses it, or recreate the RunnerSet under another name or with a spec.jobs.namespace its RunnerClass allows", field, who, name)
}
