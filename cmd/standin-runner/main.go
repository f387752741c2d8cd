// Command standin-runner is the stand-in for gitlab-runner that the local
// cluster's real node runs as its managers (see localstack/standin): the
// image names it gitlab-runner, so the manager Deployment's command
// `gitlab-runner run --config … --working-directory …` starts it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/runnerfleet/runnerfleet/localstack/standin"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		fmt.Fprintln(os.Stderr, standin.ErrUsage)
		os.Exit(standin.ExitError)
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	config := fs.String("config", "/etc/gitlab-runner/config.toml", "config.toml")
	fs.String("working-directory", "", "ignored: the stand-in keeps no files")
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(standin.ExitError)
	}
	// Before anything else: SIGQUIT's default would dump goroutines and exit 2.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGINT)
	cfg, err := standin.ReadConfig(*config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(standin.ExitError)
	}
	os.Exit(standin.Run(context.Background(), standin.Options{Config: cfg, Signals: sigs, Log: os.Stderr,
		// A docker+machine manager's state directory: held while it runs.
		MachineState: standin.MachineStateDir(cfg, os.Getenv)}))
}
