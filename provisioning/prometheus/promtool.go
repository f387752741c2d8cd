package prometheus

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// Promtool runs promtool (Debian's prometheus package) in dir and returns
// its output; a failure carries the output too.
func Promtool(dir string, args ...string) (string, error) {
	bin, err := exec.LookPath("promtool")
	if err != nil {
		return "", fmt.Errorf("promtool is not installed: apt-get install prometheus (.ci/run does)")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
