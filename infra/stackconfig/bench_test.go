package stackconfig

import (
	"fmt"
	"strings"
	"testing"
)

// fleetOf returns the JSON of a local stack with n teams, each a RunnerSet
// of its own (namespace, name and tag differ), all with the same settings
// a team typically writes.
func fleetOf(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"platform":"local","gitlabURL":"https://gitlab.example.com","capacity":{"allowOnDemand":true,"maxConcurrency":100},"teams":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"namespace":"team-%d","name":"build","tags":["team-%d","team-%d-linux"],"tokenConfigKey":"team%dToken",`+
			`"managers":{"replicas":2,"concurrent":4,"shutdownTimeout":"1h","resources":{"requests":{"cpu":"100m","memory":"128Mi"}}},`+
			`"jobs":{"image":"alpine:3.22","resources":{"build":{"cpuRequest":"500m","cpuLimit":"2"}}},`+
			`"capacity":{"capacityTypes":["spot","on-demand"],"limits":{"cpu":"64"}}}`, i, i, i, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
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
	b.ResetTimer()
	for b.Loop() {
		if _, err := Decode(raw, "dev"); err != nil {
			b.Fatal(err)
		}
	}
}
