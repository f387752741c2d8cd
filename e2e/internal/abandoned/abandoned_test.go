package abandoned

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
)

// stateDir is a state directory as a test's t.TempDir makes it
// (root/<test><random>/001), with one recorded process that names it, as
// every process of a local control plane does; owner is the PID recorded
// as its test process.
func stateDir(t *testing.T, root, test string, owner int) (string, int) {
	t.Helper()
	dir := filepath.Join(root, test+"123", "001")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(localcluster.State{Name: test})
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), st, 0o644); err != nil {
		t.Fatal(err)
	}
	c := &localcluster.Cluster{Dir: dir}
	// "; :" keeps the shell from exec'ing sleep, so its command line keeps
	// naming dir.
	pid, err := c.StartProcess(context.Background(), localcluster.Process{Name: "etcd", Path: "/bin/sh", Args: []string{"-c", "sleep 600; :", dir}}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.StopProcess("etcd", time.Second) })
	if err := os.WriteFile(filepath.Join(dir, OwnerFile), []byte(strconv.Itoa(owner)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, pid
}

// deadPID is the PID of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// The control plane of a test process that is gone is stopped and its
// temporary directory removed; one whose test process runs (a suite
// beside this one) is left alone, processes and files (negative control),
// and so is a state directory no test created.
func TestSweepStopsOnlyWhatADeadTestLeft(t *testing.T) {
	root := t.TempDir()
	deadDir, deadProc := stateDir(t, root, "TestKilled", deadPID(t))

	beside := exec.Command("sleep", "600")
	if err := beside.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = beside.Process.Kill(); _ = beside.Wait() })
	liveDir, liveProc := stateDir(t, root, "TestRunning", beside.Process.Pid)

	fleetDir, fleetProc := stateDir(t, root, "local", deadPID(t))
	if err := os.Remove(filepath.Join(fleetDir, OwnerFile)); err != nil {
		t.Fatal(err)
	}

	var log bytes.Buffer
	swept, err := Sweep(context.Background(), root, 5*time.Second, &log)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(swept, []string{deadDir}) {
		t.Errorf("swept %v, want only %s", swept, deadDir)
	}
	if alive(deadProc) {
		t.Errorf("the abandoned control plane's process %d still runs", deadProc)
	}
	if _, err := os.Stat(filepath.Dir(deadDir)); !os.IsNotExist(err) {
		t.Errorf("the dead test's temporary directory is still there (%v)", err)
	}
	for _, kept := range []struct {
		dir string
		pid int
	}{{liveDir, liveProc}, {fleetDir, fleetProc}} {
		if !alive(kept.pid) {
			t.Errorf("process %d of %s was stopped", kept.pid, kept.dir)
		}
		if _, err := os.Stat(kept.dir); err != nil {
			t.Errorf("%s: %v", kept.dir, err)
		}
	}
	if !bytes.Contains(log.Bytes(), []byte(deadDir)) {
		t.Errorf("the sweep does not say what it stopped: %q", log.String())
	}
}
