//go:build linux

package drainagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
)

// fakeSelf is a providers.Self made of funcs.
type fakeSelf struct {
	WaitDrainRequestFunc func(ctx context.Context) error
	ReportFunc           func(ctx context.Context, s providers.DrainState) error
}

func (f *fakeSelf) WaitDrainRequest(ctx context.Context) error { return f.WaitDrainRequestFunc(ctx) }
func (f *fakeSelf) Report(ctx context.Context, s providers.DrainState) error {
	return f.ReportFunc(ctx, s)
}

func (f *fakeSelf) ReportJobs(context.Context, providers.JobReport) error {
	return errors.New("the drain agent reports no job counts")
}

// handshake is the instance's side of the drain: a request channel (closed
// to request, and requested it stays, like the metadata key) and the
// reports the agent published.
type handshake struct {
	request chan struct{}
	mu      sync.Mutex
	reports []providers.DrainState
	// check, if set, runs on each report before it is recorded; an error
	// fails the report.
	check func(providers.DrainState) error
	// violations are what the check found wrong at report time.
	violations []string
}

func newHandshake() *handshake { return &handshake{request: make(chan struct{})} }

func (h *handshake) self() *fakeSelf {
	return &fakeSelf{
		WaitDrainRequestFunc: func(ctx context.Context) error {
			select {
			case <-h.request:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		ReportFunc: func(ctx context.Context, s providers.DrainState) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.check != nil {
				if err := h.check(s); err != nil {
					return err
				}
			}
			h.reports = append(h.reports, s)
			return nil
		},
	}
}

func (h *handshake) requestDrain() { close(h.request) }

func (h *handshake) snapshot() []providers.DrainState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.reports)
}

func (h *handshake) violate(format string, args ...any) {
	h.violations = append(h.violations, fmt.Sprintf(format, args...))
}

// waitReport waits for a report that satisfies ok.
func (h *handshake) waitReport(t *testing.T, timeout time.Duration, what string, ok func(providers.DrainState) bool) providers.DrainState {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, r := range h.snapshot() {
			if ok(r) {
				return r
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no report %s after %s; reports: %v", what, timeout, h.snapshot())
	return providers.DrainState{}
}

// logBuffer collects the agent's JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// count counts the lines that contain s.
func (l *logBuffer) count(s string) int {
	n := 0
	for line := range strings.Lines(l.String()) {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func newLog(t *testing.T) (*slog.Logger, *logBuffer) {
	lb := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", lb.String())
		}
	})
	return slog.New(slog.NewJSONHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

// newAgent is an agent for the stand-in, found through its pid file.
func newAgent(t *testing.T, s *standIn, h *handshake, log *slog.Logger) *Agent {
	return &Agent{
		Self:     h.self(),
		Runner:   &ProcessRunner{PIDFile: s.pidFile, Log: log},
		Jobs:     &MetricsJobCounter{URL: s.metricsURL()},
		Interval: 200 * time.Millisecond,
		Poll:     20 * time.Millisecond,
		Log:      log,
	}
}

// runAgent runs a in the background; the result arrives on the channel.
func runAgent(ctx context.Context, a *Agent) <-chan error {
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return done
}

func waitRun(t *testing.T, done <-chan error, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("Run still running after %s", timeout)
		return nil
	}
}

// checkDoneAfterExit makes h fail the test when done is reported while the
// stand-in still runs or a job has not finished.
func checkDoneAfterExit(h *handshake, s *standIn, wantFinished int) {
	h.check = func(r providers.DrainState) error {
		if r.Phase != providers.DrainDone {
			return nil
		}
		if !s.gone() {
			h.violate("done reported while the runner process still runs")
		}
		if _, finished := s.jobsStartedAndFinished(); len(finished) < wantFinished {
			h.violate("done reported with %d of %d jobs finished", len(finished), wantFinished)
		}
		return nil
	}
}

// checkReports checks the common shape: draining reports with a
// non-increasing job count, then exactly one done with 0 jobs, last.
func checkReports(t *testing.T, reports []providers.DrainState) (draining []int) {
	t.Helper()
	if len(reports) == 0 {
		t.Fatal("no reports")
	}
	for i, r := range reports {
		if r.UpdatedAt.IsZero() {
			t.Errorf("report %d has no UpdatedAt", i)
		}
		if i == len(reports)-1 {
			if r.Phase != providers.DrainDone || r.JobsLeft != 0 {
				t.Errorf("last report %+v, want done with 0 jobs", r)
			}
			break
		}
		if r.Phase != providers.DrainDraining {
			t.Errorf("report %d is %+v, want draining", i, r)
		}
		if len(draining) > 0 && r.JobsLeft > draining[len(draining)-1] {
			t.Errorf("jobs left went up: %v then %d", draining, r.JobsLeft)
		}
		draining = append(draining, r.JobsLeft)
	}
	return draining
}

// distinct drops repeats: 3 3 2 1 1 → 3 2 1.
func distinct(xs []int) []int { return slices.Compact(slices.Clone(xs)) }

func TestDrainWaitsForEveryJob(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := startStandIn(t, standInOpts{jobs: "500ms,1s,1.5s"})
	h := newHandshake()
	checkDoneAfterExit(h, s, 3)
	log, logs := newLog(t)
	done := runAgent(t.Context(), newAgent(t, s, h, log))
	h.requestDrain()

	if err := waitRun(t, done, 20*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("drained in %s", time.Since(start).Round(time.Millisecond))
	if code := s.waitExit(5 * time.Second); code != 0 {
		t.Errorf("stand-in exit code %d, want 0 (graceful)", code)
	}
	if q := s.quits(); q != 1 {
		t.Errorf("stand-in got %d SIGQUITs, want 1", q)
	}
	started, finished := s.jobsStartedAndFinished()
	slices.Sort(started)
	slices.Sort(finished)
	if !slices.Equal(started, []int{1, 2, 3}) || !slices.Equal(finished, started) {
		t.Errorf("jobs started %v, finished %v; want 1 2 3 both (none killed)", started, finished)
	}
	if len(h.violations) > 0 {
		t.Errorf("at the done report: %v", h.violations)
	}
	draining := checkReports(t, h.snapshot())
	t.Logf("draining reports: %v, then done", draining)
	if got := distinct(draining); !slices.Equal(got, []int{3, 2, 1}) && !slices.Equal(got, []int{3, 2, 1, 0}) {
		t.Errorf("draining reports counted %v, want 3 2 1 (then maybe 0)", got)
	}
	if logs.count("runner exited after finishing its jobs") != 1 || logs.count("abnormal") != 0 {
		t.Errorf("want one normal exit line and no abnormal one")
	}
}

func TestAgentRestartedMidDrain(t *testing.T) {
	t.Parallel()
	t.Run("runner still draining", func(t *testing.T) {
		t.Parallel()
		s := startStandIn(t, standInOpts{jobs: "300ms,1.5s"})
		h := newHandshake()
		checkDoneAfterExit(h, s, 2)
		log, _ := newLog(t)

		ctx, cancel := context.WithCancel(t.Context())
		first := runAgent(ctx, newAgent(t, s, h, log))
		h.requestDrain()
		h.waitReport(t, 10*time.Second, "draining with 1 job", func(r providers.DrainState) bool { return r.JobsLeft == 1 })
		cancel()
		if err := waitRun(t, first, 5*time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("first agent: %v, want context.Canceled", err)
		}
		if s.gone() {
			t.Fatal("the runner exited before the agent restarted; the test needs it draining")
		}

		// A new agent, as after a restart: the request is still there.
		log2, logs2 := newLog(t)
		second := runAgent(t.Context(), newAgent(t, s, h, log2))
		if err := waitRun(t, second, 10*time.Second); err != nil {
			t.Fatalf("second agent: %v", err)
		}
		if code := s.waitExit(5 * time.Second); code != 0 {
			t.Errorf("stand-in exit code %d, want 0", code)
		}
		if q := s.quits(); q != 2 {
			t.Errorf("stand-in got %d SIGQUITs, want 2 (one per agent)", q)
		}
		if len(h.violations) > 0 {
			t.Errorf("at the done report: %v", h.violations)
		}
		checkReports(t, h.snapshot())
		if logs2.count("runner exited after finishing its jobs") != 1 {
			t.Error("second agent: no normal exit line")
		}
	})
	t.Run("runner already exited", func(t *testing.T) {
		t.Parallel()
		s := startStandIn(t, standInOpts{jobs: "300ms"})
		h := newHandshake()
		log, _ := newLog(t)

		ctx, cancel := context.WithCancel(t.Context())
		first := runAgent(ctx, newAgent(t, s, h, log))
		h.requestDrain()
		h.waitReport(t, 10*time.Second, "draining", func(r providers.DrainState) bool { return r.Phase == providers.DrainDraining })
		cancel()
		if err := waitRun(t, first, 5*time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("first agent: %v, want context.Canceled", err)
		}
		if code := s.waitExit(10 * time.Second); code != 0 {
			t.Errorf("stand-in exit code %d, want 0", code)
		}
		before := len(h.snapshot())

		log2, logs2 := newLog(t)
		second := runAgent(t.Context(), newAgent(t, s, h, log2))
		if err := waitRun(t, second, 10*time.Second); err != nil {
			t.Fatalf("second agent: %v", err)
		}
		after := h.snapshot()[before:]
		if len(after) != 1 || after[0].Phase != providers.DrainDone || after[0].JobsLeft != 0 {
			t.Errorf("second agent reported %v, want done with 0 jobs", after)
		}
		if logs2.count("nothing to drain") != 1 {
			t.Error("second agent: no line saying there was nothing to drain")
		}
	})
}

func TestRunnerCrashMidDrain(t *testing.T) {
	t.Parallel()
	s := startStandIn(t, standInOpts{jobs: "300ms,5s"})
	h := newHandshake()
	log, logs := newLog(t)
	done := runAgent(t.Context(), newAgent(t, s, h, log))
	h.requestDrain()
	h.waitReport(t, 10*time.Second, "draining with 1 job", func(r providers.DrainState) bool { return r.JobsLeft == 1 })
	s.signal(syscall.SIGKILL)

	if err := waitRun(t, done, 10*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if code := s.waitExit(5 * time.Second); code != -1 {
		t.Errorf("stand-in exit code %d, want -1 (killed)", code)
	}
	checkReports(t, h.snapshot())
	if logs.count("runner died abnormally") != 1 {
		t.Error("no log line saying the runner died abnormally")
	}
	if _, finished := s.jobsStartedAndFinished(); len(finished) != 1 {
		t.Errorf("finished jobs %v, want only the first (the crash took the other)", finished)
	}
}

func TestMetricsDownKeepsLastCount(t *testing.T) {
	t.Parallel()
	s := startStandIn(t, standInOpts{jobs: "300ms,2.5s,3s"})
	h := newHandshake()
	checkDoneAfterExit(h, s, 3)
	log, logs := newLog(t)
	done := runAgent(t.Context(), newAgent(t, s, h, log))
	h.requestDrain()
	h.waitReport(t, 10*time.Second, "draining with 2 jobs", func(r providers.DrainState) bool { return r.JobsLeft == 2 })
	s.signal(syscall.SIGUSR1) // the metrics endpoint goes down
	down := len(h.snapshot())

	if err := waitRun(t, done, 20*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if code := s.waitExit(5 * time.Second); code != 0 {
		t.Errorf("stand-in exit code %d, want 0", code)
	}
	if len(h.violations) > 0 {
		t.Errorf("at the done report: %v", h.violations)
	}
	reports := h.snapshot()
	checkReports(t, reports)
	// Reported every Interval (200ms) for ~2.5s with the endpoint down.
	kept := reports[down : len(reports)-1]
	if len(kept) < 4 {
		t.Errorf("%d draining reports while the endpoint was down, want several", len(kept))
	}
	for _, r := range kept {
		if r.JobsLeft != 2 {
			t.Errorf("report while the endpoint was down: %+v, want the last count, 2", r)
		}
	}
	if n := logs.count("metrics endpoint unreachable"); n != 1 {
		t.Errorf("%d lines about the unreachable endpoint, want 1", n)
	}
	if logs.count("whether its jobs finished is unknown") != 1 || logs.count("died abnormally") != 0 {
		t.Error("want the exit logged as unknown, not abnormal")
	}
}

func TestCancelBeforeRequest(t *testing.T) {
	t.Parallel()
	s := startStandIn(t, standInOpts{jobs: "10s"})
	h := newHandshake()
	log, _ := newLog(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := newAgent(t, s, h, log).Run(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want the context's error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Run took %s to return after its context ended", d)
	}
	time.Sleep(50 * time.Millisecond)
	if s.quits() != 0 || s.gone() {
		t.Error("the runner was signalled without a drain request")
	}
	if r := h.snapshot(); len(r) != 0 {
		t.Errorf("reports without a drain request: %v", r)
	}
}

func TestReportFailuresAreRetried(t *testing.T) {
	t.Parallel()
	s := startStandIn(t, standInOpts{jobs: "400ms"})
	h := newHandshake()
	var attempts, doneAttempts int
	h.check = func(r providers.DrainState) error {
		attempts++
		if r.Phase == providers.DrainDone {
			doneAttempts++
			if doneAttempts <= 3 {
				return errors.New("metadata server: 503")
			}
			return nil
		}
		if attempts <= 2 {
			return errors.New("metadata server: 503")
		}
		return nil
	}
	log, logs := newLog(t)
	a := newAgent(t, s, h, log)
	done := runAgent(t.Context(), a)
	h.requestDrain()
	if err := waitRun(t, done, 20*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	reports := h.snapshot()
	checkReports(t, reports)
	if doneAttempts != 4 {
		t.Errorf("done attempted %d times, want 4 (3 failures, then published)", doneAttempts)
	}
	if reports[0].Phase != providers.DrainDraining || reports[0].JobsLeft != 1 {
		t.Errorf("first published report %+v, want draining with 1 job (after 2 failures)", reports[0])
	}
	if n := logs.count("reporting the drain state failed"); n != 5 {
		t.Errorf("%d report failure lines, want 5", n)
	}
}

func TestPIDFileNamingAnotherProcessIsRefused(t *testing.T) {
	t.Parallel()
	s := startStandIn(t, standInOpts{jobs: "10s"})
	_, start, err := (&ProcessRunner{}).stat(s.pid())
	if err != nil {
		t.Fatal(err)
	}
	write := func(t *testing.T, content string) string {
		name := t.TempDir() + "/runner.pid"
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return name
	}
	t.Run("start time differs", func(t *testing.T) {
		r := &ProcessRunner{PIDFile: write(t, fmt.Sprintf("%d %d\n", s.pid(), start+1))}
		err := r.StopGracefully()
		if !errors.Is(err, ErrPIDReused) || !errors.Is(err, ErrRunnerNotRunning) {
			t.Fatalf("StopGracefully: %v, want ErrPIDReused and ErrRunnerNotRunning", err)
		}
		if !r.Exited() {
			t.Error("Exited() = false with no runner found")
		}
	})
	t.Run("process younger than its pid file", func(t *testing.T) {
		name := write(t, fmt.Sprintf("%d\n", s.pid()))
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(name, old, old); err != nil {
			t.Fatal(err)
		}
		err := (&ProcessRunner{PIDFile: name}).StopGracefully()
		if !errors.Is(err, ErrPIDReused) {
			t.Fatalf("StopGracefully: %v, want ErrPIDReused", err)
		}
	})
	t.Run("the agent does not signal it", func(t *testing.T) {
		h := newHandshake()
		log, logs := newLog(t)
		a := newAgent(t, s, h, log)
		a.Runner = &ProcessRunner{PIDFile: write(t, fmt.Sprintf("%d %d\n", s.pid(), start+7)), Log: log}
		done := runAgent(t.Context(), a)
		h.requestDrain()
		if err := waitRun(t, done, 10*time.Second); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if r := h.snapshot(); len(r) != 1 || r[0].Phase != providers.DrainDone {
			t.Errorf("reports %v, want done (nothing to drain)", r)
		}
		if logs.count("pid has been reused") != 1 {
			t.Error("the refusal is not logged")
		}
	})
	if s.quits() != 0 || s.gone() {
		t.Fatal("the process was signalled")
	}
	t.Run("start time matches", func(t *testing.T) {
		r := &ProcessRunner{PIDFile: write(t, fmt.Sprintf("%d %d\n", s.pid(), start))}
		if err := r.StopGracefully(); err != nil {
			t.Fatalf("StopGracefully: %v", err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for s.quits() != 1 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if s.quits() != 1 {
			t.Error("the process did not get SIGQUIT")
		}
	})
}

// describedRunner is a ProcessRunner that, like the Windows service, can
// tell how the runner ended.
type describedRunner struct{ *ProcessRunner }

func (describedRunner) ExitDescription() (bool, string) { return true, "exit code 3" }

func TestExitDescriptionMarksAbnormal(t *testing.T) {
	t.Parallel()
	s := startStandIn(t, standInOpts{jobs: "100ms"})
	h := newHandshake()
	log, logs := newLog(t)
	a := newAgent(t, s, h, log)
	a.Runner = describedRunner{&ProcessRunner{PIDFile: s.pidFile}}
	done := runAgent(t.Context(), a)
	h.requestDrain()
	if err := waitRun(t, done, 10*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkReports(t, h.snapshot())
	if logs.count(`"msg":"runner died abnormally","detail":"exit code 3"`) != 1 {
		t.Error("the runner's own account of its exit is not logged")
	}
}

// flakyRunner is a ProcessRunner whose first stops fail, as when the
// service manager or /proc does not answer.
type flakyRunner struct {
	*ProcessRunner
	fails int
}

func (f *flakyRunner) StopGracefully() error {
	if f.fails > 0 {
		f.fails--
		return errors.New("transient")
	}
	return f.ProcessRunner.StopGracefully()
}

func TestStopFailuresAreRetried(t *testing.T) {
	t.Parallel()
	s := startStandIn(t, standInOpts{jobs: "300ms"})
	h := newHandshake()
	checkDoneAfterExit(h, s, 1)
	log, logs := newLog(t)
	a := newAgent(t, s, h, log)
	a.Runner = &flakyRunner{ProcessRunner: &ProcessRunner{PIDFile: s.pidFile}, fails: 2}
	done := runAgent(t.Context(), a)
	h.requestDrain()
	if err := waitRun(t, done, 10*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := logs.count("asking the runner to stop failed"); n != 2 {
		t.Errorf("%d failed stops logged, want 2", n)
	}
	if s.quits() != 1 {
		t.Errorf("stand-in got %d SIGQUITs, want 1", s.quits())
	}
	if len(h.violations) > 0 {
		t.Errorf("at the done report: %v", h.violations)
	}
	if d := distinct(checkReports(t, h.snapshot())); len(d) == 0 || d[0] != 1 {
		t.Errorf("draining reports %v, want them to start at 1", d)
	}
}

// exitingRunner is a runner whose metrics endpoint closes one poll before
// /proc shows it gone, as an exiting gitlab-runner's does: Exited is false
// for the first look after the endpoint failed, true from the next.
type exitingRunner struct {
	mu     sync.Mutex
	closed bool // the endpoint has failed
	looks  int  // Exited calls since
}

func (r *exitingRunner) StopGracefully() error { return nil }
func (r *exitingRunner) Exited() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		return false
	}
	r.looks++
	return r.looks > 1
}

// exitingJobs counts 1 job, then 0, then fails: the runner finished its
// job and is exiting.
type exitingJobs struct {
	r     *exitingRunner
	calls int
}

func (j *exitingJobs) Jobs(context.Context) (int, error) {
	j.calls++
	switch j.calls {
	case 1:
		return 1, nil
	case 2:
		return 0, nil
	}
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	j.r.closed = true
	return 0, errors.New("connection reset by peer")
}

// One failed read while the runner exits is not an unreachable endpoint:
// the runner that counted down to 0 finished its jobs.
func TestEndpointClosingAsTheRunnerExitsIsANormalExit(t *testing.T) {
	t.Parallel()
	h := newHandshake()
	log, logs := newLog(t)
	r := &exitingRunner{}
	a := &Agent{Self: h.self(), Runner: r, Jobs: &exitingJobs{r: r}, Interval: 200 * time.Millisecond, Poll: time.Millisecond, Log: log}
	done := runAgent(t.Context(), a)
	h.requestDrain()
	if err := waitRun(t, done, 10*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkReports(t, h.snapshot())
	if logs.count("unreachable") != 0 || logs.count("runner exited after finishing its jobs") != 1 {
		t.Errorf("want one normal exit line and none about an unreachable endpoint")
	}
}
