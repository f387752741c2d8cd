//go:build linux

package drainagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (gitlab (run) ner) S 1 4242 4242 0 -1 4194560 1301 0 0 0 12 3 0 0 20 0 9 0 98765 1234567 890 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	state, start, err := parseStat([]byte(line))
	if err != nil || state != 'S' || start != 98765 {
		t.Fatalf("parseStat = %c, %d, %v; want S, 98765", state, start, err)
	}
	if _, _, err := parseStat([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a short stat parsed")
	}
}

func TestFindRunnerByName(t *testing.T) {
	t.Parallel()
	// A name of its own, so that no other process on the machine matches.
	name := fmt.Sprintf("gitlab-runner-test-%d", os.Getpid())
	runner := startStandIn(t, standInOpts{jobs: "10s", argv0: filepath.Join(t.TempDir(), name)})
	// The same executable without the "run" argument is not the runner.
	other := startStandIn(t, standInOpts{argv0: filepath.Join(t.TempDir(), name), noRun: true})

	r := &ProcessRunner{Name: name}
	if err := r.StopGracefully(); err != nil {
		t.Fatalf("StopGracefully: %v", err)
	}
	if found := r.Found(); !slices.Equal(found, []int{runner.pid()}) {
		t.Fatalf("found %v, want the runner %d (not %d)", found, runner.pid(), other.pid())
	}
	deadline := time.Now().Add(5 * time.Second)
	for runner.quits() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if q := runner.quits(); q != 1 {
		t.Fatalf("the runner got %d SIGQUITs, want 1", q)
	}
	if r.Exited() {
		t.Error("Exited() = true while the runner finishes its job")
	}

	none := &ProcessRunner{Name: name + "-nope"}
	if err := none.StopGracefully(); !errors.Is(err, ErrRunnerNotRunning) {
		t.Errorf("StopGracefully with no such process: %v, want ErrRunnerNotRunning", err)
	}
}

func TestPIDFileRefusedFallsBackToName(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("gitlab-runner-fallback-%d", os.Getpid())
	s := startStandIn(t, standInOpts{jobs: "10s", argv0: filepath.Join(t.TempDir(), name)})
	pidFile := filepath.Join(t.TempDir(), "runner.pid")
	if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d 1\n", s.pid())), 0o644); err != nil {
		t.Fatal(err)
	}
	log, logs := newLog(t)
	r := &ProcessRunner{PIDFile: pidFile, Name: name, Log: log}
	if err := r.StopGracefully(); err != nil {
		t.Fatalf("StopGracefully: %v", err)
	}
	if !slices.Equal(r.Found(), []int{s.pid()}) {
		t.Errorf("found %v, want %d", r.Found(), s.pid())
	}
	if logs.count("refusing the runner's pid file") != 1 {
		t.Error("the refusal is not logged")
	}
}

func TestExitedSeesAZombie(t *testing.T) {
	t.Parallel()
	// A child that is not reaped stays a zombie: it has exited all the same.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.StartProcess(exe, []string{exe, "-test.run=^$"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	_, start, err := (&ProcessRunner{}).stat(p.Pid)
	if err != nil {
		t.Fatal(err)
	}
	r := &ProcessRunner{PID: p.Pid}
	r.procs, r.found = []procID{{pid: p.Pid, start: start}}, true
	deadline := time.Now().Add(10 * time.Second)
	for !r.Exited() {
		if time.Now().After(deadline) {
			t.Fatal("Exited() still false")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if state, _, err := r.stat(p.Pid); err != nil || state != 'Z' {
		t.Errorf("the child is %c, %v; the test wanted a zombie", state, err)
	}
	if err := r.StopGracefully(); !errors.Is(err, ErrRunnerNotRunning) {
		t.Errorf("StopGracefully on a zombie: %v, want ErrRunnerNotRunning", err)
	}
	p.Wait()
}
