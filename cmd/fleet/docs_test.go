package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/runnerfleet/runnerfleet/internal/docscheck"
)

// Every fleet command in a shell block of README.md, ARCHITECTURE.md and
// docs/ parses with the real command tree: the subcommand exists and takes
// every flag given, as fleet itself would parse them. Nothing runs.
// (internal/docscheck checks the rest: make targets, paths, links.)
func TestDocsFleetCommandsExist(t *testing.T) {
	docs, err := docscheck.Files("../..")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(docscheck.FleetCommands(docs)); n < 5 {
		t.Fatalf("found %d fleet commands in the docs: the check missed them", n)
	}
	for _, p := range fleetProblems(docs) {
		t.Error(p)
	}
}

// The negative control: a misspelt flag, an unknown subcommand, a flag of
// the other VM command and a flag without its value each fail, naming the
// file and the line; the same commands spelt right pass.
func TestDocsFleetCheckRefusesWhatFleetRefuses(t *testing.T) {
	good := "```sh\nfleet up --stack local --kubeconfig ~/.kube/config --context kind-ci\nfleet status -o json | jq .\n" +
		"fleet rotate --provider gce --project ci-prod --windows \\\n  --image wsrm --zone us-east1-b --settle 2m\n" +
		"fleet gc ... --apply --grace=2h -o json\nbin/fleet down --purge\nfleet --version\n```\n"
	if got := fleetProblems([]docscheck.Doc{{Path: "docs/good.md", Src: []byte(good)}}); len(got) != 0 {
		t.Fatalf("good commands refused: %v", got)
	}
	for _, tc := range []struct{ cmd, want string }{
		{"fleet up --stak local", "unknown flag: --stak"},
		{"fleet upp --stack local", `unknown command "upp"`},
		{"fleet status extra", `unknown command "extra" for "fleet status"`},
		{"fleet rotate --provider gce --imag wsrm", `fleet rotate has no flag --imag`},
		{"fleet gc --provider gce --settle 2m", `fleet gc has no flag --settle`},
		{"fleet gc --provider gce --grace", `--grace needs a value`},
		{"fleet gc --provider gce orphans", `unexpected argument "orphans"`},
	} {
		src := "# Page\n\n```sh\n" + tc.cmd + "\n```\n"
		got := fleetProblems([]docscheck.Doc{{Path: "docs/bad.md", Src: []byte(src)}})
		want := "docs/bad.md:4: `" + tc.cmd + "`: "
		if len(got) != 1 || !strings.HasPrefix(got[0], want) || !strings.Contains(got[0], tc.want) {
			t.Errorf("%s: got %q, want one problem %q…%q", tc.cmd, got, want, tc.want)
		}
	}
}

func fleetProblems(docs []docscheck.Doc) []string {
	var out []string
	for _, c := range docscheck.FleetCommands(docs) {
		if err := checkFleetArgs(c.Args); err != nil {
			out = append(out, fmt.Sprintf("%s:%d: `fleet %s`: %v", c.File, c.Line, strings.Join(c.Args, " "), err))
		}
	}
	return out
}

// checkFleetArgs parses args as fleet would and runs nothing: cobra finds
// the subcommand and parses its flags; rotate and gc, which parse their
// own flags (vm.go), are asked for their flags with -h, which they answer
// before they do anything.
func checkFleetArgs(args []string) error {
	var stdout, stderr bytes.Buffer
	root := newRoot(context.Background(), &stdout, &stderr)
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd.Hidden {
		return fmt.Errorf("%s is hidden: fleet runs it itself", cmd.CommandPath())
	}
	if cmd.DisableFlagParsing {
		flags, err := stdFlags(cmd, &stderr)
		if err != nil {
			return err
		}
		return checkStdFlags(cmd.CommandPath(), flags, rest)
	}
	cmd.InitDefaultHelpFlag()
	root.InitDefaultVersionFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	pos := cmd.Flags().Args()
	if cmd == root && len(pos) > 0 {
		return fmt.Errorf("unknown command %q for %q", pos[0], cmd.CommandPath())
	}
	if cmd.Args != nil {
		return cmd.Args(cmd, pos)
	}
	return nil
}

var usageFlag = regexp.MustCompile(`(?m)^  -(\S+)( \S+)?`)

// stdFlags are the flags of a command that parses its own with the flag
// package, read from its usage: each name, and whether it takes a value.
func stdFlags(cmd *cobra.Command, stderr *bytes.Buffer) (map[string]bool, error) {
	if err := cmd.RunE(cmd, []string{"-h"}); !errors.Is(err, errHelp) {
		return nil, fmt.Errorf("%s -h: %v, want its usage", cmd.CommandPath(), err)
	}
	out := map[string]bool{}
	for _, m := range usageFlag.FindAllStringSubmatch(stderr.String(), -1) {
		out[m[1]] = m[2] != ""
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s -h printed no flags:\n%s", cmd.CommandPath(), stderr.String())
	}
	return out, nil
}

// checkStdFlags parses args as the flag package would with flags, a
// placeholder (... or …) standing for any flags.
func checkStdFlags(name string, flags map[string]bool, args []string) error {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "..." || a == "…" {
			continue
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return fmt.Errorf("%s: unexpected argument %q", name, a)
		}
		f, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesValue, ok := flags[f]
		if !ok {
			return fmt.Errorf("%s has no flag --%s (run %s -h)", name, f, name)
		}
		if takesValue && !hasValue {
			if i+1 >= len(args) {
				return fmt.Errorf("--%s needs a value", f)
			}
			i++
		}
	}
	return nil
}

// flagsOf are the flags of fleet's subcommand name, without dashes: cobra's
// (local and inherited, shorthands too) or, for rotate and gc, the flag
// package's from their usage.
func flagsOf(t *testing.T, name string) map[string]bool {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRoot(context.Background(), &stdout, &stderr)
	cmd, _, err := root.Find([]string{name})
	if err != nil || cmd == root {
		t.Fatalf("fleet %s: %v", name, err)
	}
	out := map[string]bool{}
	if cmd.DisableFlagParsing {
		fs, err := stdFlags(cmd, &stderr)
		if err != nil {
			t.Fatal(err)
		}
		for f := range fs {
			out[f] = true
		}
		return out
	}
	for _, m := range pflagUsage.FindAllStringSubmatch(cmd.LocalFlags().FlagUsages()+cmd.InheritedFlags().FlagUsages(), -1) {
		out[m[2]] = true
		if m[1] != "" {
			out[m[1]] = true
		}
	}
	return out
}

// pflagUsage is a flag's line in cobra's usage: "  -o, --output string".
var pflagUsage = regexp.MustCompile(`(?m)^\s+(?:-(\w), )?--([a-z][a-z-]*)`)

// docFlag is a table row of the fleet reference: an optional command in
// the first cell, then the flag.
var docFlag = regexp.MustCompile("^\\| (?:`(up|status|down|check|preview)` \\| )?`(--?[a-z][a-z-]*)`")

// The fleet reference lists every flag of every command, and each row's
// flag is one its command (by the row's section and first cell) has.
func TestTheFleetReferenceListsEveryFlag(t *testing.T) {
	const page = "docs/reference/fleet-cli.md"
	src, err := os.ReadFile("../../" + page)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range fleetReferenceProblems(t, page, string(src)) {
		t.Error(p)
	}
	// The negative control: a row of a flag gc does not have, a flag of
	// rotate left out and a command left out of the table each fail.
	bad := strings.Replace(string(src), "| `--keep` |", "| `--kept` |", 1)
	bad = strings.Replace(bad, "| `--settle` |", "| settle |", 1)
	bad = strings.Replace(bad, "| `fleet status` |", "| status |", 1)
	got := strings.Join(fleetReferenceProblems(t, page, bad), "\n")
	for _, want := range []string{"fleet gc has no flag --kept", "fleet rotate's flag --settle is not on the page", "fleet gc's flag --keep is not on the page", "fleet status is not in the page's table of commands"} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in\n%s", want, got)
		}
	}
}

// vmAndStackCommands are the commands whose every flag has a row.
var vmAndStackCommands = []string{"up", "status", "down", "check", "preview", "rotate", "gc", "image-name", "vm-runner", "cost"}

func fleetReferenceProblems(t *testing.T, page, src string) []string {
	t.Helper()
	commands := map[string][]string{
		"Stack commands":          {"up", "status", "down"},
		"Checking and previewing": {"check", "preview"},
		"VM commands":             {"rotate", "gc"},
		"fleet rotate":            {"rotate"},
		"fleet gc":                {"gc"},
		"fleet image-name":        {"image-name"},
		"fleet vm-runner":         {"vm-runner"},
		"fleet cost":              {"cost"},
	}
	flags := map[string]map[string]bool{}
	for _, name := range vmAndStackCommands {
		flags[name] = flagsOf(t, name)
	}
	var out []string
	seen := map[string]map[string]bool{}
	var section []string
	for i, l := range strings.Split(src, "\n") {
		if strings.HasPrefix(l, "#") {
			section = commands[strings.Trim(strings.TrimLeft(l, "# "), "`: ")]
			if strings.Contains(l, "Stack commands") {
				section = commands["Stack commands"]
			}
			if strings.Contains(l, "Checking and previewing") {
				section = commands["Checking and previewing"]
			}
			continue
		}
		m := docFlag.FindStringSubmatch(l)
		if m == nil || section == nil {
			continue
		}
		cmds := section
		if m[1] != "" {
			cmds = []string{m[1]}
		}
		f := strings.TrimLeft(m[2], "-")
		for _, c := range cmds {
			if !flags[c][f] {
				out = append(out, fmt.Sprintf("%s:%d: fleet %s has no flag --%s", page, i+1, c, f))
				continue
			}
			if seen[c] == nil {
				seen[c] = map[string]bool{}
			}
			seen[c][f] = true
		}
	}
	for _, c := range vmAndStackCommands {
		for f := range flags[c] {
			if !seen[c][f] && f != "help" && f != "h" && !(f == "output" && seen[c]["o"]) && !(f == "o" && seen[c]["output"]) {
				out = append(out, fmt.Sprintf("%s: fleet %s's flag --%s is not on the page: add a row", page, c, f))
			}
		}
	}
	root := newRoot(context.Background(), io.Discard, io.Discard)
	for _, c := range root.Commands() {
		if !c.Hidden && c.Name() != "help" && c.Name() != "completion" && !strings.Contains(src, "| `fleet "+c.Name()+"` |") {
			out = append(out, fmt.Sprintf("%s: fleet %s is not in the page's table of commands: add it, and a section with its flags", page, c.Name()))
		}
	}
	sort.Strings(out)
	return out
}
