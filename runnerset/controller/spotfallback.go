package controller

// The fallback to on-demand capacity (RunnerClass policy.spotFallback).
// The watch of interruptions.go counts each job pod of a RunnerSet taken
// away; once the class's count is reached within its window, the
// RunnerSet's status.spotFallback.onDemandUntil is set, and the capacity
// step builds the tag's NodePool (or ComputeClass) for on-demand capacity
// only until then, when it builds it for the RunnerSet's own capacity
// types again. Writes: one status patch per interrupted job of a class
// with a fallback, one capacity update when the fallback starts and one
// when it ends; nothing in steady state.

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// countForFallback records an interruption of rs's job pod against its
// class's policy.spotFallback, and starts the fallback when the count is
// reached. It returns at once; the write runs until ctx ends.
func (r *jobRetrier) countForFallback(ctx context.Context, rs *v1alpha1.RunnerSet) {
	class := &v1alpha1.RunnerClass{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: rs.Spec.ClassName}, class); err != nil || class.Spec.Policy.SpotFallback == nil {
		return
	}
	fb := *class.Spec.Policy.SpotFallback
	at := r.now()
	go func() {
		var until *metav1.Time
		var rsNow *v1alpha1.RunnerSet
		err := r.updateStatus(ctx, client.ObjectKeyFromObject(rs), func(cur *v1alpha1.RunnerSet) bool {
			until, rsNow = nil, cur
			st := cur.Status.SpotFallback
			if st == nil {
				st = &v1alpha1.SpotFallbackStatus{}
			}
			if st.OnDemandUntil != nil && at.Before(st.OnDemandUntil.Time) {
				return false // on on-demand capacity already
			}
			st.Interruptions = slices.DeleteFunc(slices.Clone(st.Interruptions), func(t metav1.Time) bool { return at.Sub(t.Time) > fb.Window.Duration })
			st.Interruptions = append(st.Interruptions, metav1.NewTime(at))
			if int32(len(st.Interruptions)) >= fb.Interruptions {
				u := metav1.NewTime(at.Add(fb.OnDemandFor.Duration))
				st.Interruptions, st.OnDemandUntil, until = nil, &u, &u
			}
			cur.Status.SpotFallback = st
			return true
		})
		if err != nil {
			log.FromContext(ctx).Error(err, "Counting an interruption for the on-demand fallback", "runnerset", client.ObjectKeyFromObject(rs).String())
			return
		}
		if until != nil {
			r.Recorder.Eventf(rsNow, nil, corev1.EventTypeWarning, v1alpha1.ReasonSpotFallback, "Fallback",
				"%d job pods were taken away within %s: the tag's capacity asks for on-demand nodes only until %s (RunnerClass %s policy.spotFallback).",
				fb.Interruptions, fb.Window.Duration, until.UTC().Format(time.RFC3339), class.Name)
		}
	}()
}

// onDemandFallback returns rs as the capacity step builds it: with
// on-demand capacity only while status.spotFallback.onDemandUntil is
// ahead of now and the class has a fallback that allows on-demand, and how
// long until then (0 when no fallback holds).
func onDemandFallback(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass, now time.Time) (*v1alpha1.RunnerSet, time.Duration) {
	st := rs.Status.SpotFallback
	if class == nil || class.Spec.Policy.SpotFallback == nil || st == nil || st.OnDemandUntil == nil || !now.Before(st.OnDemandUntil.Time) ||
		!slices.Contains(class.Spec.Policy.AllowedCapacityTypesOrDefault(), v1alpha1.CapacityTypeOnDemand) {
		return rs, 0
	}
	out := rs.DeepCopy()
	out.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeOnDemand}
	return out, st.OnDemandUntil.Sub(now)
}
