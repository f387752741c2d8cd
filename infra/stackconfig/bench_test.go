package stackconfig

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fleetOf returns the JSON of a local stack with n teams, each a RunnerSet
// of its own (namespace, name and tag differ), all with the same settings
// a team typically writes.
func fleetOf(n int) []byte { return fleetWith(n, nil) }

// fleetWith is fleetOf with the teams for which team returns a JSON object
// replaced by it.
func fleetWith(n int, team func(i int) string) []byte {
	var b strings.Builder
	b.WriteString(`{"platform":"local","gitlabURL":"https://gitlab.example.com","capacity":{"allowOnDemand":true,"maxConcurrency":100},"teams":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		if team != nil {
			if t := team(i); t != "" {
				b.WriteString(t)
				continue
			}
		}
		fmt.Fprintf(&b, `{"namespace":"team-%d","name":"build","tags":["team-%d","team-%d-linux"],"tokenConfigKey":"team%dToken",`+
			`"managers":{"replicas":2,"concurrent":4,"shutdownTimeout":"1h","resources":{"requests":{"cpu":"100m","memory":"128Mi"}}},`+
			`"jobs":{"image":"alpine:3.22","resources":{"build":{"cpuRequest":"500m","cpuLimit":"2"}}},`+
			`"capacity":{"capacityTypes":["spot","on-demand"],"limits":{"cpu":"64"}}}`, i, i, i, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// Issue 32: what the decode of many teams judges once for all (the
// settings they share, the RunnerSet's metadata, the keys) is still judged
// for the last of 10,000 teams, whether the stack config is read the fast
// way (no key problem) or the long way (a misspelt or repeated key).
func TestTheLastOf10000TeamsIsJudgedAsTheFirst(t *testing.T) {
	const n = 10000
	team := func(i int, namespace, name, tags, rest string) string {
		return fmt.Sprintf(`{"namespace":%q,"name":%q,"tags":%s,%s}`, namespace, name, tags, rest)
	}
	shared := `"managers":{"replicas":2,"concurrent":4,"shutdownTimeout":"1h","resources":{"requests":{"cpu":"100m","memory":"128Mi"}}},` +
		`"jobs":{"image":"alpine:3.22","resources":{"build":{"cpuRequest":"500m","cpuLimit":"2"}}},` +
		`"capacity":{"capacityTypes":["spot","on-demand"],"limits":{"cpu":"64"}}`
	for _, tc := range []struct {
		name  string
		teams map[int]string
		want  []string
	}{
		{"judged by the CRD", map[int]string{
			n - 1: team(n-1, "team-last", "build", `["team-last","team-last\nprod"]`, `"tokenConfigKey":"t",`+shared),
			n - 2: team(n-2, "team-x2", "build", `["x2"]`, `"tokenSecretRef":{"name":"Bad_Name/../x"},`+shared),
			n - 3: team(n-3, "team-x3", "build", `["x3"]`, `"tokenConfigKey":"t",`+strings.Replace(shared, `"replicas":2`, `"replicas":51`, 1)),
			n - 4: team(n-4, "team-x4", "build", `["x4"]`, `"tokenConfigKey":"t",`+strings.Replace(shared, `alpine:3.22`, `Alpine`, 1)),
			n - 5: team(n-5, "team-x5", strings.Repeat("n", 64), `["x5"]`, `"tokenConfigKey":"t",`+shared),
			n - 6: team(n-6, "team-x6", "build", `["x6"]`, `"tokenConfigKey":"t",`+strings.Replace(shared, `"cpu":"64"`, `"nvidia.com/gpu":"1"`, 1)),
		}, []string{
			`runnerfleet:fleet.teams[9999].tags[1]: Invalid value`, "a tag cannot hold a newline",
			`runnerfleet:fleet.teams[9998].tokenSecretRef.name: Invalid value`, "name must be a Secret's name",
			`runnerfleet:fleet.teams[9997].managers.replicas: Invalid value: 51`,
			`runnerfleet:fleet.teams[9996].jobs.image: Invalid value`, "must be an image reference",
			`runnerfleet:fleet.teams[9995].name: Invalid value`, "no more than 63 characters",
			`runnerfleet:fleet.teams[9994].capacity.limits: Invalid value`, "takes only cpu and memory",
		}},
		{"keys", map[int]string{
			n - 1: team(n-1, "team-last", "build", `["team-last"]`, `"tokenConfigKey":"t",`+strings.Replace(shared, `"replicas"`, `"replica"`, 1)),
			n - 2: team(n-2, "team-x2", "build", `["x2"]`, `"tokenConfigKey":"t","tokenConfigKey":"u",`+shared),
			n - 3: team(n-3, "team-x3", "build", `["x3"]`, `"tokenConfigKey":"t",`+strings.Replace(shared, `"jobs"`, `"Jobs"`, 1)),
			n - 4: team(n-4, "team-x4", "build", `["x4\u0000"]`, `"tokenConfigKey":"t",`+shared),
		}, []string{
			`runnerfleet:fleet.teams[9999].managers.replica: Forbidden: unknown key; did you mean "replicas"?`,
			`runnerfleet:fleet.teams[9998].tokenConfigKey: Duplicate value: "tokenConfigKey": given more than once`,
			`runnerfleet:fleet.teams[9997].Jobs: Forbidden: unknown key; did you mean "jobs"?`,
			`runnerfleet:fleet.teams[9996].tags[0]: Invalid value`, "a tag cannot hold a newline, tab, NUL",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(fleetWith(n, func(i int) string { return tc.teams[i] }), "dev")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not report %q:\n%v", want, err)
				}
			}
			if got := len(err.(*Error).List); got != len(tc.teams) {
				t.Errorf("%d problems, want one for each of the %d teams:\n%v", got, len(tc.teams), err)
			}
		})
	}
}

func TestTheBenchmarkFleetIsValid(t *testing.T) {
	f, err := Decode(fleetOf(50), "dev")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Teams) != 50 {
		t.Fatalf("%d teams, want 50", len(f.Teams))
	}
}

// BenchmarkDecode10000Teams decodes and validates a stack of 10,000 teams,
// each team's RunnerSet judged by the embedded CRD (schema and CEL).
func BenchmarkDecode10000Teams(b *testing.B) {
	raw := fleetOf(10000)
	if _, err := Decode(raw, "dev"); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	start := cpuTime(b)
	for b.Loop() {
		if _, err := Decode(raw, "dev"); err != nil {
			b.Fatal(err)
		}
	}
	// On a machine other work shares, the CPU time the process spent
	// says more than the wall time (it includes the garbage collector's
	// and every core's).
	b.ReportMetric((cpuTime(b)-start).Seconds()/float64(b.N), "cpu-s/op")
}

// cpuTime is the user and system CPU time the process has spent.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
