package controller

// Retries of interrupted jobs (spec.jobs.retryOnInterruption). When the
// watch of interruptions.go sees a job pod of a RunnerSet that opts in
// taken away under its job, the retrier finds the job in GitLab (the
// executor puts the project's ID on the pod as a label and the job's ID
// as an annotation), waits until GitLab reports it failed, and, if it
// failed with runner_system_failure (its runner lost it, as the pod's
// loss makes it), retries it (POST /projects/:id/jobs/:job_id/retry) with
// the RunnerSet's API token. A job that ended otherwise (succeeded, or
// failed on its own: script_failure, a timeout, …) is never retried, nor
// one whose pod ended normally: the watch hands over only pods that a
// disruption took.
//
// The record of each interrupted job lives in the RunnerSet's
// status.jobRetries: written when the interruption is seen (Waiting),
// before the retry (Retrying) and after it (Retried, with the new job's
// ID), or when the job is not retried (NotRetried, with why). So a
// controller restart resumes the jobs it waited for, and never asks GitLab
// twice for a job: a record found in Retrying at start is one whose retry
// may or may not have reached GitLab, and it is not asked again. A retried
// job's record carries the new job's ID, so that the new job, interrupted
// in turn, counts as the old job's next retry: maxRetries holds along the
// chain. Writes: none for a RunnerSet that does not opt in or has no job
// interrupted; per interrupted job three status patches (Waiting,
// Retrying, Retried) or two (Waiting, NotRetried) and one Event.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Keys of a job pod that name its GitLab job, as gitlab-runner's
// kubernetes executor sets them.
const (
	podKeyJobID     = naming.LabelGitLabJobID
	podKeyProjectID = naming.LabelGitLabProjectID
)

// How long records of finished jobs stay in status.jobRetries, and how
// many records it holds at most (the CRD's MaxItems).
const (
	jobRetryKeep    = 24 * time.Hour
	jobRetryRecords = 100
)

// Defaults of JobRetryOptions.
const (
	DefaultJobRetryPoll = 15 * time.Second
	DefaultJobRetryWait = 30 * time.Minute
)

// fieldRetryToken names the token's field in messages.
const fieldRetryToken = "spec.jobs.retryOnInterruption.apiTokenSecretRef"

// JobRetryOptions tune the retries of interrupted jobs.
type JobRetryOptions struct {
	// Poll is how often GitLab is asked for an interrupted job's state
	// until it reports the job failed; DefaultJobRetryPoll when 0.
	Poll time.Duration
	// Wait is how long after the interruption the job may still be
	// reported running before it is given up; DefaultJobRetryWait when 0.
	Wait time.Duration
	// NewJobs reaches GitLab; gitlab.NewJobs with the controller's
	// metrics transport, and no retry of a request within a call (a
	// retry of the POST could retry a job twice), when nil.
	NewJobs func(url, pat string) (gitlab.Jobs, error)
}

// WithJobRetry sets how the controller retries interrupted jobs, for
// example a test's GitLab and a short poll.
func WithJobRetry(o JobRetryOptions) Option {
	return func(r *Reconciler) { r.jobRetry = o }
}

func (o JobRetryOptions) withDefaults() JobRetryOptions {
	if o.Poll <= 0 {
		o.Poll = DefaultJobRetryPoll
	}
	if o.Wait <= 0 {
		o.Wait = DefaultJobRetryWait
	}
	if o.NewJobs == nil {
		o.NewJobs = func(url, pat string) (gitlab.Jobs, error) {
			return gitlab.NewJobs(url, pat, gitlab.Options{Retries: -1, Transport: metrics.GitLabTransport(nil)})
		}
	}
	return o
}

// jobRetrier retries the interrupted jobs of RunnerSets that opt in.
type jobRetrier struct {
	// Client writes status; Reader is the manager's cache (RunnerSets,
	// RunnerClasses); APIReader reads Secrets and the RunnerSet to update.
	Client    client.Client
	Reader    client.Reader
	APIReader client.Reader
	Recorder  events.EventRecorder
	Options   JobRetryOptions
	now       func() time.Time

	mu       sync.Mutex
	inFlight map[jobKey]bool
}

// jobKey is one job of one RunnerSet.
type jobKey struct {
	rs           types.NamespacedName
	project, job int64
}

func (k jobKey) String() string {
	return fmt.Sprintf("job %d of project %d", k.job, k.project)
}

func newJobRetrier(c client.Client, reader, apiReader client.Reader, rec events.EventRecorder, o JobRetryOptions, now func() time.Time) *jobRetrier {
	if now == nil {
		now = time.Now
	}
	return &jobRetrier{Client: c, Reader: reader, APIReader: apiReader, Recorder: rec, Options: o.withDefaults(), now: now, inFlight: map[jobKey]bool{}}
}

// gitLabJobOf reads a job pod's GitLab project and job: the project from
// the executor's label (which no configuration can overwrite), else its
// annotation; the job from the executor's annotation, else the label the
// local stack's stand-in also sets.
func gitLabJobOf(pod *corev1.Pod) (project, job int64, ok bool) {
	num := func(keys ...string) int64 {
		for _, m := range []map[string]string{pod.Labels, pod.Annotations} {
			for _, k := range keys {
				if n, err := strconv.ParseInt(m[k], 10, 64); err == nil && n > 0 {
					return n
				}
			}
		}
		return 0
	}
	project = num(podKeyProjectID)
	if n, err := strconv.ParseInt(pod.Annotations[podKeyJobID], 10, 64); err == nil && n > 0 {
		job = n
	} else {
		job = num(podKeyJobID)
	}
	return project, job, project > 0 && job > 0
}

// interrupted starts the retry of the job of pod, a job pod of rs that a
// disruption took away. It returns at once; the work runs until ctx ends.
func (r *jobRetrier) interrupted(ctx context.Context, rs *v1alpha1.RunnerSet, pod *corev1.Pod) {
	if rs.Spec.Jobs.RetryOnInterruption == nil || !rs.DeletionTimestamp.IsZero() {
		return
	}
	project, job, ok := gitLabJobOf(pod)
	if !ok {
		log.FromContext(ctx).Info("An interrupted job pod names no GitLab job: not retried", "pod", pod.Namespace+"/"+pod.Name)
		r.Recorder.Eventf(rs, pod, corev1.EventTypeWarning, v1alpha1.ReasonJobNotRetried, "Retry",
			"Job pod %s/%s carries no %s annotation and %s label (gitlab-runner's kubernetes executor sets them): its job is not retried.",
			pod.Namespace, pod.Name, podKeyJobID, podKeyProjectID)
		return
	}
	k := jobKey{rs: client.ObjectKeyFromObject(rs), project: project, job: job}
	now := metav1.NewTime(r.now())
	rec := v1alpha1.JobRetry{ProjectID: project, JobID: job, Pod: pod.Name, Node: pod.Spec.NodeName,
		InterruptedAt: now, State: v1alpha1.JobRetryWaiting, UpdatedAt: now}
	go r.run(ctx, k, &rec)
}

// resume picks up, when the leader starts, the jobs the last leader left
// waiting, and settles the ones it left asking GitLab.
func (r *jobRetrier) resume(ctx context.Context) error {
	list := &v1alpha1.RunnerSetList{}
	if err := r.Reader.List(ctx, list); err != nil {
		return fmt.Errorf("listing RunnerSets: %w", err)
	}
	for i := range list.Items {
		rs := &list.Items[i]
		for _, rec := range rs.Status.JobRetries {
			k := jobKey{rs: client.ObjectKeyFromObject(rs), project: rec.ProjectID, job: rec.JobID}
			switch rec.State {
			case v1alpha1.JobRetryWaiting:
				go r.run(ctx, k, nil)
			case v1alpha1.JobRetryRetrying:
				go r.settleUnknown(ctx, k)
			}
		}
	}
	return nil
}

// claim marks k in flight in this process; false when it already is.
func (r *jobRetrier) claim(k jobKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight[k] {
		return false
	}
	r.inFlight[k] = true
	return true
}

func (r *jobRetrier) release(k jobKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inFlight, k)
}

// run records the interruption (rec; nil to resume a record already
// written), waits for GitLab's verdict and retries the job or says why not.
func (r *jobRetrier) run(ctx context.Context, k jobKey, rec *v1alpha1.JobRetry) {
	if !r.claim(k) {
		return
	}
	defer r.release(k)
	logger := log.FromContext(ctx).WithValues("runnerset", k.rs.String(), "project", k.project, "job", k.job)
	ctx = log.IntoContext(ctx, logger)
	cur, rs, err := r.start(ctx, k, rec)
	if err != nil {
		logger.Error(err, "Recording an interrupted job")
		return
	}
	if cur == nil || cur.State != v1alpha1.JobRetryWaiting {
		return // not opted in any more, or already handled
	}
	r.waitAndRetry(ctx, k, rs, cur)
}

// start writes rec for k unless a record of k exists (then it returns
// that one). A job whose chain reached maxRetries is recorded NotRetried.
func (r *jobRetrier) start(ctx context.Context, k jobKey, rec *v1alpha1.JobRetry) (*v1alpha1.JobRetry, *v1alpha1.RunnerSet, error) {
	var out *v1alpha1.JobRetry
	var rs *v1alpha1.RunnerSet
	wrote := false
	err := r.updateStatus(ctx, k.rs, func(cur *v1alpha1.RunnerSet) bool {
		rs, out, wrote = cur, nil, false
		if cur.Spec.Jobs.RetryOnInterruption == nil {
			return false
		}
		if i := findJobRetry(cur.Status.JobRetries, k); i >= 0 {
			out = cur.Status.JobRetries[i].DeepCopy()
			return false
		}
		if rec == nil {
			return false
		}
		n := rec.DeepCopy()
		for _, prev := range cur.Status.JobRetries {
			if prev.ProjectID == k.project && prev.RetriedAs == k.job {
				n.Retries = prev.Retries + 1
			}
		}
		limit := cur.Spec.Jobs.RetryOnInterruption.MaxRetriesOrDefault()
		if n.Retries >= limit {
			n.State = v1alpha1.JobRetryNotRetried
			n.Message = fmt.Sprintf("job %d was retried %d times after interruptions, the limit of spec.jobs.retryOnInterruption.maxRetries (%d)", k.job, n.Retries, limit)
		}
		cur.Status.JobRetries = pruneJobRetries(append(cur.Status.JobRetries, *n), r.now())
		out, wrote = n, true
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	if wrote && out.State == v1alpha1.JobRetryNotRetried {
		r.notRetried(rs, k, corev1.EventTypeWarning, out.Message)
	}
	return out, rs, nil
}

// waitAndRetry asks GitLab for the job until it has ended or the wait is
// over, then retries it if it failed for its lost runner.
func (r *jobRetrier) waitAndRetry(ctx context.Context, k jobKey, rs *v1alpha1.RunnerSet, rec *v1alpha1.JobRetry) {
	api, why := r.api(ctx, rs)
	if why != "" {
		r.finish(ctx, k, corev1.EventTypeWarning, why)
		return
	}
	deadline := rec.InterruptedAt.Add(r.Options.Wait)
	for {
		job, err := api.GetJob(ctx, k.project, k.job)
		var ge *gitlab.Error
		switch {
		case ctx.Err() != nil:
			return // the leader stops: the next one resumes the record
		case err == nil && job.Status == gitlab.JobStatusFailed && job.FailureReason == gitlab.FailureRunnerSystem:
			r.retry(ctx, k, rs, api)
			return
		case err == nil && (job.Status == gitlab.JobStatusFailed || job.Status == gitlab.JobStatusSuccess || job.Status == gitlab.JobStatusCancel || job.Status == "skipped"):
			reason := job.Status
			if job.FailureReason != "" {
				reason += ", " + job.FailureReason
			}
			r.finish(ctx, k, corev1.EventTypeNormal, fmt.Sprintf("GitLab reports job %d %s: it ended on its own, not for its lost pod, and is not retried", k.job, reason))
			return
		case errors.As(err, &ge) && !ge.Retryable():
			r.finish(ctx, k, corev1.EventTypeWarning, gitLabRefusal(ge, k, rs))
			return
		case err != nil:
			log.FromContext(ctx).Info("GitLab did not answer about an interrupted job; asking again", "error", err.Error())
		}
		if !r.now().Before(deadline) {
			state := "unknown"
			if job != nil {
				state = job.Status
			}
			r.finish(ctx, k, corev1.EventTypeWarning, fmt.Sprintf("GitLab still reports job %d %s %s after its pod was lost: it is not retried (a job is retried only once GitLab reports it failed with %s)",
				k.job, state, r.Options.Wait, gitlab.FailureRunnerSystem))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.Options.Poll):
		}
	}
}

// retry records Retrying, asks GitLab to retry the job and records what
// came of it.
func (r *jobRetrier) retry(ctx context.Context, k jobKey, rs *v1alpha1.RunnerSet, api gitlab.Jobs) {
	proceed := false
	if err := r.updateStatus(ctx, k.rs, func(cur *v1alpha1.RunnerSet) bool {
		i := findJobRetry(cur.Status.JobRetries, k)
		proceed = i >= 0 && cur.Status.JobRetries[i].State == v1alpha1.JobRetryWaiting && cur.Spec.Jobs.RetryOnInterruption != nil
		if !proceed {
			return false
		}
		cur.Status.JobRetries[i].State = v1alpha1.JobRetryRetrying
		cur.Status.JobRetries[i].UpdatedAt = metav1.NewTime(r.now())
		return true
	}); err != nil || !proceed {
		if err != nil {
			log.FromContext(ctx).Error(err, "Recording a job retry; not retried")
		}
		return
	}
	// The retry goes out even if the leader stops now: a record left in
	// Retrying is never asked again.
	n, err := api.RetryJob(context.WithoutCancel(ctx), k.project, k.job)
	if err != nil {
		var ge *gitlab.Error
		why := fmt.Sprintf("retrying job %d: %v", k.job, err)
		if errors.As(err, &ge) && ge.Status != 0 {
			why = gitLabRefusal(ge, k, rs)
		}
		r.finish(context.WithoutCancel(ctx), k, corev1.EventTypeWarning, why)
		return
	}
	var retries int32
	err = r.updateStatus(context.WithoutCancel(ctx), k.rs, func(cur *v1alpha1.RunnerSet) bool {
		i := findJobRetry(cur.Status.JobRetries, k)
		if i < 0 {
			return false
		}
		rec := &cur.Status.JobRetries[i]
		rec.State, rec.RetriedAs, rec.UpdatedAt = v1alpha1.JobRetryRetried, n.ID, metav1.NewTime(r.now())
		retries = rec.Retries + 1
		return true
	})
	if err != nil {
		log.FromContext(ctx).Error(err, "Recording a job GitLab retried", "retriedAs", n.ID)
	}
	metrics.JobRetries.WithLabelValues(k.rs.Namespace, k.rs.Name, metrics.ResultRetried).Inc()
	log.FromContext(ctx).Info("Retried an interrupted job", "retriedAs", n.ID)
	r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, v1alpha1.ReasonJobRetried, "Retry",
		"Job %d of project %d, whose pod was taken away, was retried as job %d (retry %d of at most %d).",
		k.job, k.project, n.ID, retries, rs.Spec.Jobs.RetryOnInterruption.MaxRetriesOrDefault())
}

// settleUnknown records NotRetried for a job the last leader was asking
// GitLab to retry when it stopped: whether GitLab retried it is unknown,
// and asking again could run it twice.
func (r *jobRetrier) settleUnknown(ctx context.Context, k jobKey) {
	if !r.claim(k) {
		return
	}
	defer r.release(k)
	r.finish(ctx, k, corev1.EventTypeWarning, fmt.Sprintf(
		"the controller stopped while it asked GitLab to retry job %d: whether GitLab did is unknown, and it is not asked again so that the job never runs twice; look at the job's pipeline in GitLab", k.job))
}

// finish records NotRetried with why for a job still Waiting or Retrying.
func (r *jobRetrier) finish(ctx context.Context, k jobKey, eventType, why string) {
	var rs *v1alpha1.RunnerSet
	err := r.updateStatus(ctx, k.rs, func(cur *v1alpha1.RunnerSet) bool {
		i := findJobRetry(cur.Status.JobRetries, k)
		if i < 0 || (cur.Status.JobRetries[i].State != v1alpha1.JobRetryWaiting && cur.Status.JobRetries[i].State != v1alpha1.JobRetryRetrying) {
			return false
		}
		rec := &cur.Status.JobRetries[i]
		rec.State, rec.Message, rec.UpdatedAt = v1alpha1.JobRetryNotRetried, truncate(why, 1024), metav1.NewTime(r.now())
		rs = cur
		return true
	})
	if err != nil {
		log.FromContext(ctx).Error(err, "Recording a job not retried", "why", why)
		return
	}
	if rs != nil {
		r.notRetried(rs, k, eventType, why)
	}
}

func (r *jobRetrier) notRetried(rs *v1alpha1.RunnerSet, k jobKey, eventType, why string) {
	metrics.JobRetries.WithLabelValues(k.rs.Namespace, k.rs.Name, metrics.ResultNotRetried).Inc()
	r.Recorder.Eventf(rs, nil, eventType, v1alpha1.ReasonJobNotRetried, "Retry", "Job %d of project %d, whose pod was taken away, is not retried: %s.", k.job, k.project, why)
}

// api is the GitLab client of rs's retries, or why there is none (a
// message naming the field and the fix). The token is read for each
// interrupted job, never kept, never logged.
func (r *jobRetrier) api(ctx context.Context, rs *v1alpha1.RunnerSet) (gitlab.Jobs, string) {
	spec := rs.Spec.Jobs.RetryOnInterruption
	if spec == nil || spec.APITokenSecretRef == nil {
		return nil, "spec.jobs.retryOnInterruption names no apiTokenSecretRef"
	}
	ref := *spec.APITokenSecretRef
	sec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("Secret %s/%s named by %s does not exist: create it with a GitLab access token (scope api, Developer role on the job's project) under key %q", rs.Namespace, ref.Name, fieldRetryToken, ref.KeyOrDefault())
		}
		return nil, fmt.Sprintf("reading Secret %s/%s named by %s: %v", rs.Namespace, ref.Name, fieldRetryToken, err)
	}
	pat := sec.Data[ref.KeyOrDefault()]
	if len(pat) == 0 {
		return nil, fmt.Sprintf("Secret %s/%s has no key %q (%s.key): put a GitLab access token (scope api, Developer role on the job's project) there", rs.Namespace, ref.Name, ref.KeyOrDefault(), fieldRetryToken)
	}
	class := &v1alpha1.RunnerClass{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: rs.Spec.ClassName}, class); err != nil {
		class = nil
	}
	url := v1alpha1.Effective(rs, class).GitLabURL
	api, err := r.Options.NewJobs(url, string(pat))
	if err != nil {
		return nil, fmt.Sprintf("a GitLab client for %s: %v", url, err)
	}
	return api, ""
}

// gitLabRefusal says what GitLab's refusal means for the team.
func gitLabRefusal(e *gitlab.Error, k jobKey, rs *v1alpha1.RunnerSet) string {
	ref := rs.Spec.Jobs.RetryOnInterruption.APITokenSecretRef
	secret := rs.Namespace + "/" + ref.Name
	switch {
	case e.Status == http.StatusUnauthorized:
		return fmt.Sprintf("GitLab refused the token in Secret %s (%s) as invalid, revoked or expired (401): put a valid access token there", secret, fieldRetryToken)
	case e.InsufficientScope():
		return fmt.Sprintf("the token in Secret %s (%s) lacks the api scope GitLab needs to retry a job (403 insufficient_scope): give it the api scope", secret, fieldRetryToken)
	case e.Status == http.StatusNotFound:
		return fmt.Sprintf("GitLab does not show job %d of project %d to the user of the token in Secret %s (%s): give that user at least the Developer role on project %d (%s)", k.job, k.project, secret, fieldRetryToken, k.project, e.Message)
	case e.Status == http.StatusForbidden:
		return fmt.Sprintf("GitLab refused to retry job %d of project %d (%s): the job is not retryable (already retried, by its own retry: or a person), or the user of the token in Secret %s (%s) lacks the Developer role on the project", k.job, k.project, e.Message, secret, fieldRetryToken)
	}
	return e.Error()
}

// updateStatus re-reads the RunnerSet of key from the API server, lets
// change edit it, and patches its status when change says so, again on a
// conflict (the reconciler and other retries write status too).
func (r *jobRetrier) updateStatus(ctx context.Context, key types.NamespacedName, change func(*v1alpha1.RunnerSet) bool) error {
	backoff := wait.Backoff{Steps: 10, Duration: 20 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: 2 * time.Second}
	return retry.RetryOnConflict(backoff, func() error {
		cur := &v1alpha1.RunnerSet{}
		if err := r.APIReader.Get(ctx, key, cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		before := cur.DeepCopy()
		if !change(cur) {
			return nil
		}
		return r.Client.Status().Patch(ctx, cur, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
}

func findJobRetry(recs []v1alpha1.JobRetry, k jobKey) int {
	return slices.IndexFunc(recs, func(r v1alpha1.JobRetry) bool { return r.ProjectID == k.project && r.JobID == k.job })
}

// pruneJobRetries drops finished records older than jobRetryKeep, then the
// oldest finished ones (and last the oldest of all) beyond jobRetryRecords.
func pruneJobRetries(recs []v1alpha1.JobRetry, now time.Time) []v1alpha1.JobRetry {
	finished := func(r v1alpha1.JobRetry) bool {
		return r.State == v1alpha1.JobRetryRetried || r.State == v1alpha1.JobRetryNotRetried
	}
	recs = slices.DeleteFunc(recs, func(r v1alpha1.JobRetry) bool { return finished(r) && now.Sub(r.UpdatedAt.Time) > jobRetryKeep })
	for len(recs) > jobRetryRecords {
		i := slices.IndexFunc(recs, finished)
		if i < 0 {
			i = 0
		}
		recs = slices.Delete(recs, i, i+1)
	}
	return recs
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
