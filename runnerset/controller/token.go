package controller

import (
	"context"
	"fmt"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// TokenSource gets the runner authentication token of a RunnerSet and gives
// the runner back when the RunnerSet goes. SecretTokens reads a token the
// team stored; a GitLab-backed source creates and deletes runners.
type TokenSource interface {
	// Token returns the token, or a *TokenError the team can act on.
	Token(ctx context.Context, rs *v1alpha1.RunnerSet) (string, error)
	// Release is called once the managers have drained, before the
	// RunnerSet's finalizer is removed.
	Release(ctx context.Context, rs *v1alpha1.RunnerSet) error
}

// TokenError is a token problem only the team can fix: it becomes a False
// TokenReady condition, not a retry.
type TokenError struct {
	Reason  string
	Message string
}

func (e *TokenError) Error() string { return e.Message }

// tokenFormat is what may stand in config.toml's token field. It also keeps
// the init container's sed substitution safe.
var tokenFormat = regexp.MustCompile(`^[A-Za-z0-9._-]{8,512}$`)

// SecretTokens reads the token from spec.gitlab.tokenSecretRef.
type SecretTokens struct {
	Reader client.Reader
}

// Token implements TokenSource.
func (s SecretTokens) Token(ctx context.Context, rs *v1alpha1.RunnerSet) (string, error) {
	ref := rs.Spec.GitLab.TokenSecretRef
	if ref == nil {
		return "", &TokenError{v1alpha1.ReasonTokenSecretNotFound,
			"spec.gitlab.tokenSecretRef is not set: name a Secret holding the runner's glrt- token"}
	}
	sec := &corev1.Secret{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return "", &TokenError{v1alpha1.ReasonTokenSecretNotFound, fmt.Sprintf(
				"Secret %s/%s named by spec.gitlab.tokenSecretRef does not exist: create it with the runner's glrt- token under key %q",
				rs.Namespace, ref.Name, ref.KeyOrDefault())}
		}
		return "", fmt.Errorf("getting token Secret %s: %w", ref.Name, err)
	}
	tok, ok := sec.Data[ref.KeyOrDefault()]
	if !ok || len(tok) == 0 {
		return "", &TokenError{v1alpha1.ReasonTokenKeyMissing, fmt.Sprintf(
			"Secret %s/%s has no key %q (spec.gitlab.tokenSecretRef.key): put the runner's glrt- token there",
			rs.Namespace, ref.Name, ref.KeyOrDefault())}
	}
	if !tokenFormat.Match(tok) {
		// Say what is wrong without echoing any of the value.
		return "", &TokenError{v1alpha1.ReasonTokenMalformed, fmt.Sprintf(
			"the value under key %q of Secret %s/%s is not a runner token (8 to 512 letters, digits, '.', '_' or '-', like glrt-…): check for a trailing newline or a pasted label",
			ref.KeyOrDefault(), rs.Namespace, ref.Name)}
	}
	return string(tok), nil
}

// Release implements TokenSource: a token the team brought stays theirs.
func (SecretTokens) Release(context.Context, *v1alpha1.RunnerSet) error { return nil }

func (r *Reconciler) reconcileToken(ctx context.Context, s *state) (bool, time.Duration, error) {
	tok, err := r.Tokens.Token(ctx, s.rs)
	if te, ok := err.(*TokenError); ok {
		s.rs.SetCondition(v1alpha1.ConditionTokenReady, metav1.ConditionFalse, te.Reason, te.Message)
		return false, 0, nil // the Secret watch brings us back
	}
	if err != nil {
		return false, 0, err
	}
	s.token = tok
	s.rs.SetCondition(v1alpha1.ConditionTokenReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled, "the runner token is present")
	return true, 0, nil
}
