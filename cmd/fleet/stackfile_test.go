package main

import (
	"strings"
	"testing"
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
