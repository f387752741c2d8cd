package standin

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
)

func TestMachineStateDirIsDockerMachinesOwn(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	dm := &Config{Runners: []Runner{{Executor: "kubernetes"}, {Executor: ExecutorDockerMachine}}}
	if got := MachineStateDir(dm, env(map[string]string{"HOME": "/home/gitlab-runner"})); got != "/home/gitlab-runner/.docker/machine" {
		t.Errorf("docker+machine with HOME: %q", got)
	}
	if got := MachineStateDir(dm, env(map[string]string{"HOME": "/h", EnvMachineStoragePath: "/state"})); got != "/state" {
		t.Errorf("docker+machine with %s: %q", EnvMachineStoragePath, got)
	}
	if got := MachineStateDir(&Config{Runners: []Runner{{Executor: "kubernetes"}}}, env(nil)); got != "" {
		t.Errorf("no docker+machine runner has a state directory: %q", got)
	}
}

// Two docker+machine processes never share one machine state directory: a
// second stand-in on a directory another live holder has locked refuses to
// start; once the holder is gone it starts.
func TestSecondManagerOnAHeldMachineStateRefusesToStart(t *testing.T) {
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	rn := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"shared"}})
	cfg := &Config{Concurrent: 1, CheckInterval: 1, Runners: []Runner{{Name: "shared", URL: srv.URL(), Token: rn.Token, Executor: ExecutorDockerMachine}}}
	dir := filepath.Join(t.TempDir(), "machine")

	release, err := LockMachineState(dir, "s_first")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockMachineState(dir, "s_again"); !errors.Is(err, ErrStateHeld) || !strings.Contains(err.Error(), "s_first") {
		t.Fatalf("a second lock of a held directory: %v; want ErrStateHeld naming the holder s_first", err)
	}
	run := func(sigs chan os.Signal) (int, *syncBuffer) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		log := &syncBuffer{}
		return Run(context.Background(), Options{Config: cfg, SystemID: "s_second", Signals: sigs, Log: log, Listener: ln, MachineState: dir}), log
	}
	// Were it to start, it would drain and exit 0 a moment later.
	quit := make(chan os.Signal, 1)
	go func() { time.Sleep(time.Second); quit <- syscall.SIGQUIT }()
	if code, log := run(quit); code != ExitError || !strings.Contains(log.String(), "refusing to start") {
		t.Fatalf("a stand-in on a held state directory exited %d; want %d (refused):\n%s", code, ExitError, log)
	}
	release()
	sigs := make(chan os.Signal, 1)
	go func() { time.Sleep(300 * time.Millisecond); sigs <- syscall.SIGQUIT }()
	if code, log := run(sigs); code != ExitDrained || !strings.Contains(log.String(), "holding the machine state directory") {
		t.Fatalf("a stand-in on a free state directory exited %d; want it to run and drain (%d):\n%s", code, ExitDrained, log)
	}
	b, err := os.ReadFile(filepath.Join(dir, MachineStateLock))
	if err != nil || string(b) != "s_second" {
		t.Errorf("the lock file says %q (%v); want its holder s_second", b, err)
	}
}
