package localcluster

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fake starts a stand-in for a control-plane process: a shell that appends
// its name to <dir>/order when SIGTERM arrives, then exits. Its command line
// names dir, as every real process's does.
func fake(t *testing.T, dir, name string, ignoreTERM bool) int {
	t.Helper()
	// Each touches $0.trapped once its trap is set.
	script := `trap 'echo "$0" >> "$1/order"; exit 0' TERM; : > "$1/$0.trapped"; while :; do sleep 0.05; done`
	if ignoreTERM {
		script = `trap '' TERM; : > "$1/$0.trapped"; while :; do sleep 0.05; done`
	}
	pid, err := spawn(dir, Process{Name: name, Path: "/bin/sh", Args: []string{"-c", script, name, dir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	// Wait until the shell has set its trap (a pause after its command
	// line showed up was once not enough on a loaded machine).
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, name+".trapped")); err == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never set its trap", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDownStopsAddOnsThenControllerThenControlPlaneTopDown(t *testing.T) {
	dir := t.TempDir()
	// Start them in an order unlike either start or stop order.
	names := []string{Etcd, Kwok, APIServer, Karpenter, Controller, Scheduler, ControllerManager}
	pids := map[string]int{}
	for _, n := range names {
		pids[n] = fake(t, dir, n, false)
	}
	if err := DownWithTimeout(context.Background(), dir, 5*time.Second, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "order"))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(b))
	want := []string{Controller, Karpenter, Kwok, Scheduler, ControllerManager, APIServer, Etcd}
	if !slices.Equal(got, want) {
		t.Errorf("stop order\n got %v\nwant %v", got, want)
	}
	for n, pid := range pids {
		if processAlive(pid) {
			t.Errorf("%s (pid %d) still runs after Down", n, pid)
		}
		if _, err := os.Stat(pidFile(dir, n)); !os.IsNotExist(err) {
			t.Errorf("pid file of %s left behind: %v", n, err)
		}
	}
}

func TestStopOrderMatchesDependencies(t *testing.T) {
	got := stopOrder([]string{APIServer, "z-addon", Etcd, "a-addon"})
	want := []string{"z-addon", "a-addon", Controller, KEDAMetricsAPIServer, KEDAOperator, Karpenter, Kubelet, Containerd, ServiceProxy, Kwok, Scheduler, ControllerManager, APIServer, Etcd}
	if !slices.Equal(got, want) {
		t.Errorf("stopOrder\n got %v\nwant %v", got, want)
	}
	// Reverse of the start order, after the controller (started last, by the
	// caller), KEDA (its adapter, then the operator whose gRPC service the
	// adapter reads), Karpenter (started once the CRDs are in) and the real
	// node (its kubelet, then containerd, which the kubelet talks to, then
	// the Service proxy its pods reached the API server through).
	rev := slices.Clone(StartOrder)
	slices.Reverse(rev)
	if !slices.Equal(StopOrder[7:], rev) || !slices.Equal(StopOrder[:7], []string{Controller, KEDAMetricsAPIServer, KEDAOperator, Karpenter, Kubelet, Containerd, ServiceProxy}) {
		t.Errorf("StopOrder %v is not the controller, KEDA's adapter and operator, Karpenter, the kubelet, containerd and the Service proxy followed by the reverse of StartOrder %v", StopOrder, StartOrder)
	}
}

func TestStopKillsWhatIgnoresSIGTERM(t *testing.T) {
	dir := t.TempDir()
	pid := fake(t, dir, Kwok, true)
	start := time.Now()
	if err := stopProcess(dir, Kwok, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Fatalf("pid %d survived SIGKILL", pid)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 10*time.Second {
		t.Errorf("stop took %s; want SIGKILL right after the 300ms grace", d)
	}
}

// A pid file whose pid now belongs to a process not started for this state
// directory (the pid was reused) must never get a signal.
func TestDownNeverSignalsAProcessOfAnotherDirectory(t *testing.T) {
	dir := t.TempDir()
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	if err := os.MkdirAll(LogsDir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pidFile(dir, APIServer), []byte(strconv.Itoa(other.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if running(dir, APIServer) != 0 {
		t.Fatal("running() claims an unrelated process as kube-apiserver")
	}
	if err := Down(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if !processAlive(other.Process.Pid) {
		t.Fatal("Down killed a process it did not start")
	}
}

func TestDownOfNothingIsNotAnError(t *testing.T) {
	if err := Down(context.Background(), filepath.Join(t.TempDir(), "never-created")); err != nil {
		t.Fatal(err)
	}
	if err := Down(context.Background(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

func TestWaitReadyNamesTheProcessAndShowsItsLog(t *testing.T) {
	dir := t.TempDir()
	p := Process{Name: Etcd, Path: "/bin/sh", Args: []string{"-c", `echo "listen tcp 127.0.0.1:2379: bind: address already in use" >&2; exit 1`, dir},
		Ready: func(context.Context) error { return os.ErrNotExist }}
	pid, err := spawn(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	err = waitReady(context.Background(), dir, p, pid, 10*time.Second)
	if err == nil {
		t.Fatal("waitReady succeeded for a process that exited")
	}
	for _, want := range []string{"etcd exited while starting", LogFile(dir, Etcd), "address already in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestAProcessBelongsToTheDirectoryItsArgumentsName(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"etcd", "--data-dir=/tmp/a/etcd"}, true},
		{[]string{"kwok", "--kubeconfig", "/tmp/a/kubeconfig"}, true},
		{[]string{"sh", "-c", "script", "name", "/tmp/a"}, true},
		{[]string{"etcd", "--data-dir=/tmp/a2/etcd"}, false},
		{[]string{"kwok", "--kubeconfig=/tmp/ab"}, false},
		{[]string{"sleep", "30"}, false},
	} {
		if got := namesDir(tc.args, "/tmp/a"); got != tc.want {
			t.Errorf("namesDir(%q, /tmp/a) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// A state directory whose real node left only its service proxy running
// (the kubelet died, or a killed suite stopped it) still owns the node: a
// new cluster is refused, naming the process and the fix. Once that
// process is gone, the claim passes (the negative control).
func TestANodeThatLeftItsServiceProxyRunningStillOwnsTheMachine(t *testing.T) {
	other, mine := t.TempDir(), t.TempDir()
	owner := filepath.Join(t.TempDir(), "node.owner")
	if err := os.WriteFile(owner, []byte(other+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := fake(t, other, ServiceProxy, false)
	err := claimNodeAt(owner, mine)
	if err == nil || !strings.Contains(err.Error(), ServiceProxy) || !strings.Contains(err.Error(), "fleet down --state-dir "+other) {
		t.Fatalf("claim beside a running %s: %v, want a refusal naming it and the fix", ServiceProxy, err)
	}
	if b, _ := os.ReadFile(owner); strings.TrimSpace(string(b)) != other {
		t.Errorf("the refused claim rewrote the owner file: %q", b)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for running(other, ServiceProxy) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := claimNodeAt(owner, mine); err != nil {
		t.Fatalf("claim once the other node's processes are gone: %v", err)
	}
	if b, _ := os.ReadFile(owner); strings.TrimSpace(string(b)) != mine {
		t.Errorf("owner file %q, want %s", b, mine)
	}
}
