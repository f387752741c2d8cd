package standin

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// queued starts the stand-in against a loopback GitLab whose clock says a
// first job waited 200 s and a second 45 s when the stand-in takes them,
// and returns its metrics once both run.
func queued(t *testing.T, runnerTOML string, now func() time.Time) map[string]*dto.MetricFamily {
	t.Helper()
	srv := gitlabserver.New()
	t0 := time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)
	clock := t0
	srv.SetClock(func() time.Time { return clock })
	srv.QueueJob([]string{"team"}, 30*time.Second)
	clock = t0.Add(155 * time.Second)
	srv.QueueJob([]string{"team"}, 30*time.Second)
	clock = t0.Add(200 * time.Second) // before the stand-in starts: no race
	f := startWith(t, srv, 2, runnerTOML, now)
	f.waitJobs(t, "both jobs running", func(j []gitlabserver.Job) bool { return count(j, gitlabserver.JobRunning) == 2 })
	// GitLab marks a job running when it hands it out; the stand-in
	// observes it when the request returns, a moment later (CI once
	// scraped in between and read one job of two).
	deadline := time.Now().Add(20 * time.Second)
	for {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(f.scrape(t)))
		if err != nil {
			t.Fatalf("metrics do not parse: %v", err)
		}
		if observed(fams) == 2 {
			return fams
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stand-in observed %d queued jobs of 2", observed(fams))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// observed is how many jobs the queue-duration histogram holds.
func observed(fams map[string]*dto.MetricFamily) uint64 {
	var n uint64
	for _, m := range fams[queueDurationMetric].GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func exceeded(t *testing.T, fams map[string]*dto.MetricFamily) float64 {
	t.Helper()
	f := fams[queueExceededMetric]
	if f == nil || f.GetType() != dto.MetricType_COUNTER || len(f.GetMetric()) != 1 {
		t.Fatalf("%s: %v, want one counter", queueExceededMetric, f)
	}
	m := f.GetMetric()[0]
	if l := labels(m); len(l) != 3 || l["runner"] != "team" || l["runner_name"] != "team" || l["system_id"] != "s_test" {
		t.Errorf("%s labels %v, want runner, runner_name and system_id", queueExceededMetric, l)
	}
	return m.GetCounter().GetValue()
}

// A job that waited N seconds lands in the histogram's buckets from N up,
// with gitlab-runner's name, buckets and labels.
func TestQueueDurationHistogramObservesJobInfo(t *testing.T) {
	if queueDurationMetric != monitoring.RunnerJobQueueDuration {
		t.Fatalf("the stand-in exports %s, the rules read %s", queueDurationMetric, monitoring.RunnerJobQueueDuration)
	}
	fams := queued(t, "", nil)
	f := fams[queueDurationMetric]
	if f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("%s: %v, want a histogram", queueDurationMetric, f)
	}
	// The first job is its project's only one running on instance
	// runners when taken, the second one of two.
	want := map[string]struct {
		sum   float64
		below float64 // highest bucket bound still empty
		from  float64 // lowest bucket bound holding the job
	}{"1": {200, 120, 300}, "2": {45, 30, 60}}
	if len(f.GetMetric()) != len(want) {
		t.Fatalf("%d series, want %d: %v", len(f.GetMetric()), len(want), f)
	}
	for _, m := range f.GetMetric() {
		l := labels(m)
		w, ok := want[l["project_jobs_running"]]
		if !ok || len(l) != 4 || l["runner"] != "team" || l["runner_name"] != "team" || l["system_id"] != "s_test" {
			t.Errorf("series labels %v", l)
			continue
		}
		h := m.GetHistogram()
		if h.GetSampleCount() != 1 || h.GetSampleSum() != w.sum {
			t.Errorf("%v: count %d sum %g, want 1 and %g", l, h.GetSampleCount(), h.GetSampleSum(), w.sum)
		}
		var bounds []float64
		for _, b := range h.GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
			switch le := b.GetUpperBound(); {
			case le <= w.below && b.GetCumulativeCount() != 0, le >= w.from && b.GetCumulativeCount() != 1:
				t.Errorf("%v: bucket le=%g holds %d", l, le, b.GetCumulativeCount())
			}
		}
		if !slices.Equal(bounds, []float64{1, 3, 10, 30, 60, 120, 300, 900, 1800, 3600, math.Inf(1)}) {
			t.Errorf("buckets %v, want gitlab-runner's 1 3 10 30 60 120 300 900 1800 3600 and +Inf", bounds)
		}
	}
	// Without a monitoring section the counter is there, at 0.
	if n := exceeded(t, fams); n != 0 {
		t.Errorf("exceeded without job_queuing_durations: %g, want 0", n)
	}
}

const monitoringTOML = `  [runners.monitoring]
    [[runners.monitoring.job_queuing_durations]]
      periods = ["* * * * * * *"]
      timezone = "UTC"
      threshold = "%s"
`

// Only a job that waited longer than the threshold counts: of 200 s and
// 45 s, one job is over 2m, none over 5m, both over 30s.
func TestQueuingDurationExceededCountsOnlyJobsOverThreshold(t *testing.T) {
	for _, tc := range []struct {
		threshold string
		want      float64
	}{{"2m", 1}, {"5m", 0}, {"30s", 2}} {
		t.Run(tc.threshold, func(t *testing.T) {
			if n := exceeded(t, queued(t, strings.Replace(monitoringTOML, "%s", tc.threshold, 1), nil)); n != tc.want {
				t.Errorf("exceeded: %g, want %g", n, tc.want)
			}
		})
	}
}

// The last entry whose periods match the time decides; an entry whose
// jobs_running_for_project does not match a job's count lets it wait.
func TestQueuingDurationEntryInPeriodAndProjectSelector(t *testing.T) {
	two := monitoringTOML + `    [[runners.monitoring.job_queuing_durations]]
      periods = ["* * 9-17 * * * *"]
      timezone = "UTC"
      threshold = "10m"
`
	two = strings.Replace(two, "%s", "30s", 1)
	at := func(h int) func() time.Time {
		return func() time.Time { return time.Date(2026, 3, 4, h, 0, 30, 0, time.UTC) }
	}
	if n := exceeded(t, queued(t, two, at(12))); n != 0 {
		t.Errorf("at 12:00 (10m entry in period): exceeded %g, want 0", n)
	}
	if n := exceeded(t, queued(t, two, at(3))); n != 2 {
		t.Errorf("at 03:00 (only the 30s entry in period): exceeded %g, want 2", n)
	}
	only1 := strings.Replace(monitoringTOML, "%s", "30s", 1) + "      jobs_running_for_project = \"^1$\"\n"
	if n := exceeded(t, queued(t, only1, nil)); n != 1 {
		t.Errorf("jobs_running_for_project ^1$: exceeded %g, want 1 (the second job ran with 2)", n)
	}
}

func TestReadConfigNamesBadJobQueuingDuration(t *testing.T) {
	for _, tc := range []struct{ entry, want string }{
		{`periods = ["not cron"]`, "monitoring.job_queuing_durations[0]: periods[0]"},
		{`timezone = "Mars/Olympus"`, "monitoring.job_queuing_durations[0]: timezone"},
		{`jobs_running_for_project = "("`, "monitoring.job_queuing_durations[0]: jobs_running_for_project"},
	} {
		path := filepath.Join(t.TempDir(), "config.toml")
		cfg := "concurrent = 1\n[[runners]]\n  name = \"a\"\n  url = \"http://x\"\n  token = \"glrt-x\"\n" +
			"  [[runners.monitoring.job_queuing_durations]]\n    " + tc.entry + "\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadConfig(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.entry, err, tc.want)
		}
	}
}

// The stand-in reads the job_queuing_durations runnerfleet renders.
func TestReadsRenderedJobQueuingDurations(t *testing.T) {
	out, err := runnerconfig.Render(runnerconfig.Config{Concurrent: 1, Runners: []runnerconfig.Runner{{
		Name: "a", URL: "http://gitlab.local", Token: "glrt-x", Executor: "kubernetes",
		Monitoring: &runnerconfig.Monitoring{JobQueuingDurations: []runnerconfig.JobQueuingDuration{{
			Periods: []string{"* * 9-17 * * * *"}, Timezone: "UTC", Threshold: runnerconfig.Duration(5 * time.Minute),
		}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Runners[0]
	noon, night := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC), time.Date(2026, 3, 4, 3, 0, 0, 0, time.UTC)
	if !r.exceeded(noon, 301, "+Inf") || r.exceeded(noon, 300, "+Inf") || r.exceeded(night, 301, "+Inf") {
		t.Errorf("rendered entry read as %+v: want 301 s at noon over 5m, 300 s not, nothing at night\n%s", r.Monitoring.JobQueuingDurations[0], out)
	}
}
