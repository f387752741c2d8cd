package prometheus

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/runnerfleet/runnerfleet/internal/promtool"
)

// Files is a set of Prometheus files written together into one directory,
// so that rule_files and rule tests find each other by name.
type Files map[string][]byte

// Write writes the files into dir.
func (f Files) Write(dir string) error {
	for name, b := range f {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ToolsEnv names the directory holding promtool and amtool (see
// internal/promtool, which finds or builds them).
const ToolsEnv = promtool.EnvDir

func toolsDir() (string, error) { return promtool.Dir() }

// run runs tool (promtool or amtool) from the tool cache in dir.
func run(tool, dir string, args ...string) (string, error) {
	td, err := toolsDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(td, tool)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s is not in %s (%s): run hack/tools.sh promtool", tool, td, ToolsEnv)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", tool, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Promtool runs promtool (Prometheus's own, built from the pinned
// github.com/prometheus/prometheus by hack/tools.sh) in dir and returns its
// output; a failure carries the output too.
func Promtool(dir string, args ...string) (string, error) { return run("promtool", dir, args...) }

// Amtool runs amtool (Alertmanager's own, built from the pinned
// github.com/prometheus/alertmanager by hack/tools.sh) in dir.
func Amtool(dir string, args ...string) (string, error) { return run("amtool", dir, args...) }
