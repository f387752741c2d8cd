package infra_test

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/infra"
	"github.com/runnerfleet/runnerfleet/infra/infratest"
)

var updatePreview = flag.Bool("update-preview", false, "rewrite testdata/preview/*.json from the program as it is")

// committedStacks are the stacks of stacks/Pulumi.*.yaml.
func committedStacks(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "stacks", "Pulumi.*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no committed stacks in ../stacks (%v)", err)
	}
	var out []string
	for _, f := range files {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "Pulumi."), ".yaml"))
	}
	return out
}

// TestEveryCommittedStackKeepsItsResources runs each committed stack under
// the mocks and compares what it registers with the recording in
// testdata/preview/<stack>.json (URN, type, provider, a digest of each
// input): every recorded resource must still be registered under its URN
// or through an alias to it, with the same inputs, and no custom resource
// may be new. That is what a preview of the stack would show as nothing
// but moves. After a change that is meant to change resources, record
// again: go test ./infra/ -run TestEveryCommittedStackKeepsItsResources -update-preview
func TestEveryCommittedStackKeepsItsResources(t *testing.T) {
	for _, stack := range committedStacks(t) {
		t.Run(stack, func(t *testing.T) {
			secrets, ok := stackSecrets[stack]
			if !ok {
				t.Fatalf("stack %s has no entry in stackSecrets: give the test its secrets", stack)
			}
			m := infratest.NewMocks(t)
			cfg, keys := stackConfig(t, stack, secrets)
			// The local platform's kubeconfig is an input: a fixed path
			// keeps the recording stable.
			program := infra.ProgramWith(infra.Options{Kubeconfig: filepath.Join("testdata", "preview", "kubeconfig")})
			if err := infratest.Run(m, stack, cfg, keys, program); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "preview", stack+".json")
			if *updatePreview {
				if err := infratest.WriteRecording(path, infratest.Record(m.Resources())); err != nil {
					t.Fatal(err)
				}
				return
			}
			before, err := infratest.ReadRecording(path)
			if err != nil {
				t.Fatalf("%v (record it with -update-preview)", err)
			}
			if diffs := infratest.Compare(before, m.Resources()); len(diffs) > 0 {
				t.Errorf("the preview of stack %s would not be only moves (%d differences):\n  %s", stack, len(diffs), strings.Join(diffs, "\n  "))
			}
		})
	}
}
