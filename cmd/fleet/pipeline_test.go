package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// The deploy pipeline template and the page that shows how to include it.
const (
	pipelineTemplate = "../../ci/runnerfleet.gitlab-ci.yml"
	pipelineDoc      = "../../docs/tasks/deploy-from-gitlab-ci.md"
	gitlabCISchema   = "testdata/gitlab-ci-schema/ci.json"
)

// gitlabSchema is GitLab's own CI configuration schema (testdata, with its
// licence and commit beside it), compiled by a JSON-schema validator.
func gitlabSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(gitlabCISchema)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatalf("%s: %v", gitlabCISchema, err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("ci.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("ci.json")
	if err != nil {
		t.Fatalf("compiling GitLab's schema: %v", err)
	}
	return s
}

// validateCI validates a .gitlab-ci.yml against GitLab's schema.
func validateCI(s *jsonschema.Schema, src []byte) error {
	j, err := yaml.YAMLToJSON(src)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// consumerExample is the .gitlab-ci.yml the deploy page shows: a platform
// repository that includes the template.
func consumerExample(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(pipelineDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(include:.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no yaml block starting with include:", pipelineDoc)
	}
	return m[1]
}

// asJobs makes the template's hidden jobs (.runnerfleet:…, which GitLab's
// schema lets be any YAML, as it checks them only once a job extends them)
// jobs of their own, so that the schema checks every key they hold.
func asJobs(tmpl []byte) []byte {
	return regexp.MustCompile(`(?m)^\.(runnerfleet:[a-z-]+):`).ReplaceAll(tmpl, []byte("$1-hidden:"))
}

// The template, its hidden jobs checked as jobs, and the repository
// configuration the docs show including it, are valid by GitLab's own CI
// schema; the negative controls (a job key GitLab does not know, a when
// GitLab does not have, a rule that is neither an object nor a string, an
// ID token without aud) fail it.
func TestPipelineTemplateIsValidByGitLabsSchema(t *testing.T) {
	s := gitlabSchema(t)
	tmpl, err := os.ReadFile(pipelineTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if err := validateCI(s, tmpl); err != nil {
		t.Fatalf("%s is not valid by GitLab's CI schema:\n%v", pipelineTemplate, err)
	}
	if !bytes.Contains(asJobs(tmpl), []byte("\nrunnerfleet:up-hidden:\n")) {
		t.Fatal("asJobs made no job of .runnerfleet:up")
	}
	if err := validateCI(s, asJobs(tmpl)); err != nil {
		t.Fatalf("the hidden jobs of %s are not valid jobs by GitLab's CI schema:\n%v", pipelineTemplate, err)
	}
	if err := validateCI(s, consumerExample(t)); err != nil {
		t.Fatalf("the example of %s is not valid by GitLab's CI schema:\n%v", pipelineDoc, err)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"unknown job key", "  resource_group: runnerfleet-$RUNNERFLEET_STACK\n", "  resource_groups: runnerfleet-$RUNNERFLEET_STACK\n"},
		{"unknown when", "      when: manual\n", "      when: by-hand\n"},
		{"rule of the wrong type", "    - if: $RUNNERFLEET_DEPLOY == \"auto\"\n", "    - 42\n"},
		{"id token without aud", "      aud: sts.amazonaws.com\n", "      audience: sts.amazonaws.com\n"},
	} {
		bad := strings.Replace(string(tmpl), tc.old, tc.new, 1)
		if bad == string(tmpl) {
			t.Fatalf("%s: %q is not in the template", tc.name, tc.old)
		}
		if err := validateCI(s, asJobs([]byte(bad))); err == nil {
			t.Errorf("%s: the broken template passes GitLab's schema", tc.name)
		}
	}
}

// Every job of the template runs one fleet command that a person can run
// by hand: each parses with fleet's own command tree (the subcommand
// exists, every flag is one it has).
func TestPipelineTemplateRunsFleetCommands(t *testing.T) {
	tmpl, err := os.ReadFile(pipelineTemplate)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(tmpl, &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for job, v := range doc {
		j, ok := v.(map[string]any)
		if !ok {
			continue
		}
		script, _ := j["script"].([]any)
		for _, line := range script {
			s, _ := line.(string)
			args, ok := fleetLine(s)
			if !ok {
				continue
			}
			seen[args[0]] = true
			if err := checkFleetArgs(args); err != nil {
				t.Errorf("%s: `%s`: %v", job, s, err)
			}
		}
	}
	for _, c := range []string{"check", "preview", "up", "rotate"} {
		if !seen[c] {
			t.Errorf("no job of the template runs fleet %s", c)
		}
	}
	// The negative control: a flag fleet does not have fails.
	args, _ := fleetLine(`$RUNNERFLEET_FLEET preview --stack "$RUNNERFLEET_STACK" --sumary x.md`)
	if err := checkFleetArgs(args); err == nil || !strings.Contains(err.Error(), "unknown flag: --sumary") {
		t.Errorf("a misspelt flag: %v", err)
	}
}

// fleetLine turns a script line running $RUNNERFLEET_FLEET into fleet's
// arguments: a flags variable expands to nothing (its default), a quoted
// value to a placeholder.
func fleetLine(s string) ([]string, bool) {
	rest, ok := strings.CutPrefix(s, "$RUNNERFLEET_FLEET ")
	if !ok {
		return nil, false
	}
	var args []string
	for _, f := range regexp.MustCompile(`"[^"]*(?:"[^"]*"[^"]*)*"\S*|\S+`).FindAllString(rest, -1) {
		switch {
		case regexp.MustCompile(`^\$RUNNERFLEET_\w+_FLAGS$`).MatchString(f):
		case strings.Contains(f, "$"):
			args = append(args, "value")
		default:
			args = append(args, f)
		}
	}
	return args, true
}
