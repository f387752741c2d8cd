// Package promtool runs Prometheus' promtool for the tests of packages that
// may not import provisioning/ (runnerset/...): the binary the repository's
// scripts provide, found the way hack/tools.sh says.
package promtool

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/runnerfleet/runnerfleet/internal/checkout"
)

// EnvDir names the directory holding promtool and amtool, as
// `hack/tools.sh promtool` prints it (make test sets it). Without it the
// tools are built, or found in the cache, by running hack/tools.sh of the
// repository the caller runs in: never from PATH, where Debian's promtool is
// Prometheus 2.42 without Kubernetes service discovery.
const EnvDir = "RUNNERFLEET_PROMTOOLS"

var (
	once sync.Once
	dir  string
	err  error
)

// Dir is the directory holding promtool and amtool, built the first time.
func Dir() (string, error) {
	once.Do(func() { dir, err = find() })
	return dir, err
}

// Path returns the promtool to run.
func Path() (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "promtool"), nil
}

func find() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	root, err := checkout.Root()
	if err != nil {
		return "", fmt.Errorf("promtool and amtool: %s is not set and this is not a runnerfleet checkout; run hack/tools.sh promtool and set %s to the directory it prints", EnvDir, EnvDir)
	}
	cmd := exec.Command(filepath.Join(root, "hack", "tools.sh"), "promtool")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building promtool and amtool with hack/tools.sh promtool: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Run runs promtool with args in dir, stdin fed to it, and returns its
// combined output; a failure carries the output too.
func Run(dir string, stdin []byte, args ...string) (string, error) {
	p, err := Path()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(p, args...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
