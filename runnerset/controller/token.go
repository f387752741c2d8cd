// The token step and the TokenSource it reads: runnerset/controller/token
// holds the sources (the team's Secret, a runner created in GitLab) and the
// whole life of a runner token; this file turns what a source returns into
// the RunnerRegistered condition and the time to come back.

package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller/token"
)

// TokenSource gets the runner authentication token of a RunnerSet and gives
// the runner back when the RunnerSet goes. token.Tokens dispatches between a token
// the team stored (spec.gitlab.tokenSecretRef) and a runner the controller
// creates in GitLab (spec.gitlab.runner).
//
// token.Tokens, token.SecretTokens and *token.GitLabTokens implement it.
type TokenSource interface {
	// Token returns the runner's token, or a *v1alpha1.Failure the team can act on.
	Token(ctx context.Context, rs *v1alpha1.RunnerSet, gitlabURL string) (*token.RunnerToken, error)
	// Release is called once the managers have drained, before the
	// RunnerSet's finalizer is removed.
	Release(ctx context.Context, rs *v1alpha1.RunnerSet, gitlabURL string) error
}

var (
	_ TokenSource = token.Tokens{}
	_ TokenSource = token.SecretTokens{}
	_ TokenSource = (*token.GitLabTokens)(nil)
)

// authErrorRecheck is how often a RunnerSet whose GitLab token was refused
// tries again without any change: seldom enough to be no retry storm, often
// enough to notice a scope granted in GitLab.
const authErrorRecheck = 10 * time.Minute

// tokenStep gets the runner's token from its TokenSource (the team's
// Secret, or a runner it creates in GitLab) and says when to come back: to
// renew or check it, or to report a stored token's expiry by the clock.
type tokenStep struct {
	Tokens TokenSource
	now    func() time.Time
}

func (r tokenStep) run(ctx context.Context, s *state) (bool, time.Duration, error) {
	tok, err := r.Tokens.Token(ctx, s.rs, s.settings.GitLabURL)
	var te *v1alpha1.Failure
	switch {
	case errors.As(err, &te):
		s.rs.SetCondition(v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, te.Reason, te.Message)
		var recheck time.Duration
		if strings.HasPrefix(te.Reason, "GitLab") {
			recheck = authErrorRecheck
		}
		return false, recheck, nil // Secret and spec watches bring us back sooner
	case err != nil:
		s.rs.SetCondition(v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonGitLabUnavailable,
			fmt.Sprintf("%v; retrying with backoff", err))
		return false, 0, &reportedError{err}
	}
	if tok.RunnerID == 0 && !tok.ExpiresAt.IsZero() && !r.now().Before(tok.ExpiresAt) {
		// A token the team stored, past the expiry its Secret states:
		// GitLab refuses the managers, and only the team can get another.
		// The managers keep their config; the Secret's watch brings the
		// new token.
		ref := s.rs.Spec.GitLab.TokenSecretRef
		s.rs.SetCondition(v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonTokenExpired, fmt.Sprintf(
			"the runner token in Secret %s/%s key %q expired at %s (its annotation %s), so GitLab refuses the managers: reset the runner's token in GitLab (the runner's page under CI/CD → Runners, or POST /runners/:id/reset_authentication_token) and store the new glrt- token there with its new expiry; or give spec.gitlab.runner and an API token, and runnerfleet creates the runner and renews its token before it expires",
			s.rs.Namespace, ref.Name, ref.KeyOrDefault(), tok.ExpiresAt.UTC().Format(time.RFC3339), token.AnnotationTokenExpiresAt))
		return false, 0, nil
	}
	s.token = tok
	if tok.RunnerID != 0 {
		s.rs.Status.RunnerID = tok.RunnerID
	}
	msg := "the runner token is present"
	if tok.RunnerID != 0 {
		msg = fmt.Sprintf("runner %d exists in GitLab and its token is in Secret %s", tok.RunnerID, tok.SecretRef.Name)
	}
	s.rs.SetCondition(v1alpha1.ConditionRunnerRegistered, metav1.ConditionTrue, v1alpha1.ReasonReconciled, msg)
	var requeue time.Duration
	expiry := time.Time{} // a stored token: come back when it expires, to say so
	if tok.RunnerID == 0 {
		expiry = tok.ExpiresAt
	}
	for _, at := range []time.Time{tok.RenewAt, tok.CheckAt, expiry} {
		if at.IsZero() {
			continue
		}
		if d := max(at.Sub(r.now()), time.Second); requeue == 0 || d < requeue {
			requeue = d
		}
	}
	return true, requeue, nil
}
