package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// reconcileConfig renders config.toml into the RunnerSet's ConfigMap.
func (r *Reconciler) reconcileConfig(ctx context.Context, s *state) (bool, time.Duration, error) {
	cfg := runnerconfig.ForRunnerSet(s.rs, s.class, s.placement)
	out, err := runnerconfig.Render(cfg)
	if err != nil {
		s.rs.SetCondition(v1alpha1.ConditionConfigReady, metav1.ConditionFalse, v1alpha1.ReasonRenderFailed, err.Error())
		return false, 0, nil
	}
	if err := r.apply(ctx, s.rs, resources.ConfigMap(s.rs, out)); err != nil {
		return false, 0, err
	}
	s.configTOML = out
	s.configHash = resources.ConfigHash(out, s.token.Value)
	s.rs.Status.ConfigHash = s.configHash
	s.rs.SetCondition(v1alpha1.ConditionConfigReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled, "config.toml is rendered")
	return true, 0, nil
}
