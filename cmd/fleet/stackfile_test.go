package main

import (
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/encoding"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
)

// fleet up --kubeconfig reads the stack file itself: a key given twice is
// refused there with its path, before anything is planned or applied.
func TestUpRefusesAStackFileWithAKeyGivenTwice(t *testing.T) {
	_, err := parseStack("mine", []byte(`config:
  runnerfleet:fleet:
    platform: local
    gitlabURL: https://gitlab.example.com
    teams:
      - namespace: team-a
        name: build
        tags: [team-a]
        tokenSecretRef: {name: team-a-token}
        managers:
          replicas: 1
          replicas: 3
`))
	if err == nil || !strings.Contains(err.Error(), `runnerfleet:fleet.teams[0].managers.replicas: Duplicate value: "replicas": on lines 11 and 12`) {
		t.Fatalf("parseStack = %v, want the key given twice named with its path and lines", err)
	}
}

// pulumi up reads the stack file with the Pulumi SDK's loader, which the
// CLI runs before the program: it refuses a key given twice itself (naming
// the key and both lines), so a duplicate never reaches Decode as one value.
func TestPulumiRefusesAStackFileWithAKeyGivenTwice(t *testing.T) {
	b := []byte("config:\n  runnerfleet:fleet:\n    platform: local\n    teams:\n      - managers:\n          replicas: 1\n          replicas: 3\n")
	proj := &workspace.Project{Name: "runnerfleet", Runtime: workspace.NewProjectRuntimeInfo("go", nil)}
	_, err := workspace.LoadProjectStackBytes(nil, proj, b, "Pulumi.mine.yaml", encoding.YAML)
	if err == nil || !strings.Contains(err.Error(), `mapping key "replicas" already defined at line 6`) {
		t.Fatalf("LoadProjectStackBytes = %v, want the key given twice refused", err)
	}
	// The negative control: the same file without the second key loads.
	if _, err := workspace.LoadProjectStackBytes(nil, proj, b[:len(b)-len("          replicas: 3\n")], "Pulumi.mine.yaml", encoding.YAML); err != nil {
		t.Fatalf("a good stack file is refused: %v", err)
	}
}
