// Package token is the life of a RunnerSet's runner token, behind the
// controller's TokenSource: a token the team stored in a Secret
// (spec.gitlab.tokenSecretRef, SecretTokens), or a runner the controller
// creates in GitLab (spec.gitlab.runner, GitLabTokens), adopts after an
// interrupted attempt, checks, rotates before it expires, replaces when
// GitLab refuses it, and deletes with the RunnerSet. Tokens picks one per
// RunnerSet. The package writes only the token Secret it owns and the
// release finalizer on the API token Secret; the controller's token step
// (runnerset/controller/token.go) turns what it returns into the
// RunnerRegistered condition.
//
// Files: token.go the sources and the stored token's checks; gitlab.go a
// created runner's lifecycle; checks.go when a runner's token is next
// checked with GitLab, and when GitLab's view of a runner is next read
// (the Schedule both share); tokenmemo.go the reader that reads each version of a
// token Secret once.
package token

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

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

// Token returns the runner's token, or a *v1alpha1.Failure the team can act on.
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

// Release lets the runner go once the managers have drained: a token the
// team brought stays theirs.
func (SecretTokens) Release(context.Context, *v1alpha1.RunnerSet, string) error { return nil }

// ReadSecretKey reads key ref of a Secret of namespace through r, as a
// *v1alpha1.Failure naming field and what belongs there when it is missing.
func ReadSecretKey(ctx context.Context, r client.Reader, namespace string, ref v1alpha1.SecretKeyRef, field, what string) (string, error) {
	_, v, err := readSecret(ctx, r, namespace, ref, field, what)
	return v, err
}

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

// Token returns the runner's token, or a *v1alpha1.Failure the team can act on.
func (t Tokens) Token(ctx context.Context, rs *v1alpha1.RunnerSet, url string) (*RunnerToken, error) {
	if rs.Spec.GitLab.Runner != nil {
		return t.GitLab.Token(ctx, rs, url)
	}
	return t.Secret.Token(ctx, rs, url)
}

// Release lets the runner go once the managers have drained, before the
// RunnerSet's finalizer is removed. A RunnerSet whose spec switched from a
// created runner to a stored token still has its created runner released.
func (t Tokens) Release(ctx context.Context, rs *v1alpha1.RunnerSet, url string) error {
	if rs.Spec.GitLab.Runner != nil || rs.Status.RunnerID != 0 {
		return t.GitLab.Release(ctx, rs, url)
	}
	return t.Secret.Release(ctx, rs, url)
}

// New returns the token sources of a controller: the team's Secret, read
// through apiReader once per version (cache holds every Secret's metadata),
// or a runner created in GitLab through the instrumented GitLab client.
func New(c client.Client, apiReader client.Reader, rec events.EventRecorder) Tokens {
	return Tokens{
		Secret: SecretTokens{Reader: newReadSecrets(apiReader, c)},
		GitLab: &GitLabTokens{
			Client: c, APIReader: apiReader, Recorder: rec, checks: NewTokenChecks(),
			NewGitLab: func(url, pat string) (gitlab.Client, error) {
				return gitlab.New(url, pat, gitlab.Options{Transport: metrics.GitLabTransport(nil)})
			},
		},
	}
}
