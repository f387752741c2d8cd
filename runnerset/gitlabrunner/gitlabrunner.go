// Package gitlabrunner holds the facts about the gitlab-runner process that
// every fleet relies on, whether its managers run as RunnerSet pods, in the
// shared fleet or on VMs: where it serves metrics, how it is asked to drain,
// what a runner token looks like. It imports only the standard library, so
// the drain agent on a VM can use it too.
package gitlabrunner

import (
	"fmt"
	"regexp"
	"time"
)

// MetricsPort is where gitlab-runner serves Prometheus metrics.
const MetricsPort = 9252

// ListenAddress is config.toml's listen_address: metrics on MetricsPort.
var ListenAddress = fmt.Sprintf(":%d", MetricsPort)

// LocalMetricsURL is the metrics endpoint as seen from the runner's own host.
var LocalMetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", MetricsPort)

// TokenFormat is what runnerfleet accepts as a runner token. config.toml
// gets the token through the TOML encoder whatever it holds; this refuses
// what cannot be a token (a pasted newline or label) before any manager
// sees it.
var TokenFormat = regexp.MustCompile(`^[A-Za-z0-9._-]{8,512}$`)

// DrainMarginSeconds is what a wait for a draining gitlab-runner adds to
// the longest job it may still run: the last job's report, the process's
// exit and its pod's or VM's removal. A shared fleet's manager pods get it
// on top of the job timeout as their grace, fleet rotate on top of
// --job-timeout as its default --drain-timeout, and the program on top of
// a RunnerSet's shutdownTimeout as the wait of its deletion. Untyped, for
// the grace periods counted in seconds.
const DrainMarginSeconds = 600

// DrainMargin is DrainMarginSeconds as a duration.
const DrainMargin = DrainMarginSeconds * time.Second

// DrainCommand is a manager pod's preStop hook: SIGQUIT makes gitlab-runner
// take no new job and exit once its jobs are done, and the hook waits for it
// to exit. PID 1 is gitlab-runner or an init (dumb-init, tini) that forwards
// the signal to it. Callers get a copy.
func DrainCommand() []string {
	return []string{"/bin/sh", "-c", "kill -QUIT 1; while kill -0 1 2>/dev/null; do sleep 1; done"}
}
