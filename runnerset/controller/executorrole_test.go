package controller_test

import (
	"errors"
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// A RunnerSet of an earlier version has its managers' own Role and
// RoleBinding in its jobs namespace. The controller binds the executor's
// ClusterRole there instead, and only then deletes the two, so the
// managers never lack a right in between; a Role of that name that is
// not the RunnerSet's stays.
func TestTheManagersOwnJobsRoleOfEarlierVersionsGoesOnceTheExecutorsIsBound(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "earlier-token", token)
	rs := runnerSet(ns, "earlier", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	n := naming.For(ns, "earlier")
	jobs := n.JobsNamespace()
	managerUser := "system:serviceaccount:" + ns + ":" + n.ManagerServiceAccount()

	// What an earlier version wrote, with the executor's binding gone.
	must(t, k8s.Delete(ctx, get(t, jobs, n.ManagerExecutorBinding(), &rbacv1.RoleBinding{})))
	earlier := metav1.ObjectMeta{Namespace: jobs, Name: n.ManagerRole(), Labels: map[string]string{
		resources.LabelManagedBy: resources.ManagedBy, resources.LabelOwnerNamespace: ns, resources.LabelOwnerName: "earlier",
	}}
	must(t, k8s.Create(ctx, &rbacv1.Role{ObjectMeta: earlier, Rules: resources.ExecutorRules()}))
	must(t, k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: earlier,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: n.ManagerRole()},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: n.ManagerServiceAccount()}}}))
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Managers.Concurrent = 3 }) // a pass
	eventually(t, "the earlier Role and RoleBinding deleted, the executor's bound", func() error {
		for _, o := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}} {
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: jobs, Name: n.ManagerRole()}, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T still there (%v)", o, err)
			}
		}
		rb := &rbacv1.RoleBinding{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: jobs, Name: n.ManagerExecutorBinding()}, rb); err != nil {
			return err
		}
		if rb.RoleRef.Name != resources.ExecutorClusterRole {
			return fmt.Errorf("binding refers to %+v", rb.RoleRef)
		}
		return nil
	})
	// The managers still may run jobs there, through the ClusterRole alone.
	eventually(t, "the managers may create pods in the jobs namespace", func() error {
		if !can(t, managerUser, jobs, "create", "pods", "") {
			return errors.New("not allowed")
		}
		return nil
	})
	if can(t, managerUser, ns, "create", "pods", "") {
		t.Error("the managers may create pods in the team's namespace: the ClusterRole reaches beyond the jobs namespace")
	}

	// A Role of that name someone else wrote there (no owner labels) stays.
	theirs := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: jobs, Name: n.ManagerRole()}, Rules: resources.ExecutorRules()}
	must(t, k8s.Create(ctx, theirs))
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Managers.Concurrent = 4 }) // another pass
	waitCondition(t, cur, v1alpha1.ConditionIdentityReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled)
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(theirs), &rbacv1.Role{}))
}
