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
)

// EnvDir names a directory holding promtool, as hack/tools.sh promtool
// prints it; when unset, hack/tools.sh is asked, and failing that PATH.
const EnvDir = "RUNNERFLEET_PROMTOOLS"

var (
	once sync.Once
	bin  string
	err  error
)

// Path returns the promtool to run.
func Path() (string, error) {
	once.Do(func() { bin, err = find() })
	return bin, err
}

func find() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return filepath.Join(d, "promtool"), nil
	}
	if root, ok := repoRoot(); ok {
		tools := filepath.Join(root, "hack", "tools.sh")
		if b, err := os.ReadFile(tools); err == nil && bytes.Contains(b, []byte("\npromtool()")) {
			cmd := exec.Command(tools, "promtool")
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				return "", fmt.Errorf("building promtool with hack/tools.sh promtool: %w", err)
			}
			return filepath.Join(strings.TrimSpace(string(out)), "promtool"), nil
		}
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		return "", fmt.Errorf("promtool not found: run hack/tools.sh promtool, or apt-get install prometheus (.ci/run does)")
	}
	return p, nil
}

func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/runnerfleet/runnerfleet\n") {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
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
