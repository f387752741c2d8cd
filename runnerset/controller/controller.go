// Package controller reconciles RunnerSets into a running GitLab runner: job
// and manager identities, config.toml, and manager pods that drain instead of
// dying mid-job.
//
// The parent Reconciler runs one sub-reconciler per condition, in order, and
// patches status once at the end. A sub-reconciler that cannot go on (a
// missing RunnerClass, a missing token) sets its condition False with a reason
// the team can act on and stops the pass; nothing already running is torn down.
package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// Name is the controller's name in logs, metrics and events.
const Name = "runnerset"

// Finalizer holds a RunnerSet until its managers have drained.
const Finalizer = "runnerfleet.dev/drain"

// Field indexes that map Secrets and RunnerClasses back to RunnerSets.
const (
	indexTokenSecret = "spec.gitlab.tokenSecretRef.name"
	indexClassName   = "spec.className"
)

// Client rate limits of the controller: a fleet of a thousand RunnerSets
// converges in minutes without crowding the API server (see BENCHMARKS.md).
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// concurrentReconciles is how many RunnerSets are reconciled at once. A
// new RunnerSet's pass waits on about a dozen requests in a row (most of
// them on a different kind's client rate limit); eight passes at once keep
// those limits, not the round trips, the bound when a thousand arrive.
const concurrentReconciles = 8

// inTheWayRecheck is how often a RunnerSet blocked by an object it does
// not own looks again.
const inTheWayRecheck = time.Minute

// drainPoll is how often a deleting RunnerSet checks whether its pods are gone.
const drainPoll = 5 * time.Second

// Reconciler reconciles RunnerSets.
type Reconciler struct {
	Client client.Client
	// APIReader reads what the cache does not hold (token Secrets, pods)
	// straight from the API server.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Tokens    TokenSource
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	// steps are the pass, built by New from the fields above.
	steps []step
	// firstStatus remembers the RunnerSets whose first status this
	// controller wrote in the last seconds.
	firstStatus createdObjects
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// WithClock makes the Reconciler read the time from now, for example a
// test's clock that jumps ahead.
func WithClock(now func() time.Time) Option {
	return func(r *Reconciler) {
		r.Now = now
		if t, ok := r.Tokens.(Tokens); ok {
			t.GitLab.Now = now
		}
	}
}

// Option changes a Reconciler built by New.
type Option func(*Reconciler)

// WithGitLab makes the Reconciler reach GitLab through newClient, for example
// a client of a test server.
func WithGitLab(newClient func(url, pat string) (gitlab.Client, error)) Option {
	return func(r *Reconciler) { r.Tokens.(Tokens).GitLab.NewGitLab = newClient }
}

// New returns a Reconciler that takes each RunnerSet's token from the Secret
// it names, or creates its runner in GitLab.
func New(c client.Client, apiReader client.Reader, rec events.EventRecorder, opts ...Option) *Reconciler {
	r := &Reconciler{Client: c, APIReader: apiReader, Recorder: rec, Tokens: Tokens{
		Secret: SecretTokens{Reader: newReadSecrets(apiReader, c)},
		GitLab: &GitLabTokens{
			Client: c, APIReader: apiReader, Recorder: rec,
			NewGitLab: func(url, pat string) (gitlab.Client, error) {
				return gitlab.New(url, pat, gitlab.Options{Transport: metrics.GitLabTransport(nil)})
			},
		},
	}}
	for _, o := range opts {
		o(r)
	}
	// Each step holds only what it uses; the steps that write share one
	// writer, so what one pass created is remembered across steps and passes.
	w := &writer{Client: c, APIReader: apiReader, created: &createdObjects{}, secrets: &writtenSecrets{}, now: r.now}
	r.steps = steps(map[string]stepFunc{
		v1alpha1.ConditionClassAccepted:      classStep{Client: c}.run,
		v1alpha1.ConditionJobsNamespaceReady: jobsNamespaceStep{w}.run,
		v1alpha1.ConditionRunnerRegistered:   tokenStep{Tokens: r.Tokens, now: r.now}.run,
		v1alpha1.ConditionCapacityReady:      capacityStep{w}.run,
		v1alpha1.ConditionIdentityReady:      identityStep{w}.run,
		v1alpha1.ConditionConfigReady:        configStep{w}.run,
		v1alpha1.ConditionManagersAvailable:  managersStep{w}.run,
	})
	return r
}

// steps orders the step of each condition as v1alpha1.DependentConditions
// does, the one place the order is written: the pass runs them in that
// order and blocked marks the ones after a stopped step by it.
func steps(byCondition map[string]stepFunc) []step {
	if len(byCondition) != len(v1alpha1.DependentConditions) {
		panic(fmt.Sprintf("%d steps for %d dependent conditions", len(byCondition), len(v1alpha1.DependentConditions)))
	}
	out := make([]step, 0, len(byCondition))
	for _, c := range v1alpha1.DependentConditions {
		run, ok := byCondition[c]
		if !ok {
			panic("no step for condition " + c)
		}
		out = append(out, step{c, run})
	}
	return out
}

// state is what one pass learns and hands from step to step.
type state struct {
	rs    *v1alpha1.RunnerSet
	class *v1alpha1.RunnerClass
	// settings are rs's under class, resolved once when the class is accepted.
	settings   v1alpha1.Settings
	token      *RunnerToken
	placement  runnerconfig.JobPlacement
	configTOML []byte
	configHash string
	// managersSince is when the managers' Deployment was created.
	managersSince time.Time
}

// step owns one condition. It returns done=false to stop the pass (its
// condition already says why) and an error only for failures worth a retry.
// Each step is a small struct holding only its own dependencies (a reader,
// the writer, the TokenSource, the clock) whose run method is the stepFunc,
// so it can be read and tested alone.
type step struct {
	condition string
	run       stepFunc
}

type stepFunc func(ctx context.Context, s *state) (done bool, requeue time.Duration, err error)

// blocked marks the conditions after a stopped step as blocked by it.
func blocked(rs *v1alpha1.RunnerSet, after string) {
	seen := false
	for _, t := range v1alpha1.DependentConditions {
		if seen {
			c := meta.FindStatusCondition(rs.Status.Conditions, t)
			if c == nil || c.Status != metav1.ConditionTrue {
				rs.SetCondition(t, metav1.ConditionUnknown, v1alpha1.ReasonBlocked, fmt.Sprintf("waiting for %s", after))
			}
		}
		seen = seen || t == after
	}
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rs := &v1alpha1.RunnerSet{}
	if err := r.Client.Get(ctx, req.NamespacedName, rs); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	key := "RunnerSet/" + req.String()
	if len(rs.Status.Conditions) == 0 && r.firstStatus.recent(key, r.now()) {
		// Its first status was written moments ago and the cache has not
		// seen it: a pass on this copy would write it again, and be
		// refused (a conflict) at best. Read it from the API server.
		if err := r.APIReader.Get(ctx, req.NamespacedName, rs); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	if !rs.DeletionTimestamp.IsZero() {
		res, err := r.finalize(ctx, rs)
		if err != nil {
			metrics.ReconcileErrors.WithLabelValues(metrics.StepFinalize).Inc()
		}
		return res, err
	}
	if !controllerutil.ContainsFinalizer(rs, Finalizer) {
		patch := client.MergeFromWithOptions(rs.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(rs, Finalizer)
		if err := r.Client.Patch(ctx, rs, patch); err != nil {
			return conflictIsRequeue(fmt.Errorf("adding finalizer: %w", err))
		}
	}

	before := rs.DeepCopy()
	s := &state{rs: rs}
	var requeue time.Duration
	var errs []error
	for _, st := range r.steps {
		was := meta.FindStatusCondition(rs.Status.Conditions, st.condition).DeepCopy()
		done, after, err := st.run(ctx, s)
		var itw *InTheWay
		switch {
		case errors.As(err, &itw):
			// Only someone else can fix it; its deletion is not watched
			// (the cache does not see it), so look again now and then.
			rs.SetCondition(st.condition, metav1.ConditionFalse, v1alpha1.ReasonObjectInTheWay, itw.Error())
			err, after = nil, inTheWayRecheck
		case err != nil:
			// A step that failed without saying why in its condition
			// gets the cause there: the user reads status, not logs.
			var rep *reportedError
			if now := meta.FindStatusCondition(rs.Status.Conditions, st.condition); !apierrors.IsConflict(err) && !errors.As(err, &rep) && (now == nil || equality.Semantic.DeepEqual(now, was)) {
				rs.SetCondition(st.condition, metav1.ConditionFalse, v1alpha1.ReasonWriteFailed,
					fmt.Sprintf("%v; runnerfleet retries with backoff. If it persists, check the controller's permissions and the object named here", err))
			}
			errs = append(errs, fmt.Errorf("%s: %w", st.condition, err))
			metrics.ReconcileErrors.WithLabelValues(st.condition).Inc()
		}
		if after > 0 && (requeue == 0 || after < requeue) {
			requeue = after
		}
		if !done || err != nil {
			blocked(rs, st.condition)
			break
		}
	}
	if s.token != nil {
		metrics.TokenExpiries.Set(req.NamespacedName, s.token.ExpiresAt)
	}
	rs.RollUpReady()
	rs.Status.ObservedGeneration = rs.Generation
	if len(errs) == 0 && r.startingUp(before, rs, s) {
		// A new RunnerSet whose only wait is its first managers' rollout:
		// the Deployment's progress brings the next pass, which writes
		// the status once, Ready or not, instead of once per pass.
		return reconcile.Result{RequeueAfter: firstStatusWithin}, nil
	}
	r.recordTransitions(before, rs)
	if err := r.patchStatus(ctx, before, rs); err != nil {
		errs = append(errs, err)
		if !apierrors.IsConflict(err) {
			metrics.ReconcileErrors.WithLabelValues(metrics.StepStatus).Inc()
		}
	} else if len(before.Status.Conditions) == 0 {
		r.firstStatus.add(key, r.now())
	}
	if err := errors.Join(errs...); err != nil {
		return conflictIsRequeue(err)
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// createdObjects remembers the objects this controller created in the
// last seconds: a pass right after the one that created them may run
// before the cache has seen them, and reads them from the API server
// rather than trying to create them again. Any other object the cache
// does not hold is created without a read first.
type createdObjects struct {
	mu sync.Mutex
	m  map[string]time.Time
	// pruned is when entries older than createdRecently were last dropped:
	// at most once a second, not on every add (a thousand new RunnerSets
	// add eight thousand entries in seconds).
	pruned time.Time
}

// createdRecently is how long a created object may stay unseen by the cache.
const createdRecently = 30 * time.Second

func (c *createdObjects) add(key string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]time.Time{}
	}
	if now.Sub(c.pruned) >= time.Second {
		for k, at := range c.m {
			if now.Sub(at) > createdRecently {
				delete(c.m, k)
			}
		}
		c.pruned = now
	}
	c.m[key] = now
}

func (c *createdObjects) recent(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.m[key]
	return ok && now.Sub(at) <= createdRecently
}

func (c *createdObjects) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// reportedError is a step's error whose cause the step already wrote into
// its condition: a condition unchanged since the last pass is then no sign
// that the step said nothing, and must not be overwritten (which would
// flip it back and forth, a status write and a new pass each time).
type reportedError struct{ error }

func (e *reportedError) Unwrap() error { return e.error }

// firstStatusWithin bounds how long a new RunnerSet whose managers are
// starting may go without a status.
const firstStatusWithin = 10 * time.Second

// startingUp reports whether rs has never had a status, its managers'
// Deployment was created less than firstStatusWithin ago, and it waits for
// that first rollout and nothing else: then its first status can wait for
// it. A RunnerSet that waits for nothing (its managers are available) is
// not starting up: its status is written in this pass.
func (r *Reconciler) startingUp(before, rs *v1alpha1.RunnerSet, s *state) bool {
	if len(before.Status.Conditions) > 0 || s.managersSince.IsZero() || r.now().Sub(s.managersSince) >= firstStatusWithin {
		return false
	}
	rollingOut := false
	for _, c := range rs.Status.Conditions {
		switch {
		case c.Type == v1alpha1.ConditionReady:
		case c.Status == metav1.ConditionTrue:
		case c.Type == v1alpha1.ConditionManagersAvailable && c.Reason == v1alpha1.ReasonRollingOut:
			rollingOut = true
		default:
			return false
		}
	}
	return rollingOut
}

// patchStatus writes status once, and only when it changed.
func (r *Reconciler) patchStatus(ctx context.Context, before, after *v1alpha1.RunnerSet) error {
	if equality.Semantic.DeepEqual(before.Status, after.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, after, patch); err != nil {
		return fmt.Errorf("patching status: %w", err)
	}
	return nil
}

// recordTransitions emits an Event for every condition that changed status.
// A RunnerSet's first status that is all True is no transition: it gets no
// Event (a thousand new RunnerSets would write a thousand), failures do.
func (r *Reconciler) recordTransitions(before, after *v1alpha1.RunnerSet) {
	first := len(before.Status.Conditions) == 0
	for _, c := range after.Status.Conditions {
		if first && c.Status == metav1.ConditionTrue {
			continue
		}
		old := meta.FindStatusCondition(before.Status.Conditions, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		if c.Type != v1alpha1.ConditionReady && c.Status == metav1.ConditionTrue {
			continue // Ready=True says it once for all
		}
		if c.Status == metav1.ConditionUnknown {
			continue
		}
		typ := corev1.EventTypeNormal
		if c.Status == metav1.ConditionFalse && c.Reason != v1alpha1.ReasonRollingOut && c.Reason != v1alpha1.ReasonNotReconciled {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(after, nil, typ, c.Reason, c.Type, "%s", c.Message)
	}
}

func conflictIsRequeue(err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	return reconcile.Result{}, err
}

// writer writes a RunnerSet's objects for the steps: apply, dry run and
// delete of what the RunnerSet owns, and nothing else. Client reads the
// cache and writes, and knows the scheme; APIReader reads what the cache
// does not hold (Secrets) or has not seen yet (created, in created).
type writer struct {
	Client    client.Client
	APIReader client.Reader
	created   *createdObjects
	// secrets remembers the Secrets written, so a pass need not read them.
	secrets *writtenSecrets
	now     func() time.Time
}

// apply creates desired, or updates the live object when the spec hash the
// builder recorded differs. Comparing hashes instead of fields means a field
// the API server defaults never causes a rewrite, so a steady fleet makes no
// writes at all. Namespaced objects are owned by the RunnerSet through a
// controller reference; cluster-scoped ones through capacity labels.
func (r *writer) apply(ctx context.Context, owner *v1alpha1.RunnerSet, desired client.Object) error {
	_, err := r.write(ctx, owner, desired, false)
	return err
}

// applyAndGet is apply that also returns the object as the API server has it
// now: the response of a write, never a cache that may lag behind it.
func (r *writer) applyAndGet(ctx context.Context, owner *v1alpha1.RunnerSet, desired client.Object) (client.Object, error) {
	return r.write(ctx, owner, desired, false)
}

// dryRun sends what apply would write as a server-side dry run, when it
// would update an object; a create is not dry run (the caller judged the
// new object offline).
func (r *writer) dryRun(ctx context.Context, owner *v1alpha1.RunnerSet, desired client.Object) error {
	_, err := r.write(ctx, owner, desired.DeepCopyObject().(client.Object), true)
	return err
}

func (r *writer) write(ctx context.Context, owner *v1alpha1.RunnerSet, desired client.Object, dryRun bool) (client.Object, error) {
	// An ownerReference never crosses namespaces: cluster-scoped objects
	// and those in the jobs namespace are tied to the RunnerSet by labels.
	clusterScoped := desired.GetNamespace() != owner.Namespace
	if !clusterScoped {
		if err := controllerutil.SetControllerReference(owner, desired, r.Client.Scheme()); err != nil {
			return nil, err
		}
	}
	kind := r.kindOf(desired)
	live := desired.DeepCopyObject().(client.Object)
	// The cache holds only objects labelled as runnerfleet's, and no
	// Secrets at all: Secrets are read from the API server. An object
	// someone else made under the name is found by the create that fails
	// (AlreadyExists) and judged, never overwritten.
	var reader client.Reader = r.Client
	if _, ok := desired.(*corev1.Secret); ok {
		reader = r.APIReader
	}
	key := kind + "/" + desired.GetNamespace() + "/" + desired.GetName()
	if sec, ok := desired.(*corev1.Secret); ok && !dryRun && r.secrets.unchanged(ctx, r.Client, key, sec) {
		return desired, nil // as this controller wrote it, and it would write the same
	}
	err := reader.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if err == nil {
		r.created.forget(key)
	}
	if apierrors.IsNotFound(err) && reader != r.APIReader && r.created.recent(key, r.now()) {
		// Created moments ago and not in the cache yet: ask the API server.
		err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), live)
	}
	switch {
	case apierrors.IsNotFound(err) && dryRun:
		return desired, nil
	case apierrors.IsNotFound(err):
		// Not in the cache (or, for a Secret, not there at all): create it.
		// An object of that name the cache does not see (someone else's,
		// or one without runnerfleet's label) makes the create fail with
		// AlreadyExists and is then read from the API server and judged:
		// one write for a new object, no read before it.
		var createOpts []client.CreateOption
		if dryRun {
			createOpts = append(createOpts, client.DryRunAll)
		}
		err := r.Client.Create(ctx, desired, createOpts...)
		if err == nil {
			if !dryRun {
				r.created.add(key, r.now())
				r.secrets.record(key, desired, desired)
				log.FromContext(ctx).V(1).Info("Created object", "kind", kind, "name", desired.GetName())
			}
			return desired, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating %s %s: %w", kind, desired.GetName(), err)
		}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
			return nil, fmt.Errorf("getting %s %s: %w", kind, desired.GetName(), err)
		}
	case err != nil:
		return nil, fmt.Errorf("getting %s %s: %w", kind, desired.GetName(), err)
	}
	itw := inTheWay(owner, live, kind, clusterScoped)
	if ref := metav1.GetControllerOf(desired); ref != nil && clusterScoped {
		// Shared by the RunnerSets of a RunnerClass (its node class): the
		// class must be its controller.
		itw = sharedInTheWay(owner, live, kind, ref)
	}
	if itw != nil {
		return nil, itw
	}
	if resources.SpecHash(live) == resources.SpecHash(desired) && sameData(live, desired) {
		r.secrets.record(key, desired, live)
		return live, nil
	}
	desired.SetResourceVersion(live.GetResourceVersion())
	// Keep finalizers others put on the object (Karpenter's termination finalizer).
	desired.SetFinalizers(live.GetFinalizers())
	var updateOpts []client.UpdateOption
	if dryRun {
		updateOpts = append(updateOpts, client.DryRunAll)
	}
	if err := r.Client.Update(ctx, desired, updateOpts...); err != nil {
		return nil, fmt.Errorf("updating %s %s: %w", kind, desired.GetName(), err)
	}
	if !dryRun {
		r.secrets.record(key, desired, desired)
		log.FromContext(ctx).Info("Updated object", "kind", kind, "name", desired.GetName())
	}
	return desired, nil
}

// writtenSecrets remembers, for each Secret this controller wrote (or
// found as it would write it), the resourceVersion the API server had
// and a digest of the content: while the metadata cache (every Secret's,
// watched by metadata for the token Secrets) shows that resourceVersion,
// the Secret is unchanged, and a pass that would write the same content
// needs no read from the API server. Secrets are not cached whole; without
// this, each pass of a thousand RunnerSets read each config Secret, a
// request each on the client's rate limit for Secrets.
type writtenSecrets struct {
	mu sync.Mutex
	m  map[string]writtenSecret
}

type writtenSecret struct{ resourceVersion, digest string }

// secretDigest covers what write compares of a Secret: its spec hash (the
// builder's labels, annotations and type) and its data.
func secretDigest(s *corev1.Secret) string {
	h := sha256.New()
	h.Write([]byte(resources.SpecHash(s)))
	for _, k := range slices.Sorted(maps.Keys(s.Data)) {
		fmt.Fprintf(h, "\x00%s\x00%d\x00", k, len(s.Data[k]))
		h.Write(s.Data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// record remembers live's resourceVersion for key when desired is a
// Secret: live holds desired's content.
func (w *writtenSecrets) record(key string, desired, live client.Object) {
	s, ok := desired.(*corev1.Secret)
	if !ok || live.GetResourceVersion() == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]writtenSecret{}
	}
	w.m[key] = writtenSecret{resourceVersion: live.GetResourceVersion(), digest: secretDigest(s)}
}

// unchanged reports whether the Secret desired names is, by the metadata
// cache, still as recorded, and desired's content is what was recorded.
func (w *writtenSecrets) unchanged(ctx context.Context, c client.Reader, key string, desired *corev1.Secret) bool {
	w.mu.Lock()
	at, ok := w.m[key]
	w.mu.Unlock()
	if !ok || at.digest != secretDigest(desired) {
		return false
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := c.Get(ctx, client.ObjectKeyFromObject(desired), meta); err != nil {
		if apierrors.IsNotFound(err) {
			w.mu.Lock()
			delete(w.m, key) // gone: the map holds only Secrets that exist
			w.mu.Unlock()
		}
		return false
	}
	return meta.ResourceVersion == at.resourceVersion
}

// deleteOwned deletes obj (by its kind, namespace and name) when the cache
// holds it and it is owner's (by controller reference, or by owner labels
// outside owner's namespace); anything else is left alone.
func (r *writer) deleteOwned(ctx context.Context, owner *v1alpha1.RunnerSet, obj client.Object) error {
	live := obj.DeepCopyObject().(client.Object)
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		return client.IgnoreNotFound(err)
	}
	if inTheWay(owner, live, r.kindOf(obj), live.GetNamespace() != owner.Namespace) != nil || !live.GetDeletionTimestamp().IsZero() {
		return nil // not owner's, or on its way (a finalizer holds it)
	}
	if err := r.Client.Delete(ctx, live, client.Preconditions{UID: ptr.To(live.GetUID())}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s %s: %w", r.kindOf(obj), obj.GetName(), err)
	}
	log.FromContext(ctx).Info("Deleted object", "kind", r.kindOf(obj), "name", obj.GetName())
	return nil
}

// sameData reports whether a Secret's data is what was built: the spec hash
// of a Secret does not cover its data (the token), and an edit of the
// config the managers mount must not stand.
func sameData(live, desired client.Object) bool {
	l, ok1 := live.(*corev1.Secret)
	d, ok2 := desired.(*corev1.Secret)
	if !ok1 || !ok2 {
		return true
	}
	return equality.Semantic.DeepEqual(l.Data, d.Data)
}

// InTheWay is an object a RunnerSet needs whose name is taken by one
// runnerfleet did not create for it. The controller never overwrites,
// adopts or deletes such an object; the step's condition names it.
type InTheWay struct {
	Kind, Namespace, Name string
	// Owner is who holds it, when runnerfleet can tell.
	Owner string
	// RunnerSet is the RunnerSet that needs the name.
	RunnerSet string
}

func (e *InTheWay) Error() string {
	what := e.Kind + " " + e.Name
	if e.Namespace != "" {
		what = e.Kind + " " + e.Namespace + "/" + e.Name
	}
	owner := "was not created by runnerfleet for RunnerSet " + e.RunnerSet
	if e.Owner != "" {
		owner += " (it belongs to " + e.Owner + ")"
	}
	return fmt.Sprintf("%s exists and %s: runnerfleet will not overwrite or delete it; delete or rename it, or give the RunnerSet another name", what, owner)
}

// inTheWay returns an *InTheWay when live is not owner's. byLabels says
// live is owned through its owner labels (cluster-scoped, or in the jobs
// namespace), not a controller reference.
func inTheWay(owner *v1alpha1.RunnerSet, live client.Object, kind string, byLabels bool) *InTheWay {
	itw := &InTheWay{Kind: kind, Namespace: live.GetNamespace(), Name: live.GetName(), RunnerSet: owner.Namespace + "/" + owner.Name}
	if byLabels {
		l := live.GetLabels()
		if l[capacity.LabelOwnerNamespace] == owner.Namespace && l[capacity.LabelOwnerName] == owner.Name {
			return nil
		}
		if l[capacity.LabelOwnerNamespace] != "" {
			itw.Owner = "RunnerSet " + l[capacity.LabelOwnerNamespace] + "/" + l[capacity.LabelOwnerName]
		}
		return itw
	}
	if metav1.IsControlledBy(live, owner) {
		return nil
	}
	if ref := metav1.GetControllerOf(live); ref != nil {
		itw.Owner = ref.Kind + " " + ref.Name
	}
	return itw
}

// sharedInTheWay returns an *InTheWay when live, an object the RunnerSets
// of a RunnerClass share, is not controlled by that class (ref, by UID).
func sharedInTheWay(owner *v1alpha1.RunnerSet, live client.Object, kind string, ref *metav1.OwnerReference) *InTheWay {
	have := metav1.GetControllerOf(live)
	if have != nil && have.UID == ref.UID {
		return nil
	}
	itw := &InTheWay{Kind: kind, Name: live.GetName(), RunnerSet: owner.Namespace + "/" + owner.Name}
	if have != nil {
		itw.Owner = have.Kind + " " + have.Name
	}
	return itw
}

// kindOf names obj's kind for messages.
func (r *writer) kindOf(obj client.Object) string {
	if gvk, err := apiutil.GVKForObject(obj, r.Client.Scheme()); err == nil {
		return gvk.Kind
	}
	return fmt.Sprintf("%T", obj)
}

// finalize drains the managers, waits until no manager or job pod is left
// (deleting job pods no manager is left to delete, after their grace), then
// lets the RunnerSet go; its owned objects follow by garbage collection.
func (r *Reconciler) finalize(ctx context.Context, rs *v1alpha1.RunnerSet) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(rs, Finalizer) {
		return reconcile.Result{}, nil
	}
	before := rs.DeepCopy()
	// Scale managers to zero: each one gets SIGQUIT and finishes its jobs.
	d := &appsv1.Deployment{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: naming.For(rs.Namespace, rs.Name).Managers()}, d)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("getting managers: %w", err)
	}
	if err == nil && (d.Spec.Replicas == nil || *d.Spec.Replicas != 0) {
		patch := client.MergeFrom(d.DeepCopy())
		zero := int32(0)
		d.Spec.Replicas = &zero
		if err := r.Client.Patch(ctx, d, patch); err != nil {
			return conflictIsRequeue(fmt.Errorf("scaling managers to zero: %w", err))
		}
		log.FromContext(ctx).Info("Draining managers before deletion")
	}
	left, err := r.podsLeft(ctx, rs)
	if err != nil {
		return reconcile.Result{}, err
	}
	if left.total() > 0 {
		// Job pods no manager is left to delete go after their grace
		// (orphans.go).
		return r.waitForPods(ctx, before, rs, left)
	}
	class := &v1alpha1.RunnerClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: rs.Spec.ClassName}, class); err != nil {
		class = nil // the runner's own Secret remembers its GitLab
	}
	err = r.Tokens.Release(ctx, rs, v1alpha1.Effective(rs, class).GitLabURL)
	if err != nil && r.cannotBeRestored(ctx, rs, err) {
		// The API token went with a namespace that is being deleted (a
		// RunnerSet from before the token was held by ReleaseFinalizer):
		// nothing can bring it back, so holding the RunnerSet would hold
		// the namespace forever. Say which runner is left, and go.
		r.Recorder.Eventf(rs, nil, corev1.EventTypeWarning, "RunnerLeftInGitLab", "Release",
			"runner %d could not be deleted from GitLab: %v; namespace %s is being deleted, so it cannot be restored: delete the runner in GitLab",
			rs.Status.RunnerID, err, rs.Namespace)
		log.FromContext(ctx).Info("Runner left in GitLab: its API token is gone with its namespace", "runnerID", rs.Status.RunnerID)
		err = nil
	}
	if err != nil {
		rs.SetCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting,
			fmt.Sprintf("managers drained; deleting the runner from GitLab failed, retrying: %v", err))
		r.recordTransitions(before, rs)
		_ = r.patchStatus(ctx, before, rs)
		return reconcile.Result{}, fmt.Errorf("releasing runner: %w", err)
	}
	// Capacity goes last: only now is no job left that could need it.
	gone, err := r.deleteCapacity(ctx, rs)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !gone {
		rs.SetCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting,
			"managers drained; waiting for the runner's capacity to be removed")
		if err := r.patchStatus(ctx, before, rs); err != nil {
			return conflictIsRequeue(err)
		}
		return reconcile.Result{RequeueAfter: drainPoll}, nil
	}
	if err := r.deleteJobsNamespace(ctx, rs); err != nil {
		return reconcile.Result{}, err
	}
	patch := client.MergeFromWithOptions(rs.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(rs, Finalizer)
	if err := r.Client.Patch(ctx, rs, patch); err != nil {
		return conflictIsRequeue(client.IgnoreNotFound(fmt.Errorf("removing finalizer: %w", err)))
	}
	log.FromContext(ctx).Info("Drained and released RunnerSet")
	return reconcile.Result{}, nil
}

// cannotBeRestored reports whether releasing failed for want of an API
// token that can no longer be restored: the namespace is terminating.
func (r *Reconciler) cannotBeRestored(ctx context.Context, rs *v1alpha1.RunnerSet, err error) bool {
	var te *v1alpha1.Failure
	if !errors.As(err, &te) || te.Reason != v1alpha1.ReasonAPITokenMissing {
		return false
	}
	ns := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: rs.Namespace}, ns); err != nil {
		return false
	}
	return !ns.DeletionTimestamp.IsZero()
}

// ownJobsNamespace returns rs's jobs namespace if it exists and
// runnerfleet created it for rs, nil otherwise.
func (r *Reconciler) ownJobsNamespace(ctx context.Context, rs *v1alpha1.RunnerSet) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	name := v1alpha1.Effective(rs, nil).JobsNamespace
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, ns)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting jobs namespace %s: %w", name, err)
	}
	if inTheWay(rs, ns, "Namespace", true) != nil {
		return nil, nil
	}
	return ns, nil
}

// deleteJobsNamespace deletes rs's jobs namespace, once no manager or job
// pod of rs is left, if it is rs's own: one runnerfleet created for it.
// The namespace controller removes what is left in it (the job
// ServiceAccount, the managers' Role).
func (r *Reconciler) deleteJobsNamespace(ctx context.Context, rs *v1alpha1.RunnerSet) error {
	ns, err := r.ownJobsNamespace(ctx, rs)
	if err != nil || ns == nil || !ns.DeletionTimestamp.IsZero() {
		return err // not there, not ours, or on its way
	}
	if err := r.Client.Delete(ctx, ns, client.Preconditions{UID: &ns.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting jobs namespace %s: %w", ns.Name, err)
	}
	log.FromContext(ctx).Info("Deleted the jobs namespace", "namespace", ns.Name)
	return nil
}

// CacheOptions keeps the informer caches to what runnerfleet manages: owned
// objects by their managed-by label, so the controller's memory does not grow
// with the rest of the cluster.
func CacheOptions(scheme *runtime.Scheme, mapper meta.RESTMapper) cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedBy})}
	byObject := map[client.Object]cache.ByObject{
		&appsv1.Deployment{}:            managed,
		&corev1.ConfigMap{}:             managed,
		&corev1.ServiceAccount{}:        managed,
		&corev1.Service{}:               managed,
		&rbacv1.Role{}:                  managed,
		&rbacv1.RoleBinding{}:           managed,
		&policyv1.PodDisruptionBudget{}: managed,
		&corev1.Namespace{}:             managed,
		&networkingv1.NetworkPolicy{}:   managed,
		&corev1.ResourceQuota{}:         managed,
	}
	// Manager pods, by metadata only, for the drain metrics: the selector
	// keeps every other pod of the cluster out of memory.
	managerPods := &metav1.PartialObjectMetadata{}
	managerPods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	byObject[managerPods] = cache.ByObject{Label: labels.SelectorFromSet(resources.ManagerPods())}
	// Capacity kinds are filtered too, but only those the cluster has: an
	// EKS cluster has no ComputeClass, a GKE cluster no EC2NodeClass.
	for _, obj := range []client.Object{&karpv1.NodePool{}, &awsv1.EC2NodeClass{}, &kwokv1alpha1.KWOKNodeClass{}} {
		gvk, err := apiutil.GVKForObject(obj, scheme)
		if err != nil {
			continue
		}
		if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
			byObject[obj] = managed
		}
	}
	return cache.Options{ByObject: byObject}
}

// SetupWithManager registers the controller and its field indexes.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1alpha1.RunnerSet{}, indexTokenSecret, func(o client.Object) []string {
		var names []string
		g := o.(*v1alpha1.RunnerSet).Spec.GitLab
		if g.TokenSecretRef != nil {
			names = append(names, g.TokenSecretRef.Name)
		}
		if g.Runner != nil {
			names = append(names, g.Runner.APITokenSecretRef.Name)
		}
		return names
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1alpha1.RunnerSet{}, indexClassName, func(o client.Object) []string {
		return []string{o.(*v1alpha1.RunnerSet).Spec.ClassName}
	}); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&v1alpha1.RunnerSet{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		// Token Secrets are watched by metadata only: the controller never
		// holds every Secret of the cluster in memory; it reads the one it
		// needs from the API server. The config Secret the managers mount
		// brings back its owner when someone edits or deletes it.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretOwners), builder.OnlyMetadata).
		// A class's spec brings back its RunnerSets; its status (written by
		// the RunnerClass controller as they change) must not, or every
		// RunnerSet's change would reconcile all of its class.
		Watches(&v1alpha1.RunnerClass{}, handler.EnqueueRequestsFromMapFunc(r.runnerSetsFor(indexClassName, false)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrentReconciles})
	// The jobs namespace and what lives in it cannot carry an
	// ownerReference to the RunnerSet: they are mapped back through their
	// owner labels.
	for _, obj := range []client.Object{&corev1.Namespace{}, &networkingv1.NetworkPolicy{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.ResourceQuota{}} {
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(ownerOfCapacity))
	}
	// Cluster-scoped capacity cannot carry an ownerReference to a namespaced
	// RunnerSet: it is mapped back through its owner labels, for the kinds
	// this cluster has.
	for _, gvk := range capacityKinds {
		if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			continue
		}
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		// A class's node class, shared by its RunnerSets, brings them back
		// only when its spec changes or it goes: Karpenter writes its
		// status often, and a class may have a thousand RunnerSets.
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(r.capacityOwners), builder.OnlyMetadata,
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.NewPredicateFuncs(ownedByARunnerSet))))
	}
	if err := b.Complete(r); err != nil {
		return err
	}
	// The RunnerClass controller counts a class's RunnerSets through the
	// className index registered above.
	return (&ClassReconciler{Client: r.Client}).setupWithManager(mgr)
}

// ownerOfCapacity maps a capacity object, or an object of a jobs
// namespace, to the RunnerSet its labels name.
func ownerOfCapacity(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	ns, name := l[capacity.LabelOwnerNamespace], l[capacity.LabelOwnerName]
	if ns == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// ownedByARunnerSet reports whether o carries the owner labels of a
// RunnerSet.
func ownedByARunnerSet(o client.Object) bool {
	l := o.GetLabels()
	return l[capacity.LabelOwnerNamespace] != "" && l[capacity.LabelOwnerName] != ""
}

// capacityOwners maps a capacity object to the RunnerSet its labels name,
// or, for a node class its RunnerClass controls, to every RunnerSet of
// that class.
func (r *Reconciler) capacityOwners(ctx context.Context, o client.Object) []reconcile.Request {
	if reqs := ownerOfCapacity(ctx, o); reqs != nil {
		return reqs
	}
	if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "RunnerClass" && ref.APIVersion == v1alpha1.GroupVersion.String() {
		return r.runnerSetsFor(indexClassName, false)(ctx, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: ref.Name}})
	}
	return nil
}

// secretOwners maps a Secret to the RunnerSets that name it and to the
// RunnerSet that owns it.
func (r *Reconciler) secretOwners(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := r.runnerSetsFor(indexTokenSecret, true)(ctx, o)
	if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "RunnerSet" && ref.APIVersion == v1alpha1.GroupVersion.String() {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}})
	}
	return reqs
}

// runnerSetsFor maps an object to the RunnerSets whose index field names it.
func (r *Reconciler) runnerSetsFor(index string, sameNamespace bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &v1alpha1.RunnerSetList{}
		opts := []client.ListOption{client.MatchingFields{index: o.GetName()}}
		if sameNamespace {
			opts = append(opts, client.InNamespace(o.GetNamespace()))
		}
		if err := r.Client.List(ctx, list, opts...); err != nil {
			log.FromContext(ctx).Error(err, "Listing RunnerSets to enqueue", "index", index)
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, rs := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&rs)})
		}
		return reqs
	}
}
