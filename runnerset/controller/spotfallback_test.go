package controller_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Issue 31, item 2: after a number of interruptions in a window, a tag
// falls back to on-demand capacity for a time its RunnerClass sets
// (policy.spotFallback), then goes back to spot. One interruption short of
// the count changes nothing (the negative control).
func TestRepeatedInterruptionsMoveATagToOnDemandForTheClassesTime(t *testing.T) {
	t.Cleanup(func() { clockAhead.Store(0) })
	ns := newNamespace(t)
	class := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Policy.AllowedCapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeSpot, v1alpha1.CapacityTypeOnDemand}
		c.Spec.Policy.SpotFallback = &v1alpha1.SpotFallback{Interruptions: 2, Window: metav1.Duration{Duration: time.Hour}, OnDemandFor: metav1.Duration{Duration: 30 * time.Minute}}
	})
	newSecret(t, ns, "fallback-token", token)
	rs := runnerSet(ns, "fallback", class.Name)
	must(t, k8s.Create(ctx, rs))
	rs = waitReady(t, rs)
	pool := naming.For(ns, rs.Name).Capacity()
	capacityTypes := func() []string {
		np := get(t, "", pool, &karpv1.NodePool{})
		for _, r := range np.Spec.Template.Spec.Requirements {
			if r.Key == karpv1.CapacityTypeLabelKey {
				return r.Values
			}
		}
		return nil
	}
	waitTypes := func(what string, want ...string) {
		t.Helper()
		eventually(t, what, func() error {
			if got := capacityTypes(); !slices.Equal(got, want) {
				return fmt.Errorf("NodePool %s asks for %v, want %v", pool, got, want)
			}
			return nil
		})
	}
	if got := capacityTypes(); !slices.Equal(got, []string{karpv1.CapacityTypeSpot}) {
		t.Fatalf("NodePool %s asks for %v before any interruption, want spot", pool, got)
	}
	jobsNS := naming.For(ns, rs.Name).JobsNamespace()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-" + ns}}
	must(t, k8s.Create(ctx, node))
	taken := 0
	takeAway := func() {
		t.Helper()
		taken++
		pod := orphanPod(rs, jobsNS, fmt.Sprintf("runner-fallback-project-1-concurrent-%d", taken), resources.ComponentJob)
		pod.Spec.NodeName = node.Name
		must(t, k8s.Create(ctx, pod))
		pod.Status.Phase = corev1.PodFailed
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists", LastTransitionTime: metav1.Now()}}
		must(t, k8s.Status().Update(ctx, pod))
		must(t, k8s.Delete(ctx, pod, client.GracePeriodSeconds(0)))
	}
	status := func() *v1alpha1.SpotFallbackStatus {
		return get(t, ns, rs.Name, &v1alpha1.RunnerSet{}).Status.SpotFallback
	}

	// One interruption: counted, nothing moves.
	takeAway()
	eventually(t, "the first interruption counted", func() error {
		if st := status(); st == nil || len(st.Interruptions) != 1 {
			return fmt.Errorf("status.spotFallback %+v", st)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	if got := capacityTypes(); !slices.Equal(got, []string{karpv1.CapacityTypeSpot}) {
		t.Fatalf("one interruption of two moved NodePool %s to %v", pool, got)
	}
	if st := status(); st.OnDemandUntil != nil {
		t.Fatalf("one interruption of two set onDemandUntil %v", st.OnDemandUntil)
	}

	// The second within the window: on-demand for 30 minutes.
	takeAway()
	waitTypes("the tag on on-demand capacity", karpv1.CapacityTypeOnDemand)
	st := status()
	if st.OnDemandUntil == nil || time.Until(st.OnDemandUntil.Time) < 29*time.Minute || time.Until(st.OnDemandUntil.Time) > 31*time.Minute {
		t.Errorf("onDemandUntil %v, want 30 minutes from now", st.OnDemandUntil)
	}
	eventually(t, "a SpotFallback Event", func() error {
		list := &eventsv1.EventList{}
		must(t, k8s.List(ctx, list, client.InNamespace(ns)))
		for _, e := range list.Items {
			if e.Reason == v1alpha1.ReasonSpotFallback && e.Regarding.Name == rs.Name && strings.Contains(e.Note, "on-demand") && strings.Contains(e.Note, class.Name) {
				return nil
			}
		}
		return fmt.Errorf("none among %d Events", len(list.Items))
	})

	// The class's time passes: back to spot.
	clockAhead.Store(int64(31 * time.Minute))
	update(t, rs, func(r *v1alpha1.RunnerSet) { // a pass, as the requeue at onDemandUntil brings one
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		r.Annotations["test.runnerfleet.dev/poke"] = "1"
	})
	waitTypes("the tag back on spot capacity", karpv1.CapacityTypeSpot)
}

// Admission refuses a fallback to on-demand in a class that does not
// allow on-demand, and bounds its numbers, naming the field.
func TestAdmissionRefusesASpotFallbackTheClassCannotHonour(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*v1alpha1.RunnerClass)
		want   []string
	}{
		"no on-demand": {func(c *v1alpha1.RunnerClass) {
			c.Spec.Policy.SpotFallback = &v1alpha1.SpotFallback{Interruptions: 3, Window: metav1.Duration{Duration: time.Hour}, OnDemandFor: metav1.Duration{Duration: time.Hour}}
		}, []string{"spec.policy", "add on-demand to policy.allowedCapacityTypes"}},
		"window too long": {func(c *v1alpha1.RunnerClass) {
			c.Spec.Policy.AllowedCapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeSpot, v1alpha1.CapacityTypeOnDemand}
			c.Spec.Policy.SpotFallback = &v1alpha1.SpotFallback{Interruptions: 3, Window: metav1.Duration{Duration: 25 * time.Hour}, OnDemandFor: metav1.Duration{Duration: time.Hour}}
		}, []string{"spec.policy.spotFallback.window", "between 1m and 24h"}},
		"no interruptions": {func(c *v1alpha1.RunnerClass) {
			c.Spec.Policy.AllowedCapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeSpot, v1alpha1.CapacityTypeOnDemand}
			c.Spec.Policy.SpotFallback = &v1alpha1.SpotFallback{Interruptions: -1, Window: metav1.Duration{Duration: time.Hour}, OnDemandFor: metav1.Duration{Duration: time.Hour}}
		}, []string{"spec.policy.spotFallback.interruptions"}},
	} {
		t.Run(name, func(t *testing.T) {
			c := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "bad-fallback"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
			tc.mutate(c)
			err := k8s.Create(ctx, c)
			if err == nil {
				_ = k8s.Delete(ctx, c)
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}
