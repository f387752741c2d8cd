package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/policy"
)

// ClassName is the RunnerClass controller's name in logs, metrics and events.
const ClassName = "runnerclass"

// ClassReconciler writes a RunnerClass's status: whether its settings are
// usable (Accepted) and how many RunnerSets use it, how many of them Ready.
// Besides, it deletes the class's shared NodePool once no tag shares it
// (removeSharedNodePool). It writes nothing else: a class that is not accepted stops its RunnerSets
// at their ClassAccepted condition, which says why.
type ClassReconciler struct {
	Client client.Client
}

// Reconcile implements reconcile.Reconciler.
func (r *ClassReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	class := &v1alpha1.RunnerClass{}
	if err := r.Client.Get(ctx, req.NamespacedName, class); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	deleting := !class.DeletionTimestamp.IsZero()
	if !deleting && !controllerutil.ContainsFinalizer(class, v1alpha1.ClassFinalizer) {
		patch := client.MergeFromWithOptions(class.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(class, v1alpha1.ClassFinalizer)
		if err := r.Client.Patch(ctx, class, patch); err != nil {
			return conflictIsRequeue(fmt.Errorf("adding the finalizer of RunnerClass %s: %w", class.Name, err))
		}
	}
	before := class.DeepCopy()
	if reason, msg := classProblem(class); reason != "" {
		class.SetCondition(v1alpha1.ClassConditionAccepted, metav1.ConditionFalse, reason, msg)
	} else {
		class.SetCondition(v1alpha1.ClassConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted,
			fmt.Sprintf("RunnerSets with spec.className %s get %s capacity", class.Name, class.Spec.Provider))
	}
	list := &v1alpha1.RunnerSetList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{indexClassName: class.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the RunnerSets of class %s: %w", class.Name, err)
	}
	class.Status.RunnerSets, class.Status.ReadyRunnerSets = int32(len(list.Items)), 0
	for i := range list.Items {
		if list.Items[i].IsReady() {
			class.Status.ReadyRunnerSets++
		}
	}
	if !deleting {
		if err := r.removeSharedNodePool(ctx, class, len(list.Items)); err != nil {
			return reconcile.Result{}, err
		}
	}
	if deleting {
		if len(list.Items) == 0 {
			if !controllerutil.ContainsFinalizer(class, v1alpha1.ClassFinalizer) {
				return reconcile.Result{}, nil
			}
			patch := client.MergeFromWithOptions(class.DeepCopy(), client.MergeFromWithOptimisticLock{})
			controllerutil.RemoveFinalizer(class, v1alpha1.ClassFinalizer)
			if err := r.Client.Patch(ctx, class, patch); err != nil {
				return conflictIsRequeue(fmt.Errorf("removing the finalizer of RunnerClass %s: %w", class.Name, err))
			}
			return reconcile.Result{}, nil
		}
		names := make([]string, 0, 3)
		for i := range list.Items {
			if len(names) < cap(names) {
				names = append(names, list.Items[i].Namespace+"/"+list.Items[i].Name)
			}
		}
		class.SetCondition(v1alpha1.ClassConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInUse, fmt.Sprintf(
			"RunnerClass %s is being deleted but %d RunnerSets use it (%s): it stays until they are gone, because its node class goes with it and Karpenter would drain and terminate every node of their capacity. Delete those RunnerSets (their managers drain first), or recreate them with another spec.className",
			class.Name, len(list.Items), strings.Join(names, ", ")))
	}
	class.Status.ObservedGeneration = class.Generation
	recount := classRecount
	if deleting {
		recount = classDeletingRecount
	}
	if equality.Semantic.DeepEqual(before.Status, class.Status) {
		return reconcile.Result{RequeueAfter: recount}, nil
	}
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, class, patch); err != nil {
		return conflictIsRequeue(fmt.Errorf("patching the status of RunnerClass %s: %w", class.Name, err))
	}
	return reconcile.Result{RequeueAfter: recount}, nil
}

// removeSharedNodePool deletes class's shared NodePool (capacity.Shared)
// once its tags no longer share one at runnerSets RunnerSets
// (spec.nodePools) and Karpenter counts no node in it: each tag's next
// pass puts it on a NodePool of its own, and deleting a NodePool with
// nodes would make Karpenter drain them under running jobs. The class's
// recount brings the check back (classRecount).
func (r *ClassReconciler) removeSharedNodePool(ctx context.Context, class *v1alpha1.RunnerClass, runnerSets int) error {
	switch class.Spec.Provider {
	case v1alpha1.CapacityProviderKarpenter, v1alpha1.CapacityProviderKWOK:
	default:
		return nil
	}
	if class.Spec.NodePools.Shares(runnerSets) {
		return nil
	}
	np := &karpv1.NodePool{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: naming.ClassCapacity(class.Name)}, np)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting the shared NodePool of RunnerClass %s: %w", class.Name, err)
	}
	if ref := metav1.GetControllerOf(np); ref == nil || ref.UID != class.UID || !np.DeletionTimestamp.IsZero() {
		return nil // not the class's, or on its way
	}
	if np.Status.Nodes == nil || *np.Status.Nodes != 0 {
		return nil
	}
	if err := r.Client.Delete(ctx, np, client.Preconditions{UID: ptr.To(np.UID)}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the shared NodePool %s of RunnerClass %s: %w", np.Name, class.Name, err)
	}
	log.FromContext(ctx).Info("Deleted the shared NodePool no tag uses", "nodePool", np.Name, "runnerClass", class.Name, "mode", class.Spec.NodePools.ModeOrDefault())
	return nil
}

// classDeletingRecount is how often a class being deleted looks whether
// its last RunnerSet is gone, to go too.
const classDeletingRecount = 5 * time.Second

// classRecount is how often a class counts its RunnerSets again. The
// counts are for people reading kubectl get; recounting on every RunnerSet
// event made the RunnerSets' own reconciles more frequent (a test of
// GitLab retry storms saw it), so they are counted on a timer instead.
const classRecount = 30 * time.Second

// classProblem says what makes class unusable, naming the field and the
// fix, or returns "". Admission refuses most of it; this catches classes
// admitted before a rule existed and what CEL cannot say.
func classProblem(class *v1alpha1.RunnerClass) (reason, message string) {
	id := class.Spec.Policy.Identity
	for _, f := range []struct {
		field    string
		patterns []string
	}{
		{"spec.policy.identity.awsRoleARNPatterns", id.AWSRoleARNPatterns},
		{"spec.policy.identity.gcpServiceAccountPatterns", id.GCPServiceAccountPatterns},
	} {
		for _, p := range f.patterns {
			if err := policy.ValidatePattern(p); err != nil {
				return v1alpha1.ReasonInvalidIdentityPattern, fmt.Sprintf("%s: %v", f.field, err)
			}
		}
	}
	d := class.Spec.Defaults
	for _, f := range []struct {
		field string
		image v1alpha1.ImageReference
	}{
		{"spec.defaults.managerImage", d.ManagerImage},
		{"spec.defaults.jobImage", d.JobImage},
		{"spec.defaults.helperImage", d.HelperImage},
	} {
		if f.image == "" {
			continue
		}
		if msg := invalidImage(f.image, f.field); msg != "" {
			return v1alpha1.ReasonInvalidImage, msg
		}
	}
	return "", ""
}

// Name is the RunnerClass controller's name (Controller).
func (r *ClassReconciler) Name() string { return ClassName }

// Register adds the RunnerClass controller to mgr; it counts a class's
// RunnerSets through the className index Register adds.
func (r *ClassReconciler) Register(_ context.Context, mgr ctrl.Manager) error {
	// Only a class's spec brings a pass: its own status patch did too, and
	// while a thousand RunnerSets became Ready each pass found a new count
	// and patched again (a quarter of a write per RunnerSet). The counts
	// are recounted every classRecount.
	return ctrl.NewControllerManagedBy(mgr).
		Named(ClassName).
		For(&v1alpha1.RunnerClass{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{},
			predicate.NewPredicateFuncs(func(o client.Object) bool { return !o.GetDeletionTimestamp().IsZero() })))).
		Complete(r)
}
