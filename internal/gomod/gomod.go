// Package gomod fetches Go module sources through the go command, for the
// tests and oracles that read other projects' source as their schema.
package gomod

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Download runs `go mod download -json module@version` outside any module and
// returns the module's source directory. The go command's module cache makes
// it a no-op after the first time.
func Download(ctx context.Context, module, version string) (string, error) {
	target := module + "@" + version
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("downloading %s: go command not found: %w", target, err)
	}
	tmp, err := os.MkdirTemp("", "runnerfleet-gomod-")
	if err != nil {
		return "", fmt.Errorf("downloading %s: %w", target, err)
	}
	defer os.RemoveAll(tmp)

	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", target)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()

	var out struct {
		Dir   string
		Error string
	}
	if jsonErr := json.Unmarshal(stdout.Bytes(), &out); jsonErr != nil {
		if runErr == nil {
			runErr = jsonErr
		}
		return "", fmt.Errorf("go mod download %s: %w: %s", target, runErr, strings.TrimSpace(stderr.String()))
	}
	if out.Error != "" {
		return "", fmt.Errorf("go mod download %s: %s", target, out.Error)
	}
	if runErr != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s", target, runErr, strings.TrimSpace(stderr.String()))
	}
	if out.Dir == "" {
		return "", fmt.Errorf("go mod download %s: no Dir in its output", target)
	}
	return out.Dir, nil
}
