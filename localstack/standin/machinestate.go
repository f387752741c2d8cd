package standin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ExecutorDockerMachine is the executor whose managers keep docker+machine
// state: a machine directory per VM under MACHINE_STORAGE_PATH.
const ExecutorDockerMachine = "docker+machine"

// EnvMachineStoragePath is where docker-machine keeps its machines; default
// $HOME/.docker/machine.
const EnvMachineStoragePath = "MACHINE_STORAGE_PATH"

// MachineStateLock is the file in the machine state directory that the
// stand-in holds locked (flock) while it runs.
const MachineStateLock = "runnerfleet-standin.lock"

// MachineStateDir is the docker+machine state directory of a config with a
// docker+machine runner, as docker-machine finds it (getenv:
// MACHINE_STORAGE_PATH, else $HOME/.docker/machine); "" when no runner is
// docker+machine.
func MachineStateDir(c *Config, getenv func(string) string) string {
	dm := false
	for _, r := range c.Runners {
		dm = dm || r.Executor == ExecutorDockerMachine
	}
	if !dm {
		return ""
	}
	if p := getenv(EnvMachineStoragePath); p != "" {
		return p
	}
	home := getenv("HOME")
	if home == "" {
		home = "/"
	}
	return filepath.Join(home, ".docker", "machine")
}

// ErrStateHeld is returned by LockMachineState when another live process
// holds the state directory.
var ErrStateHeld = errors.New("another docker+machine process holds this machine state directory")

// LockMachineState takes the machine state directory dir for this process:
// an exclusive flock on dir/MachineStateLock, which the kernel lets go when
// the process ends however it ends. Two docker+machine processes on one
// state directory would hand the same idle VM to two jobs and remove each
// other's machines; the stand-in refuses to start instead (ErrStateHeld),
// so a deployment that lets two managers share one state volume is found.
// owner is written into the lock file for whoever looks. release unlocks.
func LockMachineState(dir, owner string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("the machine state directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, MachineStateLock)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the machine state lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by %q", ErrStateHeld, path, holder)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(owner), 0)
	}
	return func() { f.Close() }, nil
}
