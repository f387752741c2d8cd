//go:build linux

package drainagent

// The stand-in runner: the test binary re-executed with DRAINAGENT_STANDIN=1
// behaves like gitlab-runner as far as the drain agent can tell. It runs
// "jobs" and serves gitlab_runner_jobs on a loopback port; SIGQUIT is a
// graceful stop (let the running jobs finish, exit 0). A job's length counts
// from the first SIGQUIT, so every job is still running when the drain
// reaches the stand-in however slowly a loaded machine starts it (the
// lengths once counted from the start, and a test's margin of a few hundred
// milliseconds did not always hold beside the end-to-end suite);
// SIGTERM kills it at once (exit 143), as does SIGKILL; SIGUSR1 takes its
// metrics endpoint down. It leaves marker files in -dir: job-N.started,
// job-N.finished, one line in "quit" per SIGQUIT, and "exited" just before a
// graceful exit.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const standInEnv = "DRAINAGENT_STANDIN"

func TestMain(m *testing.M) {
	if os.Getenv(standInEnv) == "1" {
		os.Exit(standInMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

type standInState struct {
	mu       sync.Mutex
	dir      string
	started  time.Time
	running  map[int]time.Duration // job number → length
	next     int
	draining bool
	quitting chan struct{} // closed at the first SIGQUIT
	idle     chan struct{} // closed when draining with no job left
}

// standInMain is the stand-in's main; args are what follows argv[0], "run"
// first.
func standInMain(args []string) int {
	if len(args) == 0 || args[0] != "run" {
		// Not the runner: some other gitlab-runner command, which idles.
		time.Sleep(time.Hour)
		return 0
	}
	fs := flag.NewFlagSet("standin", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "metrics address")
	ready := fs.String("ready", "", "file to write the metrics address to once ready")
	dir := fs.String("dir", "", "directory of the marker files")
	jobs := fs.String("jobs", "", "lengths of the jobs running from the start, counted from the first SIGQUIT, comma separated")
	exitDelay := fs.Duration("exit-delay", 200*time.Millisecond, "shutdown after the last job, before exiting")
	pidFile := fs.String("pid-file", "", "file to write the pid to")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	// Handlers first: SIGQUIT's default would dump goroutines and exit 2.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1)

	s := &standInState{dir: *dir, running: map[int]time.Duration{}, idle: make(chan struct{}), quitting: make(chan struct{})}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(s.serveMetrics)}
	go srv.Serve(ln)

	if *pidFile != "" {
		s.writeFile(*pidFile, fmt.Sprintf("%d\n", os.Getpid()))
	}
	s.mu.Lock()
	s.started = time.Now()
	for _, d := range parseLengths(*jobs) {
		s.startLocked(d)
	}
	s.mu.Unlock()
	s.writeFile(*ready, ln.Addr().String())

	for {
		select {
		case sig := <-sigs:
			switch sig {
			case syscall.SIGQUIT:
				s.quit()
			case syscall.SIGTERM:
				return 143
			case syscall.SIGUSR1:
				srv.Close()
			}
		case <-s.idle:
			time.Sleep(*exitDelay)
			s.writeFile(filepath.Join(s.dir, "exited"), "")
			return 0
		}
	}
}

func parseLengths(s string) []time.Duration {
	var ds []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			panic(err)
		}
		ds = append(ds, d)
	}
	return ds
}

// writeFile writes atomically, so that a reader never sees half of it.
func (s *standInState) writeFile(name, content string) {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		panic(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		panic(err)
	}
}

func (s *standInState) marker(name, content string) {
	f, err := os.OpenFile(filepath.Join(s.dir, name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	f.WriteString(content)
	f.Close()
}

// startLocked starts job number s.next+1.
func (s *standInState) startLocked(d time.Duration) {
	s.next++
	n := s.next
	s.running[n] = d
	s.marker(fmt.Sprintf("job-%d.started", n), d.String())
	go func() {
		<-s.quitting
		time.Sleep(d)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.marker(fmt.Sprintf("job-%d.finished", n), d.String())
		delete(s.running, n)
		s.idleLocked()
	}()
}

func (s *standInState) quit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marker("quit", fmt.Sprintf("%d\n", time.Since(s.started).Milliseconds()))
	if s.draining {
		return // like gitlab-runner: another SIGQUIT while draining changes nothing
	}
	s.draining = true
	close(s.quitting)
	s.idleLocked()
}

func (s *standInState) idleLocked() {
	if s.draining && len(s.running) == 0 {
		select {
		case <-s.idle:
		default:
			close(s.idle)
		}
	}
}

// serveMetrics writes a text exposition like gitlab-runner's: the jobs
// split over two runners, plus unrelated families.
func (s *standInState) serveMetrics(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	perRunner := [2]int{}
	for n := range s.running {
		perRunner[n%2]++
	}
	s.mu.Unlock()
	var b bytes.Buffer
	b.WriteString("# HELP gitlab_runner_concurrent The current value of concurrent setting\n")
	b.WriteString("# TYPE gitlab_runner_concurrent gauge\n")
	b.WriteString("gitlab_runner_concurrent 4\n")
	b.WriteString("# HELP gitlab_runner_jobs The number of running jobs\n")
	b.WriteString("# TYPE gitlab_runner_jobs gauge\n")
	for i, n := range perRunner {
		fmt.Fprintf(&b, "gitlab_runner_jobs{executor_stage=\"docker_run\",runner=\"tok%d\",stage=\"step_script\",state=\"running\",system_id=\"s_standin\"} %d\n", i, n)
	}
	b.WriteString("gitlab_runner_jobs{executor_stage=\"prepare_executor\",runner=\"tok2\",stage=\"prepare_script\",state=\"running\",system_id=\"s_standin\"} 0\n")
	b.WriteString("# HELP gitlab_runner_job_duration_seconds Histogram of job durations\n")
	b.WriteString("# TYPE gitlab_runner_job_duration_seconds histogram\n")
	b.WriteString("gitlab_runner_job_duration_seconds_bucket{runner=\"tok0\",le=\"30\"} 1\n")
	b.WriteString("gitlab_runner_job_duration_seconds_bucket{runner=\"tok0\",le=\"+Inf\"} 2\n")
	b.WriteString("gitlab_runner_job_duration_seconds_sum{runner=\"tok0\"} 75.5\n")
	b.WriteString("gitlab_runner_job_duration_seconds_count{runner=\"tok0\"} 2\n")
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(b.Bytes())
}

// standIn is a running stand-in, seen from the test.
type standIn struct {
	t       *testing.T
	cmd     *exec.Cmd
	dir     string
	pidFile string
	addr    string
	exited  chan struct{} // closed once reaped
	exitErr error
}

type standInOpts struct {
	jobs      string
	exitDelay time.Duration
	argv0     string   // default <dir>/gitlab-runner
	extraArgs []string // after "run"
	noRun     bool     // start it without the "run" argument
}

func startStandIn(t *testing.T, o standInOpts) *standIn {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &standIn{t: t, dir: dir, pidFile: filepath.Join(dir, "gitlab-runner.pid"), exited: make(chan struct{})}
	argv0 := o.argv0
	if argv0 == "" {
		argv0 = filepath.Join(dir, "gitlab-runner")
	}
	ready := filepath.Join(dir, "ready")
	args := []string{argv0}
	if !o.noRun {
		if o.exitDelay == 0 {
			o.exitDelay = 200 * time.Millisecond
		}
		args = append(args, "run", "-dir", dir, "-ready", ready, "-pid-file", s.pidFile,
			"-jobs", o.jobs, "-exit-delay", o.exitDelay.String())
		args = append(args, o.extraArgs...)
	}
	var stderr bytes.Buffer
	s.cmd = &exec.Cmd{Path: exe, Args: args, Env: append(os.Environ(), standInEnv+"=1"), Stderr: &stderr}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.exitErr = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.exited
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("stand-in stderr:\n%s", stderr.String())
		}
	})
	if o.noRun {
		return s
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil {
			s.addr = string(b)
			return s
		}
		select {
		case <-s.exited:
			t.Fatalf("stand-in exited before it was ready: %v\n%s", s.exitErr, stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("stand-in not ready after 20s")
		}
	}
}

func (s *standIn) pid() int           { return s.cmd.Process.Pid }
func (s *standIn) metricsURL() string { return "http://" + s.addr + "/metrics" }

func (s *standIn) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signalling the stand-in: %v", err)
	}
}

// has reports whether the marker file exists.
func (s *standIn) has(name string) bool {
	_, err := os.Stat(filepath.Join(s.dir, name))
	return err == nil
}

// quits is how many SIGQUITs the stand-in got.
func (s *standIn) quits() int {
	b, _ := os.ReadFile(filepath.Join(s.dir, "quit"))
	return strings.Count(string(b), "\n")
}

// jobsStartedAndFinished counts the job markers.
func (s *standIn) jobsStartedAndFinished() (started, finished []int) {
	entries, _ := os.ReadDir(s.dir)
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "job-")
		if !ok {
			continue
		}
		num, kind, _ := strings.Cut(name, ".")
		n, _ := strconv.Atoi(num)
		switch kind {
		case "started":
			started = append(started, n)
		case "finished":
			finished = append(finished, n)
		}
	}
	return started, finished
}

// waitExit waits for the stand-in to be reaped and returns its exit code.
func (s *standIn) waitExit(timeout time.Duration) int {
	s.t.Helper()
	select {
	case <-s.exited:
	case <-time.After(timeout):
		s.t.Fatalf("stand-in still running after %s", timeout)
	}
	var ee *exec.ExitError
	if errors.As(s.exitErr, &ee) {
		return ee.ExitCode()
	}
	if s.exitErr != nil {
		s.t.Fatalf("stand-in: %v", s.exitErr)
	}
	return 0
}

// gone reports whether the stand-in's pid is gone or a zombie, as seen in
// /proc now.
func (s *standIn) gone() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.pid()))
	if err != nil {
		return true
	}
	state, _, err := parseStat(b)
	return err == nil && state == 'Z'
}

// TestStandInSIGTERMLosesJobs shows what the agent avoids: SIGTERM kills
// the stand-in at once, with its jobs unfinished, where SIGQUIT (the other
// tests) lets them finish.
func TestStandInSIGTERMLosesJobs(t *testing.T) {
	t.Parallel()
	s := startStandIn(t, standInOpts{jobs: "2s,3s"})
	n, err := (&MetricsJobCounter{URL: s.metricsURL()}).Jobs(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("jobs = %d, %v; want 2", n, err)
	}
	s.signal(syscall.SIGTERM)
	if code := s.waitExit(5 * time.Second); code != 143 {
		t.Errorf("exit code %d, want 143", code)
	}
	started, finished := s.jobsStartedAndFinished()
	if len(started) != 2 || len(finished) != 0 {
		t.Errorf("jobs started %v, finished %v: want 2 started, none finished", started, finished)
	}
}
