package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// TokenSource gets the runner authentication token of a RunnerSet and gives
// the runner back when the RunnerSet goes. Tokens dispatches between a token
// the team stored (spec.gitlab.tokenSecretRef) and a runner the controller
// creates in GitLab (spec.gitlab.runner).
type TokenSource interface {
	// Token returns the runner's token, or a *v1alpha1.Failure the team can act on.
	Token(ctx context.Context, rs *v1alpha1.RunnerSet, gitlabURL string) (*RunnerToken, error)
	// Release is called once the managers have drained, before the
	// RunnerSet's finalizer is removed.
	Release(ctx context.Context, rs *v1alpha1.RunnerSet, gitlabURL string) error
}

// RunnerToken is what the managers need to authenticate.
type RunnerToken struct {
	// Value is the token: never logged, never put in status, events or a ConfigMap.
	Value string
	// SecretRef is where the managers read it.
	SecretRef v1alpha1.SecretKeyRef
	// RunnerID in GitLab, when the controller created the runner.
	RunnerID int64
	// RenewAt is when the controller rotates the token; zero for never.
	RenewAt time.Time
	// CheckAt is when the controller next checks the token with GitLab;
	// zero for never.
	CheckAt time.Time
	// Retire, when set, deletes the runners this one replaced; it is called
	// once every manager runs on this token.
	Retire func(context.Context) error
	// ExpiresAt is when GitLab stops accepting the token; zero when it
	// never expires or nobody said when.
	ExpiresAt time.Time
}

// AnnotationTokenExpiresAt on a token Secret a team brings
// (spec.gitlab.tokenSecretRef) says when its token expires, in RFC 3339
// (2027-01-31T00:00:00Z): GitLab's token_expires_at of the runner. The
// controller exports it as runnerfleet_runnerset_token_expiry_timestamp_seconds,
// so an alert fires before the managers lose GitLab.
const AnnotationTokenExpiresAt = naming.AnnotationTokenExpiresAt

// registrationTokenPrefix starts the runner registration tokens GitLab no
// longer accepts.
const registrationTokenPrefix = "GR1348941"

// SecretTokens reads the token from spec.gitlab.tokenSecretRef through
// Reader (New gives it a reader that reads each version of a Secret once).
type SecretTokens struct {
	Reader client.Reader
}

// Token implements TokenSource.
func (s SecretTokens) Token(ctx context.Context, rs *v1alpha1.RunnerSet, _ string) (*RunnerToken, error) {
	ref := rs.Spec.GitLab.TokenSecretRef
	if ref == nil {
		return nil, &v1alpha1.Failure{Reason: v1alpha1.ReasonTokenSecretNotFound, Message: "spec.gitlab.tokenSecretRef is not set: name a Secret holding the runner's glrt- token"}
	}
	sec, tok, err := readSecret(ctx, s.Reader, rs.Namespace, *ref, "spec.gitlab.tokenSecretRef", "the runner's glrt- token")
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(tok, registrationTokenPrefix) {
		return nil, v1alpha1.Failf(v1alpha1.ReasonRegistrationToken,
			"Secret %s/%s holds a runner registration token (%s…), which current GitLab refuses (POST /runners answers 410 Gone): create the runner in GitLab and store its glrt- authentication token instead, or let runnerfleet create it with spec.gitlab.runner",
			rs.Namespace, ref.Name, registrationTokenPrefix)
	}
	if !gitlabrunner.TokenFormat.MatchString(tok) {
		// Say what is wrong without echoing any of the value.
		return nil, v1alpha1.Failf(v1alpha1.ReasonTokenMalformed,
			"the value under key %q of Secret %s/%s is not a runner token (8 to 512 letters, digits, '.', '_' or '-', like glrt-…): check for a trailing newline or a pasted label",
			ref.KeyOrDefault(), rs.Namespace, ref.Name)
	}
	out := &RunnerToken{Value: tok, SecretRef: v1alpha1.SecretKeyRef{Name: ref.Name, Key: ref.KeyOrDefault()}}
	if v, ok := sec.Annotations[AnnotationTokenExpiresAt]; ok {
		at, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, v1alpha1.Failf(v1alpha1.ReasonTokenMalformed,
				"annotation %s of Secret %s/%s is %q, not an RFC 3339 time: write the token's expiry as GitLab shows it, such as 2027-01-31T00:00:00Z, or remove the annotation",
				AnnotationTokenExpiresAt, rs.Namespace, ref.Name, v)
		}
		out.ExpiresAt = at
	}
	return out, nil
}

// Release implements TokenSource: a token the team brought stays theirs.
func (SecretTokens) Release(context.Context, *v1alpha1.RunnerSet, string) error { return nil }

// readSecret reads one key of a Secret straight from the API server (the
// controller caches no Secrets), as a *v1alpha1.Failure when it is not
// there, and returns the Secret with it.
func readSecret(ctx context.Context, r client.Reader, namespace string, ref v1alpha1.SecretKeyRef, field, what string) (*corev1.Secret, string, error) {
	sec := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", v1alpha1.Failf(v1alpha1.ReasonTokenSecretNotFound,
				"Secret %s/%s named by %s does not exist: create it with %s under key %q",
				namespace, ref.Name, field, what, ref.KeyOrDefault())
		}
		return nil, "", fmt.Errorf("getting Secret %s: %w", ref.Name, err)
	}
	v, ok := sec.Data[ref.KeyOrDefault()]
	if !ok || len(v) == 0 {
		return nil, "", v1alpha1.Failf(v1alpha1.ReasonTokenKeyMissing,
			"Secret %s/%s has no key %q (%s.key): put %s there",
			namespace, ref.Name, ref.KeyOrDefault(), field, what)
	}
	return sec, string(v), nil
}

// Tokens picks the source each RunnerSet asks for.
type Tokens struct {
	Secret SecretTokens
	GitLab *GitLabTokens
}

// Token implements TokenSource.
func (t Tokens) Token(ctx context.Context, rs *v1alpha1.RunnerSet, url string) (*RunnerToken, error) {
	if rs.Spec.GitLab.Runner != nil {
		return t.GitLab.Token(ctx, rs, url)
	}
	return t.Secret.Token(ctx, rs, url)
}

// Release implements TokenSource. A RunnerSet whose spec switched from a
// created runner to a stored token still has its created runner released.
func (t Tokens) Release(ctx context.Context, rs *v1alpha1.RunnerSet, url string) error {
	if rs.Spec.GitLab.Runner != nil || rs.Status.RunnerID != 0 {
		return t.GitLab.Release(ctx, rs, url)
	}
	return t.Secret.Release(ctx, rs, url)
}

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
			s.rs.Namespace, ref.Name, ref.KeyOrDefault(), tok.ExpiresAt.UTC().Format(time.RFC3339), AnnotationTokenExpiresAt))
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
