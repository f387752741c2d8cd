// Command fleet-agent is runnerfleet's drain agent. It runs beside
// gitlab-runner on each manager VM (Linux or Windows); when fleet asks the VM
// to drain (GCE instance metadata runnerfleet-drain=true, EC2 tag
// runnerfleet:drain=true), it asks the runner to stop gracefully (SIGQUIT on
// Linux, a service stop on Windows), reports its progress (GCE guest
// attributes, EC2 tags) and, once the runner has exited, reports done and
// exits 0, so that fleet rotate can delete the VM without losing a job.
//
//	fleet-agent --provider gce|ec2 [--runner-pid-file FILE] [--runner-pid PID]
//	            [--runner-process-name gitlab-runner] [--service-name gitlab-runner]
//	            [--metrics-url <drainagent.DefaultMetricsURL>] [--interval 10s]
//	fleet-agent --provider gce|ec2 --report-jobs [--docker-host unix:///var/run/docker.sock]
//
// With --report-jobs it runs on an autoscaled (job) VM instead and reports,
// every --interval, how many GitLab jobs have a running container there,
// which fleet gc needs to prove a VM idle before deleting it.
//
// The work is in provisioning/drainagent; this is flags and wiring. Logs are
// JSON lines (log/slog) on stderr, or in --log-file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/provisioning/drainagent"
)

// stdout is where --version goes.
var stdout io.Writer = os.Stdout

// errUsage is a command line the agent cannot run; the reason has been
// printed.
var errUsage = errors.New("usage")

func main() {
	// As a Windows service, the service control manager drives the agent
	// (service_windows.go).
	if runAsService(os.Args[1:]) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(exitCode(ctx, err))
}

// exitCode: 0 after done, and after a stop signal; 2 for usage errors.
func exitCode(ctx context.Context, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return 0 // stopped (the log says so)
	default:
		return 1
	}
}

// config is the command line.
type config struct {
	provider     string
	runner       drainagent.RunnerOptions
	metricsURL   string
	interval     time.Duration
	poll         time.Duration
	logLevel     slog.Level
	logFile      string
	imdsEndpoint string
	ec2Endpoint  string
	ec2Poll      time.Duration
	gceMetadata  string
	reportJobs   bool
	dockerHost   string
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("fleet-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.provider, "provider", "", "the cloud the VM runs in: "+strings.Join(knownProviders, " or "))
	fs.StringVar(&c.runner.PIDFile, "runner-pid-file", "", "Linux: file holding gitlab-runner's pid, optionally followed by its start time (field 22 of /proc/<pid>/stat)")
	fs.IntVar(&c.runner.PID, "runner-pid", 0, "Linux: gitlab-runner's pid")
	fs.StringVar(&c.runner.ProcessName, "runner-process-name", drainagent.DefaultProcessName, "Linux: gitlab-runner's executable name, to find the process running it with the argument \"run\" (empty: only by pid or pid file)")
	fs.StringVar(&c.runner.ServiceName, "service-name", drainagent.DefaultServiceName, "Windows: gitlab-runner's service")
	fs.StringVar(&c.metricsURL, "metrics-url", drainagent.DefaultMetricsURL, "gitlab-runner's Prometheus metrics endpoint (its listen_address)")
	fs.DurationVar(&c.interval, "interval", drainagent.DefaultInterval, "how often to report the drain while nothing changes")
	fs.DurationVar(&c.poll, "poll", drainagent.DefaultPoll, "how often to look at the runner and its job count")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	fs.StringVar(&c.logFile, "log-file", "", "append the JSON log to this file instead of stderr")
	fs.StringVar(&c.imdsEndpoint, "imds-endpoint", "", "EC2: instance metadata endpoint (default the SDK's, $AWS_EC2_METADATA_SERVICE_ENDPOINT or http://169.254.169.254)")
	fs.StringVar(&c.ec2Endpoint, "ec2-endpoint", "", "EC2: EC2 API endpoint (default the region's)")
	fs.StringVar(&c.gceMetadata, "gce-metadata-url", "", "GCE: metadata API root (default http://$GCE_METADATA_HOST/computeMetadata/v1, else http://metadata.google.internal/computeMetadata/v1)")
	fs.BoolVar(&c.reportJobs, "report-jobs", false, "on an autoscaled VM: report, every --interval, how many GitLab jobs have a running container (for fleet gc), instead of waiting for a drain")
	fs.StringVar(&c.dockerHost, "docker-host", drainagent.DefaultDockerHost, "with --report-jobs: the VM's Docker engine")
	fs.DurationVar(&c.ec2Poll, "ec2-poll", 0, "EC2: how often to read the drain tag from instance metadata (default the provider's, 5s)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, errUsage
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String("fleet-agent"))
		return c, flag.ErrHelp
	}
	fail := func(format string, args ...any) (config, error) {
		fmt.Fprintf(stderr, "fleet-agent: "+format+"\n", args...)
		fs.Usage()
		return c, errUsage
	}
	switch {
	case fs.NArg() > 0:
		return fail("unexpected arguments %q", fs.Args())
	case c.provider == "":
		return fail("--provider is required")
	case !isKnownProvider(c.provider):
		return fail("unknown --provider %q: want %s", c.provider, strings.Join(knownProviders, " or "))
	case c.interval <= 0 || c.poll <= 0:
		return fail("--interval and --poll must be positive")
	}
	return c, nil
}

// run runs the agent until the drain is done (nil) or ctx ends.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	c, err := parse(args, stderr)
	if err != nil {
		return err
	}
	logw := stderr
	if c.logFile != "" {
		f, err := os.OpenFile(c.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		logw = f
	}
	log := slog.New(slog.NewJSONHandler(logw, &slog.HandlerOptions{Level: c.logLevel}))

	if c.reportJobs {
		self, err := connect(ctx, c, log)
		if err != nil {
			return err
		}
		log.Info("fleet-agent reporting the VM's jobs", "provider", c.provider, "docker_host", c.dockerHost, "interval", c.interval.String())
		r := &drainagent.JobReporter{Self: self, Jobs: &drainagent.DockerJobCounter{Host: c.dockerHost}, Interval: c.interval, Log: log}
		return r.Run(ctx)
	}

	runner, err := drainagent.NewRunnerControl(c.runner, log)
	if err != nil {
		log.Error("cannot control the runner", "err", err)
		return err
	}
	self, err := connect(ctx, c, log)
	if err != nil {
		return err
	}
	agent := &drainagent.Agent{
		Self:     self,
		Runner:   runner,
		Jobs:     &drainagent.MetricsJobCounter{URL: c.metricsURL},
		Interval: c.interval,
		Poll:     c.poll,
		Log:      log,
	}
	log.Info("fleet-agent waiting for a drain request", "provider", c.provider, "metrics_url", c.metricsURL,
		"interval", c.interval.String())
	err = agent.Run(ctx)
	if err != nil && ctx.Err() != nil {
		log.Info("fleet-agent stopped before the drain was done", "err", err)
	}
	return err
}

// connect makes the provider's Self, retrying while the cloud's metadata
// service is not there yet (early in boot); a provider this agent is not
// built with fails at once.
func connect(ctx context.Context, c config, log *slog.Logger) (providers.Self, error) {
	newSelf, ok := selfConstructors[c.provider]
	if !ok {
		err := fmt.Errorf("provider %s is not built into this agent", c.provider)
		log.Error("cannot watch for drain requests", "err", err)
		return nil, err
	}
	o := selfOptions{log: log, imdsEndpoint: c.imdsEndpoint, ec2Endpoint: c.ec2Endpoint, ec2Poll: c.ec2Poll, gceMetadataURL: c.gceMetadata}
	backoff := time.Second
	for {
		self, err := newSelf(ctx, o)
		if err == nil {
			return self, nil
		}
		if ctx.Err() != nil {
			log.Info("fleet-agent stopped before it could watch for drain requests", "err", err)
			return nil, ctx.Err()
		}
		log.Error("connecting to the instance's metadata failed; retrying", "provider", c.provider, "err", err,
			"retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}
