// The pass: Reconcile runs the steps of a live RunnerSet in the order of
// v1alpha1.DependentConditions, marks the conditions after a stopped step
// blocked, and patches status once, only when it changed, emitting an Event
// for each transition.

package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller/token"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// inTheWayRecheck is how often a RunnerSet blocked by an object it does
// not own looks again.
const inTheWayRecheck = time.Minute

// state is what one pass learns and hands from step to step.
type state struct {
	rs    *v1alpha1.RunnerSet
	class *v1alpha1.RunnerClass
	// settings are rs's under class, resolved once when the class is accepted.
	settings   v1alpha1.Settings
	token      *token.RunnerToken
	placement  runnerconfig.JobPlacement
	configTOML []byte
	configHash string
	// managersSince is when the managers' Deployment was created.
	managersSince time.Time
}

// step owns one condition. It returns done=false to stop the pass (its
// condition already says why) and an error only for failures worth a retry.
// Each step is a small struct holding only its own dependencies (a reader,
// the writer, the TokenSource, the clock) whose run method is the stepFunc,
// so it can be read and tested alone.
type step struct {
	condition string
	run       stepFunc
}

type stepFunc func(ctx context.Context, s *state) (done bool, requeue time.Duration, err error)

// blocked marks the conditions after a stopped step as blocked by it.
func blocked(rs *v1alpha1.RunnerSet, after string) {
	seen := false
	for _, t := range v1alpha1.DependentConditions {
		if seen {
			c := meta.FindStatusCondition(rs.Status.Conditions, t)
			if c == nil || c.Status != metav1.ConditionTrue {
				rs.SetCondition(t, metav1.ConditionUnknown, v1alpha1.ReasonBlocked, fmt.Sprintf("waiting for %s", after))
			}
		}
		seen = seen || t == after
	}
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rs := &v1alpha1.RunnerSet{}
	if err := r.Client.Get(ctx, req.NamespacedName, rs); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	key := "RunnerSet/" + req.String()
	if len(rs.Status.Conditions) == 0 && r.firstStatus.recent(key, r.now()) {
		// Its first status was written moments ago and the cache has not
		// seen it: a pass on this copy would write it again, and be
		// refused (a conflict) at best. Read it from the API server.
		if err := r.APIReader.Get(ctx, req.NamespacedName, rs); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	if !rs.DeletionTimestamp.IsZero() {
		if r.view != nil {
			r.view.forget(rs.UID)
		}
		res, err := r.finalize(ctx, rs)
		if err != nil {
			metrics.ReconcileErrors.WithLabelValues(metrics.StepFinalize).Inc()
		}
		return res, err
	}
	// Before anything is written for it, the RunnerSet holds the drain
	// finalizer: set at its creation where the install's admission policy
	// runs (install.FinalizerPolicy), else patched on here.
	if !controllerutil.ContainsFinalizer(rs, Finalizer) {
		patch := client.MergeFromWithOptions(rs.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(rs, Finalizer)
		if err := r.Client.Patch(ctx, rs, patch); err != nil {
			return conflictIsRequeue(fmt.Errorf("adding finalizer: %w", err))
		}
	}

	before := rs.DeepCopy()
	s := &state{rs: rs}
	var requeue time.Duration
	var errs []error
	viewSet := false
	for _, st := range r.steps {
		was := meta.FindStatusCondition(rs.Status.Conditions, st.condition).DeepCopy()
		done, after, err := st.run(ctx, s)
		var itw *InTheWay
		switch {
		case errors.As(err, &itw):
			// Only someone else can fix it; its deletion is not watched
			// (the cache does not see it), so look again now and then.
			rs.SetCondition(st.condition, metav1.ConditionFalse, v1alpha1.ReasonObjectInTheWay, itw.Error())
			err, after = nil, inTheWayRecheck
		case err != nil:
			// A step that failed without saying why in its condition
			// gets the cause there: the user reads status, not logs.
			var rep *reportedError
			if now := meta.FindStatusCondition(rs.Status.Conditions, st.condition); !apierrors.IsConflict(err) && !errors.As(err, &rep) && (now == nil || equality.Semantic.DeepEqual(now, was)) {
				rs.SetCondition(st.condition, metav1.ConditionFalse, v1alpha1.ReasonWriteFailed,
					fmt.Sprintf("%v; runnerfleet retries with backoff. If it persists, check the controller's permissions and the object named here", err))
			}
			errs = append(errs, fmt.Errorf("%s: %w", st.condition, err))
			metrics.ReconcileErrors.WithLabelValues(st.condition).Inc()
		}
		if after > 0 && (requeue == 0 || after < requeue) {
			requeue = after
		}
		if !done || err != nil {
			blocked(rs, st.condition)
			break
		}
	}
	if s.token != nil {
		metrics.TokenExpiries.Set(req.NamespacedName, s.token.ExpiresAt)
		if r.view != nil && len(errs) == 0 {
			// GitLab's view, when its slow schedule says so.
			after, set := r.view.run(ctx, s)
			if after > 0 && (requeue == 0 || after < requeue) {
				requeue = after
			}
			viewSet = set
		}
	}
	// What a read of GitLab's view found and this pass does not write,
	// the next pass writes: the read is not repeated for an interval.
	unwritten := func() {
		if viewSet {
			r.view.keep(rs)
		}
	}
	rs.RollUpReady()
	rs.Status.ObservedGeneration = rs.Generation
	if len(errs) == 0 && r.startingUp(before, rs, s) {
		// A new RunnerSet whose only wait is its first managers' rollout:
		// the Deployment's progress brings the next pass, which writes
		// the status once, Ready or not, instead of once per pass.
		unwritten()
		return reconcile.Result{RequeueAfter: firstStatusWithin}, nil
	}
	r.recordTransitions(before, rs)
	if err := r.patchStatus(ctx, before, rs); err != nil {
		unwritten()
		errs = append(errs, err)
		if !apierrors.IsConflict(err) {
			metrics.ReconcileErrors.WithLabelValues(metrics.StepStatus).Inc()
		}
	} else if len(before.Status.Conditions) == 0 {
		r.firstStatus.add(key, r.now())
	}
	if err := errors.Join(errs...); err != nil {
		return conflictIsRequeue(err)
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// reportedError is a step's error whose cause the step already wrote into
// its condition: a condition unchanged since the last pass is then no sign
// that the step said nothing, and must not be overwritten (which would
// flip it back and forth, a status write and a new pass each time).
type reportedError struct{ error }

func (e *reportedError) Unwrap() error { return e.error }

// firstStatusWithin bounds how long a new RunnerSet whose managers are
// starting may go without a status.
const firstStatusWithin = 10 * time.Second

// startingUp reports whether rs has never had a status, its managers'
// Deployment was created less than firstStatusWithin ago, and it waits for
// that first rollout and nothing else: then its first status can wait for
// it. A RunnerSet that waits for nothing (its managers are available) is
// not starting up: its status is written in this pass.
func (r *Reconciler) startingUp(before, rs *v1alpha1.RunnerSet, s *state) bool {
	if len(before.Status.Conditions) > 0 || s.managersSince.IsZero() || r.now().Sub(s.managersSince) >= firstStatusWithin {
		return false
	}
	rollingOut := false
	for _, c := range rs.Status.Conditions {
		switch {
		case c.Type == v1alpha1.ConditionReady:
		case c.Status == metav1.ConditionTrue:
		case c.Type == v1alpha1.ConditionAutoscaling && c.Status == metav1.ConditionUnknown:
			// KEDA has not reported on the new ScaledObject yet.
		case c.Type == v1alpha1.ConditionManagersAvailable && c.Reason == v1alpha1.ReasonRollingOut:
			rollingOut = true
		default:
			return false
		}
	}
	return rollingOut
}

// patchStatus writes status once, and only when it changed.
func (r *Reconciler) patchStatus(ctx context.Context, before, after *v1alpha1.RunnerSet) error {
	if equality.Semantic.DeepEqual(before.Status, after.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, after, patch); err != nil {
		return fmt.Errorf("patching status: %w", err)
	}
	return nil
}

// recordTransitions emits an Event for every condition that changed status.
// A RunnerSet's first status that is all True is no transition: it gets no
// Event (a thousand new RunnerSets would write a thousand), failures do.
func (r *Reconciler) recordTransitions(before, after *v1alpha1.RunnerSet) {
	first := len(before.Status.Conditions) == 0
	for _, c := range after.Status.Conditions {
		if first && c.Status == metav1.ConditionTrue {
			continue
		}
		old := meta.FindStatusCondition(before.Status.Conditions, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		if c.Type != v1alpha1.ConditionReady && c.Status == metav1.ConditionTrue {
			continue // Ready=True says it once for all
		}
		if c.Status == metav1.ConditionUnknown {
			continue
		}
		typ := corev1.EventTypeNormal
		if c.Status == metav1.ConditionFalse && c.Reason != v1alpha1.ReasonRollingOut && c.Reason != v1alpha1.ReasonNotReconciled {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(after, nil, typ, c.Reason, c.Type, "%s", c.Message)
	}
}

func conflictIsRequeue(err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	return reconcile.Result{}, err
}
