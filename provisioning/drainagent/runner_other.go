//go:build !linux && !windows

package drainagent

import (
	"errors"
	"log/slog"
	"runtime"
)

// NewRunnerControl: the agent controls gitlab-runner on Linux and Windows
// only.
func NewRunnerControl(o RunnerOptions, log *slog.Logger) (RunnerControl, error) {
	return nil, errors.New("the drain agent cannot control gitlab-runner on " + runtime.GOOS)
}
