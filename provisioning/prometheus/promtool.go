package prometheus

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// ToolsEnv names the directory holding promtool and amtool, as
// `hack/tools.sh promtool` prints it (make test sets it). Without it the
// tools are built, or found in the cache, by running hack/tools.sh from the
// repository the caller runs in: never from PATH, where Debian's promtool
// is Prometheus 2.42 without Kubernetes service discovery.
const ToolsEnv = "RUNNERFLEET_PROMTOOLS"

var tools struct {
	once sync.Once
	dir  string
	err  error
}

// toolsDir is where promtool and amtool are, building them the first time.
func toolsDir() (string, error) {
	tools.once.Do(func() {
		if d := os.Getenv(ToolsEnv); d != "" {
			tools.dir = d
			return
		}
		wd, err := os.Getwd()
		if err != nil {
			tools.err = err
			return
		}
		for d := wd; ; d = filepath.Dir(d) {
			script := filepath.Join(d, "hack", "tools.sh")
			if _, err := os.Stat(script); err == nil {
				out, err := exec.Command(script, "promtool").Output()
				if err != nil {
					var ee *exec.ExitError
					if errors.As(err, &ee) {
						err = fmt.Errorf("%w\n%s", err, ee.Stderr)
					}
					tools.err = fmt.Errorf("building promtool and amtool (hack/tools.sh promtool): %w", err)
					return
				}
				tools.dir = strings.TrimSpace(string(out))
				return
			}
			if filepath.Dir(d) == d {
				tools.err = fmt.Errorf("promtool and amtool: %s is not set and no hack/tools.sh is above %s; run hack/tools.sh promtool and set %s to the directory it prints", ToolsEnv, wd, ToolsEnv)
				return
			}
		}
	})
	return tools.dir, tools.err
}

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
