package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// stack is what fleet does to one stack.
type stack interface {
	// Up brings the stack up and prints its status.
	Up(ctx context.Context, o upOptions) error
	// Status prints the fleet and what runs it.
	Status(ctx context.Context) error
	// Down stops the stack.
	Down(ctx context.Context, o downOptions) error
}

type upOptions struct {
	timeout time.Duration
	config  string
	// demoJobs queued per RunnerSet in the local stack's loopback GitLab,
	// each running demoDuration.
	demoJobs     int
	demoDuration time.Duration
}

type downOptions struct {
	purge bool
	grace time.Duration
}

// openStack is the one place that maps a stack name to what runs it. The
// local stack is a control plane on this machine that fleet starts before it
// runs the program; the cloud stacks need credentials and the AWS or GCP
// provider plugin, and are deployed with pulumi up.
func openStack(c common, stdout, stderr io.Writer) (stack, error) {
	switch c.stack {
	case "local":
		return newLocalStack(c, stdout, stderr)
	case "":
		return nil, fmt.Errorf("--stack is empty: name a stack, for example --stack local")
	default:
		return nil, fmt.Errorf("stack %q: fleet runs the local stack only; deploy a cloud stack with `pulumi up --stack %s` in the checkout (stacks/README.md)", c.stack, c.stack)
	}
}

// repoRoot finds the runnerfleet checkout: above the working directory, else
// above the fleet binary (bin/fleet of a checkout). "" when there is none.
func repoRoot() string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for {
			b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && strings.HasPrefix(string(b), "module github.com/runnerfleet/runnerfleet\n") {
				return dir
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return ""
}
