package vmfleet_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// newRunner is the metrics endpoint of a new manager VM's runner, as
// gitlab-runner 19.4 exports it: version info always; job requests that
// GitLab answered (204 no job) once the runner's token is accepted.
type newRunner struct {
	srv      *httptest.Server
	accepted atomic.Bool
	down     atomic.Bool

	// With flapAfter > 0, the runner answers down once after that many
	// healthy answers (a restart), and healthySince is when it first
	// answered healthy again.
	mu           sync.Mutex
	flapAfter    int
	healthy      int
	healthySince time.Time
}

// flap counts a healthy answer and reports whether this one is the flap.
func (r *newRunner) flap() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flapAfter == 0 {
		return false
	}
	r.healthy++
	switch {
	case r.healthy == r.flapAfter+1:
		return true
	case r.healthy == r.flapAfter+2:
		r.healthySince = time.Now()
	}
	return false
}

func (r *newRunner) since() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.healthySince
}

func startNewRunner(t *testing.T) *newRunner {
	r := &newRunner{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if r.down.Load() || r.accepted.Load() && r.flap() {
			http.Error(w, "runner restarting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "# TYPE gitlab_runner_version_info gauge\ngitlab_runner_version_info{architecture=\"amd64\",version=\"19.4.0\"} 1\n")
		fmt.Fprint(w, "# TYPE gitlab_runner_api_request_statuses_total counter\n")
		if r.accepted.Load() {
			fmt.Fprint(w, "gitlab_runner_api_request_statuses_total{endpoint=\"request_job\",method=\"POST\",runner=\"abc\",status=\"204\",system_id=\"s_1\"} 12\n")
		} else {
			// A rejected token: GitLab answers 403, the runner stops asking.
			fmt.Fprint(w, "gitlab_runner_api_request_statuses_total{endpoint=\"request_job\",method=\"POST\",runner=\"abc\",status=\"403\",system_id=\"s_1\"} 1\n")
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func health(runners map[string]*newRunner) func(context.Context, providers.Instance) error {
	return vmfleet.RunnerHealth{URL: func(i providers.Instance) string {
		if r, ok := runners[i.Name]; ok {
			return r.srv.URL + "/metrics"
		}
		return "http://127.0.0.1:1/metrics" // no runner at all
	}}.Check
}

// The old color drains only after the new runner has been healthy by its
// own metrics for the settle time; a flap restarts the settle time.
func TestRotationDrainsTheOldColorOnlyAfterTheNewRunnersSettle(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	old := startManager(t, ctx, srv, "wsrm-blue-1", "blue", 1, []int{300})
	nr := startNewRunner(t)
	var progress strings.Builder
	r := rotation(srv, nil, &progress)
	r.Healthy = health(map[string]*newRunner{"wsrm-green-1": nr})
	r.Settle = 600 * time.Millisecond
	r.Poll = 50 * time.Millisecond
	// A flap after the rotation has seen the runner healthy twice: the
	// settle time starts over. The flap follows the rotation's own checks,
	// not the wall clock, so a loaded machine cannot miss it (a 150 ms
	// window once could be).
	nr.flapAfter = 2
	go func() {
		time.Sleep(500 * time.Millisecond)
		nr.accepted.Store(true) // GitLab accepts the runner
	}()
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	quit, healthySince := old.at(t, "quit"), nr.since()
	if healthySince.IsZero() || quit.Sub(healthySince) < r.Settle {
		t.Errorf("the old runner was stopped at %s, %s after the new one became healthy for good; want at least the settle time %s\n%s",
			quit.Format(time.StampMilli), quit.Sub(healthySince), r.Settle, progress.String())
	}
	if old.finished() != 1 || rep.Result != "succeeded" || !strings.Contains(progress.String(), "unhealthy again") {
		t.Errorf("report %+v\n%s", rep, progress.String())
	}
}

// A new color whose runner never gets a job request answered (its token is
// refused) is deleted, and the old color is never asked to drain.
func TestANewColorWhoseRunnerNeverConnectsIsDeletedAndTheOldKeepsServing(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	srv.AddInstance(ec2test.Instance{ImageID: "ami-old", Zone: "us-east-1a", State: "running",
		Tags: map[string]string{"Name": "wsrm-blue-1", vmfleet.LabelGroup: "wsrm", vmfleet.LabelColor: "blue", vmfleet.LabelGeneration: "1"}})
	nr := startNewRunner(t) // up, but GitLab refuses its token
	r := rotation(srv, nil, io.Discard)
	r.Healthy = health(map[string]*newRunner{"wsrm-green-1": nr})
	r.HealthTimeout, r.Poll = 400*time.Millisecond, 50*time.Millisecond
	rep, err := r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "has not answered a job request") || !strings.Contains(err.Error(), "keep serving") {
		t.Fatalf("error %v", err)
	}
	for _, req := range srv.Requests("CreateTags") {
		if req.Get("Tag.1.Key") == providers.EC2DrainTag {
			t.Error("an old VM was asked to drain although the new color never became healthy")
		}
	}
	if len(instancesByTag(srv, vmfleet.LabelColor, "blue")) != 1 {
		t.Error("the old color was touched")
	}
	if left := instancesByTag(srv, vmfleet.LabelColor, "green"); len(left) != 0 || strings.Join(rep.Deleted, ",") != "wsrm-green-1" {
		t.Errorf("the unhealthy new VMs were not deleted: %v, report %+v", left, rep)
	}
}

func TestRunnerHealthReadsGitLabRunnersOwnMetrics(t *testing.T) {
	for _, tc := range []struct{ page, want string }{
		{"gitlab_runner_jobs{state=\"running\"} 0\n", "no gitlab_runner_version_info"},
		{"gitlab_runner_version_info{version=\"19.4.0\"} 1\n", "has not answered a job request"},
		{"gitlab_runner_version_info{version=\"19.4.0\"} 1\ngitlab_runner_api_request_statuses_total{endpoint=\"request_job\",status=\"201\"} 1\n", ""},
		{"gitlab_runner_version_info{version=\"19.4.0\"} 1\ngitlab_runner_api_request_statuses_total{endpoint=\"update_job\",status=\"200\"} 5\n", "has not answered a job request"},
	} {
		err := vmfleet.RunnerHealthFromMetrics("vm", strings.NewReader(tc.page))
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.page, err, tc.want)
		}
	}
}
