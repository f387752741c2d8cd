package stackconfig

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
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

func TestTeamsRefusedBeforeTheyFailAtDeploy(t *testing.T) {
	_, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","capacity":{"maxConcurrency":0},"teams":[
		{"namespace":"default","name":"a","tags":["a"],"tokenConfigKey":"t"},
		{"namespace":"kube-system","name":"b","tags":[" b","c,d"],"tokenSecretRef":{}},
		{"namespace":"team-c","name":"c","tags":["e"],"runner":{"type":"bogus"},"apiTokenConfigKey":"k k"},
		{"namespace":"team-d","name":"d","tags":["f"],"runner":{"type":"group"},"apiTokenConfigKey":"api"}]}`), "dev")
	for _, want := range []string{
		`runnerfleet:fleet.capacity.maxConcurrency: Invalid value: 0: at least 1`,
		`runnerfleet:fleet.teams[0].namespace: Invalid value: "default": the namespace belongs to Kubernetes`,
		`runnerfleet:fleet.teams[1].namespace: Invalid value: "kube-system": the namespace belongs to Kubernetes`,
		`runnerfleet:fleet.teams[1].tags[0]: Invalid value: " b"`,
		`runnerfleet:fleet.teams[1].tags[1]: Invalid value: "c,d"`,
		`runnerfleet:fleet.teams[1].tokenSecretRef.name: Required value`,
		`runnerfleet:fleet.teams[2].runner.type: Unsupported value: "bogus"`,
		`runnerfleet:fleet.teams[2].apiTokenConfigKey: Invalid value: "k k"`,
		`runnerfleet:fleet.teams[3].runner.groupID: Required value`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
}

// Durations and quantities decode themselves; their errors still name the key.
func TestSelfDecodingValuesNameTheirKey(t *testing.T) {
	_, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","teams":[
		{"namespace":"a","name":"b","tags":["a"],"tokenConfigKey":"t","managers":{"shutdownTimeout":"soon","resources":{"requests":{"cpu":"lots"}}}}]}`), "dev")
	for _, want := range []string{
		`runnerfleet:fleet.teams[0].managers.shutdownTimeout: Invalid value: "soon"`,
		`runnerfleet:fleet.teams[0].managers.resources.requests[cpu]: Invalid value: "lots"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
}

// A key given twice is refused with its path, at the top of the fleet and
// deep in a team, where encoding/json would keep the last value.
func TestKeysGivenTwiceAreRefusedNamingTheirPath(t *testing.T) {
	_, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","platform":"eks",
		"teams":[{"namespace":"a","name":"b","tags":["a"],"tokenConfigKey":"t","managers":{"replicas":2,"concurrent":4,"replicas":5}},
		         {"namespace":"c","name":"d","tags":["b"],"tokenConfigKey":"t","jobs":{"image":"alpine:3.22","\u0069mage":"alpine:3.21"}}]}`), "dev")
	for _, want := range []string{
		`runnerfleet:fleet.platform: Duplicate value: "platform": given more than once`,
		`runnerfleet:fleet.teams[0].managers.replicas: Duplicate value: "replicas": given more than once`, "keep one",
		`runnerfleet:fleet.teams[1].jobs.image: Duplicate value: "image"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
	// The negative control: the same key in two objects is no duplicate.
	if _, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com",
		"teams":[{"namespace":"a","name":"b","tags":["a"],"tokenConfigKey":"t","managers":{"replicas":2}},
		         {"namespace":"c","name":"b","tags":["b"],"tokenConfigKey":"t","managers":{"replicas":2}}]}`), "dev"); err != nil {
		t.Errorf("a valid fleet is refused: %v", err)
	}
}

// A misspelt key is refused with its path and the key it was meant to be.
func TestMisspeltKeysAreRefusedWithADidYouMean(t *testing.T) {
	_, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","gitlabUrl":"https://x",
		"teams":[{"namespace":"a","name":"b","tags":["a"],"tokenConfigKey":"t","managers":{"replica":3}}]}`), "dev")
	for _, want := range []string{
		`runnerfleet:fleet.gitlabUrl: Forbidden: unknown key; did you mean "gitlabURL"?`,
		`runnerfleet:fleet.teams[0].managers.replica: Forbidden: unknown key; did you mean "replicas"?`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
}

// The duplicate scan reads any valid JSON: escapes, nesting, numbers and
// empty containers, and names each duplicate's path.
func TestDuplicateKeysInAnyJSON(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []string
	}{
		{`{"a":1,"b":2}`, nil},
		{`{"a":{"a":1},"b":[{"a":1},{"a":2}]}`, nil},
		{`{"a":1,"a":2,"a":3}`, []string{"r.a", "r.a"}},
		{`{"ab":1,"a\u0062":2}`, []string{"r.ab"}},
		{`{"q\"k":1, "q\"k" :2}`, []string{`r.q"k`}},
		{` { "x" : [ [ ], [ {"s":"}\\\"{","n":-1.5e+3,"t":true,"z":null,"n":0} ] ] } `, []string{"r.x[1][0].n"}},
		{`[{"a":1},{"b":1,"b":{"c":[1,2],"c":[]}}]`, []string{"r[1].b", "r[1].b.c"}},
	} {
		var got []string
		for _, e := range duplicateKeys([]byte(tc.raw), field.NewPath("r")) {
			got = append(got, e.Field)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: duplicates at %v, want %v", tc.raw, got, tc.want)
		}
	}
}

// capacity.nodePools becomes the RunnerClass's spec.nodePools; a mode
// gitlab-runner's class does not know, sharedAbove outside mode auto or
// out of range, and shared teams on GKE (a ComputeClass per team) are
// refused naming the key and the fix.
func TestNodePoolsModeIsTheClasssAndBadValuesNameTheKey(t *testing.T) {
	f, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","capacity":{"nodePools":{"mode":"auto","sharedAbove":50}}}`), "dev")
	if err != nil {
		t.Fatal(err)
	}
	if np := f.RunnerClass().Spec.NodePools; np == nil || np.Mode != v1alpha1.NodePoolModeAuto || *np.SharedAbove != 50 {
		t.Errorf("the class's spec.nodePools %+v, want auto above 50", np)
	}
	for _, c := range []struct{ platform, nodePools, want string }{
		{"local", `{"mode":"pertag"}`, `runnerfleet:fleet.capacity.nodePools.mode: Unsupported value: "pertag": supported values: "perTag", "shared", "auto"`},
		{"local", `{"mode":"shared","sharedAbove":3}`, `runnerfleet:fleet.capacity.nodePools.sharedAbove: Invalid value: 3: applies only to mode auto: set capacity.nodePools.mode to auto`},
		{"local", `{"mode":"auto","sharedAbove":0}`, `runnerfleet:fleet.capacity.nodePools.sharedAbove: Invalid value: 0: between 1 and 100000`},
		{"gke", `{"mode":"shared"}`, `runnerfleet:fleet.capacity.nodePools.mode: Invalid value: "shared": platform gke gives each team a ComputeClass of its own`},
	} {
		_, err := Decode([]byte(`{"platform":"`+c.platform+`","gitlabURL":"https://gitlab.example.com","capacity":{"nodePools":`+c.nodePools+`}}`), "dev")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: error %v, want %q", c.platform, c.nodePools, err, c.want)
		}
	}
}
