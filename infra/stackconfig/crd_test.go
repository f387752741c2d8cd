package stackconfig

import (
	"fmt"
	"strings"
	"testing"
)

// 11.8: what a team embeds is judged by the RunnerSet CRD itself, as
// admission will judge it, and every problem is reported at once with its
// stack config key, before any resource is declared.
func TestEmbeddedRunnerSetsAreJudgedByTheirCRDAllAtOnce(t *testing.T) {
	tags := make([]string, 33)
	for i := range tags {
		tags[i] = fmt.Sprintf("%q", fmt.Sprintf("t%d", i))
	}
	raw := `{"platform":"local","gitlabURL":"https://gitlab.example.com","teams":[
		{"namespace":"team-a","name":"` + strings.Repeat("n", 64) + `","tags":["a","a","` + strings.Repeat("x", 256) + `"],"tokenConfigKey":"t",
		 "managers":{"replicas":51,"concurrent":1001,"image":" gitlab-runner:v19"},
		 "jobs":{"image":"alpine:3.22\n","resources":{"build":{"cpuRequest":"2","cpuLimit":"1"}}},
		 "capacity":{"limits":{"nvidia.com/gpu":"1"},"instanceFamilies":["C7I"]}},
		{"namespace":"team-b","name":"b","tags":[` + strings.Join(tags, ",") + `],"tokenConfigKey":"t"}]}`
	_, err := Decode([]byte(raw), "dev")
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`runnerfleet:fleet.teams[0].name: Invalid value`, "no more than 63 characters",
		`runnerfleet:fleet.teams[0].tags[1]: Duplicate value: "a"`,
		`runnerfleet:fleet.teams[0].tags[2]: Too long`,
		`runnerfleet:fleet.teams[0].managers.replicas: Invalid value: 51`,
		`runnerfleet:fleet.teams[0].managers.concurrent: Invalid value: 1001`,
		`runnerfleet:fleet.teams[0].managers.image: Invalid value`, "must be an image reference",
		`runnerfleet:fleet.teams[0].jobs.image: Invalid value`,
		`runnerfleet:fleet.teams[0].jobs.resources.build: Invalid value`, "cpuRequest must not exceed cpuLimit",
		`runnerfleet:fleet.teams[0].capacity.limits: Invalid value`, "takes only cpu and memory",
		`runnerfleet:fleet.teams[0].capacity.instanceFamilies[0]: Invalid value: "C7I"`,
		`runnerfleet:fleet.teams[1].tags: Too many: 33: must have at most 32 items`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
}

func TestTheFleetRefusesAnOpenAPIBadURLsAndTheControllersNamespace(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []string
	}{
		{`{"platform":"local","gitlabURL":"http://","teams":[{"namespace":"runnerfleet-system","name":"a","tags":["a"],"tokenConfigKey":"t"}]}`, []string{
			`runnerfleet:fleet.gitlabURL: Invalid value: "http://"`, "needs a host",
			`runnerfleet:fleet.teams[0].namespace: Invalid value: "runnerfleet-system": the runnerset-controller's namespace`,
		}},
		// team-a/build's jobs namespace is team-a-build-j6, which the stack would create as a team's.
		{`{"platform":"local","gitlabURL":"https://gitlab.example.com","teams":[{"namespace":"team-a","name":"build","tags":["a"],"tokenConfigKey":"t"},{"namespace":"team-a-build-j6","name":"x","tags":["b"],"tokenConfigKey":"t"}]}`,
			[]string{`runnerfleet:fleet.teams[0]: Invalid value: "team-a/build": its jobs run in namespace team-a-build-j6, which is teams[1]'s namespace`}},
		{`{"platform":"local","gitlabURL":"https://gitlab.example.com\n"}`, []string{`runnerfleet:fleet.gitlabURL: Invalid value`}},
		{`{"platform":"local","gitlabURL":"https://gitlab.example.com","controller":{"namespace":"ci"},"teams":[{"namespace":"ci","name":"a","tags":["a"],"tokenConfigKey":"t"}]}`,
			[]string{`runnerfleet:fleet.teams[0].namespace: Invalid value: "ci": the runnerset-controller's namespace`}},
		{`{"platform":"gke","gitlabURL":"https://gitlab.example.com","controller":{"image":"r/c:v1"},"gcp":{"project":"ci-project","region":"europe-west1","masterAuthorizedCIDRs":["0.0.0.0/0"]}}`,
			[]string{`runnerfleet:fleet.gcp.masterAuthorizedCIDRs[0]: Forbidden: 0.0.0.0/0 opens the Kubernetes API to the whole internet`}},
		{`{"platform":"local","gitlabURL":"https://gitlab.example.com","identity":{"awsRoleARNPatterns":["arn:aws:iam::1:role/ci-{namespace}-*"]}}`,
			[]string{`runnerfleet:fleet.identity.awsRoleARNPatterns[0]: Invalid value`, "cannot tell namespace x from x-b"}},
		{`{"platform":"local","gitlabURL":"https://gitlab.example.com","defaults":{"jobImage":"Alpine:3"}}`,
			[]string{`runnerfleet:fleet.defaults.jobImage: Invalid value`, "must be an image reference"}},
	} {
		_, err := Decode([]byte(tc.raw), "dev")
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error does not report %q:\n%v", tc.raw, want, err)
			}
		}
	}
}

func TestEveryWronglyTypedKeyIsReported(t *testing.T) {
	_, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","cache":{"expireDays":"14"},
		"teams":[{"namespace":"a","name":"b","tags":"a","managers":{"replicas":"2","concurrent":1.5},"jobs":{"privileged":"yes"}}]}`), "dev")
	for _, want := range []string{
		`runnerfleet:fleet.cache.expireDays: Invalid value: "string": want a whole number`,
		`runnerfleet:fleet.teams[0].tags: Invalid value: "string": want a list`,
		`runnerfleet:fleet.teams[0].managers.replicas: Invalid value: "string": want a whole number`,
		`runnerfleet:fleet.teams[0].managers.concurrent: Invalid value: "number 1.5": want a whole number`,
		`runnerfleet:fleet.teams[0].jobs.privileged: Invalid value: "string": want true or false`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
}

// Issue 32: a team's tag with a control character and a token Secret no
// Secret could be are refused by the RunnerSet CRD's own rules, named with
// the stack config's keys; spaces inside a tag and a dotted name are not.
func TestTeamsTagsAndSecretNamesAreJudgedByTheCRD(t *testing.T) {
	_, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","teams":[
		{"namespace":"team-a","name":"a","tags":["team-a\nprod","x\u0000y"],"tokenSecretRef":{"name":"Bad_Name/../x"}},
		{"namespace":"team-b","name":"b","tags":["b"],"runner":{"type":"instance","apiTokenSecretRef":{"name":"PAT","key":"../t"}}}]}`), "dev")
	for _, want := range []string{
		`runnerfleet:fleet.teams[0].tags[0]: Invalid value`, "a tag cannot hold a newline, tab, NUL or other control character",
		`runnerfleet:fleet.teams[0].tags[1]: Invalid value`,
		`runnerfleet:fleet.teams[0].tokenSecretRef.name: Invalid value`, "name must be a Secret's name",
		`runnerfleet:fleet.teams[1].runner.apiTokenSecretRef.name: Invalid value`,
		`runnerfleet:fleet.teams[1].runner.apiTokenSecretRef.key: Invalid value`, "key must be a key of the Secret's data",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
	if _, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","teams":[
		{"namespace":"team-a","name":"a","tags":["linux amd64 large"],"tokenSecretRef":{"name":"team-a.gitlab-token","key":"runner.token"}}]}`), "dev"); err != nil {
		t.Errorf("a good team is refused: %v", err)
	}
}
