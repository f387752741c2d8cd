package stackconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const stackFileHead = `config:
  runnerfleet:teamAToken: glrt-x
  runnerfleet:fleet:
    platform: local
    gitlabURL: https://gitlab.example.com
`

// In a stack file a key given twice is refused with its path and both
// lines: at the fleet's top, deep in a team, and among the config keys
// themselves. sigs.k8s.io/yaml, which fleet up read the file with, kept
// the last one without a word.
func TestStackFileRefusesKeysGivenTwice(t *testing.T) {
	_, err := StackFile([]byte(stackFileHead + `    teams:
      - namespace: team-a
        name: build
        tags: [team-a]
        tokenConfigKey: teamAToken
        managers:
          replicas: 2
          concurrent: 4
          replicas: 5
    platform: eks
  runnerfleet:teamAToken: glrt-y
`))
	for _, want := range []string{
		`runnerfleet:fleet.teams[0].managers.replicas: Duplicate value: "replicas": on lines 12 and 14: given more than once`,
		`runnerfleet:fleet.platform: Duplicate value: "platform": on lines 4 and 15`,
		`config.runnerfleet:teamAToken: Duplicate value: "runnerfleet:teamAToken": on lines 2 and 16`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
}

// Every committed stack is a file StackFile reads and Decode accepts.
func TestTheCommittedStacksDecode(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "stacks", "Pulumi.*.yaml"))
	if err != nil || len(paths) < 3 {
		t.Fatalf("stacks: %v %v", paths, err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := StackFile(b)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		raw, ok := cfg["runnerfleet:"+Key]
		if !ok {
			t.Errorf("%s has no runnerfleet:%s", p, Key)
			continue
		}
		stack := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "Pulumi."), ".yaml")
		if _, err := Decode(raw, stack); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
