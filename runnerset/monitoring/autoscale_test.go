package monitoring_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/internal/promtool"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

// The queries KEDA scales managers by, run by promtool on the series the
// managers' scrape gives: the running jobs of one RunnerSet summed over
// its managers and gitlab_runner_jobs' own labels, 0 with no manager; the
// 90th percentile queue time of the named RunnerSets together, 0 with no
// job received in the window, names matched exactly (a '.' in a name is
// no wildcard). The negative control: the names unquoted, a RunnerSet
// whose name the '.' matches counts.
func TestAutoscaleQueriesReadTheManagersSeries(t *testing.T) {
	jobs := func(ns, rs, pod, stage string) string {
		return fmt.Sprintf(`%s{namespace=%q,%s=%q,pod=%q,runner="abc",state="running",stage=%q,executor_stage=%q,system_id="s_1"}`,
			monitoring.RunnerJobs, ns, monitoring.LabelRunnerSet, rs, pod, stage, stage)
	}
	// buckets gives one RunnerSet's queue-time histogram: perMinute jobs
	// a minute, each waiting between the bucket below le and le.
	buckets := func(rs string, le string, perMinute int) []inputSeries {
		var out []inputSeries
		below := true
		for _, b := range []string{"1", "10", "60", "300", "+Inf"} {
			if b == le {
				below = false
			}
			v := fmt.Sprintf("0+%dx20", perMinute)
			if below {
				v = "0x20"
			}
			out = append(out, inputSeries{fmt.Sprintf(`%s_bucket{namespace="team-a",%s=%q,pod=%q,le=%q}`,
				monitoring.RunnerJobQueueDuration, monitoring.LabelRunnerSet, rs, rs+"-manager-0", b), v})
		}
		return out
	}
	in := []inputSeries{
		{jobs("team-a", "build", "build-manager-a", "step_script"), "3x20"},
		{jobs("team-a", "build", "build-manager-a", "prepare_script"), "1x20"},
		{jobs("team-a", "build", "build-manager-b", "step_script"), "2x20"},
		{jobs("team-a", "other", "other-manager-a", "step_script"), "50x20"},
		{jobs("team-b", "build", "build-manager-a", "step_script"), "70x20"},
	}
	in = append(in, buckets("build", "1", 10)...)   // short waits
	in = append(in, buckets("burst", "300", 10)...) // 60-300 s waits
	in = append(in, buckets("ci.x", "1", 10)...)
	in = append(in, buckets("cizx", "300", 10)...)
	quiet := buckets("quiet", "1", 0) // no job received: rate 0, NaN
	in = append(in, quiet...)

	window := 2 * time.Minute
	one := func(v float64) []expSample { return []expSample{{"{}", v}} }
	cases := []exprCase{
		{Expr: monitoring.RunningJobsQuery("team-a", "build"), EvalTime: "10m", ExpSamples: one(6)},
		{Expr: monitoring.RunningJobsQuery("team-a", "idle"), EvalTime: "10m", ExpSamples: one(0)},
		// Ten a minute under 1 s: the 9th of 10 in (0, 1].
		{Expr: monitoring.QueueTimeQuery("team-a", []string{"build"}, window), EvalTime: "10m", ExpSamples: one(0.9)},
		// With the overflow's own long waits: the 18th of 20, the 8th of
		// 10 in (60, 300].
		{Expr: monitoring.QueueTimeQuery("team-a", []string{"build", "burst"}, window), EvalTime: "10m", ExpSamples: one(60 + 240*0.8)},
		{Expr: monitoring.QueueTimeQuery("team-a", []string{"ci.x"}, window), EvalTime: "10m", ExpSamples: one(0.9)},
		{Expr: monitoring.QueueTimeQuery("team-a", []string{"quiet"}, window), EvalTime: "10m", ExpSamples: one(0)},
		{Expr: monitoring.QueueTimeQuery("team-a", []string{"nothing"}, window), EvalTime: "10m", ExpSamples: one(0)},
	}
	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("rules.yaml", []byte("groups: []\n"))
	run := func(cases []exprCase) (string, error) {
		tests, err := yaml.Marshal(costTests{RuleFiles: []string{"rules.yaml"}, EvaluationInterval: "1m",
			Tests: []costTest{{Interval: "1m", InputSerie: in, Exprs: cases}}})
		if err != nil {
			t.Fatal(err)
		}
		write("autoscale.test.yaml", tests)
		return promtool.Run(dir, nil, "test", "rules", "autoscale.test.yaml")
	}
	if out, err := run(cases); err != nil {
		t.Errorf("%v\n%s", err, out)
	}

	// The negative control.
	unquoted := strings.Replace(monitoring.QueueTimeQuery("team-a", []string{"ci.x"}, window), `ci\\.x`, `ci.x`, 1)
	if unquoted == monitoring.QueueTimeQuery("team-a", []string{"ci.x"}, window) {
		t.Fatalf("the query does not quote the name as this test expects: %s", unquoted)
	}
	if out, err := run([]exprCase{{Expr: unquoted, EvalTime: "10m", ExpSamples: one(0.9)}}); err == nil {
		t.Errorf("promtool passed with the name unquoted:\n%s", out)
	}
}
