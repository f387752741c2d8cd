package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// reconcileIdentity writes the job ServiceAccount (with its cloud identity)
// and the manager's ServiceAccount, Role and RoleBinding.
func (r *Reconciler) reconcileIdentity(ctx context.Context, s *state) (bool, time.Duration, error) {
	for _, obj := range []client.Object{
		resources.JobServiceAccount(s.rs),
		resources.ManagerServiceAccountFor(s.rs, s.class),
		resources.ManagerRole(s.rs),
		resources.ManagerRoleBinding(s.rs),
	} {
		if err := r.apply(ctx, s.rs, obj); err != nil {
			return false, 0, err
		}
	}
	s.rs.SetCondition(v1alpha1.ConditionIdentityReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled,
		"job and manager ServiceAccounts and the manager Role are in place")
	return true, 0, nil
}
