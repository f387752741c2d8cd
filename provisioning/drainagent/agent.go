// Package drainagent is the drain agent that runs beside gitlab-runner on
// each manager VM. When fleet asks the VM to drain (instance metadata or tags,
// watched through providers.Self), the agent asks the runner to stop
// gracefully, reports how many jobs it still runs, and reports done once the
// runner process is gone, so that fleet rotate can delete the VM without
// losing a job.
//
// How long a drain may take is fleet's business, not the agent's: the agent
// waits for the runner as long as it lives.
package drainagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
)

// ErrRunnerNotRunning is returned (wrapped) by RunnerControl.StopGracefully
// when there is no runner to stop: it never ran, or it has already exited.
var ErrRunnerNotRunning = errors.New("runner is not running")

// RunnerControl is the agent's handle on the gitlab-runner process or service.
type RunnerControl interface {
	// StopGracefully asks the runner to stop taking jobs, finish the ones it
	// runs and exit (Unix: SIGQUIT; Windows: a service stop). Asking again
	// while the runner drains must be harmless, since a restarted agent asks
	// again. It returns an error wrapping ErrRunnerNotRunning when there is
	// no runner to stop.
	StopGracefully() error
	// Exited reports whether the runner that StopGracefully asked to stop is
	// gone. Before StopGracefully found a runner it reports true.
	Exited() bool
}

// ExitDescriber is implemented by a RunnerControl that can tell how the
// runner ended (the Windows service's exit code). The agent calls it once
// Exited reported true.
type ExitDescriber interface {
	// ExitDescription reports whether the runner ended abnormally, and how.
	ExitDescription() (abnormal bool, detail string)
}

// JobCounter counts the jobs the runner still runs.
type JobCounter interface {
	Jobs(ctx context.Context) (int, error)
}

// Clock is the agent's time source; nil is the wall clock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Defaults of Agent's durations.
const (
	DefaultInterval      = 10 * time.Second
	DefaultPoll          = 500 * time.Millisecond
	DefaultReportTimeout = 30 * time.Second
)

// JobsUnknown is the JobsLeft the agent reports while the runner's metrics
// endpoint has never answered.
const JobsUnknown = -1

// Agent drains the runner of the VM it runs on when the VM is asked to drain.
type Agent struct {
	Self   providers.Self
	Runner RunnerControl
	Jobs   JobCounter
	// Interval is how often the agent reports draining while nothing
	// changes (default DefaultInterval).
	Interval time.Duration
	// Poll is how often the agent looks at the runner process and its job
	// count; a change is reported at once (default the smaller of
	// DefaultPoll and Interval).
	Poll time.Duration
	// ReportTimeout bounds one Self.Report call (default DefaultReportTimeout).
	ReportTimeout time.Duration
	Log           *slog.Logger // default slog.Default()
	Clock         Clock        // default the wall clock
}

// Run waits for the drain request, asks the runner to stop gracefully,
// reports draining with the jobs left every Interval and whenever the count
// changes, and, once the runner process is gone, reports done and returns nil.
//
// A runner that is already stopping or gone when the request is seen (the
// agent restarted mid-drain) converges to done the same way. Failed reports
// are retried; done is retried until it is published or ctx ends. Run returns
// ctx's error when ctx ends first; the runner is signalled only after a drain
// request.
func (a *Agent) Run(ctx context.Context) error {
	if a.Self == nil || a.Runner == nil || a.Jobs == nil {
		return errors.New("drainagent: Agent needs Self, Runner and Jobs")
	}
	r := a.newRun()
	if err := r.waitRequest(ctx); err != nil {
		return err
	}
	r.log.Info("drain requested")
	// Count first: once signalled, a runner may be gone before it is counted.
	r.count(ctx)
	if err := r.stopRunner(ctx); err != nil {
		return err
	}
	if !r.gone {
		if err := r.watch(ctx); err != nil {
			return err
		}
	}
	return r.reportDone(ctx)
}

// run is the state of one Agent.Run.
type run struct {
	*Agent
	log      *slog.Logger
	clock    Clock
	interval time.Duration
	poll     time.Duration
	rtimeout time.Duration

	// gone: the runner was not running when asked to stop.
	gone bool

	jobs        int       // last count, JobsUnknown before the first
	countedAt   time.Time // when jobs was read
	failedOnce  bool      // the last read of the metrics endpoint failed
	unreachable bool      // it failed twice in a row since the last count

	reported     bool // a draining report was published
	reportedJobs int
	reportedAt   time.Time
	nextTry      time.Time     // after a failed report, not before
	backoff      time.Duration // of the failed reports
}

func (a *Agent) newRun() *run {
	r := &run{Agent: a, log: a.Log, clock: a.Clock, interval: a.Interval, poll: a.Poll, rtimeout: a.ReportTimeout, jobs: JobsUnknown}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.clock == nil {
		r.clock = wallClock{}
	}
	if r.interval <= 0 {
		r.interval = DefaultInterval
	}
	if r.poll <= 0 {
		r.poll = min(DefaultPoll, r.interval)
	}
	if r.rtimeout <= 0 {
		r.rtimeout = DefaultReportTimeout
	}
	return r
}

// sleep waits d or until ctx ends.
func (r *run) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.clock.After(d):
		return nil
	}
}

// waitRequest waits for the drain request, retrying the watch on errors.
func (r *run) waitRequest(ctx context.Context) error {
	backoff := r.poll
	for {
		err := r.Self.WaitDrainRequest(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.log.Warn("watching for a drain request failed; retrying", "err", err, "retry_in", backoff.String())
		if err := r.sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, r.interval)
	}
}

// stopRunner asks the runner to stop until it has been asked, or is gone.
func (r *run) stopRunner(ctx context.Context) error {
	backoff := r.poll
	for {
		err := r.Runner.StopGracefully()
		switch {
		case err == nil:
			r.log.Info("asked the runner to stop gracefully", "jobs", r.jobs)
			return nil
		case errors.Is(err, ErrRunnerNotRunning):
			r.log.Warn("no runner to stop: it has already exited or never ran", "reason", err.Error())
			r.gone = true
			return nil
		}
		// A runner that exits meanwhile makes the next attempt say so.
		r.log.Error("asking the runner to stop failed; retrying", "err", err, "retry_in", backoff.String())
		if err := r.sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, r.interval)
	}
}

// count reads the job count into r.jobs; on failure the last count stays,
// and the failure is logged once until the endpoint answers again.
func (r *run) count(ctx context.Context) {
	n, err := r.Jobs.Jobs(ctx)
	if err != nil {
		if ctx.Err() != nil || r.gone || r.Runner.Exited() {
			return // a runner that exited takes its endpoint with it
		}
		// An exiting runner closes its endpoint a moment before its
		// process is gone from /proc: one failure is confirmed by the next
		// poll before the count is called stale (a run of the tests once
		// logged a normal exit as unknown this way).
		if !r.failedOnce {
			r.failedOnce = true
			return
		}
		if !r.unreachable {
			r.unreachable = true
			r.log.Warn("runner metrics endpoint unreachable while the runner is alive; keeping the last job count",
				"err", err, "jobs", r.jobs)
		}
		return
	}
	r.failedOnce = false
	if r.unreachable {
		r.unreachable = false
		r.log.Info("runner metrics endpoint answers again", "jobs", n)
	}
	if n != r.jobs {
		r.log.Info("jobs left", "jobs", n)
	}
	r.jobs, r.countedAt = n, r.clock.Now()
}

// watch reports draining until the runner has exited.
func (r *run) watch(ctx context.Context) error {
	for {
		if r.Runner.Exited() {
			return nil
		}
		r.count(ctx)
		now := r.clock.Now()
		due := !r.reported || r.jobs != r.reportedJobs || now.Sub(r.reportedAt) >= r.interval
		if due && !now.Before(r.nextTry) {
			r.report(ctx, providers.DrainDraining, r.jobs)
		}
		if err := r.sleep(ctx, r.poll); err != nil {
			return err
		}
	}
}

// report publishes one state; a failure is logged and backs off the next
// attempt.
func (r *run) report(ctx context.Context, phase providers.DrainPhase, jobs int) bool {
	now := r.clock.Now()
	rctx, cancel := context.WithTimeout(ctx, r.rtimeout)
	err := r.Self.Report(rctx, providers.DrainState{Phase: phase, JobsLeft: jobs, UpdatedAt: now.UTC()})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			r.backoff = min(max(2*r.backoff, r.poll), r.interval)
			r.nextTry = r.clock.Now().Add(r.backoff)
			r.log.Warn("reporting the drain state failed; retrying", "phase", string(phase), "jobs", jobs,
				"err", err, "retry_in", r.backoff.String())
		}
		return false
	}
	r.backoff, r.nextTry = 0, time.Time{}
	r.reported, r.reportedJobs, r.reportedAt = true, jobs, now
	return true
}

// reportDone logs how the runner ended and reports done until it is
// published or ctx ends.
func (r *run) reportDone(ctx context.Context) error {
	abnormal, detail := false, ""
	if d, ok := r.Runner.(ExitDescriber); ok && !r.gone {
		abnormal, detail = d.ExitDescription()
	}
	log := r.log
	if detail != "" {
		log = log.With("detail", detail)
	}
	switch {
	case r.gone:
		log.Info("runner not running: nothing to drain")
	case abnormal:
		log.Error("runner died abnormally", "jobs_at_last_count", r.jobs)
	case r.unreachable:
		log.Warn("runner exited while its metrics endpoint was unreachable: whether its jobs finished is unknown",
			"jobs_at_last_count", r.jobs, "last_count_age", r.clock.Now().Sub(r.countedAt).String())
	case r.jobs > 0:
		// gitlab-runner counts its jobs down to 0 before it exits after a
		// graceful stop: a runner that vanished with jobs still counted
		// crashed or was killed, and those jobs are lost. The count is
		// read every Poll: a runner that finished its last job and exited
		// within one Poll is taken for a crash too; a short Poll makes
		// that rare.
		log.Error("runner died abnormally: it exited while jobs were still running",
			"jobs_at_last_count", r.jobs, "last_count_age", r.clock.Now().Sub(r.countedAt).String())
	case r.jobs == JobsUnknown:
		log.Info("runner exited; its job count was never read")
	default:
		log.Info("runner exited after finishing its jobs")
	}
	for {
		if r.report(ctx, providers.DrainDone, 0) {
			r.log.Info("drain done")
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("reporting done: %w", ctx.Err())
		}
		if err := r.sleep(ctx, r.backoff); err != nil {
			return fmt.Errorf("reporting done: %w", err)
		}
	}
}
