package token

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller/internal/ownership"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Keys of the Secret holding a created runner's token.
const (
	keyToken     = "token"
	keyRunnerID  = "runner-id"
	keyExpiresAt = "token-expires-at"
	keyObtained  = "token-obtained-at"
	keyURL       = "gitlab-url"
	keySettings  = "settings-hash"
	// keyTokenSum is the SHA-256 of the token the controller stored or
	// last verified: a token edited by hand no longer matches it.
	keyTokenSum = "token-sha256"
	// keyRetired lists runners replaced by this one, deleted from GitLab
	// once the managers run on the new token.
	keyRetired = "retired-runner-ids"
)

// GitLabTokens creates the runner of a RunnerSet in GitLab, keeps its token
// in a Secret the RunnerSet owns, rotates it before it expires and deletes
// the runner with the RunnerSet.
//
// The controller may stop between creating a runner and storing its token.
// Every runner it creates carries a marker with the RunnerSet's UID in its
// description, and before creating one it looks for runners with that
// marker: the oldest is adopted (its token reset), any other deleted. So a
// RunnerSet never has two runners, and none is left behind.
//
// Only the controller renews tokens: config.toml carries no
// token_expires_at, so gitlab-runner never renews on its own and two
// managers never race to renew the same token.
type GitLabTokens struct {
	Client    client.Client // writes the token Secret
	APIReader client.Reader // reads Secrets, which the controller does not cache
	Recorder  events.EventRecorder
	// NewGitLab returns a client for the GitLab at url acting with token pat.
	NewGitLab func(url, pat string) (gitlab.Client, error)
	Now       func() time.Time

	// checks is when each runner's token is next checked (NewTokenChecks).
	checks *Schedule
}

// Marker ties a GitLab runner to the RunnerSet with uid.
func Marker(uid string) string { return "[runnerfleet " + uid + "]" }

func scopeOf(r *v1alpha1.RunnerRegistration) gitlab.Scope {
	s := gitlab.Scope{Type: string(r.Type)}
	if r.GroupID != nil {
		s.GroupID = *r.GroupID
	}
	if r.ProjectID != nil {
		s.ProjectID = *r.ProjectID
	}
	return s
}

func (g *GitLabTokens) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// api returns a GitLab client acting with the RunnerSet's API token.
func (g *GitLabTokens) api(ctx context.Context, rs *v1alpha1.RunnerSet, url string) (gitlab.Client, error) {
	reg := rs.Spec.GitLab.Runner
	if reg == nil {
		return nil, &v1alpha1.Failure{Reason: v1alpha1.ReasonAPITokenMissing, Message: "spec.gitlab.runner is not set: nothing to talk to GitLab about"}
	}
	sec, pat, err := readSecret(ctx, g.APIReader, rs.Namespace, reg.APITokenSecretRef, "spec.gitlab.runner.apiTokenSecretRef",
		"a GitLab access token with the create_runner and manage_runner scopes")
	var te *v1alpha1.Failure
	if errors.As(err, &te) {
		te.Reason = v1alpha1.ReasonAPITokenMissing
		return nil, te
	}
	if err != nil {
		return nil, err
	}
	// Releasing the runner needs this token. Deleting the namespace
	// deletes it together with the RunnerSet; the finalizer keeps it
	// readable until the runner is gone from GitLab.
	if rs.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(sec, ReleaseFinalizer(rs)) {
		patch := client.MergeFromWithOptions(sec.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(sec, ReleaseFinalizer(rs))
		if err := g.Client.Patch(ctx, sec, patch); err != nil {
			return nil, fmt.Errorf("holding Secret %s until the runner is released: %w", sec.Name, err)
		}
		// A Secret the RunnerSet named before is no longer needed.
		if err := g.letGoOfAPITokens(ctx, rs, sec.Name); err != nil {
			return nil, err
		}
	}
	return g.NewGitLab(url, pat)
}

// ReleaseFinalizer is the finalizer by which RunnerSet rs holds its GitLab
// API token Secret while it may still need it to delete its runner: one per
// RunnerSet (named by its UID), so RunnerSets that share the Secret each
// let go of it on their own, with no race between them.
func ReleaseFinalizer(rs *v1alpha1.RunnerSet) string {
	return "release.runnerfleet.dev/" + string(rs.UID)
}

// letGoOfAPITokens removes ReleaseFinalizer(rs) from every Secret of the
// namespace that carries it but keep, so that no Secret the RunnerSet
// named once stays held (and its namespace Terminating) after it moved on
// or went. It reads the Secrets' metadata only.
func (g *GitLabTokens) letGoOfAPITokens(ctx context.Context, rs *v1alpha1.RunnerSet, keep string) error {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := g.APIReader.List(ctx, list, client.InNamespace(rs.Namespace)); err != nil {
		return fmt.Errorf("listing Secrets: %w", err)
	}
	for i := range list.Items {
		sec := &list.Items[i]
		if sec.Name == keep || !controllerutil.ContainsFinalizer(sec, ReleaseFinalizer(rs)) {
			continue
		}
		patch := client.MergeFromWithOptions(sec.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(sec, ReleaseFinalizer(rs))
		if err := g.Client.Patch(ctx, sec, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("letting go of Secret %s: %w", sec.Name, err)
		}
	}
	return nil
}

// Token returns the runner's token, creating, adopting, rotating or
// replacing the runner as needed, or a *v1alpha1.Failure the team can act on.
func (g *GitLabTokens) Token(ctx context.Context, rs *v1alpha1.RunnerSet, url string) (*RunnerToken, error) {
	names := naming.For(rs.Namespace, rs.Name)
	ref := v1alpha1.SecretKeyRef{Name: names.RunnerToken(), Key: keyToken}
	api, err := g.api(ctx, rs, url)
	if err != nil {
		return nil, err
	}

	sec := &corev1.Secret{}
	err = g.APIReader.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: ref.Name}, sec)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("getting Secret %s: %w", ref.Name, err)
	}
	if err == nil && !metav1.IsControlledBy(sec, rs) {
		// Someone else's Secret: never read as ours, overwritten or deleted.
		return nil, tokenSecretInTheWay(rs, sec)
	}
	if err == nil && len(sec.Data[keyToken]) > 0 {
		return g.keep(ctx, rs, url, api, sec, ref)
	}
	// No usable token: adopt what an earlier attempt left, or create.
	tok, err := g.adoptOrCreate(ctx, rs, api, nil)
	if err != nil {
		return nil, err
	}
	return g.store(ctx, rs, url, tok, nil)
}

// keep checks the stored token only when there is a reason to, and renews
// or replaces it when it must:
//
//   - when it changed: a token that is not the one the controller stored
//     (edited by hand), or a spec that changed, is verified once;
//   - when it is due for renewal (two thirds into its life);
//   - at most once an hour per runner, with jitter so that a fleet's checks
//     spread over time and a restart makes none, through GET /runners/:id,
//     which tells a runner deleted in GitLab without posing as a manager.
//
// A converged RunnerSet therefore makes no GitLab call at all.
func (g *GitLabTokens) keep(ctx context.Context, rs *v1alpha1.RunnerSet, url string, api gitlab.Client, sec *corev1.Secret, ref v1alpha1.SecretKeyRef) (*RunnerToken, error) {
	id, _ := strconv.ParseInt(string(sec.Data[keyRunnerID]), 10, 64)
	value := string(sec.Data[keyToken])
	obtained, _ := time.Parse(time.RFC3339, string(sec.Data[keyObtained]))
	expires, _ := time.Parse(time.RFC3339, string(sec.Data[keyExpiresAt]))
	retired := parseIDs(string(sec.Data[keyRetired]))
	renewAt := renewTime(obtained, expires)
	now := g.now()
	if id == 0 {
		tok, err := g.adoptOrCreate(ctx, rs, api, retired)
		if err != nil {
			return nil, err
		}
		return g.store(ctx, rs, url, tok, retired)
	}
	valid, gone, asked := true, false, false
	switch {
	case !renewAt.IsZero() && !now.Before(renewAt):
		valid = false // rotate
	case !gitlabrunner.TokenFormat.MatchString(value):
		// Edited by hand into something that is no token: no need to ask.
		log.FromContext(ctx).Info("The stored runner token is not a runner token; replacing it", "runnerID", id)
		valid = false
	case string(sec.Data[keyTokenSum]) != tokenSum(value) || string(sec.Data[keySettings]) != settingsHash(rs):
		// The token is not the one recorded (edited by hand), or the
		// runner's settings changed. Both keys are recorded only once the
		// token is known good, so a pass cut short checks again.
		ok, err := api.VerifyToken(ctx, value, gitlab.SystemID)
		if err != nil {
			return nil, g.explain(rs, err)
		}
		valid, asked = ok, true
	case g.checks.Due(rs.UID, now):
		exists, err := api.RunnerExists(ctx, id)
		if err != nil {
			return nil, g.explain(rs, err)
		}
		gone, asked = !exists, true
	}
	if asked && valid && !gone {
		g.checks.Done(rs.UID, now) // a failed check stays due until replaced
	}
	if !valid {
		log.FromContext(ctx).Info("GitLab no longer accepts the stored runner token, or it is due for renewal; replacing it", "runnerID", id)
	}
	if valid && !gone {
		// Tags and settings changed in the spec reach GitLab; a token
		// verified after a hand edit is remembered as checked.
		want := settingsHash(rs)
		if string(sec.Data[keySettings]) != want || string(sec.Data[keyTokenSum]) != tokenSum(value) {
			if string(sec.Data[keySettings]) != want {
				if err := api.UpdateRunner(ctx, id, settings(rs)); err != nil && gitlab.StatusOf(err) != http.StatusNotFound {
					return nil, g.explain(rs, err)
				}
				log.FromContext(ctx).Info("Updated runner settings in GitLab", "runnerID", id)
			}
			patch := client.MergeFrom(sec.DeepCopy())
			sec.Data[keySettings] = []byte(want)
			sec.Data[keyTokenSum] = []byte(tokenSum(value))
			if err := g.Client.Patch(ctx, sec, patch); err != nil {
				return nil, fmt.Errorf("recording the settings of runner %d: %w", id, err)
			}
		}
		return &RunnerToken{Value: value, SecretRef: ref, RunnerID: id, RenewAt: renewAt, ExpiresAt: expires,
			CheckAt: g.checks.Next(rs.UID, now), Retire: g.retire(api, rs, sec, retired)}, nil
	}
	if !gone {
		tok, err := api.ResetToken(ctx, id)
		switch {
		case err == nil:
			log.FromContext(ctx).Info("Rotated runner token", "runnerID", id, "expiresAt", expires)
			g.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "TokenRotated", "RotateToken",
				"rotated the token of runner %d; managers roll to the new one", id)
			return g.store(ctx, rs, url, tok, retired)
		case refusedRunner(err):
			// Deleted in GitLab, or a runner GitLab will not renew (its
			// token expired or was revoked): replace the runner below.
		default:
			return nil, g.explain(rs, err)
		}
	}
	log.FromContext(ctx).Info("Runner is gone from GitLab or refuses renewal; replacing the runner", "runnerID", id)
	g.Recorder.Eventf(rs, nil, corev1.EventTypeWarning, "RunnerReplaced", "ReplaceRunner",
		"GitLab no longer accepts runner %d or its token; runnerfleet creates a new runner, rolls the managers to it and deletes the old one once they drained", id)
	retired = appendID(retired, id)
	tok, err := g.adoptOrCreate(ctx, rs, api, retired)
	if err != nil {
		return nil, err
	}
	return g.store(ctx, rs, url, tok, retired)
}

// refusedRunner reports whether GitLab refused to renew a runner's token
// for a reason no retry fixes: the runner is gone (404) or GitLab forbids
// it (403) although the access token has its scopes.
func refusedRunner(err error) bool {
	var ge *gitlab.Error
	if !errors.As(err, &ge) {
		return false
	}
	return ge.Status == http.StatusNotFound || (ge.Status == http.StatusForbidden && !ge.InsufficientScope())
}

// adoptOrCreate returns a runner for rs: the oldest one an earlier attempt
// left (found by the marker in its description; runners in skip, which are
// being retired, never count), with any others deleted, or a new one.
func (g *GitLabTokens) adoptOrCreate(ctx context.Context, rs *v1alpha1.RunnerSet, api gitlab.Client, skip []int64) (*gitlab.Token, error) {
	reg := rs.Spec.GitLab.Runner
	found, err := api.FindRunners(ctx, scopeOf(reg), Marker(string(rs.UID)))
	if err != nil {
		return nil, g.explain(rs, err)
	}
	var ids []int64
	for _, id := range found {
		if !slices.Contains(skip, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		tok, err := api.CreateRunner(ctx, settings(rs))
		if err != nil {
			return nil, g.explain(rs, err)
		}
		log.FromContext(ctx).Info("Created runner in GitLab", "runnerID", tok.RunnerID, "type", reg.Type)
		g.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "RunnerCreated", "CreateRunner", "created %s runner %d in GitLab", reg.Type, tok.RunnerID)
		return tok, nil
	}
	for _, extra := range ids[1:] {
		if err := api.DeleteRunner(ctx, extra); err != nil {
			return nil, g.explain(rs, err)
		}
		log.FromContext(ctx).Info("Deleted a duplicate runner an earlier attempt left", "runnerID", extra)
	}
	tok, err := api.ResetToken(ctx, ids[0])
	if err != nil {
		return nil, g.explain(rs, err)
	}
	if err := api.UpdateRunner(ctx, ids[0], settings(rs)); err != nil {
		return nil, g.explain(rs, err)
	}
	log.FromContext(ctx).Info("Adopted the runner an earlier attempt created", "runnerID", ids[0])
	return tok, nil
}

// retire returns the function that deletes the runners rs replaced, once
// its managers run on the new token (nil when there are none): the old
// managers drain on the old runner first.
func (g *GitLabTokens) retire(api gitlab.Client, rs *v1alpha1.RunnerSet, sec *corev1.Secret, ids []int64) func(context.Context) error {
	if len(ids) == 0 {
		return nil
	}
	return func(ctx context.Context) error {
		for _, id := range ids {
			if err := api.DeleteRunner(ctx, id); err != nil { // 404 counts as deleted
				return g.explain(rs, err)
			}
			log.FromContext(ctx).Info("Deleted the replaced runner from GitLab", "runnerID", id)
		}
		patch := client.MergeFromWithOptions(sec.DeepCopy(), client.MergeFromWithOptimisticLock{})
		delete(sec.Data, keyRetired)
		if err := g.Client.Patch(ctx, sec, patch); err != nil {
			return fmt.Errorf("recording that the replaced runners are deleted: %w", err)
		}
		return nil
	}
}

func tokenSum(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:])
}

func parseIDs(s string) []int64 {
	var out []int64
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ',' }) {
		if id, err := strconv.ParseInt(f, 10, 64); err == nil && id > 0 {
			out = append(out, id)
		}
	}
	return out
}

func appendID(ids []int64, id int64) []int64 {
	if slices.Contains(ids, id) {
		return ids
	}
	return append(slices.Clone(ids), id)
}

func formatIDs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ",")
}

// tokenSecretInTheWay is the condition of a RunnerSet whose runner token
// Secret's name is taken.
func tokenSecretInTheWay(rs *v1alpha1.RunnerSet, sec *corev1.Secret) error {
	itw := &ownership.InTheWay{Kind: "Secret", Namespace: sec.Namespace, Name: sec.Name, RunnerSet: rs.Namespace + "/" + rs.Name}
	return &v1alpha1.Failure{Reason: v1alpha1.ReasonObjectInTheWay, Message: itw.Error() + " (runnerfleet keeps the token of the runner it creates there)"}
}

// settings are the runner's settings in GitLab as rs asks for them.
func settings(rs *v1alpha1.RunnerSet) gitlab.CreateOptions {
	reg := rs.Spec.GitLab.Runner
	desc := reg.Description
	if desc == "" {
		desc = rs.Namespace + "/" + rs.Name
	}
	o := gitlab.CreateOptions{
		Scope:           scopeOf(reg),
		Description:     desc + " " + Marker(string(rs.UID)),
		MaintenanceNote: reg.MaintenanceNote,
		Tags:            rs.Spec.Tags,
		RunUntagged:     rs.Spec.RunUntagged,
		Locked:          reg.Locked,
		Paused:          reg.Paused,
		Protected:       reg.Protected,
	}
	if reg.MaximumTimeout != nil {
		o.MaximumTimeout = reg.MaximumTimeout.Duration
	}
	return o
}

// settingsHash identifies settings(rs), to tell when GitLab needs an update.
func settingsHash(rs *v1alpha1.RunnerSet) string {
	b, _ := json.Marshal(settings(rs))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// renewTime is when a token obtained at obtained and expiring at expires is
// rotated: two thirds into its life, or a day before it ends when its start
// is unknown. Zero when it never expires.
func renewTime(obtained, expires time.Time) time.Time {
	switch {
	case expires.IsZero():
		return time.Time{}
	case obtained.IsZero() || !obtained.Before(expires):
		return expires.Add(-24 * time.Hour)
	}
	return obtained.Add(expires.Sub(obtained) * 2 / 3)
}

// store writes the token Secret, owned by the RunnerSet.
func (g *GitLabTokens) store(ctx context.Context, rs *v1alpha1.RunnerSet, url string, tok *gitlab.Token, retired []int64) (*RunnerToken, error) {
	if !gitlabrunner.TokenFormat.MatchString(tok.Value) {
		// Nothing else can be a runner token; refuse before a manager sees it.
		return nil, fmt.Errorf("GitLab returned a token for runner %d that is not 8 to 512 letters, digits, '.', '_' or '-'; refusing to pass it to the managers", tok.RunnerID)
	}
	now := g.now().UTC()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: rs.Namespace, Name: naming.For(rs.Namespace, rs.Name).RunnerToken()}}
	fill := func(sec *corev1.Secret) error {
		sec.Labels = resources.Labels(rs, "runner-token")
		sec.Type = corev1.SecretTypeOpaque
		sec.Data = map[string][]byte{
			keyToken:    []byte(tok.Value),
			keyRunnerID: []byte(strconv.FormatInt(tok.RunnerID, 10)),
			keyObtained: []byte(now.Format(time.RFC3339)),
			keyURL:      []byte(url),
			keySettings: []byte(settingsHash(rs)),
			keyTokenSum: []byte(tokenSum(tok.Value)),
		}
		if len(retired) > 0 {
			sec.Data[keyRetired] = []byte(formatIDs(retired))
		}
		if !tok.ExpiresAt.IsZero() {
			sec.Data[keyExpiresAt] = []byte(tok.ExpiresAt.UTC().Format(time.RFC3339))
		}
		return controllerutil.SetControllerReference(rs, sec, g.Client.Scheme())
	}
	// Create, else read through the API reader and update: a read through
	// the cached client would start an informer holding every Secret of the
	// cluster, where the controller watches Secrets' metadata only.
	err := fill(sec)
	if err == nil {
		err = g.Client.Create(ctx, sec)
	}
	if apierrors.IsAlreadyExists(err) {
		cur := &corev1.Secret{}
		if err = g.APIReader.Get(ctx, client.ObjectKeyFromObject(sec), cur); err == nil {
			if !metav1.IsControlledBy(cur, rs) {
				// The runner exists; the next pass finds it by its marker
				// once the Secret in the way is gone.
				return nil, tokenSecretInTheWay(rs, cur)
			}
			if err = fill(cur); err == nil {
				err = g.Client.Update(ctx, cur)
			}
		}
	}
	if err != nil {
		// The runner exists; the next pass finds it by its marker.
		return nil, fmt.Errorf("storing the token of runner %d: %w", tok.RunnerID, err)
	}
	g.checks.Done(rs.UID, now)
	return &RunnerToken{
		Value:     tok.Value,
		SecretRef: v1alpha1.SecretKeyRef{Name: sec.Name, Key: keyToken},
		RunnerID:  tok.RunnerID,
		RenewAt:   renewTime(now, tok.ExpiresAt),
		ExpiresAt: tok.ExpiresAt,
		CheckAt:   g.checks.Next(rs.UID, now),
		// The next pass retires them, once the managers rolled.
	}, nil
}

// Release deletes the runner, and any other runner
// carrying the RunnerSet's marker, then the token Secret.
func (g *GitLabTokens) Release(ctx context.Context, rs *v1alpha1.RunnerSet, url string) error {
	name := naming.For(rs.Namespace, rs.Name).RunnerToken()
	sec := &corev1.Secret{}
	err := g.APIReader.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: name}, sec)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if err == nil && !metav1.IsControlledBy(sec, rs) {
		sec = &corev1.Secret{} // someone else's: neither read nor deleted
	}
	if u := string(sec.Data[keyURL]); u != "" {
		url = u // the instance the runner was created in
	}
	if rs.Spec.GitLab.Runner == nil {
		return fmt.Errorf("runner %d was created by runnerfleet but spec.gitlab.runner is gone: restore it so the runner can be deleted", rs.Status.RunnerID)
	}
	api, err := g.api(ctx, rs, url)
	if err != nil {
		return err
	}
	ids, err := api.FindRunners(ctx, scopeOf(rs.Spec.GitLab.Runner), Marker(string(rs.UID)))
	if err != nil {
		return g.explain(rs, err)
	}
	if id, _ := strconv.ParseInt(string(sec.Data[keyRunnerID]), 10, 64); id != 0 {
		ids = append(ids, id)
	}
	ids = append(ids, parseIDs(string(sec.Data[keyRetired]))...)
	g.checks.Forget(rs.UID)
	for _, id := range ids {
		if err := api.DeleteRunner(ctx, id); err != nil { // 404 counts as deleted
			return g.explain(rs, err)
		}
		log.FromContext(ctx).Info("Deleted runner from GitLab", "runnerID", id)
	}
	if sec.Name != "" {
		if err := g.Client.Delete(ctx, sec); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Secret %s: %w", name, err)
		}
	}
	return g.letGoOfAPITokens(ctx, rs, "")
}

// explain turns a GitLab error into a *v1alpha1.Failure that says what to fix, or
// keeps it an error to retry with backoff when GitLab may answer later.
func (g *GitLabTokens) explain(rs *v1alpha1.RunnerSet, err error) error {
	var ge *gitlab.Error
	if !errors.As(err, &ge) || ge.Retryable() {
		return err
	}
	reg := rs.Spec.GitLab.Runner
	secret := fmt.Sprintf("Secret %s/%s key %q (spec.gitlab.runner.apiTokenSecretRef)", rs.Namespace, reg.APITokenSecretRef.Name, reg.APITokenSecretRef.KeyOrDefault())
	switch {
	case ge.InsufficientScope() && reg.Type == v1alpha1.RunnerTypeInstance && strings.HasPrefix(ge.Op, "listing runners"):
		// GitLab lists instance runners only through GET /runners/all,
		// which create_runner and manage_runner do not open.
		return v1alpha1.Failf(v1alpha1.ReasonGitLabForbidden,
			"%s: GitLab refused it for want of a scope (insufficient_scope); an instance runner is found again after an interrupted attempt only through GET /runners/all, which needs an administrator's token with the read_api (or api) scope besides create_runner and manage_runner: add read_api to the token in %s",
			ge.Op, secret)
	case ge.InsufficientScope():
		return v1alpha1.Failf(v1alpha1.ReasonGitLabForbidden,
			"%s: GitLab refused it for want of a scope (insufficient_scope); the token in %s needs the create_runner and manage_runner scopes",
			ge.Op, secret)
	}
	switch ge.Status {
	case http.StatusUnauthorized:
		return v1alpha1.Failf(v1alpha1.ReasonGitLabUnauthorized,
			"%s: GitLab refused the access token in %s as wrong, revoked or expired; store a valid token there", ge.Op, secret)
	case http.StatusForbidden:
		if reg.Type == v1alpha1.RunnerTypeInstance {
			return v1alpha1.Failf(v1alpha1.ReasonGitLabForbidden,
				"%s: GitLab forbade it (%s); an instance runner needs an administrator's token with the create_runner and manage_runner scopes in %s, or use runner.type group or project",
				ge.Op, ge.Message, secret)
		}
		return v1alpha1.Failf(v1alpha1.ReasonGitLabForbidden,
			"%s: GitLab forbade it (%s); the token in %s needs the create_runner and manage_runner scopes and the Maintainer or Owner role in the %s",
			ge.Op, ge.Message, secret, reg.Type)
	case http.StatusNotFound:
		field, id := "groupID", reg.GroupID
		if reg.Type == v1alpha1.RunnerTypeProject {
			field, id = "projectID", reg.ProjectID
		}
		what := "the runner"
		if id != nil {
			what = fmt.Sprintf("%s %d", reg.Type, *id)
		}
		return v1alpha1.Failf(v1alpha1.ReasonGitLabNotFound,
			"%s: GitLab does not know %s (%s); check spec.gitlab.runner.%s and that the token in %s can see it",
			ge.Op, what, ge.Message, field, secret)
	}
	return v1alpha1.Failf(v1alpha1.ReasonGitLabRejected, "%s: GitLab refused it (%d: %s); fix spec.gitlab.runner", ge.Op, ge.Status, ge.Message)
}
