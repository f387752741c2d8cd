//go:build linux

package drainagent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrPIDReused is wrapped by the error about a pid file whose process is not
// the one that wrote it: the pid has been reused since.
var ErrPIDReused = errors.New("pid file names another process: its pid has been reused")

// NewRunnerControl is a ProcessRunner on Linux.
func NewRunnerControl(o RunnerOptions, log *slog.Logger) (RunnerControl, error) {
	if o.PID <= 0 && o.PIDFile == "" && o.ProcessName == "" {
		return nil, errors.New("no way to find the runner: give a pid, a pid file or a process name")
	}
	return &ProcessRunner{PID: o.PID, PIDFile: o.PIDFile, Name: o.ProcessName, Log: log}, nil
}

// ProcessRunner controls a gitlab-runner process on Linux: SIGQUIT is its
// graceful stop (stop taking jobs, finish the running ones, exit).
//
// The runner is found, in this order, by PID, by the pid in PIDFile, or by
// scanning /proc for processes whose executable is Name and that have the
// argument "run". A process is known by its pid and its start time (field 22
// of /proc/<pid>/stat), so that a pid reused by another process is neither
// signalled nor taken for the runner: a pid file may carry that start time
// after the pid ("1234 98765"); a pid file without one is refused when its
// process started after the file was written.
type ProcessRunner struct {
	PID     int
	PIDFile string
	Name    string
	Log     *slog.Logger // default slog.Default()
	// Proc is the proc file system (default /proc).
	Proc string

	mu    sync.Mutex
	found bool
	procs []procID
}

// procID is one process: a pid and when it started, in clock ticks after
// boot.
type procID struct {
	pid   int
	start uint64
}

// clockTicks is USER_HZ, the unit of /proc's times on every Linux
// architecture Go supports.
const clockTicks = 100

// pidFileSlack is how long after its pid file was written a process may
// have started and still be the one that wrote it (the file's time and
// btime are wall clock readings, btime to the second).
const pidFileSlack = 2 * time.Second

func (p *ProcessRunner) proc() string {
	if p.Proc == "" {
		return "/proc"
	}
	return p.Proc
}

func (p *ProcessRunner) log() *slog.Logger {
	if p.Log == nil {
		return slog.Default()
	}
	return p.Log
}

// StopGracefully sends SIGQUIT to the runner: the processes it found the
// first time, or finds now.
func (p *ProcessRunner) StopGracefully() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.found {
		procs, err := p.find()
		if err != nil {
			return err
		}
		p.procs, p.found = procs, true
	}
	signalled := 0
	var errs []error
	for _, id := range p.procs {
		err := p.signal(id, unix.SIGQUIT)
		switch {
		case err == nil:
			signalled++
		case errors.Is(err, errGone):
		default:
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if signalled == 0 {
		return fmt.Errorf("%w: it exited", ErrRunnerNotRunning)
	}
	return nil
}

// Exited reports whether every process StopGracefully found is gone (or a
// zombie, or its pid now belongs to another process).
func (p *ProcessRunner) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range p.procs {
		if p.alive(id) {
			return false
		}
	}
	return true
}

// Found lists the pids StopGracefully found.
func (p *ProcessRunner) Found() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	pids := make([]int, len(p.procs))
	for i, id := range p.procs {
		pids[i] = id.pid
	}
	return pids
}

var errGone = errors.New("process is gone")

// signal delivers sig to id, and only to id: through a pidfd checked against
// the start time, so that a pid reused meanwhile is not signalled.
func (p *ProcessRunner) signal(id procID, sig unix.Signal) error {
	fd, err := unix.PidfdOpen(id.pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return errGone
	case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
		// Kernel before 5.3 (or a seccomp filter): check, then kill; the
		// window for a reuse is the microseconds in between.
		if !p.alive(id) {
			return errGone
		}
		if err := unix.Kill(id.pid, sig); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return errGone
			}
			return fmt.Errorf("signalling runner pid %d: %w", id.pid, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("signalling runner pid %d: %w", id.pid, err)
	}
	defer unix.Close(fd)
	// The pidfd holds whatever process had the pid when it was opened; it
	// is ours if ours still has the pid now.
	if !p.alive(id) {
		return errGone
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return errGone
		}
		return fmt.Errorf("signalling runner pid %d: %w", id.pid, err)
	}
	return nil
}

// find locates the runner's processes.
func (p *ProcessRunner) find() ([]procID, error) {
	var reasons []string
	if p.PID > 0 {
		id, err := p.live(p.PID)
		if err == nil {
			return []procID{id}, nil
		}
		reasons = append(reasons, err.Error())
	}
	if p.PIDFile != "" {
		id, err := p.fromPIDFile()
		if err == nil {
			return []procID{id}, nil
		}
		if errors.Is(err, ErrPIDReused) {
			if p.Name == "" {
				return nil, fmt.Errorf("%w: %w", ErrRunnerNotRunning, err)
			}
			p.log().Warn("refusing the runner's pid file; looking for the runner by name", "err", err, "name", p.Name)
		}
		reasons = append(reasons, err.Error())
	}
	if p.Name != "" {
		procs, err := p.scan()
		if err != nil {
			return nil, err
		}
		if len(procs) > 0 {
			return procs, nil
		}
		reasons = append(reasons, fmt.Sprintf("no process %q with the argument \"run\"", p.Name))
	}
	return nil, fmt.Errorf("%w: %s", ErrRunnerNotRunning, strings.Join(reasons, "; "))
}

// fromPIDFile reads and checks the pid file.
func (p *ProcessRunner) fromPIDFile() (procID, error) {
	f, err := os.Open(p.PIDFile)
	if err != nil {
		return procID{}, fmt.Errorf("pid file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return procID{}, fmt.Errorf("pid file: %w", err)
	}
	data := make([]byte, 256)
	n, _ := f.Read(data)
	fields := strings.Fields(string(data[:n]))
	if len(fields) == 0 || len(fields) > 2 {
		return procID{}, fmt.Errorf("pid file %s: want \"PID\" or \"PID STARTTIME\", have %q", p.PIDFile, data[:n])
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil || pid <= 0 {
		return procID{}, fmt.Errorf("pid file %s: bad pid %q", p.PIDFile, fields[0])
	}
	id, err := p.live(pid)
	if err != nil {
		return procID{}, fmt.Errorf("pid file %s: %w", p.PIDFile, err)
	}
	if len(fields) == 2 {
		want, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return procID{}, fmt.Errorf("pid file %s: bad start time %q", p.PIDFile, fields[1])
		}
		if want != id.start {
			return procID{}, fmt.Errorf("%w: %s says pid %d started at tick %d, pid %d started at tick %d",
				ErrPIDReused, p.PIDFile, pid, want, pid, id.start)
		}
		return id, nil
	}
	started, err := p.startedAt(id)
	if err != nil {
		return procID{}, err
	}
	if started.After(st.ModTime().Add(pidFileSlack)) {
		return procID{}, fmt.Errorf("%w: pid %d started at %s, after %s was written at %s",
			ErrPIDReused, pid, started.UTC().Format(time.RFC3339), p.PIDFile, st.ModTime().UTC().Format(time.RFC3339))
	}
	return id, nil
}

// startedAt is when id started, by the wall clock.
func (p *ProcessRunner) startedAt(id procID) (time.Time, error) {
	data, err := os.ReadFile(filepath.Join(p.proc(), "stat"))
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			btime, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("%s/stat: bad btime %q", p.proc(), v)
			}
			return time.Unix(btime, 0).Add(time.Duration(id.start) * time.Second / clockTicks), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s/stat: no btime", p.proc())
}

// scan finds the live processes that run Name with the argument "run".
func (p *ProcessRunner) scan() ([]procID, error) {
	entries, err := os.ReadDir(p.proc())
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var procs []procID
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if !p.isRunner(pid) {
			continue
		}
		id, err := p.live(pid)
		if err != nil {
			continue
		}
		procs = append(procs, id)
	}
	return procs, nil
}

// isRunner reports whether pid runs Name with the argument "run".
func (p *ProcessRunner) isRunner(pid int) bool {
	dir := filepath.Join(p.proc(), strconv.Itoa(pid))
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil || len(cmdline) == 0 {
		return false
	}
	args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
	hasRun := false
	for _, a := range args[1:] {
		if a == "run" {
			hasRun = true
			break
		}
	}
	if !hasRun {
		return false
	}
	if filepath.Base(args[0]) == p.Name {
		return true
	}
	// The executable may have been started under another argv[0]; one
	// replaced by an upgrade reads "… (deleted)".
	exe, err := os.Readlink(filepath.Join(dir, "exe"))
	return err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == p.Name
}

// live identifies the live (not zombie) process pid.
func (p *ProcessRunner) live(pid int) (procID, error) {
	state, start, err := p.stat(pid)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return procID{}, fmt.Errorf("pid %d is not running", pid)
		}
		return procID{}, err
	}
	if state == 'Z' || state == 'X' || state == 'x' {
		return procID{}, fmt.Errorf("pid %d has exited (state %c)", pid, state)
	}
	return procID{pid: pid, start: start}, nil
}

// alive reports whether id still runs: its pid exists, started when id
// did, and is not a zombie. A /proc it cannot read counts as alive.
func (p *ProcessRunner) alive(id procID) bool {
	state, start, err := p.stat(id.pid)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH)
	}
	return start == id.start && state != 'Z' && state != 'X' && state != 'x'
}

// stat reads the state (field 3) and the start time (field 22) of
// /proc/<pid>/stat.
func (p *ProcessRunner) stat(pid int) (state byte, start uint64, err error) {
	data, err := os.ReadFile(filepath.Join(p.proc(), strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	return parseStat(data)
}

// parseStat parses a /proc/<pid>/stat; the command name, in parentheses,
// may hold spaces and parentheses itself.
func parseStat(data []byte) (state byte, start uint64, err error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("bad /proc stat %q", data)
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("bad /proc stat %q", data)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("bad /proc stat start time %q", f[19])
	}
	return f[0][0], start, nil
}
