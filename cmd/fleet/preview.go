package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/spf13/cobra"

	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/stacks"
)

// previewOptions are fleet preview's own flags.
type previewOptions struct {
	summary string // a Markdown file the summary is written to
}

// previewCmd runs pulumi preview of a stack through the Automation API,
// after the stack's checks (fleet check): nothing is applied.
func previewCmd(c *common, stdout, stderr io.Writer) *cobra.Command {
	var o previewOptions
	cmd := &cobra.Command{
		Use:     "preview",
		GroupID: "stack",
		Short:   "Check a stack, then show what pulumi up would change, without changing anything",
		Long: `fleet preview runs the checks of fleet check on the stack config, then
pulumi preview of the stack with the Pulumi program compiled into fleet
(the Automation API, the same workspace and state as fleet up), and prints
what would be created, updated, replaced and deleted. Nothing is applied.

With --summary it also writes that summary as Markdown to a file: the
merge-request pipeline (ci/runnerfleet.gitlab-ci.yml) attaches it to the
merge request. The local stack previews against its running control plane
(fleet up --stack local first).`,
		Example: `  fleet preview --stack local --summary preview-local.md
  fleet preview --stack staging --config stacks/Pulumi.staging.yaml --kubeconfig ./kubeconfig`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPreview(cmd.Context(), *c, o, stdout, stderr)
		},
	}
	cmd.Flags().StringVar(&o.summary, "summary", "", "also write the preview's summary as Markdown to this file (the pipeline attaches it to the merge request)")
	_ = cmd.MarkFlagFilename("summary", "md")
	return cmd
}

// previewProgram is the program of the stack fleet up would run, in the
// same workspace, so that the preview compares against the stack's state.
func previewProgram(ctx context.Context, c common, stderr io.Writer) (*program, error) {
	if c.stack == stackLocal {
		s, err := newLocalStack(c, io.Discard, stderr)
		if err != nil {
			return nil, err
		}
		file, err := s.stackFile()
		if err != nil {
			return nil, err
		}
		kubeconfig := c.kubeconfig
		if kubeconfig == "" {
			kubeconfig = localcluster.KubeconfigPath(s.dir)
			if _, err := os.Stat(kubeconfig); err != nil {
				return nil, fmt.Errorf("the local stack is not up (no %s): run %s first", kubeconfig, commandLine(append([]string{"up", "--stack", stackLocal}, s.flags...)...))
			}
		}
		tools, err := pulumiTools(ctx, s.root, stderr)
		if err != nil {
			return nil, err
		}
		// The RunnerClass names the stack's Prometheus, as fleet up does.
		var prom string
		if c.kubeconfig == "" {
			cl, err := localcluster.Open(ctx, s.dir)
			if err != nil {
				return nil, err
			}
			if prom, err = cl.PrometheusAddress(); err != nil {
				return nil, err
			}
		}
		return s.program(tools, file, kubeconfig, prom), nil
	}
	dir := c.stateDir
	root := repoRoot()
	if dir == "" {
		if root == "" {
			return nil, fmt.Errorf("no state directory for the %s stack: give --state-dir", c.stack)
		}
		dir = filepath.Join(root, ".local", c.stack)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	file := c.config
	if file == "" {
		b, err := stackConfigBytes(c)
		if err != nil {
			return nil, err
		}
		file = filepath.Join(dir, "Pulumi."+c.stack+".yaml")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(file, b, 0o600); err != nil {
			return nil, err
		}
	}
	tools, err := pulumiTools(ctx, root, stderr)
	if err != nil {
		return nil, err
	}
	return &program{stack: c.stack, stackFile: file, dir: filepath.Join(dir, "pulumi"), tools: tools, kubeconfig: c.kubeconfig, stderr: stderr}, nil
}

func runPreview(ctx context.Context, c common, o previewOptions, stdout, stderr io.Writer) error {
	if err := checkNamedStack(c); err != nil {
		return err
	}
	p, err := previewProgram(ctx, c, stderr)
	if err != nil {
		return err
	}
	res, err := p.preview(ctx)
	if err != nil {
		return err
	}
	sum := previewSummary(c.stack, res)
	fmt.Fprint(stdout, sum)
	if o.summary != "" {
		if err := os.WriteFile(o.summary, []byte(sum), 0o644); err != nil {
			return fmt.Errorf("--summary: %w", err)
		}
	}
	return nil
}

// checkNamedStack runs fleet check's checks on the stack --stack and
// --config name, as fleet up and fleet preview read it: a job fails on
// them, with the stack's own error, before anything starts or any Pulumi
// runs. Config secrets are left to the program, which reads them from
// wherever pulumi config has them.
func checkNamedStack(c common) error {
	if c.stack == "" {
		return fmt.Errorf("--stack is empty: name the stack to work on")
	}
	var raw []byte
	var err error
	switch root := repoRoot(); {
	case c.config != "":
		raw, err = os.ReadFile(c.config)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--config %s: no such stack config for stack %q%s", c.config, c.stack, stacksBeside(c.config))
		}
	case c.stack == stackLocal && root != "":
		raw, err = os.ReadFile(filepath.Join(root, "stacks", "Pulumi."+stackLocal+".yaml"))
	default:
		raw, err = stacks.Config(c.stack)
	}
	if err != nil {
		return err
	}
	if _, err := checkStack(c.stack, raw, false); err != nil {
		return fmt.Errorf("the %s stack: %w", c.stack, err)
	}
	return nil
}

// stacksBeside names the stack configs in the directory of path, for a
// message about a stack that has none there.
func stacksBeside(path string) string {
	dir := filepath.Dir(path)
	matches, _ := filepath.Glob(filepath.Join(dir, "Pulumi.*.yaml"))
	var names []string
	for _, m := range matches {
		if n, err := stackOfFile(m); err == nil {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf(" (%s holds no Pulumi.<stack>.yaml)", dir)
	}
	return fmt.Sprintf(": the stacks in %s are %s", dir, strings.Join(names, ", "))
}

// preview runs pulumi preview of the program; nothing is applied.
func (p *program) preview(ctx context.Context) (auto.PreviewResult, error) {
	st, err := p.open(ctx)
	if err != nil {
		return auto.PreviewResult{}, err
	}
	fmt.Fprintf(p.stderr, "pulumi preview --stack %s (inline program, state in %s)\n", p.stack, filepath.Join(p.dir, "state"))
	res, err := st.Preview(ctx, optpreview.ProgressStreams(p.stderr), optpreview.ErrorProgressStreams(p.stderr), optpreview.Color("never"), optpreview.Diff())
	if err != nil {
		return res, fmt.Errorf("pulumi preview of the %s stack: %w", p.stack, err)
	}
	return res, nil
}

// previewSummary is the Markdown a merge request shows: the count of each
// operation, then pulumi's own diff.
func previewSummary(stack string, res auto.PreviewResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### pulumi preview of stack `%s`\n\n", stack)
	ops := make([]string, 0, len(res.ChangeSummary))
	changes := 0
	for op, n := range res.ChangeSummary {
		ops = append(ops, string(op))
		if op != "same" {
			changes += n
		}
	}
	sort.Strings(ops)
	if changes == 0 {
		b.WriteString("No changes.\n\n")
	} else {
		fmt.Fprintf(&b, "%d change(s).\n\n", changes)
	}
	if len(ops) > 0 {
		b.WriteString("| operation | resources |\n| --- | --- |\n")
		for _, op := range ops {
			for k, n := range res.ChangeSummary {
				if string(k) == op {
					fmt.Fprintf(&b, "| %s | %d |\n", op, n)
				}
			}
		}
		b.WriteString("\n")
	}
	if out := strings.TrimSpace(res.StdOut); out != "" {
		b.WriteString("<details><summary>pulumi's output</summary>\n\n```\n")
		b.WriteString(strings.ReplaceAll(out, "```", "` ` `"))
		b.WriteString("\n```\n\n</details>\n")
	}
	return b.String()
}
