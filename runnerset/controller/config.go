package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// configStep renders config.toml, with the token the token step
// validated, into the Secret the managers mount. The token enters through
// the TOML encoder, never by substitution; the hash of the file without it
// (and of the token) rolls the managers.
type configStep struct{ *writer }

func (r configStep) run(ctx context.Context, s *state) (bool, time.Duration, error) {
	cfg := runnerconfig.ForSettings(s.rs, s.settings, s.placement)
	template, err := runnerconfig.Render(cfg)
	if err == nil {
		s.configTOML, err = runnerconfig.Render(runnerconfig.WithToken(cfg, s.token.Value))
	}
	if err != nil {
		s.rs.SetCondition(v1alpha1.ConditionConfigReady, metav1.ConditionFalse, v1alpha1.ReasonRenderFailed, err.Error())
		return false, 0, nil
	}
	s.configHash = resources.ConfigHash(template, s.token.Value)
	if err := r.apply(ctx, s.rs, resources.ConfigSecret(s.rs, s.configTOML, s.configHash)); err != nil {
		return false, 0, err
	}
	s.rs.Status.ConfigHash = s.configHash
	s.rs.SetCondition(v1alpha1.ConditionConfigReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled, "config.toml is rendered")
	return true, 0, nil
}
