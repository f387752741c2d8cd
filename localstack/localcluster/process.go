package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one detached process of a local cluster. Its pid file and log
// are <dir>/logs/<Name>.pid and <dir>/logs/<Name>.log.
type Process struct {
	Name string
	Path string
	Args []string
	// Env is added to the environment the process inherits.
	Env []string
	// Endpoint is shown by Status, for example https://127.0.0.1:6443.
	Endpoint string
	// Ready returns nil once the process serves; nil means ready once started.
	Ready func(ctx context.Context) error
}

// LogsDir is where pid files and logs are.
func LogsDir(dir string) string { return filepath.Join(dir, "logs") }

func pidFile(dir, name string) string { return filepath.Join(LogsDir(dir), name+".pid") }

// LogFile is the log of one process.
func LogFile(dir, name string) string { return filepath.Join(LogsDir(dir), name+".log") }

// spawn starts p detached from the caller: in its own session (so that it
// survives the command that started it and no terminal signal reaches it),
// stdin from /dev/null, stdout and stderr appended to its log. The pid file is
// written once the process runs.
func spawn(dir string, p Process) (int, error) {
	if err := os.MkdirAll(LogsDir(dir), 0o755); err != nil {
		return 0, err
	}
	logf, err := os.OpenFile(LogFile(dir, p.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("opening the log of %s: %w", p.Name, err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== %s fleet: starting %s %s\n", time.Now().Format(time.RFC3339), p.Path, strings.Join(p.Args, " "))
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s (%s): %w", p.Name, p.Path, err)
	}
	pid := cmd.Process.Pid
	// Reap the child should it exit while this process still runs; once this
	// process exits, init adopts it.
	go func() { _ = cmd.Wait() }()
	if err := writeFileAtomic(pidFile(dir, p.Name), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return 0, fmt.Errorf("writing the pid file of %s: %w", p.Name, err)
	}
	return pid, nil
}

// readPID returns the pid recorded for name, 0 when there is none.
func readPID(dir, name string) int {
	b, err := os.ReadFile(pidFile(dir, name))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// running returns the pid of name when its pid file names a live process
// started for this state directory, 0 otherwise. A pid the kernel has since
// given to an unrelated process does not count: the command line of each of
// our processes names the state directory.
func running(dir, name string) int {
	pid := readPID(dir, name)
	if pid == 0 || !processAlive(pid) {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err == nil && namesDir(strings.Split(string(cmdline), "\x00"), dir) {
		return pid
	}
	// A program that takes no path flag (Karpenter) is found by the
	// KUBECONFIG it was given.
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err == nil {
		for _, kv := range strings.Split(string(environ), "\x00") {
			if v, ok := strings.CutPrefix(kv, "KUBECONFIG="); ok && namesDir([]string{v}, dir) {
				return pid
			}
		}
	}
	return 0
}

// namesDir reports whether an argument is dir or a path inside it, alone or
// as the value of a --flag=: /tmp/a/kubeconfig names /tmp/a, not /tmp/a2.
func namesDir(args []string, dir string) bool {
	for _, a := range args {
		if i := strings.IndexByte(a, '='); i >= 0 && strings.HasPrefix(a, "-") {
			a = a[i+1:]
		}
		if a == dir || strings.HasPrefix(a, dir+"/") {
			return true
		}
	}
	return false
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return true
	}
	state := stat[i+2]
	return state != 'Z' && state != 'X'
}

// recorded lists the names of every process with a pid file, sorted.
func recorded(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(LogsDir(dir), "*.pid"))
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".pid"))
	}
	sort.Strings(names)
	return names
}

// stopProcess stops name: SIGTERM, then SIGKILL once grace has passed, and
// waits until it is gone. Its pid file goes once it has.
func stopProcess(dir, name string, grace time.Duration) error {
	pid := running(dir, name)
	if pid == 0 {
		_ = os.Remove(pidFile(dir, name))
		return nil
	}
	signal := func(sig syscall.Signal) {
		// Each process leads its own process group (setsid): signal the
		// group, so that anything it started goes too.
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
			_ = syscall.Kill(-pid, sig)
			return
		}
		_ = syscall.Kill(pid, sig)
	}
	signal(syscall.SIGTERM)
	if !waitGone(pid, grace) {
		signal(syscall.SIGKILL)
		if !waitGone(pid, 10*time.Second) {
			return fmt.Errorf("%s (pid %d) is still running after SIGKILL", name, pid)
		}
	}
	_ = os.Remove(pidFile(dir, name))
	return nil
}

func waitGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if !processAlive(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReady waits until p is ready, failing early when it exits.
func waitReady(ctx context.Context, dir string, p Process, pid int, timeout time.Duration) error {
	if p.Ready == nil {
		return nil
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if !processAlive(pid) {
			return fmt.Errorf("%s exited while starting; the end of %s:\n%s", p.Name, LogFile(dir, p.Name), Tail(LogFile(dir, p.Name), 20))
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = p.Ready(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("interrupted while waiting for %s: %w", p.Name, parent.Err())
			}
			return fmt.Errorf("%s is not ready after %s (%v); the end of %s:\n%s",
				p.Name, timeout, last, LogFile(dir, p.Name), Tail(LogFile(dir, p.Name), 20))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Tail returns the last n lines of a file, indented, for error messages.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "    (no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 400 {
			l = l[:400] + "…"
		}
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portFree reports whether port can be listened on at 127.0.0.1.
func portFree(port int) bool {
	if port <= 0 {
		return false
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// Listening reports whether something accepts connections on 127.0.0.1:port.
func Listening(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
