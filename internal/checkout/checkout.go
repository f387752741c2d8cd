// Package checkout finds the runnerfleet checkout a process runs in: the
// directory of the module's go.mod, where hack/tools.sh builds the tools
// the tests, the local stack and promtool need.
package checkout

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// Module is the module path the go.mod of a checkout declares.
const Module = "github.com/runnerfleet/runnerfleet"

// Root returns the runnerfleet checkout holding the first of starts that is
// in one: that directory or the nearest of its parents whose go.mod declares
// Module. With no starts it looks above the working directory. The error
// names where it looked.
func Root(starts ...string) (string, error) {
	if len(starts) == 0 {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("finding the runnerfleet checkout: %w", err)
		}
		starts = []string{wd}
	}
	for _, start := range starts {
		dir, err := filepath.Abs(start)
		if err != nil {
			continue
		}
		for {
			if isRoot(dir) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("no go.mod of module %s in or above %v: run from a runnerfleet checkout", Module, starts)
}

// isRoot reports whether dir holds the go.mod of Module.
func isRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && bytes.HasPrefix(b, []byte("module "+Module+"\n"))
}
