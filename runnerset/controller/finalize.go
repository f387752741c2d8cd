// Finalization: a deleting RunnerSet drains its managers, waits for its
// pods, releases its runner, deletes its capacity and its jobs namespace,
// and only then lets go of its finalizer.

package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// drainPoll is how often a deleting RunnerSet checks whether its pods are gone.
const drainPoll = 5 * time.Second

// finalize drains the managers, waits until no manager or job pod is left
// (deleting job pods no manager is left to delete, after their grace), then
// lets the RunnerSet go; its owned objects follow by garbage collection.
func (r *Reconciler) finalize(ctx context.Context, rs *v1alpha1.RunnerSet) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(rs, Finalizer) {
		return reconcile.Result{}, nil
	}
	before := rs.DeepCopy()
	// KEDA lets the managers go first: it would start one again after the
	// scale to zero below.
	if gone, err := r.scaledObjectGone(ctx, rs); err != nil || !gone {
		return reconcile.Result{RequeueAfter: drainPoll}, err
	}
	// Scale managers to zero: each one gets SIGQUIT and finishes its jobs.
	d := &appsv1.Deployment{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: naming.For(rs.Namespace, rs.Name).Managers()}, d)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("getting managers: %w", err)
	}
	if err == nil && (d.Spec.Replicas == nil || *d.Spec.Replicas != 0) {
		patch := client.MergeFrom(d.DeepCopy())
		zero := int32(0)
		d.Spec.Replicas = &zero
		if err := r.Client.Patch(ctx, d, patch); err != nil {
			return conflictIsRequeue(fmt.Errorf("scaling managers to zero: %w", err))
		}
		log.FromContext(ctx).Info("Draining managers before deletion")
	}
	left, err := r.podsLeft(ctx, rs)
	if err != nil {
		return reconcile.Result{}, err
	}
	if left.total() > 0 {
		// Job pods no manager is left to delete go after their grace
		// (orphans.go).
		return r.waitForPods(ctx, before, rs, left)
	}
	class := &v1alpha1.RunnerClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: rs.Spec.ClassName}, class); err != nil {
		class = nil // the runner's own Secret remembers its GitLab
	}
	err = r.Tokens.Release(ctx, rs, v1alpha1.Effective(rs, class).GitLabURL)
	if err != nil && r.cannotBeRestored(ctx, rs, err) {
		// The API token went with a namespace that is being deleted (a
		// RunnerSet from before the token was held by ReleaseFinalizer):
		// nothing can bring it back, so holding the RunnerSet would hold
		// the namespace forever. Say which runner is left, and go.
		r.Recorder.Eventf(rs, nil, corev1.EventTypeWarning, "RunnerLeftInGitLab", "Release",
			"runner %d could not be deleted from GitLab: %v; namespace %s is being deleted, so it cannot be restored: delete the runner in GitLab",
			rs.Status.RunnerID, err, rs.Namespace)
		log.FromContext(ctx).Info("Runner left in GitLab: its API token is gone with its namespace", "runnerID", rs.Status.RunnerID)
		err = nil
	}
	if err != nil {
		rs.SetCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting,
			fmt.Sprintf("managers drained; deleting the runner from GitLab failed, retrying: %v", err))
		r.recordTransitions(before, rs)
		_ = r.patchStatus(ctx, before, rs)
		return reconcile.Result{}, fmt.Errorf("releasing runner: %w", err)
	}
	// Capacity goes last: only now is no job left that could need it.
	gone, err := r.deleteCapacity(ctx, rs)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !gone {
		rs.SetCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting,
			"managers drained; waiting for the runner's capacity to be removed")
		if err := r.patchStatus(ctx, before, rs); err != nil {
			return conflictIsRequeue(err)
		}
		return reconcile.Result{RequeueAfter: drainPoll}, nil
	}
	if err := r.deleteJobsNamespace(ctx, rs); err != nil {
		return reconcile.Result{}, err
	}
	patch := client.MergeFromWithOptions(rs.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(rs, Finalizer)
	if err := r.Client.Patch(ctx, rs, patch); err != nil {
		return conflictIsRequeue(client.IgnoreNotFound(fmt.Errorf("removing finalizer: %w", err)))
	}
	log.FromContext(ctx).Info("Drained and released RunnerSet")
	return reconcile.Result{}, nil
}

// cannotBeRestored reports whether releasing failed for want of an API
// token that can no longer be restored: the namespace is terminating.
func (r *Reconciler) cannotBeRestored(ctx context.Context, rs *v1alpha1.RunnerSet, err error) bool {
	var te *v1alpha1.Failure
	if !errors.As(err, &te) || te.Reason != v1alpha1.ReasonAPITokenMissing {
		return false
	}
	ns := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: rs.Namespace}, ns); err != nil {
		return false
	}
	return !ns.DeletionTimestamp.IsZero()
}

// ownJobsNamespace returns rs's jobs namespace if it exists and
// runnerfleet created it for rs, nil otherwise.
func (r *Reconciler) ownJobsNamespace(ctx context.Context, rs *v1alpha1.RunnerSet) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	name := v1alpha1.Effective(rs, nil).JobsNamespace
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, ns)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting jobs namespace %s: %w", name, err)
	}
	if inTheWay(rs, ns, "Namespace", true) != nil {
		return nil, nil
	}
	return ns, nil
}

// deleteJobsNamespace deletes rs's jobs namespace, once no manager or job
// pod of rs is left, if it is rs's own: one runnerfleet created for it.
// The namespace controller removes what is left in it (the job
// ServiceAccount, the managers' Role).
func (r *Reconciler) deleteJobsNamespace(ctx context.Context, rs *v1alpha1.RunnerSet) error {
	ns, err := r.ownJobsNamespace(ctx, rs)
	if err != nil || ns == nil || !ns.DeletionTimestamp.IsZero() {
		return err // not there, not ours, or on its way
	}
	if err := r.Client.Delete(ctx, ns, client.Preconditions{UID: &ns.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting jobs namespace %s: %w", ns.Name, err)
	}
	log.FromContext(ctx).Info("Deleted the jobs namespace", "namespace", ns.Name)
	return nil
}
