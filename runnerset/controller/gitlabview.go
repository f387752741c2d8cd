// GitLab's view of the runner: the RunnerOnline and TagsMatch conditions,
// from GitLab's own record of the runner and its managers, read on the slow,
// jittered schedule token.NewRunnerViews gives (RunnerViewInterval ±
// RunnerViewJitter), never because a pass ran; and the cleanup of the
// manager records that pods which no longer exist left behind.
//
// The conditions do not roll up to Ready, and their messages hold nothing
// that changes while GitLab's view does not (no "last seen" time of a
// manager that is online), so a converged fleet writes no status for them.

package controller

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller/token"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// managerClockSkew is how far GitLab's clock and the API server's may
// differ: a manager record counts as older than a pod only when GitLab
// created it this long before the pod.
const managerClockSkew = 10 * time.Minute

// maxManagerDeletesPerRead bounds the manager records one read deletes.
const maxManagerDeletesPerRead = 20

// gitlabView reads GitLab's record of a RunnerSet's runner when its
// schedule says so and turns it into RunnerOnline and TagsMatch.
type gitlabView struct {
	// secrets reads the access token the view reads GitLab with (each
	// version of a Secret once: token.SecretTokens' reader).
	secrets client.Reader
	// apiReader lists the live manager pods before a manager record goes.
	apiReader client.Reader
	recorder  events.EventRecorder
	newGitLab func(url, pat string) (gitlab.Client, error)
	now       func() time.Time
	views     *token.Schedule

	mu sync.Mutex
	// ids are the runner IDs of the tokens teams brought, by RunnerSet,
	// learned from POST /runners/verify once per token and controller.
	ids map[types.UID]verifiedRunner
	// unwritten are the conditions a read found whose status write failed
	// (a conflict), by RunnerSet: the next pass writes them. Reading GitLab
	// again instead would cost a call and could find less (the read's
	// cleanup may have deleted the stale records it reported).
	unwritten map[types.UID][]metav1.Condition
}

type verifiedRunner struct {
	tokenSum [sha256.Size]byte
	id       int64
}

func newGitLabView(t token.Tokens, apiReader client.Reader, rec events.EventRecorder, now func() time.Time) *gitlabView {
	return &gitlabView{
		secrets: t.Secret.Reader, apiReader: apiReader, recorder: rec, newGitLab: t.GitLab.NewGitLab, now: now,
		views: token.NewRunnerViews(), ids: map[types.UID]verifiedRunner{}, unwritten: map[types.UID][]metav1.Condition{},
	}
}

// readWith is the access token's Secret the view of rs reads GitLab with,
// its field and what it must hold; nil when there is none.
func readWith(rs *v1alpha1.RunnerSet) (*v1alpha1.SecretKeyRef, string) {
	if reg := rs.Spec.GitLab.Runner; reg != nil {
		return &reg.APITokenSecretRef, "spec.gitlab.runner.apiTokenSecretRef"
	}
	return rs.Spec.GitLab.ReadTokenSecretRef, "spec.gitlab.readTokenSecretRef"
}

// run reads GitLab's view when it is due, or sets what the last read found
// when its write failed, and says when to come back and whether it set the
// view's conditions. The first pass that hears of a RunnerSet (a new one,
// or any after a restart) only schedules its first read.
func (v *gitlabView) run(ctx context.Context, s *state) (time.Duration, bool) {
	rs := s.rs
	ref, field := readWith(rs)
	if ref == nil {
		// A team's token and nothing to read GitLab with: say nothing
		// rather than something old.
		meta.RemoveStatusCondition(&rs.Status.Conditions, v1alpha1.ConditionRunnerOnline)
		meta.RemoveStatusCondition(&rs.Status.Conditions, v1alpha1.ConditionTagsMatch)
		v.forget(rs.UID)
		return 0, false
	}
	now := v.now()
	v.mu.Lock()
	kept, set := v.unwritten[rs.UID]
	delete(v.unwritten, rs.UID)
	v.mu.Unlock()
	for _, c := range kept {
		rs.SetCondition(c.Type, c.Status, c.Reason, c.Message)
	}
	due := v.views.Due(rs.UID, now)
	if c := meta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionTagsMatch); c != nil && c.ObservedGeneration != rs.Generation && rs.Spec.GitLab.Runner == nil {
		due = true // spec.tags may have changed: compare them now, once
	}
	if due {
		v.views.Done(rs.UID, now) // one read per interval, whatever it finds
		v.read(ctx, s, *ref, field)
	}
	return max(v.views.Next(rs.UID, now).Sub(now), time.Second), set || due
}

// keep holds the view's conditions of rs, which this pass set and could
// not write, for the next pass to write.
func (v *gitlabView) keep(rs *v1alpha1.RunnerSet) {
	var kept []metav1.Condition
	for _, typ := range []string{v1alpha1.ConditionRunnerOnline, v1alpha1.ConditionTagsMatch} {
		if c := meta.FindStatusCondition(rs.Status.Conditions, typ); c != nil {
			kept = append(kept, *c)
		}
	}
	v.mu.Lock()
	v.unwritten[rs.UID] = kept
	v.mu.Unlock()
}

// forget drops what the view remembers of a RunnerSet that is gone.
func (v *gitlabView) forget(uid types.UID) {
	v.views.Forget(uid)
	v.mu.Lock()
	delete(v.ids, uid)
	delete(v.unwritten, uid)
	v.mu.Unlock()
}

func (v *gitlabView) read(ctx context.Context, s *state, ref v1alpha1.SecretKeyRef, field string) {
	rs := s.rs
	unknown := func(reason, msg string) {
		rs.SetCondition(v1alpha1.ConditionRunnerOnline, metav1.ConditionUnknown, reason, msg)
		if rs.Spec.GitLab.Runner == nil {
			rs.SetCondition(v1alpha1.ConditionTagsMatch, metav1.ConditionUnknown, reason, msg)
		}
	}
	pat, err := token.ReadSecretKey(ctx, v.secrets, rs.Namespace, ref, field, "a GitLab access token with the read_api scope that can see the runner")
	var f *v1alpha1.Failure
	if errors.As(err, &f) {
		unknown(f.Reason, f.Message)
		return
	}
	if err != nil {
		unknown(v1alpha1.ReasonGitLabUnavailable, fmt.Sprintf("reading %s: %v; runnerfleet reads again in about %s", field, err, token.RunnerViewInterval))
		return
	}
	api, err := v.newGitLab(s.settings.GitLabURL, pat)
	if err != nil {
		unknown(v1alpha1.ReasonGitLabUnavailable, err.Error())
		return
	}
	secret := fmt.Sprintf("Secret %s/%s key %q (%s)", rs.Namespace, ref.Name, ref.KeyOrDefault(), field)
	explain := func(err error) {
		reason, msg := explainRead(err, secret)
		unknown(reason, msg)
	}

	id, err := v.runnerID(ctx, s, api)
	if err != nil {
		explain(err)
		return
	}
	if id == 0 {
		msg := fmt.Sprintf("GitLab refuses the runner token in Secret %s/%s (POST /runners/verify answered 403): it was revoked, reset or has expired; store the runner's current glrt- token there",
			rs.Namespace, rs.Spec.GitLab.TokenSecretRef.Name)
		rs.SetCondition(v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonTokenRefused, msg)
		rs.SetCondition(v1alpha1.ConditionTagsMatch, metav1.ConditionUnknown, v1alpha1.ReasonTokenRefused, msg)
		return
	}
	managers, err := api.Managers(ctx, id)
	if err != nil {
		explain(err)
		return
	}
	online(rs, id, managers, s.settings.GitLabURL)
	if rs.Spec.GitLab.Runner == nil {
		// runnerfleet writes the tags of a runner it created; a team's
		// runner has the tags someone gave it in GitLab.
		details, err := api.Runner(ctx, id)
		if err != nil {
			explain(err)
			return
		}
		tagsMatch(rs, id, details.Tags)
	}
	v.cleanup(ctx, s, api, managers)
}

// runnerID is the runner's ID: the one runnerfleet created, or the one
// GitLab names for the team's token (asked once per token; 0 when GitLab
// refuses it).
func (v *gitlabView) runnerID(ctx context.Context, s *state, api gitlab.Client) (int64, error) {
	if s.token.RunnerID != 0 {
		return s.token.RunnerID, nil
	}
	sum := sha256.Sum256([]byte(s.token.Value))
	v.mu.Lock()
	known, ok := v.ids[s.rs.UID]
	v.mu.Unlock()
	if ok && known.tokenSum == sum {
		return known.id, nil
	}
	// Verify poses as a runner manager: it goes as the controller's own
	// system_id, which the view never counts as a manager of the runner.
	id, err := api.VerifiedRunnerID(ctx, s.token.Value, gitlab.SystemID)
	if err != nil || id == 0 {
		return id, err
	}
	v.mu.Lock()
	v.ids[s.rs.UID] = verifiedRunner{tokenSum: sum, id: id}
	v.mu.Unlock()
	return id, nil
}

// explainRead turns a failed read into RunnerOnline's reason and message.
func explainRead(err error, secret string) (string, string) {
	var ge *gitlab.Error
	if !errors.As(err, &ge) || ge.Retryable() {
		return v1alpha1.ReasonGitLabUnavailable, fmt.Sprintf("%v; runnerfleet reads again in about %s", err, token.RunnerViewInterval)
	}
	switch {
	case ge.InsufficientScope():
		return v1alpha1.ReasonGitLabForbidden, fmt.Sprintf("%s: GitLab refused it for want of a scope (insufficient_scope); the token in %s needs read_api (or manage_runner)", ge.Op, secret)
	case ge.Status == http.StatusUnauthorized:
		return v1alpha1.ReasonGitLabUnauthorized, fmt.Sprintf("%s: GitLab refused the access token in %s as wrong, revoked or expired; store a valid token there", ge.Op, secret)
	case ge.Status == http.StatusForbidden:
		return v1alpha1.ReasonGitLabForbidden, fmt.Sprintf("%s: GitLab forbade it (%s); the token in %s must belong to a user who can see the runner (Maintainer of its project, Owner of its group, or an administrator for an instance runner)", ge.Op, ge.Message, secret)
	case ge.Status == http.StatusNotFound:
		return v1alpha1.ReasonGitLabNotFound, fmt.Sprintf("%s: GitLab does not know the runner, or the token in %s cannot see it (%s)", ge.Op, secret, ge.Message)
	}
	return v1alpha1.ReasonGitLabRejected, fmt.Sprintf("%s: GitLab refused it (%d: %s)", ge.Op, ge.Status, ge.Message)
}

// online sets RunnerOnline from GitLab's status of the runner's managers,
// the controller's own token checks left out.
func online(rs *v1alpha1.RunnerSet, id int64, managers []gitlab.RunnerManager, url string) {
	var last time.Time
	count := map[string]int{}
	for _, m := range managers {
		if m.SystemID == gitlab.SystemID {
			continue
		}
		count[m.Status]++
		if m.ContactedAt != nil && m.ContactedAt.After(last) {
			last = *m.ContactedAt
		}
	}
	if count[gitlab.StatusOnline] > 0 {
		rs.SetCondition(v1alpha1.ConditionRunnerOnline, metav1.ConditionTrue, v1alpha1.ReasonOnline,
			fmt.Sprintf("GitLab reports runner %d online: a manager of it contacted GitLab within GitLab's online window (2 hours)", id))
		return
	}
	if rs.Spec.Managers.Autoscale != nil && rs.Status.DesiredManagers == 0 {
		// KEDA's count, as the managers' step last saw it.
		rs.SetCondition(v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonScaledToZero,
			fmt.Sprintf("KEDA scaled the managers to 0 (spec.managers.autoscale): no manager polls GitLab for runner %d, and GitLab reports none online", id))
		return
	}
	if rs.Spec.Managers.Autoscale == nil && rs.Spec.Managers.ReplicasOrDefault() == 0 {
		rs.SetCondition(v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonScaledToZero,
			fmt.Sprintf("spec.managers.replicas is 0: no manager polls GitLab for runner %d, and GitLab reports none online", id))
		return
	}
	check := fmt.Sprintf("check that the manager pods run (status.managers), that they reach %s (their logs, the NetworkPolicy, a proxy), and that GitLab still accepts the runner's token", url)
	switch {
	case last.IsZero():
		rs.SetCondition(v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonNeverContacted,
			fmt.Sprintf("no manager of runner %d has contacted GitLab yet: %s", id, check))
	case count[gitlab.StatusOffline] > 0:
		rs.SetCondition(v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonOffline,
			fmt.Sprintf("GitLab last heard from a manager of runner %d at %s, over 2 hours ago (status offline): %s", id, last.UTC().Format(time.RFC3339), check))
	default:
		rs.SetCondition(v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonStale,
			fmt.Sprintf("GitLab last heard from a manager of runner %d at %s, over 7 days ago (status stale): %s", id, last.UTC().Format(time.RFC3339), check))
	}
}

// tagsMatch sets TagsMatch from the runner's tags in GitLab against spec.tags.
func tagsMatch(rs *v1alpha1.RunnerSet, id int64, inGitLab []string) {
	missing, extra := tagDiff(rs.Spec.Tags, inGitLab)
	if len(missing) == 0 && len(extra) == 0 {
		rs.SetCondition(v1alpha1.ConditionTagsMatch, metav1.ConditionTrue, v1alpha1.ReasonTagsMatch,
			fmt.Sprintf("runner %d has spec.tags in GitLab", id))
		return
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("missing in GitLab: %s (jobs with them never reach this runner)", strings.Join(missing, ", ")))
	}
	if len(extra) > 0 {
		parts = append(parts, fmt.Sprintf("in GitLab but not in spec.tags: %s (this runner takes jobs with them too)", strings.Join(extra, ", ")))
	}
	rs.SetCondition(v1alpha1.ConditionTagsMatch, metav1.ConditionFalse, v1alpha1.ReasonTagsDiffer, fmt.Sprintf(
		"runner %d's tags in GitLab are not spec.tags: %s. runnerfleet does not write the tags of a runner whose token you bring: set them in GitLab (the runner's page under CI/CD → Runners, or PUT /runners/%d with tag_list), or change spec.tags",
		id, strings.Join(parts, "; "), id))
}

// tagDiff returns the tags of want that have is lacks, and those it has
// beyond want, each sorted (GitLab trims tags; so does the comparison).
func tagDiff(want, have []string) (missing, extra []string) {
	norm := func(in []string) []string {
		var out []string
		for _, t := range in {
			if t = strings.TrimSpace(t); t != "" && !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
		slices.Sort(out)
		return out
	}
	w, h := norm(want), norm(have)
	for _, t := range w {
		if !slices.Contains(h, t) {
			missing = append(missing, t)
		}
	}
	for _, t := range h {
		if !slices.Contains(w, t) {
			extra = append(extra, t)
		}
	}
	return missing, extra
}

// cleanup deletes the manager records that pods which no longer exist left
// behind (gitlab-runner records one per system_id, and a new manager pod
// gets a new one), with the runner's own token (DELETE /runners/managers).
// Which records qualify is staleManagers'; the live pods are read from the
// API server, and only when a record may qualify.
func (v *gitlabView) cleanup(ctx context.Context, s *state, api gitlab.Client, managers []gitlab.RunnerManager) {
	rs := s.rs
	if len(staleManagers(rs, managers, nil, true)) == 0 {
		return // nothing offline of ours: no pod list
	}
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := v.apiReader.List(ctx, pods, client.InNamespace(rs.Namespace),
		client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(resources.SelectorLabels(rs, resources.ComponentManager))}); err != nil {
		log.FromContext(ctx).Error(err, "Listing the manager pods before deleting stale runner managers; trying at the next read")
		return
	}
	var deleted []string
	for _, m := range staleManagers(rs, managers, pods.Items, false) {
		if len(deleted) == maxManagerDeletesPerRead {
			break
		}
		if err := api.DeleteManager(ctx, s.token.Value, m.SystemID); err != nil {
			log.FromContext(ctx).Error(err, "Deleting a stale runner manager from GitLab; trying at the next read", "systemID", m.SystemID)
			break
		}
		deleted = append(deleted, m.SystemID)
	}
	if len(deleted) > 0 {
		log.FromContext(ctx).Info("Deleted stale runner managers from GitLab", "systemIDs", deleted)
		v.recorder.Eventf(rs, nil, corev1.EventTypeNormal, v1alpha1.ReasonStaleManagersDeleted, "DeleteRunnerManagers",
			"deleted %d runner manager record(s) that manager pods which no longer exist left in GitLab: %s", len(deleted), strings.Join(deleted, ", "))
	}
}

// staleManagers are the manager records of rs's runner that belong to no
// live pod of it, and may go:
//
//   - GitLab reports them offline or stale (no contact for 2 hours): a
//     record any running process still uses is online, which keeps a
//     system_id shared by several pods;
//   - GitLab created them (a manager's first request) more than
//     managerClockSkew before the oldest live manager pod of rs was
//     created: a pod's system_id reaches GitLab only after the pod exists,
//     so such a record is no live pod's;
//   - they are not the controller's own (gitlab.SystemID), and, for a
//     token the team brought (which may run elsewhere too), GitLab created
//     them after the RunnerSet was.
//
// With onlyGitLab, the pods are not looked at: the records that may go
// once the pods are known.
func staleManagers(rs *v1alpha1.RunnerSet, managers []gitlab.RunnerManager, pods []metav1.PartialObjectMetadata, onlyGitLab bool) []gitlab.RunnerManager {
	var oldest time.Time
	for _, p := range pods {
		if t := p.CreationTimestamp.Time; oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	var out []gitlab.RunnerManager
	for _, m := range managers {
		switch {
		case m.SystemID == gitlab.SystemID || m.SystemID == "":
		case m.Status != gitlab.StatusOffline && m.Status != gitlab.StatusStale:
		case m.CreatedAt == nil:
		case rs.Spec.GitLab.Runner == nil && m.CreatedAt.Before(rs.CreationTimestamp.Add(-managerClockSkew)):
		case !onlyGitLab && !oldest.IsZero() && !m.CreatedAt.Before(oldest.Add(-managerClockSkew)):
		default:
			out = append(out, m)
		}
	}
	return out
}
