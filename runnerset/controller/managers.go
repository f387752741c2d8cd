package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/distribution/reference"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// managersStep writes the manager Deployment and its disruption budget
// and reports whether every manager runs the current config.
type managersStep struct{ *writer }

func (r managersStep) run(ctx context.Context, s *state) (bool, time.Duration, error) {
	image, field := s.settings.ManagerImage, s.settings.ManagerImageField
	if msg := invalidImage(image, field); msg != "" {
		s.rs.SetCondition(v1alpha1.ConditionManagersAvailable, metav1.ConditionFalse, v1alpha1.ReasonInvalidImage, msg)
		return false, 0, nil
	}
	// The managers' NetworkPolicy first: no manager runs a moment without it.
	if err := r.apply(ctx, s.rs, resources.ManagersNetworkPolicy(s.rs)); err != nil {
		return false, 0, err
	}
	written, err := r.applyAndGet(ctx, s.rs, resources.Deployment(s.rs, string(image), s.configHash, s.settings.JobsNamespace))
	if err != nil {
		return false, 0, err
	}
	// A budget of one unavailable manager protects nothing when there is
	// only one (it would only keep an unready one from being evicted): it
	// exists only for two managers or more: an autoscaled RunnerSet's
	// whenever its count may pass one, so that a drained node never takes
	// two of its managers at once, whatever KEDA set.
	if pdb := resources.PodDisruptionBudget(s.rs); s.rs.Spec.Managers.MaxManagers() > 1 {
		if err := r.apply(ctx, s.rs, pdb); err != nil {
			return false, 0, err
		}
	} else if err := r.deleteOwned(ctx, s.rs, pdb); err != nil {
		return false, 0, err
	}
	// The managers are scraped from their pods (monitoring's PodMonitor and
	// scrape config); the headless Service earlier versions wrote for it
	// goes (a read of the cache when there is none).
	if err := r.deleteOwned(ctx, s.rs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Namespace: s.rs.Namespace, Name: naming.For(s.rs.Namespace, s.rs.Name).Managers(),
	}}); err != nil {
		return false, 0, err
	}
	// Judge the rollout by what the API server returned for the write: a
	// cached read right after an update may still show the old template
	// fully available.
	live := written.(*appsv1.Deployment)
	s.managersSince = live.CreationTimestamp.Time
	want := s.rs.Spec.Managers.ReplicasOrDefault()
	autoscaled := s.rs.Spec.Managers.Autoscale != nil
	if autoscaled && live.Spec.Replicas != nil {
		// KEDA's count, which the write kept.
		want = *live.Spec.Replicas
	}
	ready := live.Status.UpdatedReplicas
	if live.Status.AvailableReplicas < ready {
		ready = live.Status.AvailableReplicas
	}
	if live.Status.ObservedGeneration < live.Generation {
		ready = 0 // the Deployment controller has not seen the new template yet
	}
	s.rs.Status.DesiredManagers = want
	s.rs.Status.ReadyManagers = ready
	s.rs.Status.Managers = fmt.Sprintf("%d/%d", ready, want)

	if s.token.Retire != nil && (want == 0 || ready >= want && live.Status.Replicas == live.Status.UpdatedReplicas) {
		// Every manager runs on the new token: the replaced runner goes.
		if err := s.token.Retire(ctx); err != nil {
			return false, 0, err
		}
	}
	if err := r.autoscale(ctx, s); err != nil {
		return false, 0, err
	}
	switch {
	case want == 0 && autoscaled:
		s.rs.SetCondition(v1alpha1.ConditionManagersAvailable, metav1.ConditionTrue, v1alpha1.ReasonScaledToZero,
			"KEDA scaled the managers to 0 (spec.managers.autoscale.minReplicas is 0): no job runs or waits long; KEDA starts one when there is")
	case want == 0:
		s.rs.SetCondition(v1alpha1.ConditionManagersAvailable, metav1.ConditionTrue, v1alpha1.ReasonScaledToZero,
			"managers.replicas is 0: the runner takes no jobs")
	case ready >= want && live.Status.Replicas == live.Status.UpdatedReplicas:
		s.rs.SetCondition(v1alpha1.ConditionManagersAvailable, metav1.ConditionTrue, v1alpha1.ReasonManagersAvailable,
			fmt.Sprintf("%d of %d managers run the current config", ready, want))
	default:
		s.rs.SetCondition(v1alpha1.ConditionManagersAvailable, metav1.ConditionFalse, v1alpha1.ReasonRollingOut, fmt.Sprintf(
			"%d of %d managers run the current config; old managers finish their jobs before they stop", ready, want))
	}
	return true, 0, nil
}

// invalidImage says why image, read from field, is not an image reference
// the container runtime accepts, or returns "". Admission refuses such
// images; this catches objects admitted before the rule existed.
func invalidImage(image v1alpha1.ImageReference, field string) string {
	if _, err := reference.ParseNormalizedNamed(string(image)); err != nil {
		return fmt.Sprintf("%s %q is not an image reference (%v): use one such as registry.example.com/team/image:v1.2.3", field, image, err)
	}
	return ""
}
