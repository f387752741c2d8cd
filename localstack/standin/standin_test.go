package standin

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	srv     *gitlabserver.Server
	sigs    chan os.Signal
	log     *syncBuffer
	metrics string
	exit    chan int      // receives the exit code once
	exited  chan struct{} // closed when Run returned
}

// start runs the stand-in against a loopback GitLab with one runner for
// tag "team", reading config.toml from disk as the container does.
func start(t *testing.T, concurrent int) *fixture {
	t.Helper()
	return startWith(t, gitlabserver.New(), concurrent, "", nil)
}

// startWith is start against srv, with more TOML at the end of the runner's
// entry, and now as the stand-in's clock (nil: the wall clock).
func startWith(t *testing.T, srv *gitlabserver.Server, concurrent int, runnerTOML string, now func() time.Time) *fixture {
	t.Helper()
	t.Cleanup(srv.Close)
	rn := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"team"}})
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	cfg := "concurrent = " + itoa(concurrent) + "\ncheck_interval = 1\nlisten_address = \":9252\"\n\n[[runners]]\n  name = \"team\"\n  url = \"" +
		srv.URL() + "\"\n  token = \"" + rn.Token + "\"\n  executor = \"kubernetes\"\n" + runnerTOML
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := ReadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, sigs: make(chan os.Signal, 4), log: &syncBuffer{}, metrics: "http://" + ln.Addr().String() + "/metrics", exit: make(chan int, 1), exited: make(chan struct{})}
	go func() {
		f.exit <- Run(context.Background(), Options{Config: c, SystemID: "s_test", Signals: f.sigs, Log: f.log, Listener: ln, Now: now})
		close(f.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-f.exited:
		default:
			f.sigs <- syscall.SIGTERM
			<-f.exited
		}
	})
	return f
}

func itoa(n int) string { return strconv.Itoa(n) }

func (f *fixture) waitJobs(t *testing.T, what string, ok func([]gitlabserver.Job) bool) []gitlabserver.Job {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		jobs := f.srv.Jobs()
		if ok(jobs) {
			return jobs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened; jobs %+v\nlog:\n%s", what, jobs, f.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func count(jobs []gitlabserver.Job, state string) int {
	n := 0
	for _, j := range jobs {
		if j.State == state {
			n++
		}
	}
	return n
}

func (f *fixture) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(f.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func drainTime(t *testing.T, log string) time.Time {
	t.Helper()
	for _, l := range strings.Split(log, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == DrainLine+":" {
			ts, err := time.Parse(time.RFC3339Nano, f[0])
			if err != nil {
				t.Fatal(err)
			}
			return ts
		}
	}
	t.Fatalf("no %q line in the log:\n%s", DrainLine, log)
	return time.Time{}
}

func TestSIGQUITFinishesRunningJobsAndTakesNoNewOne(t *testing.T) {
	f := start(t, 2)
	for range 2 {
		f.srv.QueueJob([]string{"team"}, 1500*time.Millisecond)
	}
	f.srv.QueueJob([]string{"other"}, time.Second) // never this runner's
	f.waitJobs(t, "both team jobs running", func(j []gitlabserver.Job) bool { return count(j, gitlabserver.JobRunning) == 2 })
	if m := f.scrape(t); !strings.Contains(m, `gitlab_runner_jobs{executor_stage="step_script",runner="team",stage="step_script",state="running",system_id="s_test"} 2`) ||
		!strings.Contains(m, `gitlab_runner_version_info{`) {
		t.Errorf("metrics while 2 jobs run:\n%s", m)
	}
	f.sigs <- syscall.SIGQUIT
	late := f.srv.QueueJob([]string{"team"}, time.Second) // queued while draining: left for another manager
	select {
	case code := <-f.exit:
		if code != ExitDrained {
			t.Fatalf("exit code %d after SIGQUIT, want %d\n%s", code, ExitDrained, f.log.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20s after SIGQUIT:\n%s", f.log.String())
	}
	drained := drainTime(t, f.log.String())
	for _, j := range f.srv.Jobs() {
		switch {
		case j.ID == late || j.Tags[0] == "other":
			if j.State != gitlabserver.JobPending {
				t.Errorf("job %d (%v) is %s, want pending: a draining runner took it", j.ID, j.Tags, j.State)
			}
		case j.State != gitlabserver.JobSuccess:
			t.Errorf("job %d is %s (%s), want success", j.ID, j.State, j.FailureReason)
		case j.PickedAt.After(drained) || j.SystemID != "s_test":
			t.Errorf("job %d picked at %s by %s, drain logged at %s", j.ID, j.PickedAt, j.SystemID, drained)
		case !strings.Contains(string(j.Trace), "Job succeeded"):
			t.Errorf("job %d log = %q", j.ID, j.Trace)
		}
	}
}

func TestSIGTERMAbortsRunningJobsAndReportsThemFailed(t *testing.T) {
	f := start(t, 3)
	for range 2 {
		f.srv.QueueJob([]string{"team"}, time.Hour)
	}
	f.waitJobs(t, "both jobs running", func(j []gitlabserver.Job) bool { return count(j, gitlabserver.JobRunning) == 2 })
	f.sigs <- syscall.SIGTERM
	if code := <-f.exit; code != ExitAborted {
		t.Fatalf("exit code %d after SIGTERM, want %d", code, ExitAborted)
	}
	jobs := f.srv.Jobs()
	if count(jobs, gitlabserver.JobFailed) != 2 {
		t.Fatalf("after SIGTERM jobs are %+v, want both failed", jobs)
	}
	if jobs[0].FailureReason != "runner_system_failure" {
		t.Errorf("failure reason %q", jobs[0].FailureReason)
	}
}

func TestConcurrentCapsRunningJobs(t *testing.T) {
	f := start(t, 1)
	for range 3 {
		f.srv.QueueJob([]string{"team"}, 300*time.Millisecond)
	}
	max := 0
	f.waitJobs(t, "all three jobs done one at a time", func(j []gitlabserver.Job) bool {
		max = maxInt(max, count(j, gitlabserver.JobRunning))
		return count(j, gitlabserver.JobSuccess) == 3
	})
	if max > 1 {
		t.Errorf("%d jobs ran at once with concurrent = 1", max)
	}
}

// A runner's limit caps its running jobs below concurrent, as
// gitlab-runner's acquireBuild does: 5 jobs with limit = 2 run two at a
// time, the others wait in GitLab's queue, and all succeed. Negative
// control: limit = 0 and a negative limit are no limit to gitlab-runner,
// and the same jobs run more than two at once.
func TestLimitCapsARunnersJobsAndZeroIsNoLimit(t *testing.T) {
	for _, c := range []struct {
		limit  string
		capped bool
	}{{"2", true}, {"0", false}, {"-1", false}} {
		t.Run("limit "+c.limit, func(t *testing.T) {
			f := startWith(t, gitlabserver.New(), 10, "  limit = "+c.limit+"\n", nil)
			for range 5 {
				f.srv.QueueJob([]string{"team"}, 600*time.Millisecond)
			}
			most := 0
			f.waitJobs(t, "all five jobs done", func(j []gitlabserver.Job) bool {
				most = maxInt(most, count(j, gitlabserver.JobRunning))
				return count(j, gitlabserver.JobSuccess) == 5
			})
			switch {
			case c.capped && most != 2:
				t.Errorf("%d jobs ran at once with limit = %s, want 2", most, c.limit)
			case !c.capped && most <= 2:
				t.Errorf("only %d jobs ran at once with limit = %s, which gitlab-runner reads as no limit", most, c.limit)
			}
		})
	}
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func TestReadConfigNamesWhatIsWrong(t *testing.T) {
	for name, tc := range map[string]struct{ toml, want string }{
		"no concurrent":     {"[[runners]]\nurl = \"http://x\"\ntoken = \"glrt-x\"\n", "concurrent is 0"},
		"no runners":        {"concurrent = 1\n", "no [[runners]]"},
		"placeholder token": {"concurrent = 1\n[[runners]]\nname = \"a\"\nurl = \"http://x\"\ntoken = \"__RUNNERFLEET_RUNNER_TOKEN__\"\n", "still a placeholder"},
		"no url":            {"concurrent = 1\n[[runners]]\nname = \"a\"\ntoken = \"glrt-x\"\n", "needs url and token"},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(p, []byte(tc.toml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := ReadConfig(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadConfig = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
