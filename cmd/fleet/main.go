// Command fleet is the operator CLI of runnerfleet: it brings a stack up,
// shows its status and takes it down, rotates VM manager groups and
// collects what lost managers left behind.
//
//	fleet up     --stack local              a local control plane with a real node, the Pulumi program inline, the controller
//	fleet up     --kubeconfig PATH          the controller, the stack's RunnerClass and teams into an existing cluster
//	fleet status [-o table|json]            RunnerSets, the controller, what runs it
//	fleet down                              drain and remove what fleet up brought
//	fleet check [Pulumi.<stack>.yaml ...]   decode and check stack configs and the config.toml they render
//	fleet preview --stack X                 the checks, then pulumi preview: what fleet up would change
//	fleet rotate                            blue/green rotation of a VM manager group, no job lost
//	fleet gc                                orphaned autoscaled VMs, spot requests and old images
//	fleet image-name                        the name of a VM manager image, from its inputs
//	fleet vm-runner                         create, or adopt and check, a VM group's GitLab runner
//	fleet quota-exporter                    a project's regional Compute quotas on /metrics
//
// The Pulumi program and the stack configs are compiled in, so fleet runs
// from any directory; every stack goes through openStack (stack.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/runnerfleet/runnerfleet/internal/imageref"
	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/stacks"
)

// errUsage is a command line fleet cannot run; the reason has been printed.
var errUsage = errors.New("usage")

// errHelp: -h was asked for and answered.
var errHelp = errors.New("help")

func main() {
	if filepath.Base(os.Args[0]) == "fleet" {
		progName = os.Args[0] // bin/fleet, as make down runs it
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var stopped *stoppedError
	switch {
	case err == nil, errors.Is(err, errHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case errors.As(err, &stopped):
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(exitStopped)
	default:
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// common are the flags of the stack commands.
type common struct {
	stack      string
	stateDir   string
	config     string
	kubeconfig string
	context    string
}

func (c *common) bind(cmd *cobra.Command) {
	def := os.Getenv("FLEET_STACK")
	if def == "" {
		def = stackLocal
	}
	f := cmd.PersistentFlags()
	f.StringVar(&c.stack, "stack", def, "the stack to work on ($FLEET_STACK): "+strings.Join(stacks.Names(), ", ")+", or your own with --config")
	f.StringVar(&c.stateDir, "state-dir", "", "where the local stack keeps its state (default <checkout>/.local/<stack>, else ~/.local/state/runnerfleet/<stack>)")
	f.StringVar(&c.config, "config", "", "the stack config to deploy (default the stack's Pulumi.<stack>.yaml compiled into fleet)")
	f.StringVar(&c.kubeconfig, "kubeconfig", "", "an existing cluster to install into (kind, minikube, EKS, GKE) instead of creating one")
	f.StringVar(&c.context, "context", "", "the kubeconfig context to use (default its current context)")
	_ = cmd.RegisterFlagCompletionFunc("stack", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return stacks.Names(), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return kubeContexts(c.kubeconfig), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.MarkPersistentFlagFilename("config", "yaml", "yml")
	_ = cmd.MarkPersistentFlagFilename("kubeconfig")
}

// newRoot is the fleet command tree.
func newRoot(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	var c common
	root := &cobra.Command{
		Use:   "fleet",
		Short: "The operator CLI of runnerfleet: GitLab CI runner fleets on Kubernetes and VMs",
		Long: `fleet brings a runnerfleet stack up, shows its status and takes it down,
rotates VM manager groups blue/green without losing a job, and removes what
lost managers left behind.

A stack is a Pulumi stack config (stacks/Pulumi.<stack>.yaml, compiled into
fleet): the local stack starts a control plane on this machine; with
--kubeconfig, fleet installs the controller, the stack's RunnerClass and its
teams into a cluster you already have.`,
		Version:       version.Get(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate(version.String("fleet") + "\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	root.CompletionOptions.HiddenDefaultCmd = false

	stackCmds := &cobra.Group{ID: "stack", Title: "Stacks:"}
	vmCmds := &cobra.Group{ID: "vm", Title: "VM manager groups:"}
	root.AddGroup(stackCmds, vmCmds)

	var up upOptions
	upCmd := &cobra.Command{
		Use:     "up",
		GroupID: "stack",
		Short:   "Bring a stack up and wait until its RunnerSets are Ready",
		Long: `fleet up deploys a stack and waits until every RunnerSet it declares is Ready.

With --stack local (the default) it starts a control plane on this machine
(etcd, kube-apiserver, kwok's nodes, Karpenter's kwok provider), runs the
Pulumi program inline through the Automation API (a file backend in the state
directory, no Pulumi service) and runs the controller beside it.

With --kubeconfig it installs into a cluster you already have: runnerfleet's
CRDs, the controller (ServiceAccount, ClusterRole, Deployment, PDB, metrics
Service: the same objects as the Helm chart), the stack's RunnerClass and
its teams. It first checks that the cluster answers and that you may write
every object, and changes nothing when you may not.`,
		Example: `  fleet up                                        # the local stack
  fleet up --stack local --kubeconfig ~/.kube/config --context kind-ci
  fleet up --config my-stack.yaml --kubeconfig ./kubeconfig --image registry.internal/runnerset-controller:v0.1.0
  fleet up --kubeconfig ./kubeconfig --image ghcr.io/runnerfleet/runnerset-controller@sha256:<the release's digests.json>`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if up.image != "" {
				if err := imageref.Check(up.image, version.Image(install.Name)); err != nil {
					return fmt.Errorf("--image %q %v (nothing was changed)", up.image, err)
				}
			}
			// The stack's checks first (fleet check's, preview.go): a
			// stack that fails them starts nothing.
			if err := checkNamedStack(c); err != nil {
				return err
			}
			s, err := openStack(c, stdout, stderr)
			if err != nil {
				return err
			}
			return s.Up(cmd.Context(), up)
		},
	}
	upCmd.Flags().DurationVar(&up.timeout, "timeout", 3*time.Minute, "how long to wait for the stack's RunnerSets to become Ready")
	upCmd.Flags().StringVar(&up.image, "image", "", "the controller image to install with --kubeconfig, repository:tag or repository@sha256:<digest> (default the release's)")
	upCmd.Flags().IntVar(&up.demoJobs, "demo-jobs", 0, "local stack: queue this many jobs per tag set (a RunnerSet's tags; an overflow shares its primary's) in the loopback GitLab, for the managers to run")
	upCmd.Flags().DurationVar(&up.demoDuration, "demo-duration", 30*time.Second, "local stack: how long each demo job runs")

	var st statusOptions
	statusCmd := &cobra.Command{
		Use:     "status",
		GroupID: "stack",
		Short:   "Show a stack's RunnerSets, the controller and what runs them",
		Example: `  fleet status
  fleet status -o json | jq '.runnerSets[] | select(.ready != "True")'
  fleet status --kubeconfig ~/.kube/config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if st.output != "table" && st.output != "json" {
				return fmt.Errorf("-o %q: want table or json", st.output)
			}
			s, err := openStack(c, stdout, stderr)
			if err != nil {
				return err
			}
			return s.Status(cmd.Context(), st)
		},
	}
	statusCmd.Flags().StringVarP(&st.output, "output", "o", "table", "table or json")
	_ = statusCmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp
	})

	var down downOptions
	downCmd := &cobra.Command{
		Use:     "down",
		GroupID: "stack",
		Short:   "Drain and remove what fleet up brought",
		Long: `fleet down deletes the stack's RunnerSets while the controller still runs,
so that every manager drains, every runner created through the GitLab API is
deleted and every node of their capacity is released; then it removes the
rest. The local stack's control plane stops; its state stays unless --purge.

While the RunnerSets drain it says, every 10 seconds when something changed
and every minute when nothing did, which RunnerSets, manager pods and job
pods it waits for and how long each pod's grace has left. It stops, with
exit code 3 and a message naming what is left and the command to go on or
to force, when the controller has not run for a minute (its finalizer can
then never be removed), when nothing changed for --stall-timeout while no
pod is within its grace, or after --timeout. Nothing else is removed then:
the local stack's control plane keeps running, and fleet down again
continues where it stopped.

--force deletes what holds the drain: the manager and job pods left, at
once (it names the jobs that fail first), then, if the controller does not
release a RunnerSet within two minutes or does not run, the RunnerSet's
finalizers (it names what stays behind: the runner in GitLab, the capacity,
the jobs namespace).`,
		Example: `  fleet down
  fleet down --purge
  fleet down --force
  fleet down --kubeconfig ~/.kube/config --context kind-ci`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for flag, d := range map[string]time.Duration{"--timeout": down.timeout, "--stall-timeout": down.stall} {
				if d <= 0 {
					return fmt.Errorf("%s %s: want a positive duration, such as 10m", flag, d)
				}
			}
			s, err := openStack(c, stdout, stderr)
			if err != nil {
				return err
			}
			return s.Down(cmd.Context(), down)
		},
	}
	downCmd.Flags().BoolVar(&down.purge, "purge", false, "also delete the state directory: certificates, kubeconfig, etcd data and logs")
	downCmd.Flags().DurationVar(&down.grace, "grace", 20*time.Second, "how long each process may take to exit after SIGTERM before SIGKILL")
	downCmd.Flags().DurationVar(&down.timeout, "timeout", 30*time.Minute, "how long the RunnerSets may take to drain")
	downCmd.Flags().DurationVar(&down.stall, "stall-timeout", 3*time.Minute, "stop when nothing changed for this long and no pod is within its grace")
	downCmd.Flags().BoolVar(&down.force, "force", false, "delete the manager and job pods left at once (their jobs fail, named first), then the finalizer of a RunnerSet the controller does not release")

	previewCmd := previewCmd(&c, stdout, stderr)
	for _, cmd := range []*cobra.Command{upCmd, statusCmd, downCmd, previewCmd} {
		c.bind(cmd)
		root.AddCommand(cmd)
	}
	root.AddCommand(checkCmd(stdout))
	root.AddCommand(costCmd(stdout, stderr))

	// local-gitlab is the local stack's loopback GitLab, started by fleet up
	// --stack local (local.go), not by hand.
	root.AddCommand(&cobra.Command{
		Use: "local-gitlab", Hidden: true, DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return serveLocalGitLab(cmd.Context(), args, stderr)
		},
	})

	// rotate and gc parse their own flags (vm.go); cobra only routes.
	vm := func(use, short, long, example string, f func(context.Context, []string, io.Writer, io.Writer) error) *cobra.Command {
		return &cobra.Command{
			Use: use, GroupID: "vm", Short: short, Long: long, Example: example,
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				return f(cmd.Context(), args, stdout, stderr)
			},
		}
	}
	root.AddCommand(vm("rotate [flags]", "Rotate a VM manager group blue/green without losing a job",
		`fleet rotate brings up the new color of a manager group and waits until it is
healthy, then asks every old VM to drain (fleet-agent stops gitlab-runner
gracefully) and deletes each once it is done. A VM still running jobs is
never deleted; a rerun continues where an interrupted rotation stopped.
Run fleet rotate -h for its flags.`,
		`  fleet rotate --provider gce --project ci-prod --windows \
    --image wsrm-2026-11-30 --zone us-east1-b --machine-type n2d-standard-8 \
    --drain-timeout 2h --webhook https://chat.example.com/hooks/ci`, rotate))
	root.AddCommand(vm("gc [flags]", "Find, and with --apply delete, orphaned VMs, spot requests and old images",
		`fleet gc finds autoscaled VMs whose manager is proven absent (learned from
every --source that can own VMs: the cluster's manager pods, manager VMs)
for longer than --grace and that run no job, open spot requests without an
instance (EC2) and images beyond the newest --keep of each --image-family
that nothing boots from. It only shows them unless --apply, and refuses
--apply when a source does not answer. Run fleet gc -h for its flags.`,
		`  fleet gc --provider gce --project ci-prod --source kubernetes --context gke-ci -o json
  fleet gc --provider gce --project ci-prod --source vm --image-family wsrm --keep 3
  fleet gc --provider ec2 --region eu-west-1 --source vm --grace 2h --apply`, gc))
	root.AddCommand(vm("image-name [flags]", "Print the name of a VM manager image, computed from its inputs",
		`fleet image-name prints <family>-<digest>, the name of the manager image
built from the given inputs (the image's OS and version, the gitlab-runner and
fleet-agent versions, the config.toml it installs and any other file): the
name the image build gives the image, which fleet rotate requires and fleet gc
keeps when they are given the same inputs. Run fleet image-name -h for its
flags.`,
		`  fleet image-name --image-family wsrm --image-os windows --image-os-version 2022 \
    --image-runner-version 17.5.0 --image-agent-version 0.1.0 --image-runner-config windows/config.toml`, imageName))
	root.AddCommand(vm("vm-runner [flags]", "Create, or adopt and check, the GitLab runner of a VM manager group",
		`fleet vm-runner creates the instance runner a VM manager group's managers
authenticate as, with the group's tags (<os> and <os>-<version>, or the
--runner-tag ones), and writes its token to --runner-token-file; or adopts an
existing one (--gitlab-runner-id, or the one marked as the group's) once its
tags in GitLab are the group's. Run fleet vm-runner -h for its flags.`,
		`  fleet vm-runner --windows --image-os-version 2022 --gitlab-url https://gitlab.example.com \
    --gitlab-token-file ~/.config/gitlab-admin-token --runner-token-file wsrm-runner-token`, vmRunner))
	root.AddCommand(quotaExporterCmd(stderr))
	return root
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRoot(ctx, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errUsage), errors.Is(err, errHelp):
		return err
	case isFlagError(err):
		fmt.Fprintf(stderr, "fleet: %v\nRun 'fleet --help' for usage.\n", err)
		return errUsage
	}
	return err
}

// isFlagError: cobra's errors for an unknown command or flag, or a bad
// flag value.
func isFlagError(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "invalid argument", "flag needs an argument", "accepts no arguments", "required flag"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// parse parses the flags of rotate and gc (vm.go).
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
