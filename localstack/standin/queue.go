package standin

// The queue metrics gitlab-runner derives from each job's job_info
// (commands/builds_helper.go): the histogram of the time jobs waited in
// GitLab's queue, observed for every job taken, and the counter of jobs that
// waited longer than the active [[runners.monitoring.job_queuing_durations]]
// entry's threshold.

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gorhill/cronexpr"
)

// Names, labels and buckets as gitlab-runner registers them.
const (
	queueDurationMetric = "gitlab_runner_job_queue_duration_seconds"
	queueExceededMetric = "gitlab_runner_acceptable_job_queuing_duration_exceeded_total"
)

var queueDurationBuckets = []float64{1, 3, 10, 30, 60, 120, 300, 900, 1800, 3600}

// Monitoring is a runner's [runners.monitoring].
type Monitoring struct {
	JobQueuingDurations []*JobQueuingDuration `toml:"job_queuing_durations"`
}

// JobQueuingDuration is one [[runners.monitoring.job_queuing_durations]]
// entry, with gitlab-runner's keys: while one of Periods (cron expressions
// with seconds, in Timezone; empty: the local zone) matches the time, a job
// that waited longer than Threshold counts as exceeded, if
// JobsRunningForProject (a regular expression; empty matches all) matches
// its job_info's project_jobs_running_on_instance_runners_count.
type JobQueuingDuration struct {
	Periods               []string      `toml:"periods"`
	Timezone              string        `toml:"timezone"`
	Threshold             time.Duration `toml:"threshold"`
	JobsRunningForProject string        `toml:"jobs_running_for_project"`

	exprs    []*cronexpr.Expression
	location *time.Location
	project  *regexp.Regexp
}

func (d *JobQueuingDuration) compile() error {
	d.exprs = nil
	for i, p := range d.Periods {
		e, err := cronexpr.Parse(p)
		if err != nil {
			return fmt.Errorf("periods[%d] %q: %v: write a cron expression with seconds, such as \"* * 9-17 * * mon-fri *\"", i, p, err)
		}
		d.exprs = append(d.exprs, e)
	}
	tz := d.Timezone
	if tz == "" {
		tz = "Local"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return fmt.Errorf("timezone %q: %v: name an IANA zone such as \"UTC\"", d.Timezone, err)
	}
	d.location = loc
	if d.project, err = regexp.Compile(d.JobsRunningForProject); err != nil {
		return fmt.Errorf("jobs_running_for_project %q: %v: write a Go regular expression", d.JobsRunningForProject, err)
	}
	return nil
}

// inPeriod reports whether now falls in one of d's periods: a cron
// expression's next time within a second of now, as gitlab-runner judges.
func (d *JobQueuingDuration) inPeriod(now time.Time) bool {
	now = now.In(d.location)
	for _, e := range d.exprs {
		if off := now.Sub(e.Next(now)); off >= -time.Second && off <= time.Second {
			return true
		}
	}
	return false
}

// compileMonitoring checks and compiles every runner's monitoring section.
func compileMonitoring(c *Config) error {
	for i, r := range c.Runners {
		if r.Monitoring == nil {
			continue
		}
		for k, d := range r.Monitoring.JobQueuingDurations {
			if err := d.compile(); err != nil {
				return fmt.Errorf("runners[%d] (%q) monitoring.job_queuing_durations[%d]: %w", i, r.Name, k, err)
			}
		}
	}
	return nil
}

// exceeded reports whether a job that waited inQueue seconds, whose
// project runs projectJobs jobs on instance runners, exceeds r's acceptable
// queuing duration at now: the last entry in period decides.
func (r Runner) exceeded(now time.Time, inQueue float64, projectJobs string) bool {
	if r.Monitoring == nil {
		return false
	}
	ds := r.Monitoring.JobQueuingDurations
	for i := len(ds) - 1; i >= 0; i-- {
		if d := ds[i]; d.inPeriod(now) {
			return d.Threshold > 0 && inQueue > d.Threshold.Seconds() && d.project.MatchString(projectJobs)
		}
	}
	return false
}

// queueStats are one runner's queue metrics.
type queueStats struct {
	// hist is the histogram by project_jobs_running.
	hist     map[string]*histogram
	exceeded int
}

type histogram struct {
	buckets []int // cumulative counts by queueDurationBuckets
	count   int
	sum     float64
}

// observeQueue records a job r took, as gitlab-runner does when it adds a
// build.
func (m *manager) observeQueue(r Runner, j *jobPayload) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.queue == nil {
		m.queue = map[string]*queueStats{}
	}
	q := m.queue[r.Name]
	if q == nil {
		q = &queueStats{hist: map[string]*histogram{}}
		m.queue[r.Name] = q
	}
	label := j.JobInfo.ProjectJobsRunningOnInstanceRunnersCount
	h := q.hist[label]
	if h == nil {
		h = &histogram{buckets: make([]int, len(queueDurationBuckets))}
		q.hist[label] = h
	}
	v := j.JobInfo.TimeInQueueSeconds
	for i, le := range queueDurationBuckets {
		if v <= le {
			h.buckets[i]++
		}
	}
	h.count++
	h.sum += v
	if r.exceeded(now, v, label) {
		q.exceeded++
	}
}

// writeQueueMetrics writes the queue families in the text format.
func (m *manager) writeQueueMetrics(b *strings.Builder) {
	fmt.Fprintf(b, "# HELP %s A histogram representing job queue duration.\n# TYPE %s histogram\n", queueDurationMetric, queueDurationMetric)
	for _, rn := range m.o.Config.Runners {
		q := m.queue[rn.Name]
		if q == nil {
			continue
		}
		labels := make([]string, 0, len(q.hist))
		for l := range q.hist {
			labels = append(labels, l)
		}
		sort.Strings(labels)
		for _, l := range labels {
			h := q.hist[l]
			base := fmt.Sprintf("project_jobs_running=%q,runner=%q,runner_name=%q,system_id=%q", l, rn.Name, rn.Name, m.o.SystemID)
			for i, le := range queueDurationBuckets {
				fmt.Fprintf(b, "%s_bucket{%s,le=%q} %d\n", queueDurationMetric, base, strconv.FormatFloat(le, 'g', -1, 64), h.buckets[i])
			}
			fmt.Fprintf(b, "%s_bucket{%s,le=\"+Inf\"} %d\n", queueDurationMetric, base, h.count)
			fmt.Fprintf(b, "%s_sum{%s} %s\n", queueDurationMetric, base, strconv.FormatFloat(h.sum, 'g', -1, 64))
			fmt.Fprintf(b, "%s_count{%s} %d\n", queueDurationMetric, base, h.count)
		}
	}
	fmt.Fprintf(b, "# HELP %s Counts how often jobs exceed the configured queuing time threshold\n# TYPE %s counter\n", queueExceededMetric, queueExceededMetric)
	for _, rn := range m.o.Config.Runners {
		if q := m.queue[rn.Name]; q != nil {
			fmt.Fprintf(b, "%s{runner=%q,runner_name=%q,system_id=%q} %d\n", queueExceededMetric, rn.Name, rn.Name, m.o.SystemID, q.exceeded)
		}
	}
}
