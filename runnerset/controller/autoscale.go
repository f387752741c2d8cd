// The managers' autoscaling (spec.managers.autoscale, spec.overflow): the
// ScaledObject KEDA scales their Deployment by, written by the managers'
// step after the Deployment, and ConditionAutoscaling, which says whether
// it is written and what KEDA reports of it.

package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Names of the ScaledObject's triggers.
const (
	triggerRunningJobs = "running-jobs"
	triggerQueueTime   = "primary-queue-time"
)

// autoscale writes rs's ScaledObject when spec.managers.autoscale is set
// and its inputs check out, and sets ConditionAutoscaling. Bad input (no
// Prometheus on the class, an overflow's primary missing or with other
// tags) and a cluster without KEDA leave the ScaledObject as it is (none,
// or the last good one): the running managers keep their count. A
// RunnerSet no longer autoscaled loses its ScaledObject and the
// condition; the Deployment's replicas, written again, set the count.
func (r managersStep) autoscale(ctx context.Context, s *state) error {
	rs := s.rs
	a := rs.Spec.Managers.Autoscale
	if a == nil {
		// Only a RunnerSet that was autoscaled has one to delete: the
		// others make no read for it.
		if meta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionAutoscaling) == nil {
			return nil
		}
		if err := r.deleteOwned(ctx, rs, scaledObjectOf(rs)); err != nil && !meta.IsNoMatchError(err) {
			return err
		}
		meta.RemoveStatusCondition(&rs.Status.Conditions, v1alpha1.ConditionAutoscaling)
		return nil
	}
	set := func(status metav1.ConditionStatus, reason, format string, args ...any) {
		rs.SetCondition(v1alpha1.ConditionAutoscaling, status, reason, fmt.Sprintf(format, args...))
	}
	untouched := "; the ScaledObject was not changed and the running managers keep their count"
	classField := fmt.Sprintf("RunnerClass %s's spec.prometheus.address", s.class.Name)
	if s.class.Spec.Prometheus == nil || s.class.Spec.Prometheus.Address == "" {
		set(metav1.ConditionFalse, v1alpha1.ReasonPrometheusAddressMissing,
			"spec.managers.autoscale needs %s, the Prometheus that scrapes the class's managers, which KEDA reads their running jobs from; ask the platform team to set it, or remove spec.managers.autoscale%s",
			classField, untouched)
		return nil
	}
	address := s.class.Spec.Prometheus.Address
	triggers := []resources.PrometheusTrigger{{
		Name:          triggerRunningJobs,
		ServerAddress: address,
		Query:         monitoring.RunningJobsQuery(rs.Namespace, rs.Name),
		Threshold:     float64(a.TargetRunningJobs),
	}}
	fields := classField + fmt.Sprintf(" (%s)", address)
	if o := rs.Spec.Overflow; o != nil {
		queueAddress := address
		if o.Prometheus != nil {
			// The primary runs where this controller cannot see it: the
			// program that wrote both checks it.
			queueAddress = o.Prometheus.Address
			fields += fmt.Sprintf(" and spec.overflow.prometheus.address (%s)", queueAddress)
		} else if reason, msg := r.checkPrimary(ctx, rs); reason != "" {
			set(metav1.ConditionFalse, reason, "%s%s", msg, untouched)
			return nil
		}
		threshold := o.QueueTime.Threshold.Seconds()
		triggers = append(triggers, resources.PrometheusTrigger{
			Name:          triggerQueueTime,
			ServerAddress: queueAddress,
			// The overflow's own jobs count too: while its managers take
			// jobs that waited long, the queue is still long.
			Query:               monitoring.QueueTimeQuery(rs.Namespace, []string{o.Primary, rs.Name}, o.QueueTime.WindowOrDefault()),
			Threshold:           threshold,
			ActivationThreshold: threshold,
		})
	}
	written, err := r.applyAndGet(ctx, rs, resources.ScaledObject(rs, triggers))
	switch {
	case meta.IsNoMatchError(err):
		set(metav1.ConditionFalse, v1alpha1.ReasonKEDANotInstalled,
			"spec.managers.autoscale: KEDA's CRDs are not installed in this cluster: install KEDA %s, then restart runnerset-controller so that it watches ScaledObjects; or remove spec.managers.autoscale%s",
			resources.KEDAVersion, untouched)
		return nil
	case err != nil:
		return err
	}
	name := written.GetName()
	ready := kedaCondition(written, "Ready")
	switch {
	case ready == nil || ready.Status == metav1.ConditionUnknown && ready.Reason == "":
		set(metav1.ConditionUnknown, v1alpha1.ReasonScaledObjectNotReady,
			"ScaledObject %s is written; waiting for KEDA to report on it (kubectl describe scaledobject %s -n %s)", name, name, rs.Namespace)
	case ready.Status == metav1.ConditionTrue:
		active := "inactive: at minReplicas"
		if c := kedaCondition(written, "Active"); c != nil && c.Status == metav1.ConditionTrue {
			active = "active"
		}
		set(metav1.ConditionTrue, v1alpha1.ReasonScaledObjectReady,
			"KEDA scales the managers between %d and %d, at %d running jobs each (ScaledObject %s, %s)",
			a.MinReplicas, a.MaxReplicas, a.TargetRunningJobs, name, active)
	default:
		// KEDA's TriggerError (every trigger failing) or
		// PartialTriggerError (some), with its message: most often a
		// Prometheus KEDA cannot reach.
		set(metav1.ConditionFalse, v1alpha1.ReasonScaledObjectNotReady,
			"KEDA reports ScaledObject %s not ready (%s: %s): check that KEDA reaches %s and that it answers the queries (kubectl describe scaledobject %s -n %s)",
			name, ready.Reason, ready.Message, fields, name, rs.Namespace)
	}
	return nil
}

// checkPrimary judges spec.overflow.primary: a RunnerSet of rs's
// namespace with the same tags. It returns a reason and message when it
// is not.
func (r managersStep) checkPrimary(ctx context.Context, rs *v1alpha1.RunnerSet) (reason, msg string) {
	o := rs.Spec.Overflow
	primary := &v1alpha1.RunnerSet{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: o.Primary}, primary)
	if apierrors.IsNotFound(err) {
		return v1alpha1.ReasonPrimaryNotFound, fmt.Sprintf(
			"spec.overflow.primary: there is no RunnerSet %s in namespace %s: name the RunnerSet (kubectl get runnersets -n %s) whose jobs this one takes when they wait, or, when it runs in another cluster, set spec.overflow.prometheus to the Prometheus that scrapes it",
			o.Primary, rs.Namespace, rs.Namespace)
	}
	if err != nil {
		return v1alpha1.ReasonPrimaryNotFound, fmt.Sprintf("spec.overflow.primary: reading RunnerSet %s: %v", o.Primary, err)
	}
	if !sameTags(primary.Spec.Tags, rs.Spec.Tags) {
		return v1alpha1.ReasonPrimaryTagsDiffer, fmt.Sprintf(
			"spec.overflow.primary: RunnerSet %s has tags [%s] but this overflow has [%s]: an overflow takes the jobs that wait for its primary only with the same tags; make spec.tags the same",
			o.Primary, strings.Join(sortedCopy(primary.Spec.Tags), ", "), strings.Join(sortedCopy(rs.Spec.Tags), ", "))
	}
	return "", ""
}

// sameTags reports whether a and b hold the same tags, in any order.
func sameTags(a, b []string) bool {
	x, y := sortedCopy(a), sortedCopy(b)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// scaledObjectOf is rs's ScaledObject by kind, namespace and name.
func scaledObjectOf(rs *v1alpha1.RunnerSet) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(resources.ScaledObjectGVK)
	u.SetNamespace(rs.Namespace)
	u.SetName(naming.For(rs.Namespace, rs.Name).Managers())
	return u
}

// kedaCondition is the condition of type typ of KEDA's status of a
// ScaledObject (status.conditions: type, status, reason, message), or nil.
func kedaCondition(obj client.Object, typ string) *metav1.Condition {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		str := func(k string) string { v, _ := m[k].(string); return v }
		return &metav1.Condition{Type: typ, Status: metav1.ConditionStatus(str("status")), Reason: str("reason"), Message: str("message")}
	}
	return nil
}

// scaledObjectGone reports whether rs, being deleted, has no ScaledObject
// left, and deletes the one it has: KEDA stops scaling the managers once
// it is gone (its finalizer removes its HPA), and only then may the
// finalizer scale them to zero. A RunnerSet never autoscaled makes no read.
func (r *Reconciler) scaledObjectGone(ctx context.Context, rs *v1alpha1.RunnerSet) (bool, error) {
	if rs.Spec.Managers.Autoscale == nil && meta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionAutoscaling) == nil {
		return true, nil
	}
	so := scaledObjectOf(rs)
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(so), so)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting ScaledObject %s: %w", so.GetName(), err)
	}
	if !metav1.IsControlledBy(so, rs) {
		return true, nil // not this RunnerSet's: it never scaled its managers
	}
	if so.GetDeletionTimestamp().IsZero() {
		if err := r.Client.Delete(ctx, so, client.Preconditions{UID: ptr.To(so.GetUID())}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting ScaledObject %s: %w", so.GetName(), err)
		}
	}
	return false, nil
}

// kedaStatusChanged passes an update of a ScaledObject when its spec
// (generation), owner, deletion or KEDA's conditions changed: KEDA also
// writes status.lastActiveTime at every poll while a trigger is active,
// which must not bring a pass every pollingInterval.
func kedaStatusChanged(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	if o.GetGeneration() != n.GetGeneration() || !n.GetDeletionTimestamp().Equal(o.GetDeletionTimestamp()) ||
		!equality.Semantic.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences()) {
		return true
	}
	for _, typ := range []string{"Ready", "Active"} {
		a, b := kedaCondition(o, typ), kedaCondition(n, typ)
		if (a == nil) != (b == nil) || a != nil && (a.Status != b.Status || a.Reason != b.Reason || a.Message != b.Message) {
			return true
		}
	}
	return false
}
