package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
	"github.com/runnerfleet/runnerfleet/stacks"
)

// localStackFile is stacks/Pulumi.local.yaml with edit applied.
func localStackFile(t *testing.T, dir, name string, edit func(string) string) string {
	t.Helper()
	b, err := stacks.Config("local")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "Pulumi."+name+".yaml")
	if err := os.WriteFile(p, []byte(edit(string(b))), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every stack compiled into fleet passes fleet check (its secrets set
// elsewhere), each line saying what was checked, the oracle's included.
func TestCheckPassesTheCompiledInStacks(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"check", "--no-secrets"}, &out, &out); err != nil {
		t.Fatalf("fleet check: %v\n%s", err, out.String())
	}
	for _, name := range stacks.Names() {
		if !strings.Contains(out.String(), "ok   "+name+" (compiled into fleet): ") {
			t.Errorf("no ok line for %s in\n%s", name, out.String())
		}
	}
	if !strings.Contains(out.String(), "6 config.toml checked against gitlab-runner "+oracle.GitLabRunnerRelease) {
		t.Errorf("gke-shared's team and five manager groups were not all judged by the oracle:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "with 5 manager group(s) and 1 VM group(s);") {
		t.Errorf("gke-shared's VM group is not counted:\n%s", out.String())
	}
}

// A stack whose checks fail makes fleet check fail, with the stack's own
// error naming the field; the other stacks given are still checked.
func TestCheckFailsOnABadStackNamingTheField(t *testing.T) {
	dir := t.TempDir()
	bad := localStackFile(t, dir, "staging", func(s string) string {
		return strings.Replace(s, "replicas: 1", "replicas: -3", 1)
	})
	good := localStackFile(t, dir, "production", func(s string) string { return s })
	var out bytes.Buffer
	err := run(t.Context(), []string{"check", bad, good}, &out, &out)
	var failed *errChecksFailed
	if !errors.As(err, &failed) || failed.failed != 1 || failed.total != 2 {
		t.Fatalf("fleet check = %v, want 1 of 2 failed\n%s", err, out.String())
	}
	for _, want := range []string{
		"FAIL staging (" + bad + "): ",
		"runnerfleet:fleet.teams[0].managers.replicas",
		"ok   production (" + good + "): ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q in\n%s", want, out.String())
		}
	}
}

// A config secret the stack names must be in its file (plain or secure);
// --no-secrets leaves it to the program.
func TestCheckWantsEveryConfigSecretSet(t *testing.T) {
	dir := t.TempDir()
	missing := localStackFile(t, dir, "missing", func(s string) string {
		return s[:strings.Index(s, "  runnerfleet:teamABuildToken:")]
	})
	secure := localStackFile(t, dir, "secure", func(s string) string {
		i := strings.Index(s, "  runnerfleet:teamABuildToken:")
		return s[:i] + "  runnerfleet:teamABuildToken:\n    secure: v1:AAAAAAAAAAAAAAAA:BBBBBBBBBBBBBBBBBBBBBBBB\n"
	})
	var out bytes.Buffer
	if err := run(t.Context(), []string{"check", missing}, &out, &out); err == nil ||
		!strings.Contains(out.String(), "runnerfleet:fleet.teams[0].tokenConfigKey: config key runnerfleet:teamABuildToken is not set: pulumi config set --secret teamABuildToken") {
		t.Fatalf("a stack without its token: fleet check = %v\n%s", err, out.String())
	}
	for _, args := range [][]string{{"check", secure}, {"check", "--no-secrets", missing}} {
		out.Reset()
		if err := run(t.Context(), args, &out, &out); err != nil {
			t.Errorf("fleet %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
}

// A pipeline variable that names no stack fails at once, naming the
// stacks there are; so does a file not named Pulumi.<stack>.yaml.
func TestCheckRefusesWhatNamesNoStack(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"check", "--stack", "nope"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), `--stack nope: no stack "nope": the stacks are eks-dev, gke-shared, local`) {
		t.Fatalf("fleet check --stack nope = %v", err)
	}
	err = run(t.Context(), []string{"check", filepath.Join(t.TempDir(), "staging.yaml")}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "a stack config is named Pulumi.<stack>.yaml") {
		t.Fatalf("fleet check staging.yaml = %v", err)
	}
	err = run(t.Context(), []string{"preview", "--stack", "nope"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), `no stack "nope"`) {
		t.Fatalf("fleet preview --stack nope = %v", err)
	}
}

// fleet preview runs the stack's checks before any Pulumi: a bad stack
// fails with its own error and nothing is previewed (no Pulumi workspace
// is made in the state directory).
func TestPreviewFailsEarlyOnABadStack(t *testing.T) {
	dir := t.TempDir()
	bad := localStackFile(t, dir, "local", func(s string) string {
		return strings.Replace(s, "replicas: 1", "replicas: -3", 1)
	})
	state := filepath.Join(dir, "state")
	var out bytes.Buffer
	err := run(t.Context(), []string{"preview", "--stack", "local", "--config", bad, "--state-dir", state}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "the local stack: the stack config has") || !strings.Contains(err.Error(), "managers.replicas") {
		t.Fatalf("fleet preview of a bad stack = %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "pulumi")); !os.IsNotExist(err) {
		t.Fatalf("a Pulumi workspace was made for a stack that failed its checks: %v", err)
	}
}

// fleet up runs the same checks before it starts anything: a bad stack
// fails with its own error and no state directory is made; a --config
// that names no file says which stacks are beside it.
func TestUpFailsEarlyOnABadStack(t *testing.T) {
	dir := t.TempDir()
	bad := localStackFile(t, dir, "local", func(s string) string {
		return strings.Replace(s, "replicas: 1", "replicas: -3", 1)
	})
	state := filepath.Join(dir, "state")
	var out bytes.Buffer
	err := run(t.Context(), []string{"up", "--stack", "local", "--config", bad, "--state-dir", state}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "the local stack: the stack config has") || !strings.Contains(err.Error(), "managers.replicas") {
		t.Fatalf("fleet up of a bad stack = %v", err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("fleet up made its state directory for a stack that failed its checks: %v", err)
	}
	err = run(t.Context(), []string{"up", "--stack", "staging", "--config", filepath.Join(dir, "Pulumi.staging.yaml"), "--state-dir", state}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), `no such stack config for stack "staging": the stacks in `+dir+` are local`) {
		t.Fatalf("fleet up of a stack with no file = %v", err)
	}
}

// The oracle's verdict names the stack config field and the config.toml
// key; a config.toml gitlab-runner reads is accepted.
func TestJudgeTOMLNamesTheFieldAndTheKey(t *testing.T) {
	sn, err := oracle.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	good := "concurrent = 4\n[[runners]]\nname = \"a\"\nurl = \"https://gitlab.example.com\"\nexecutor = \"kubernetes\"\n[runners.kubernetes]\nnamespace = \"jobs\"\n"
	if got := judgeTOML(sn.Schema, "teams[0]", []byte(good)); len(got) != 0 {
		t.Fatalf("a good config.toml: %v", got)
	}
	bad := strings.Replace(good, "namespace = ", "namespaces = ", 1)
	got := judgeTOML(sn.Schema, "runnerfleet:fleet.teams[0] (team-a/build)", []byte(bad))
	if len(got) != 1 || !strings.HasPrefix(got[0], "runnerfleet:fleet.teams[0] (team-a/build): its config.toml, gitlab-runner ") ||
		!strings.Contains(got[0], "runners[0].kubernetes.namespaces") {
		t.Fatalf("an unknown key: %q", got)
	}
}

// The summary counts the changes (not what stays the same) and carries
// pulumi's diff.
func TestPreviewSummary(t *testing.T) {
	s := previewSummary("local", auto.PreviewResult{
		StdOut:        "Previewing update (local):\n ~ kubernetes:runnerfleet.dev/v1alpha1:RunnerSet team-a/build update [diff: ~spec]\n",
		ChangeSummary: map[apitype.OpType]int{"same": 9, "update": 1, "create": 2},
	})
	for _, want := range []string{"### pulumi preview of stack `local`", "3 change(s).", "| create | 2 |", "| same | 9 |", "| update | 1 |", "RunnerSet team-a/build update"} {
		if !strings.Contains(s, want) {
			t.Errorf("want %q in\n%s", want, s)
		}
	}
	if s := previewSummary("local", auto.PreviewResult{ChangeSummary: map[apitype.OpType]int{"same": 9}}); !strings.Contains(s, "No changes.") {
		t.Errorf("no changes:\n%s", s)
	}
}
