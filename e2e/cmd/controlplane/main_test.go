package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// make e2e runs the suite on an existing cluster only for a KUBECONFIG
// written on its command line or RUNNERFLEET_E2E_KUBECONFIG, never for a
// KUBECONFIG exported for daily work: that cluster would get runnerfleet
// installed and removed again. Read from make -n (nothing runs).
func TestMakeE2EUsesOnlyAKubeconfigGivenOnItsCommandLine(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dryRun := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-n", "--no-print-directory"}, args...)...)
		cmd.Dir = root
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "KUBECONFIG=") && !strings.HasPrefix(e, "RUNNERFLEET_E2E_KUBECONFIG=") && !strings.HasPrefix(e, "MAKEFLAGS=") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	existing := func(out, kubeconfig string) {
		t.Helper()
		if !strings.Contains(out, "RUNNERFLEET_E2E_KUBECONFIG="+kubeconfig+" go test -tags e2e") {
			t.Errorf("make e2e does not run the suite on %s:\n%s", kubeconfig, out)
		}
		if !strings.Contains(out, `lock=""`) {
			t.Errorf("make e2e on an existing cluster waits for the machine's real node (the e2e lock):\n%s", out)
		}
		if strings.Contains(out, "hack/tools.sh") || strings.Contains(out, "e2e/cmd/controlplane") || strings.Contains(out, "hack/e2e-kubeconfig-mode.sh") {
			t.Errorf("make e2e on an existing cluster builds the tools or starts a control plane:\n%s", out)
		}
	}
	existing(dryRun(nil, "e2e", "KUBECONFIG=/tmp/kind.kubeconfig"), "/tmp/kind.kubeconfig")
	existing(dryRun(nil, "e2e", "KUBECONFIG=kind.kubeconfig"), filepath.Join(root, "kind.kubeconfig"))
	existing(dryRun([]string{"RUNNERFLEET_E2E_KUBECONFIG=/tmp/kind.kubeconfig"}, "e2e"), "/tmp/kind.kubeconfig")

	out := dryRun([]string{"KUBECONFIG=/home/me/.kube/production"}, "e2e")
	if strings.Contains(out, "production") || !strings.Contains(out, "RUNNERFLEET_E2E_KUBECONFIG= go test -tags e2e") {
		t.Errorf("an exported KUBECONFIG points make e2e at its cluster:\n%s", out)
	}
	// -o: the suite's processes must not inherit the lock (a killed
	// suite's leftover kubelet would keep every later run waiting).
	if !strings.Contains(out, `lock="flock -o /tmp/runnerfleet-e2e.lock"`) || !strings.Contains(out, "$lock env RUNNERFLEET_E2E_KUBECONFIG= go test -tags e2e") {
		t.Errorf("make e2e on the local cluster does not take the machine's e2e lock (one real node per machine):\n%s", out)
	}
	if !strings.Contains(out, "hack/e2e-kubeconfig-mode.sh TestInstallPathsIntoACluster/manifests >e2e-kubeconfig-mode.out 2>&1 &") {
		t.Errorf("make e2e in its default mode does not prove the existing-cluster mode beside the suite (hack/e2e-kubeconfig-mode.sh):\n%s", out)
	}
	script, err := os.ReadFile(filepath.Join(root, "hack", "e2e-kubeconfig-mode.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "go run ./e2e/cmd/controlplane up") || !strings.Contains(string(script), `RUNNERFLEET_E2E_KUBECONFIG="$kc" go test -tags e2e`) {
		t.Errorf("hack/e2e-kubeconfig-mode.sh does not run the suite on a control plane e2e/cmd/controlplane started:\n%s", script)
	}
}
