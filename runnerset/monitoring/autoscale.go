package monitoring

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The queries KEDA scales a RunnerSet's managers by (spec.managers.autoscale
// and spec.overflow), on the series the managers' scrape gives: labelled
// with their namespace and LabelRunnerSet. Each returns one sample and no
// sample is NaN, so that KEDA's Prometheus scaler, which refuses more than
// one and reads NaN as 0 only with ignoreNullValues, reads a number.

// QueueTimeQuantile is the quantile of the queue time an overflow starts on.
const QueueTimeQuantile = 0.9

// RunningJobsQuery is the jobs a RunnerSet's managers run, summed over
// every label gitlab-runner gives gitlab_runner_jobs (state, stage,
// executor_stage, runner, system_id) and over the managers: 0 when no
// manager runs.
func RunningJobsQuery(namespace, runnerSet string) string {
	return fmt.Sprintf(`sum(%s{namespace=%q,%s=%q}) or vector(0)`, RunnerJobs, namespace, LabelRunnerSet, runnerSet)
}

// QueueTimeQuery is the QueueTimeQuantile of the time the jobs the named
// RunnerSets' managers took waited in GitLab's queue, over window: the
// histogram gitlab-runner observes when a manager receives a job. A window
// without a job received (no observation, NaN) reads 0: the queue is
// short. The names are matched exactly (a regex of the quoted names).
func QueueTimeQuery(namespace string, runnerSets []string, window time.Duration) string {
	quoted := make([]string, len(runnerSets))
	for i, n := range runnerSets {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return fmt.Sprintf(`(histogram_quantile(%g, sum by (le) (rate(%s_bucket{namespace=%q,%s=~%q}[%ds]))) >= 0) or vector(0)`,
		QueueTimeQuantile, RunnerJobQueueDuration, namespace, LabelRunnerSet, strings.Join(quoted, "|"), int64(window/time.Second))
}
