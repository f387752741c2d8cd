package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
	"github.com/runnerfleet/runnerfleet/stacks"
)

// checkOptions are fleet check's flags.
type checkOptions struct {
	stacks []string // --stack: compiled-in stacks
	// noSecrets: config secrets are set outside the file (not checked).
	noSecrets bool
}

// checkCmd decodes and checks stack configs without deploying anything: the
// checks fleet up and the Pulumi program run before they declare anything,
// plus the config oracle's verdict on every config.toml the stack renders.
func checkCmd(stdout io.Writer) *cobra.Command {
	var o checkOptions
	cmd := &cobra.Command{
		Use:     "check [Pulumi.<stack>.yaml ...]",
		GroupID: "stack",
		Short:   "Decode and check stack configs, and every config.toml they render, without deploying",
		Long: `fleet check reads each stack config given (a file named Pulumi.<stack>.yaml:
the stack is its name) or, with --stack, compiled into fleet (every
compiled-in stack when neither is given), and runs on it what fleet up and
the Pulumi program run before they declare anything: the YAML (a key given
twice), the runnerfleet:fleet object (every field, with the stack's
defaults), the RunnerSet and RunnerClass it declares against their CRDs,
and that every config secret it names is set (secure values are not
decrypted: their presence is checked; --no-secrets when they are set
elsewhere). Then the config oracle judges every
config.toml the stack renders (each team's RunnerSet and each shared
fleet's manager group) against the config structs of the pinned
gitlab-runner release: every key known, every value of a type it decodes.

It prints one line per stack, then each problem naming its field and the
fix, and exits 1 when any stack has one. Nothing is deployed or read from a
cluster: a merge-request pipeline runs it on every stack.`,
		Example: `  fleet check                                   # every compiled-in stack
  fleet check stacks/Pulumi.*.yaml              # a platform repository's stacks
  fleet check --no-secrets --stack local --stack gke-shared`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCheck(o, args, stdout)
		},
	}
	cmd.Flags().BoolVar(&o.noSecrets, "no-secrets", false, "do not require the config secrets the stack names to be set in its file (they are set elsewhere before pulumi up)")
	cmd.Flags().StringArrayVar(&o.stacks, "stack", nil, "a stack compiled into fleet to check (repeat it; default every one when no file is given): "+strings.Join(stacks.Names(), ", "))
	_ = cmd.RegisterFlagCompletionFunc("stack", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return stacks.Names(), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// checkTarget is one stack config to check.
type checkTarget struct {
	stack  string
	source string // the file, or "compiled into fleet"
	raw    []byte
}

// stackOfFile is the stack a stack config file is for: Pulumi.<stack>.yaml.
func stackOfFile(path string) (string, error) {
	base := filepath.Base(path)
	name, ok := strings.CutPrefix(base, "Pulumi.")
	if ok {
		name, ok = strings.CutSuffix(name, ".yaml")
	}
	if !ok || name == "" || strings.ContainsAny(name, "/\\") {
		return "", fmt.Errorf("%s: a stack config is named Pulumi.<stack>.yaml (the stack is its name, as pulumi reads it): rename it", path)
	}
	return name, nil
}

func checkTargets(o checkOptions, files []string) ([]checkTarget, error) {
	var out []checkTarget
	for _, f := range files {
		name, err := stackOfFile(f)
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("the %s stack config: %w", name, err)
		}
		out = append(out, checkTarget{stack: name, source: f, raw: b})
	}
	names := o.stacks
	if len(files) == 0 && len(names) == 0 {
		names = stacks.Names()
	}
	for _, name := range names {
		b, err := stacks.Config(name)
		if err != nil {
			return nil, fmt.Errorf("--stack %s: %w", name, err)
		}
		out = append(out, checkTarget{stack: name, source: "compiled into fleet", raw: b})
	}
	return out, nil
}

// errChecksFailed: at least one stack had a problem, printed already.
type errChecksFailed struct{ failed, total int }

func (e *errChecksFailed) Error() string {
	return fmt.Sprintf("%d of %d stack(s) failed their checks; nothing was deployed", e.failed, e.total)
}

func runCheck(o checkOptions, files []string, stdout io.Writer) error {
	targets, err := checkTargets(o, files)
	if err != nil {
		return err
	}
	failed := 0
	for _, t := range targets {
		sum, err := checkStack(t.stack, t.raw, !o.noSecrets)
		if err != nil {
			failed++
			fmt.Fprintf(stdout, "FAIL %s (%s): %v\n", t.stack, t.source, err)
			continue
		}
		fmt.Fprintf(stdout, "ok   %s (%s): %s\n", t.stack, t.source, sum)
	}
	if failed > 0 {
		return &errChecksFailed{failed: failed, total: len(targets)}
	}
	return nil
}

// checkStack runs every check on one stack config and says what it
// checked; the error lists every problem found.
func checkStack(name string, raw []byte, secrets bool) (string, error) {
	v, err := parseStack(name, raw)
	if err != nil {
		return "", err
	}
	f := v.fleet
	// The program reads every config secret before it declares anything
	// (stackconfig.ReadSecrets); fleet check cannot decrypt secure values,
	// so a secure key counts as set with a stand-in that fits every kind.
	if secrets {
		if _, err := f.ReadSecrets(name, func(key string) (string, bool) {
			if s, ok := v.plain[key]; ok {
				return s, true
			}
			if v.secure[key] {
				return secureStandIn, true
			}
			return "", false
		}); err != nil {
			return "", err
		}
	}
	configs, problems, err := oracleVerdicts(f)
	if err != nil {
		return "", err
	}
	if len(problems) > 0 {
		return "", &stackconfig.Error{Extra: problems}
	}
	groups := 0
	for _, s := range f.SharedFleets {
		groups += len(s.Groups)
	}
	vmGroups := ""
	if n := len(f.VMGroupNames()); n > 0 {
		vmGroups = fmt.Sprintf(" and %d VM group(s)", n)
	}
	return fmt.Sprintf("platform %s, %d team(s), %d shared fleet(s) with %d manager group(s)%s; %d config.toml checked against gitlab-runner %s",
		f.Platform, len(f.Teams), len(f.SharedFleets), groups, vmGroups, configs, oracle.GitLabRunnerRelease), nil
}

// secureStandIn stands for a secure config value fleet check does not
// decrypt: a runner token's shape, so that only a missing key is reported.
const secureStandIn = "glrt-secure-value-not-decrypted"

// oracleVerdicts renders every config.toml the stack declares (each team's
// RunnerSet under the stack's RunnerClass, each shared fleet's manager
// group) and has the config oracle judge it; it returns how many it
// checked and each problem, naming the stack config field it comes from.
func oracleVerdicts(f *stackconfig.Fleet) (int, []string, error) {
	sn, err := oracle.Embedded()
	if err != nil {
		return 0, nil, fmt.Errorf("fleet's gitlab-runner schema cannot be read (%v): this is a bug of fleet's build", err)
	}
	var problems []string
	n := 0
	judge := func(field string, c runnerconfig.Config) {
		out, err := runnerconfig.Render(c)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: rendering its config.toml: %v", field, err))
			return
		}
		n++
		problems = append(problems, judgeTOML(sn.Schema, field, out)...)
	}
	class := f.RunnerClass()
	for i, t := range f.Teams {
		field := fmt.Sprintf("%s.teams[%d] (%s/%s)", stackconfig.Root, i, t.Namespace, t.Name)
		rs := t.RunnerSet(class.Name, t.TokenSecretName(), t.APITokenSecretName())
		if fail := runnerconfig.CheckJobSettings(rs, class); fail != nil {
			problems = append(problems, fmt.Sprintf("%s: %s", field, fail.Message))
			continue
		}
		judge(field, runnerconfig.ForRunnerSet(rs, class, runnerconfig.JobPlacement{}))
	}
	for i, s := range f.SharedFleets {
		for j, g := range s.Groups {
			field := fmt.Sprintf("%s.sharedFleets[%d].groups[%d] (%s)", stackconfig.Root, i, j, g.Name)
			c, err := sharedfleet.Config(g)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", field, err))
				continue
			}
			judge(field, c)
		}
	}
	return n, problems, nil
}

// judgeTOML is the config oracle's verdict on one rendered config.toml:
// each problem names the stack config field it was rendered from and the
// config.toml key.
func judgeTOML(schema *oracle.Schema, field string, configTOML []byte) []string {
	err := schema.Check(configTOML)
	if err == nil {
		return nil
	}
	ps := oracle.Problems(err)
	if len(ps) == 0 {
		return []string{fmt.Sprintf("%s: its config.toml: %v", field, err)}
	}
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s: its config.toml, gitlab-runner %s: %s", field, oracle.GitLabRunnerRelease, p))
	}
	return out
}
