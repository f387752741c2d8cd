package stackconfig

import (
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

const overflowTeams = `
	{"namespace":"team-a","name":"build","tags":["a","x"],"tokenConfigKey":"t1","managers":{"concurrent":2}},
	{"namespace":"team-a","name":"build-overflow","tags":["x","a"],"tokenConfigKey":"t2","region":"local-b",
	 "managers":{"concurrent":2,"autoscale":{"minReplicas":0,"maxReplicas":2,"targetRunningJobs":1}},
	 "overflow":{"primary":"build","queueTime":{"threshold":"20s","window":"1m"}}}`

// An overflow team and its primary share their tags (the one exception to
// a tag leading to one team), the overflow's RunnerSet carries the
// overflow and its region label, and the local stack needs no Prometheus
// key (fleet up names its own).
func TestAnOverflowTeamOfTheSameStack(t *testing.T) {
	f, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","teams":[`+overflowTeams+`]}`), "dev")
	if err != nil {
		t.Fatal(err)
	}
	if !f.Autoscales() {
		t.Error("Autoscales() = false with an overflow team")
	}
	rs := f.Teams[1].RunnerSet("local", "tok", "api")
	if rs.Spec.Overflow == nil || rs.Spec.Overflow.Primary != "build" || rs.Spec.Overflow.QueueTime.Threshold.Seconds() != 20 {
		t.Errorf("the overflow's RunnerSet spec.overflow = %+v, want primary build, threshold 20s", rs.Spec.Overflow)
	}
	if rs.Labels[naming.LabelRegion] != "local-b" {
		t.Errorf("labels %v, want %s=local-b", rs.Labels, naming.LabelRegion)
	}
	if l := f.Teams[0].RunnerSet("local", "tok", "api").Labels; len(l) != 0 {
		t.Errorf("a team without region has labels %v", l)
	}
}

// Bad overflows are refused naming the key and the fix, before anything is
// declared.
func TestBadOverflowsAreRefusedNamingTheKey(t *testing.T) {
	for _, c := range []struct{ name, fleet, want string }{
		{"a primary that is not a team", `"platform":"local","teams":[
			{"namespace":"team-a","name":"o","tags":["a"],"tokenConfigKey":"t","managers":{"concurrent":2,"autoscale":{"minReplicas":0,"maxReplicas":2,"targetRunningJobs":1}},
			 "overflow":{"primary":"nobody","queueTime":{"threshold":"20s"}}}]`,
			`runnerfleet:fleet.teams[0].overflow.primary: Not found: "team-a/nobody is not a team of this stack`},
		{"a primary in another namespace", `"platform":"local","teams":[
			{"namespace":"team-b","name":"build","tags":["a"],"tokenConfigKey":"t1"},
			{"namespace":"team-a","name":"o","tags":["a"],"tokenConfigKey":"t","managers":{"concurrent":2,"autoscale":{"minReplicas":0,"maxReplicas":2,"targetRunningJobs":1}},
			 "overflow":{"primary":"build","queueTime":{"threshold":"20s"}}}]`,
			`runnerfleet:fleet.teams[1].overflow.primary: Not found: "team-a/build is not a team of this stack`},
		{"a primary with other tags", `"platform":"local","teams":[
			{"namespace":"team-a","name":"build","tags":["a","b"],"tokenConfigKey":"t1"},
			{"namespace":"team-a","name":"o","tags":["a"],"tokenConfigKey":"t","managers":{"concurrent":2,"autoscale":{"minReplicas":0,"maxReplicas":2,"targetRunningJobs":1}},
			 "overflow":{"primary":"build","queueTime":{"threshold":"20s"}}}]`,
			`runnerfleet:fleet.teams[1].overflow.primary: Invalid value: "build": its tags are [a b], this team's [a]`},
		{"a threshold of zero", `"platform":"local","teams":[
			{"namespace":"team-a","name":"build","tags":["a"],"tokenConfigKey":"t1"},
			{"namespace":"team-a","name":"o","tags":["a"],"tokenConfigKey":"t","managers":{"concurrent":2,"autoscale":{"minReplicas":0,"maxReplicas":2,"targetRunningJobs":1}},
			 "overflow":{"primary":"build","queueTime":{"threshold":"0s"}}}]`,
			`runnerfleet:fleet.teams[1].overflow.queueTime.threshold`},
		{"autoscale with minimum above maximum", `"platform":"local","teams":[
			{"namespace":"team-a","name":"build","tags":["a"],"tokenConfigKey":"t1","managers":{"concurrent":4,"autoscale":{"minReplicas":3,"maxReplicas":2,"targetRunningJobs":1}}}]`,
			`runnerfleet:fleet.teams[0].managers.autoscale`},
		{"autoscale on eks without a Prometheus", `"platform":"eks","aws":{"region":"eu-west-1","zones":["eu-west-1a","eu-west-1b"]},"teams":[
			{"namespace":"team-a","name":"build","tags":["a"],"tokenConfigKey":"t1","managers":{"concurrent":4,"autoscale":{"minReplicas":1,"maxReplicas":2,"targetRunningJobs":3}}}]`,
			`runnerfleet:fleet.prometheus.address: Required value: teams[0] autoscales its managers`},
		{"a Prometheus key on the local stack", `"platform":"local","prometheus":{"address":"http://p:9090"}`,
			`runnerfleet:fleet.prometheus: Forbidden: the local stack's RunnerClass names the Prometheus fleet up starts`},
		{"a region on a cloud stack", `"platform":"eks","aws":{"region":"eu-west-1","zones":["eu-west-1a","eu-west-1b"]},"teams":[
			{"namespace":"team-a","name":"build","tags":["a"],"tokenConfigKey":"t1","region":"us-east-1"}]`,
			`runnerfleet:fleet.teams[0].region: Forbidden`},
		{"a bad overflowOf stack", `"platform":"eks","aws":{"region":"eu-west-1","zones":["eu-west-1a","eu-west-1b"]},"overflowOf":{"stack":"eks-eu"}`,
			`runnerfleet:fleet.overflowOf.stack: Invalid value: "eks-eu": the primary's stack as organization/project/stack`},
		{"an overflow's own Prometheus with overflowOf", `"platform":"eks","aws":{"region":"us-west-2","zones":["us-west-2a","us-west-2b"]},"prometheus":{"address":"http://p:9090"},
			"overflowOf":{"stack":"acme/runnerfleet/eks-eu"},"teams":[
			{"namespace":"team-a","name":"o","tags":["a"],"tokenConfigKey":"t","managers":{"concurrent":2,"autoscale":{"minReplicas":0,"maxReplicas":2,"targetRunningJobs":1}},
			 "overflow":{"primary":"build","queueTime":{"threshold":"20s"},"prometheus":{"address":"http://elsewhere:9090"}}}]`,
			`runnerfleet:fleet.teams[0].overflow.prometheus: Forbidden: with overflowOf the program sets it`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(`{"gitlabURL":"https://gitlab.example.com",`+c.fleet+`}`), "dev")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v\nwant %q", err, c.want)
			}
		})
	}
}

// An overflow stack's teams are judged against the primary stack's output:
// a primary that is missing there or has other tags is refused naming the
// key, and a primary stack that exports no Prometheus address is named.
func TestAnOverflowStacksPrimariesAreJudgedByThePrimaryStacksOutput(t *testing.T) {
	f, err := Decode([]byte(`{"platform":"eks","gitlabURL":"https://gitlab.example.com","aws":{"region":"us-west-2","zones":["us-west-2a","us-west-2b"]},
		"prometheus":{"address":"http://p:9090"},"overflowOf":{"stack":"acme/runnerfleet/eks-eu"},"teams":[
		{"namespace":"team-a","name":"build-overflow","tags":["a"],"tokenConfigKey":"t","managers":{"concurrent":2,"autoscale":{"minReplicas":0,"maxReplicas":2,"targetRunningJobs":1}},
		 "overflow":{"primary":"build","queueTime":{"threshold":"1m"}}}]}`), "us")
	if err != nil {
		t.Fatal(err)
	}
	good := &PrimaryTeams{PrometheusAddress: "http://prometheus.eu.internal:9090", Teams: []PrimaryTeam{{Namespace: "team-a", Name: "build", Tags: []string{"a"}}}}
	if errs := f.CheckPrimary(good); len(errs) != 0 {
		t.Errorf("CheckPrimary of a matching primary: %v", errs)
	}
	for _, c := range []struct {
		primary *PrimaryTeams
		want    string
	}{
		{nil, `runnerfleet:fleet.overflowOf.stack: Invalid value: "acme/runnerfleet/eks-eu": the stack exports no overflowPrimary: set prometheus.remoteAddress in that stack`},
		{&PrimaryTeams{PrometheusAddress: "http://p", Teams: []PrimaryTeam{{Namespace: "team-b", Name: "build", Tags: []string{"a"}}}},
			`runnerfleet:fleet.teams[0].overflow.primary: Not found: "team-a/build is not a team of stack acme/runnerfleet/eks-eu`},
		{&PrimaryTeams{PrometheusAddress: "http://p", Teams: []PrimaryTeam{{Namespace: "team-a", Name: "build", Tags: []string{"a", "gpu"}}}},
			`runnerfleet:fleet.teams[0].overflow.primary: Invalid value: "build": its tags in stack acme/runnerfleet/eks-eu are [a gpu], this team's [a]`},
	} {
		errs := f.CheckPrimary(c.primary)
		if err := errs.ToAggregate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckPrimary(%+v) = %v, want %q", c.primary, err, c.want)
		}
	}
	// The primary's side: its teams and remote address, only when it sets one.
	p, err := Decode([]byte(`{"platform":"eks","gitlabURL":"https://gitlab.example.com","aws":{"region":"eu-west-1","zones":["eu-west-1a","eu-west-1b"]},
		"prometheus":{"address":"http://prometheus-operated.monitoring:9090","remoteAddress":"http://prometheus.eu.internal:9090"},
		"teams":[{"namespace":"team-a","name":"build","tags":["a"],"tokenConfigKey":"t"}]}`), "eu")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Primary(); got == nil || got.PrometheusAddress != "http://prometheus.eu.internal:9090" || len(got.Teams) != 1 || got.Teams[0].Name != "build" {
		t.Errorf("Primary() = %+v", got)
	}
	if f.Primary() != nil {
		t.Error("a stack without prometheus.remoteAddress exports a primary output")
	}
}
