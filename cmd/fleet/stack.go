package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/runnerfleet/runnerfleet/internal/checkout"
	"github.com/runnerfleet/runnerfleet/stacks"
)

// stack is what fleet does to one stack.
type stack interface {
	// Up brings the stack up and prints its status.
	Up(ctx context.Context, o upOptions) error
	// Status prints the fleet and what runs it.
	Status(ctx context.Context, o statusOptions) error
	// Down stops the stack.
	Down(ctx context.Context, o downOptions) error
}

type upOptions struct {
	timeout time.Duration
	image   string // the controller image, with --kubeconfig
	// demoJobs queued per RunnerSet in the local stack's loopback GitLab,
	// each running demoDuration.
	demoJobs     int
	demoDuration time.Duration
}

type downOptions struct {
	purge   bool
	grace   time.Duration
	timeout time.Duration // how long RunnerSets may drain
	// stall: fleet down stops when nothing changed for this long and no
	// pod is within its grace.
	stall time.Duration
	// force deletes the manager and job pods left at once (their jobs
	// fail) and removes the finalizer of a RunnerSet the controller does
	// not release.
	force bool
}

// openStack is the one place that maps a stack to what runs it. With
// --kubeconfig any stack config is installed into that cluster. Without, the
// local stack is a control plane on this machine that fleet starts before it
// runs the program; the cloud stacks create their cluster with pulumi up.
func openStack(c common, stdout, stderr io.Writer) (stack, error) {
	if c.stack == "" {
		return nil, fmt.Errorf("--stack is empty: name one of %s", strings.Join(stacks.Names(), ", "))
	}
	if c.config == "" && !slices.Contains(stacks.Names(), c.stack) {
		return nil, fmt.Errorf("no stack %q: the stacks are %s (or give your own config with --config FILE)", c.stack, strings.Join(stacks.Names(), ", "))
	}
	if c.kubeconfig != "" {
		return newClusterStack(c, stdout, stderr)
	}
	if c.stack == stackLocal {
		return newLocalStack(c, stdout, stderr)
	}
	return nil, fmt.Errorf("stack %q creates its own cluster in the cloud: run pulumi up --stack %s in a checkout (stacks/README.md), or install it into a cluster you have with fleet up --stack %s --kubeconfig PATH", c.stack, c.stack, c.stack)
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
	root, err := checkout.Root(starts...)
	if err != nil {
		return ""
	}
	return root
}
