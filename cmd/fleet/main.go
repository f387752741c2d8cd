// Command fleet is the operator CLI of runnerfleet: it brings a stack up,
// shows its status and takes it down.
//
//	fleet up     --stack local   a local control plane, the Pulumi program inline, the controller
//	fleet status --stack local   RunnerSets, control-plane processes, kubeconfig
//	fleet down   --stack local   stop everything
//	fleet rotate                 blue/green rotation of a VM manager group, no job lost
//	fleet gc                     orphaned autoscaled VMs, spot requests and old images
//
// fleet up runs the same Pulumi program as `pulumi up` (infra.Program),
// inline through the Automation API. The cloud stacks are deployed with
// `pulumi up --stack <stack>` from a checkout; every stack goes through
// openStack (stack.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const usage = `fleet is the operator CLI of runnerfleet.

Usage:
  fleet up     [--stack local] [--state-dir DIR] [--timeout 3m] [--config FILE] [--demo-jobs N [--demo-duration 30s]]
  fleet status [--stack local] [--state-dir DIR]
  fleet down   [--stack local] [--state-dir DIR] [--purge]
  fleet rotate --provider gce|ec2 --group G --image I --zone Z --machine-type T [--drain-timeout 2h] [--webhook URL]
  fleet gc     --provider gce|ec2 [--image-family F --keep 3] [--apply]

Run fleet <command> -h for the flags of one command.
`

// errUsage is a command line fleet cannot run; usage has been printed.
var errUsage = errors.New("usage")

// errHelp: -h was asked for and answered.
var errHelp = errors.New("help")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, errHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// common are the flags of every command.
type common struct {
	stack    string
	stateDir string
}

func (c *common) bind(fs *flag.FlagSet) {
	def := os.Getenv("FLEET_STACK")
	if def == "" {
		def = "local"
	}
	fs.StringVar(&c.stack, "stack", def, "the stack to work on ($FLEET_STACK); only local exists for now")
	fs.StringVar(&c.stateDir, "state-dir", "", "where the local stack keeps its state (default <repo>/.local/<stack>)")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("fleet "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.bind(fs)
	switch cmd {
	case "up":
		var o upOptions
		fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long to wait for the stack's RunnerSets to become Ready")
		fs.StringVar(&o.config, "config", "", "the stack config to deploy (default <repo>/stacks/Pulumi.<stack>.yaml)")
		fs.IntVar(&o.demoJobs, "demo-jobs", 0, "local stack: queue this many jobs per RunnerSet in the loopback GitLab, for the managers to run")
		fs.DurationVar(&o.demoDuration, "demo-duration", 30*time.Second, "local stack: how long each demo job runs")
		if err := parse(fs, args); err != nil {
			return err
		}
		s, err := openStack(c, stdout, stderr)
		if err != nil {
			return err
		}
		return s.Up(ctx, o)
	case "status":
		if err := parse(fs, args); err != nil {
			return err
		}
		s, err := openStack(c, stdout, stderr)
		if err != nil {
			return err
		}
		return s.Status(ctx)
	case "down":
		var o downOptions
		fs.BoolVar(&o.purge, "purge", false, "also delete the state directory: certificates, kubeconfig, etcd data and logs")
		fs.DurationVar(&o.grace, "grace", 20*time.Second, "how long each process may take to exit after SIGTERM before SIGKILL")
		if err := parse(fs, args); err != nil {
			return err
		}
		s, err := openStack(c, stdout, stderr)
		if err != nil {
			return err
		}
		return s.Down(ctx, o)
	case "local-gitlab": // started by fleet up --stack local, not by hand
		return serveLocalGitLab(ctx, args, stderr)
	case "rotate":
		return rotate(ctx, args, stdout, stderr)
	case "gc":
		return gc(ctx, args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprintf(stderr, "fleet: unknown command %q\n\n%s", cmd, usage)
		return errUsage
	}
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}
