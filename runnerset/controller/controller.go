// Package controller reconciles RunnerSets into a running GitLab runner: job
// and manager identities, config.toml, and manager pods that drain instead of
// dying mid-job.
//
// The parent Reconciler runs one sub-reconciler per condition, in order, and
// patches status once at the end. A sub-reconciler that cannot go on (a
// missing RunnerClass, a missing token) sets its condition False with a reason
// the team can act on and stops the pass; nothing already running is torn down.
//
// The files, by concern: controllers.go every controller of the manager
// (NewControllers) and Register; controller.go the Reconciler and how New
// wires its steps; pass.go the pass (Reconcile, blocked conditions, the
// status patch, Events); one file per step, named for its condition
// (class.go, jobsnamespace.go, token.go (the token's life is
// runnerset/controller/token), capacity.go, identity.go, config.go,
// managers.go); gitlabview.go GitLab's view of the runner (RunnerOnline,
// TagsMatch, stale manager records), read on a slow schedule and rolled up
// into nothing; writes.go the writer the steps share and InTheWay;
// finalize.go deletion (with orphans.go, the job pods no manager is left to
// delete); setup.go the cache's filters, field indexes and watches;
// runnerclass.go the RunnerClass controller.
package controller

import (
	"fmt"
	"time"

	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller/token"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Name is the controller's name in logs, metrics and events.
const Name = "runnerset"

// Finalizer holds a RunnerSet until its managers have drained. A pass
// adds it when the RunnerSet lacks it; where the API server serves
// MutatingAdmissionPolicy, the install's FinalizerPolicy has added it at
// creation already, and the pass writes nothing for it.
const Finalizer = naming.FinalizerDrain

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
	// view reads GitLab's view of the runner on its own schedule
	// (gitlabview.go); nil when Tokens is not token.Tokens.
	view *gitlabView
	// firstStatus remembers the RunnerSets whose first status this
	// controller wrote in the last seconds.
	firstStatus createdObjects
	// jobRetry tunes the retries of interrupted jobs (WithJobRetry); the
	// watch of job pods (NewControllers) runs them.
	jobRetry JobRetryOptions
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
		if t, ok := r.Tokens.(token.Tokens); ok {
			t.GitLab.Now = now
		}
	}
}

// Option changes a Reconciler built by New.
type Option func(*Reconciler)

// WithGitLab makes the Reconciler reach GitLab through newClient, for example
// a client of a test server.
func WithGitLab(newClient func(url, pat string) (gitlab.Client, error)) Option {
	return func(r *Reconciler) { r.Tokens.(token.Tokens).GitLab.NewGitLab = newClient }
}

// New returns a Reconciler that takes each RunnerSet's token from the Secret
// it names, or creates its runner in GitLab.
func New(c client.Client, apiReader client.Reader, rec events.EventRecorder, opts ...Option) *Reconciler {
	r := &Reconciler{Client: c, APIReader: apiReader, Recorder: rec, Tokens: token.New(c, apiReader, rec)}
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
	if t, ok := r.Tokens.(token.Tokens); ok {
		r.view = newGitLabView(t, apiReader, rec, r.now)
	}
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
