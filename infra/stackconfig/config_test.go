package stackconfig

import (
	"errors"
	"strings"
	"testing"
)

// An unknown key does not hide the other problems: a user fixes a stack
// config in one round.
func TestEveryProblemAtOnceUnknownKeysIncluded(t *testing.T) {
	_, err := Decode([]byte(`{"platform":"eks","gitlabURL":"gitlab.example.com","colour":"blue",
		"aws":{"zones":["eu-west-1a","eu-west-1b"]},
		"teams":[{"namespace":"team-a","name":"build","tags":["a"],"tokenConfigKey":"tok","jobs":{"imag":"alpine"}}]}`), "dev")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Decode = %v, want a stack config error", err)
	}
	for _, want := range []string{
		"runnerfleet:fleet.colour: Forbidden: unknown key",
		`runnerfleet:fleet.teams[0].jobs.imag: Forbidden: unknown key; did you mean "image"?`,
		"runnerfleet:fleet.aws.region: Required value",
		"runnerfleet:fleet.gitlabURL: Invalid value",
		"runnerfleet:fleet.controller.image: Required value",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
}

// A value of the wrong type stops decoding; it is named with its key.
func TestWrongTypeNamesTheKey(t *testing.T) {
	_, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","teams":[{"namespace":"a","name":"b","tags":"a"}]}`), "dev")
	if err == nil || !strings.Contains(err.Error(), `runnerfleet:fleet.teams[0].tags: Invalid value: "string": want a list`) {
		t.Fatalf("Decode = %v, want the key of the wrongly typed value", err)
	}
}
