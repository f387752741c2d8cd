package drainagent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const exposition = `# HELP gitlab_runner_api_request_statuses_total The total number of api requests
# TYPE gitlab_runner_api_request_statuses_total counter
gitlab_runner_api_request_statuses_total{endpoint="request_job",runner="tok0",status="204",system_id="s_1"} 1234
# HELP gitlab_runner_jobs The number of running jobs
# TYPE gitlab_runner_jobs gauge
gitlab_runner_jobs{executor_stage="docker_run",runner="tok0",stage="step_script",state="running",system_id="s_1"} 2
gitlab_runner_jobs{executor_stage="prepare_executor",runner="tok0",stage="prepare_script",state="running",system_id="s_1"} 1
gitlab_runner_jobs{executor_stage="docker_run",runner="tok1",stage="after_script",state="running",system_id="s_1"} 4
gitlab_runner_jobs{executor_stage="docker_run",runner="tok1",stage="step_script",state="running",system_id="s_1"} 0
# HELP gitlab_runner_jobs_total Total jobs executed
# TYPE gitlab_runner_jobs_total counter
gitlab_runner_jobs_total{runner="tok0",system_id="s_1"} 99
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 3.1e-05
go_gc_duration_seconds_sum 0.01
go_gc_duration_seconds_count 12
`

func TestCountJobs(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       int
		wantErr    bool
	}{
		{"label sets summed", exposition, 7, false},
		{"metric absent: no job", "# TYPE gitlab_runner_concurrent gauge\ngitlab_runner_concurrent 4\n", 0, false},
		{"untyped", "gitlab_runner_jobs{runner=\"a\"} 3\ngitlab_runner_jobs{runner=\"b\"} 2\n", 5, false},
		{"empty", "", 0, false},
		{"garbage", "gitlab_runner_jobs{runner=\"a\" 3\n", 0, true},
		{"negative", "gitlab_runner_jobs -1\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CountJobs(strings.NewReader(tc.text))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("CountJobs = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestMetricsJobCounter(t *testing.T) {
	var accept string
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept = r.Header.Get("Accept")
		w.WriteHeader(status)
		w.Write([]byte(exposition))
	}))
	defer srv.Close()
	c := &MetricsJobCounter{URL: srv.URL + "/metrics"}
	n, err := c.Jobs(context.Background())
	if err != nil || n != 7 {
		t.Fatalf("Jobs = %d, %v; want 7", n, err)
	}
	if !strings.HasPrefix(accept, "text/plain") {
		t.Errorf("Accept %q, want the text format", accept)
	}
	status = http.StatusServiceUnavailable
	if _, err := c.Jobs(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Jobs on a 503: %v", err)
	}
	srv.Close()
	if _, err := c.Jobs(context.Background()); err == nil {
		t.Error("Jobs on a closed endpoint: no error")
	}
}
