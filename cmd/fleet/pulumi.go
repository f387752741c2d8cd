package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/infra"
)

// localPassphrase encrypts the secrets in the local stack's state, a file
// under the state directory. It protects nothing of value (the local stack's
// token is a placeholder); set PULUMI_CONFIG_PASSPHRASE to use your own.
const localPassphrase = "runnerfleet-local-stack"

// program is the runnerfleet Pulumi program run inline through the
// Automation API, with a file backend in the state directory: no Pulumi
// service, no language plugin, no network.
type program struct {
	stack      string
	stackFile  string // stacks/Pulumi.<stack>.yaml, or --config
	dir        string // <state>/pulumi: the workspace and the backend
	tools      string // the directory holding bin/pulumi and home/ (PULUMI_HOME)
	kubeconfig string
	prometheus string // the local platform's Prometheus, which the RunnerClass names
	stderr     io.Writer
}

// pulumiTools finds the Pulumi CLI and the Kubernetes provider plugin:
// $RUNNERFLEET_PULUMI (a directory with bin/pulumi and home/), else built
// once into the cache by hack/tools.sh from a checkout.
func pulumiTools(ctx context.Context, root string, stderr io.Writer) (string, error) {
	if d := os.Getenv("RUNNERFLEET_PULUMI"); d != "" {
		return d, nil
	}
	if root == "" {
		return "", fmt.Errorf("no Pulumi CLI: run fleet in a runnerfleet checkout (hack/tools.sh pulumi builds it), or set RUNNERFLEET_PULUMI to a directory with bin/pulumi and home/ (a PULUMI_HOME with the kubernetes plugin)")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "tools.sh"), "pulumi")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/tools.sh pulumi: %w", err)
	}
	return strings.TrimSpace(out.String()), nil
}

func (p *program) env() map[string]string {
	pass := os.Getenv("PULUMI_CONFIG_PASSPHRASE")
	if pass == "" && os.Getenv("PULUMI_CONFIG_PASSPHRASE_FILE") == "" {
		pass = localPassphrase
	}
	env := map[string]string{
		"PULUMI_BACKEND_URL":                          "file://" + filepath.Join(p.dir, "state"),
		"PULUMI_HOME":                                 filepath.Join(p.tools, "home"),
		"PULUMI_SKIP_UPDATE_CHECK":                    "true",
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
		// The plugin comes from PULUMI_HOME, at the version the program pins,
		// never from whatever pulumi-resource-kubernetes is on $PATH.
		"PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
	}
	if pass != "" {
		env["PULUMI_CONFIG_PASSPHRASE"] = pass
	}
	return env
}

// open selects (or creates) the stack in a workspace under the state
// directory, with the stack's config copied from the checkout so that edits
// to stacks/Pulumi.<stack>.yaml apply on the next run.
func (p *program) open(ctx context.Context) (auto.Stack, error) {
	var st auto.Stack
	for _, d := range []string{p.dir, filepath.Join(p.dir, "state")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return st, err
		}
	}
	if err := p.copyStackFile(); err != nil {
		return st, err
	}
	cmd, err := auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: p.tools, SkipVersionCheck: true})
	if err != nil {
		return st, fmt.Errorf("the Pulumi CLI in %s: %w", p.tools, err)
	}
	proj := workspace.Project{
		Name:    "runnerfleet",
		Runtime: workspace.NewProjectRuntimeInfo("go", nil),
		Backend: &workspace.ProjectBackend{URL: "file://" + filepath.Join(p.dir, "state")},
	}
	env := p.env()
	st, err = auto.UpsertStackInlineSource(ctx, p.stack, proj.Name.String(), infra.ProgramWith(infra.Options{Kubeconfig: p.kubeconfig, PrometheusAddress: p.prometheus}),
		auto.WorkDir(p.dir), auto.Project(proj), auto.Pulumi(cmd), auto.EnvVars(env),
		auto.PulumiHome(env["PULUMI_HOME"]), auto.SecretsProvider("passphrase"))
	if err != nil {
		return st, fmt.Errorf("opening the %s stack in %s: %w", p.stack, p.dir, err)
	}
	return st, nil
}

// copyStackFile copies the stack's config into the workspace. Secure values
// in it are encrypted with its own encryptionsalt, so that salt wins; a
// stack config without one keeps the salt the CLI wrote into the previous
// copy, with which the state's secrets are encrypted.
func (p *program) copyStackFile() error {
	dest := filepath.Join(p.dir, "Pulumi."+p.stack+".yaml")
	if filepath.Clean(p.stackFile) == dest {
		return nil // the workspace's own copy (fleet down)
	}
	b, err := os.ReadFile(p.stackFile)
	if err != nil {
		return fmt.Errorf("the stack config: %w", err)
	}
	if salt(b) == "" {
		if old, err := os.ReadFile(dest); err == nil {
			if line := salt(old); line != "" {
				if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n")) {
					b = append(b, '\n')
				}
				b = append(b, line+"\n"...)
			}
		}
	}
	return os.WriteFile(dest, b, 0o600)
}

// salt returns the encryptionsalt line of a stack config, "" without one.
func salt(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "encryptionsalt:") {
			return line
		}
	}
	return ""
}

// up runs the program and returns the RunnerSets it declared.
func (p *program) up(ctx context.Context) ([]client.ObjectKey, error) {
	st, err := p.open(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(p.stderr, "pulumi up --stack %s (inline program, state in %s)\n", p.stack, filepath.Join(p.dir, "state"))
	res, err := st.Up(ctx, optup.ProgressStreams(p.stderr), optup.ErrorProgressStreams(p.stderr), optup.Color("never"), optup.SuppressOutputs())
	if err != nil {
		return nil, fmt.Errorf("pulumi up of the %s stack: %w", p.stack, err)
	}
	var keys []client.ObjectKey
	if v, ok := res.Outputs["runnerSets"]; ok {
		if list, ok := v.Value.([]any); ok {
			for _, e := range list {
				s, _ := e.(string)
				if ns, n, ok := strings.Cut(s, "/"); ok {
					keys = append(keys, client.ObjectKey{Namespace: ns, Name: n})
				}
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys, nil
}

// destroy deletes everything the program declared; RunnerSets go first,
// while the controller still runs to drain and release them.
func (p *program) destroy(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(p.dir, "state")); err != nil {
		return nil // never deployed
	}
	st, err := p.open(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(p.stderr, "pulumi destroy --stack %s\n", p.stack)
	if _, err := st.Destroy(ctx, optdestroy.ProgressStreams(p.stderr), optdestroy.ErrorProgressStreams(p.stderr), optdestroy.Color("never")); err != nil {
		return fmt.Errorf("pulumi destroy of the %s stack: %w", p.stack, err)
	}
	return nil
}
