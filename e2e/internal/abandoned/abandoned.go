// Package abandoned finds the local control planes an end-to-end run
// started and never stopped, and stops them.
//
// A test stops its control plane in a cleanup; a test binary killed before
// its cleanups (a timeout's SIGQUIT, Ctrl-C on make test, a CI job
// cancelled) leaves etcd, kube-apiserver, a kubelet, containerd, Karpenter
// and the controller running, holding memory, ports and the machine's one
// real node, and the next run meets them. Each state directory a test
// creates records the test process's PID (Own); Sweep stops the control
// plane of every state directory whose test process is gone, and removes
// the test's temporary directory. A directory whose test process still
// runs (a suite running beside this one) is left alone, and so is every
// state directory no test created (fleet up's .local/<stack>).
package abandoned

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
)

// OwnerFile, in a state directory a test created, holds its test process's PID.
const OwnerFile = "e2e-owner.pid"

// Own records in dir that this process's tests start and stop the control
// plane there.
func Own(dir string) error {
	return os.WriteFile(filepath.Join(dir, OwnerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

// Sweep stops the control planes of the state directories under root
// (t.TempDir's: root/<test>*/<nnn>) whose owner process is gone, waiting
// grace between SIGTERM and SIGKILL, and removes the owner's temporary
// directory. It returns the state directories it stopped.
func Sweep(ctx context.Context, root string, grace time.Duration, log io.Writer) ([]string, error) {
	owners, err := filepath.Glob(filepath.Join(root, "*", "*", OwnerFile))
	if err != nil {
		return nil, err
	}
	var swept []string
	var errs []error
	for _, f := range owners {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pid == os.Getpid() || alive(pid) {
			continue
		}
		dir := filepath.Dir(f)
		fmt.Fprintf(log, "stopping the local control plane in %s: the test process that started it (pid %d) is gone\n", dir, pid)
		if err := localcluster.DownWithTimeout(ctx, dir, grace, log); err != nil {
			errs = append(errs, fmt.Errorf("stopping the abandoned control plane in %s: %w", dir, err))
			continue
		}
		swept = append(swept, dir)
		if err := os.RemoveAll(filepath.Dir(dir)); err != nil {
			errs = append(errs, err)
		}
	}
	return swept, errors.Join(errs...)
}

// alive reports whether pid is a process that has not exited (a zombie
// has). A PID the kernel gave to another process since counts as alive:
// the sweep errs on leaving a control plane running.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
