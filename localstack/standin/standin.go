// Package standin is a stand-in for gitlab-runner that keeps the contract
// runnerfleet relies on, for the local cluster's real node, where managers
// run as containers and no real GitLab exists:
//
//   - `gitlab-runner run --config <file>` reads config.toml (concurrent,
//     check_interval, listen_address, and each [[runners]] url, token, name
//     and limit);
//   - it asks the GitLab of each runner for jobs (POST /api/v4/jobs/request,
//     the runner API, as served by localstack/gitlabserver) while it has
//     free slots, runs each job for the duration its
//     gitlabserver.DurationVariable asks, streams a log (PATCH
//     /api/v4/jobs/:id/trace) and reports the result (PUT /api/v4/jobs/:id),
//     after it deleted the job's pod, as gitlab-runner's executor cleans up
//     before the final update;
//   - it serves gitlab_runner_jobs, gitlab_runner_concurrent,
//     gitlab_runner_version_info, gitlab_runner_api_request_statuses_total
//     (its job requests by status) and the queue metrics gitlab-runner
//     derives from each job's job_info (gitlab_runner_job_queue_duration_seconds
//     and, with [[runners.monitoring.job_queuing_durations]],
//     gitlab_runner_acceptable_job_queuing_duration_exceeded_total; queue.go)
//     on listen_address (/metrics);
//   - SIGQUIT is gitlab-runner's graceful stop: take no new job, let the
//     running ones finish and report, then exit 0;
//   - SIGTERM (and SIGINT) is its forceful stop: abort the running jobs,
//     report them failed, exit 1.
//
// It identifies itself to GitLab by a system_id derived from its host name
// (a pod's name), so a test can tell which manager took which job.
package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// Version is what the stand-in reports as its gitlab-runner version.
const Version = "0.0.0-standin"

// Config is the part of gitlab-runner's config.toml the stand-in reads.
type Config struct {
	Concurrent    int      `toml:"concurrent"`
	CheckInterval int      `toml:"check_interval"`
	ListenAddress string   `toml:"listen_address"`
	Runners       []Runner `toml:"runners"`
}

// Runner is one [[runners]] entry.
type Runner struct {
	Name     string `toml:"name"`
	URL      string `toml:"url"`
	Token    string `toml:"token"`
	Limit    int    `toml:"limit"`
	Executor string `toml:"executor"`
	// Kubernetes, with a namespace, makes every job a pod there
	// (kubernetes.go).
	Kubernetes *Kubernetes `toml:"kubernetes"`
	// Monitoring, with job_queuing_durations, counts the jobs that waited
	// too long (queue.go).
	Monitoring *Monitoring `toml:"monitoring"`
}

// jobPods reports whether r's jobs run in pods.
func (r Runner) jobPods() bool {
	return r.Executor == "kubernetes" && r.Kubernetes != nil && r.Kubernetes.Namespace != ""
}

// ReadConfig reads and checks config.toml.
func ReadConfig(path string) (*Config, error) {
	c := &Config{}
	if _, err := toml.DecodeFile(path, c); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if c.Concurrent <= 0 {
		return nil, fmt.Errorf("%s: concurrent is %d: set it to the number of jobs this manager may run at once", path, c.Concurrent)
	}
	if len(c.Runners) == 0 {
		return nil, fmt.Errorf("%s: no [[runners]]: nothing to ask for jobs", path)
	}
	for i, r := range c.Runners {
		if r.URL == "" || r.Token == "" {
			return nil, fmt.Errorf("%s: runners[%d] (%q) needs url and token", path, i, r.Name)
		}
		if r.Token == runnerconfig.TokenPlaceholder {
			return nil, fmt.Errorf("%s: runners[%d] (%q): the token is still a placeholder: the init container did not substitute it", path, i, r.Name)
		}
	}
	if err := compileMonitoring(c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Options configure Run.
type Options struct {
	Config *Config
	// SystemID names this manager to GitLab; default "s_" + the host name.
	SystemID string
	// Signals delivers SIGQUIT, SIGTERM and SIGINT.
	Signals <-chan os.Signal
	// Log receives one line per event; never a token.
	Log io.Writer
	// HTTP is the client for GitLab; default a client with a 30s timeout.
	HTTP *http.Client
	// Listener, when set, serves the metrics instead of Config.ListenAddress.
	Listener net.Listener
	// Kube creates the job pods of kubernetes runners; default InCluster().
	Kube *Kube
	// Now is the clock by which job_queuing_durations' periods are judged;
	// default time.Now.
	Now func() time.Time
	// MachineState is the docker+machine state directory
	// (MachineStateDir), "" for none: Run holds it locked while it runs
	// and refuses to start when another live process holds it
	// (LockMachineState).
	MachineState string
}

// Exit codes of Run.
const (
	ExitDrained = 0 // SIGQUIT: every job finished
	ExitAborted = 1 // SIGTERM or SIGINT: running jobs aborted
	ExitError   = 2 // bad configuration or no metrics listener
)

type manager struct {
	o       Options
	log     func(format string, args ...any)
	mu      sync.Mutex
	running map[string]int // runner name → running jobs
	total   int
	wg      sync.WaitGroup
	abort   chan struct{} // closed on SIGTERM
	kube    *Kube
	// requests counts job requests GitLab answered, by runner and status.
	requests map[string]map[int]int
	// queue holds the queue metrics, by runner name (queue.go).
	queue map[string]*queueStats
}

func (m *manager) now() time.Time {
	if m.o.Now != nil {
		return m.o.Now()
	}
	return time.Now()
}

// Run runs the stand-in until a signal stops it, and returns its exit code.
func Run(ctx context.Context, o Options) int {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	if o.SystemID == "" {
		host, _ := os.Hostname()
		o.SystemID = "s_" + host
	}
	m := &manager{o: o, running: map[string]int{}, abort: make(chan struct{}), kube: o.Kube}
	m.log = func(format string, args ...any) {
		fmt.Fprintf(o.Log, "%s standin: %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	}
	if err := compileMonitoring(o.Config); err != nil {
		m.log("%v", err)
		return ExitError
	}
	if o.MachineState != "" {
		release, err := LockMachineState(o.MachineState, o.SystemID)
		if err != nil {
			m.log("refusing to start: %v", err)
			return ExitError
		}
		defer release()
		m.log("holding the machine state directory %s", o.MachineState)
	}
	for _, r := range o.Config.Runners {
		if r.jobPods() && m.kube == nil {
			k, err := InCluster()
			if err != nil {
				m.log("runner %s runs jobs in pods of namespace %s, but there is no Kubernetes API: %v", r.Name, r.Kubernetes.Namespace, err)
				return ExitError
			}
			m.kube = k
		}
	}
	ln := o.Listener
	if ln == nil {
		addr := o.Config.ListenAddress
		if addr == "" {
			m.log("listen_address is empty: set it so that the metrics (and the readiness probe) can be reached")
			return ExitError
		}
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			m.log("listening on %s: %v", addr, err)
			return ExitError
		}
	}
	srv := &http.Server{Handler: http.HandlerFunc(m.serveMetrics), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	m.log("started: system_id %s, concurrent %d, %d runner(s), metrics on %s", o.SystemID, o.Config.Concurrent, len(o.Config.Runners), ln.Addr())

	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	var polling sync.WaitGroup
	for _, r := range o.Config.Runners {
		polling.Add(1)
		go func() {
			defer polling.Done()
			m.poll(pollCtx, r)
		}()
	}
	for {
		select {
		case <-ctx.Done():
			stopPolling()
			close(m.abort)
			polling.Wait()
			m.wg.Wait()
			return ExitAborted
		case sig := <-o.Signals:
			switch sig {
			case syscall.SIGQUIT:
				// A request already sent is answered first: a job GitLab
				// hands out is run, never dropped. From the line below on,
				// no request goes out.
				stopPolling()
				polling.Wait()
				m.log("%s: graceful stop: taking no new job, waiting for %d running job(s)", DrainLine, m.jobs())
				done := make(chan struct{})
				go func() { m.wg.Wait(); close(done) }()
				for {
					select {
					case <-done:
						m.log("every job finished; exiting")
						return ExitDrained
					case sig := <-o.Signals:
						if sig == syscall.SIGQUIT {
							m.log("SIGQUIT again: still waiting for %d job(s)", m.jobs())
							continue
						}
						m.log("%s while draining: aborting %d job(s)", sig, m.jobs())
						close(m.abort)
						<-done
						return ExitAborted
					}
				}
			default:
				m.log("%s: forceful stop: aborting %d running job(s)", sig, m.jobs())
				stopPolling()
				close(m.abort)
				polling.Wait()
				m.wg.Wait()
				return ExitAborted
			}
		}
	}
}

func (m *manager) jobs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// take reserves a slot for r, false when concurrent or r's limit is
// reached, as gitlab-runner's processRunner does before it asks GitLab for
// a job (acquireBuild: a limit counts only above 0; 0 is no limit). A
// manager at its limit asks for nothing, so the job stays in GitLab's
// queue.
func (m *manager) take(r Runner) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.total >= m.o.Config.Concurrent || r.Limit > 0 && m.running[r.Name] >= r.Limit {
		return false
	}
	m.total++
	m.running[r.Name]++
	m.wg.Add(1)
	return true
}

func (m *manager) release(r Runner) {
	m.mu.Lock()
	m.total--
	m.running[r.Name]--
	m.mu.Unlock()
	m.wg.Done()
}

// poll asks r's GitLab for jobs every check_interval while a slot is free,
// and at once again after it got one.
func (m *manager) poll(ctx context.Context, r Runner) {
	interval := time.Duration(m.o.Config.CheckInterval) * time.Second
	if interval <= 0 {
		interval = 3 * time.Second
	}
	for {
		got := false
		if ctx.Err() == nil && m.take(r) {
			// Not canceled with ctx: a job GitLab hands out is run.
			job, err := m.request(context.WithoutCancel(ctx), r)
			switch {
			case err != nil:
				m.release(r)
				if ctx.Err() == nil {
					m.log("runner %s: requesting a job: %v", r.Name, err)
				}
			case job == nil:
				m.release(r)
			default:
				got = true
				m.observeQueue(r, job)
				go func() {
					defer m.release(r)
					m.run(r, job)
				}()
			}
		}
		if got {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

type jobPayload struct {
	ID      int64  `json:"id"`
	Token   string `json:"token"`
	JobInfo struct {
		ProjectID int64 `json:"project_id"`
		// The queue signals, as gitlab-runner's spec.JobInfo reads them.
		TimeInQueueSeconds                       float64 `json:"time_in_queue_seconds"`
		ProjectJobsRunningOnInstanceRunnersCount string  `json:"project_jobs_running_on_instance_runners_count"`
	} `json:"job_info"`
	Variables []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"variables"`
}

func (j *jobPayload) duration() (time.Duration, error) {
	for _, v := range j.Variables {
		if v.Key == gitlabserver.DurationVariable {
			return time.ParseDuration(v.Value)
		}
	}
	return 0, nil
}

func apiURL(r Runner, p string) string {
	return strings.TrimSuffix(r.URL, "/") + "/api/v4/" + p
}

// request asks for one job; nil when none waits.
func (m *manager) request(ctx context.Context, r Runner) (*jobPayload, error) {
	body, _ := json.Marshal(map[string]any{
		"token":     r.Token,
		"system_id": m.o.SystemID,
		"info": map[string]any{
			"name": "gitlab-runner", "version": Version, "executor": "kubernetes",
			"features": map[string]bool{"trace_reset": true, "trace_checksum": false, "trace_size": true},
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, apiURL(r, "jobs/request"), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.o.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m.mu.Lock()
	if m.requests == nil {
		m.requests = map[string]map[int]int{}
	}
	if m.requests[r.Name] == nil {
		m.requests[r.Name] = map[int]int{}
	}
	m.requests[r.Name][resp.StatusCode]++
	m.mu.Unlock()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil, nil
	case http.StatusCreated:
		j := &jobPayload{}
		if err := json.Unmarshal(b, j); err != nil {
			return nil, fmt.Errorf("reading the job: %w", err)
		}
		return j, nil
	case http.StatusForbidden:
		return nil, fmt.Errorf("403 Forbidden: GitLab does not know this runner's token")
	}
	return nil, fmt.Errorf("POST /jobs/request: %s", resp.Status)
}

// run runs one job: it sleeps its duration unless aborted, streaming a log,
// then reports the result.
func (m *manager) run(r Runner, j *jobPayload) {
	d, err := j.duration()
	if err != nil {
		m.log("job %d: bad %s: %v", j.ID, gitlabserver.DurationVariable, err)
	}
	m.log("job %d: started on runner %s for %s", j.ID, r.Name, d)
	var sent int
	trace := func(line string) {
		b := []byte(line)
		if err := m.trace(r, j, sent, b); err != nil {
			m.log("job %d: sending its log: %v", j.ID, err)
			return
		}
		sent += len(b)
	}
	trace(fmt.Sprintf("Running with gitlab-runner %s on %s\n", Version, m.o.SystemID))
	state, reason := gitlabserver.JobSuccess, ""
	var pod string
	unknownPod := false // a create whose outcome is unknown
	if r.jobPods() {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-m.abort:
				cancel()
			case <-ctx.Done():
			}
		}()
		name, err := m.startPod(ctx, r, j.ID, j.JobInfo.ProjectID, trace)
		cancel()
		pod = name
		// A create that failed short of the API server's answer (a
		// timeout) may have made the pod all the same.
		unknownPod = err != nil && pod == "" && !isAPIError(err)
		if err != nil {
			m.log("job %d: %v", j.ID, err)
			state, reason = gitlabserver.JobFailed, "runner_system_failure"
			trace("ERROR: Job failed (system failure): " + err.Error() + "\n")
		}
	}
	if state == gitlabserver.JobSuccess {
		trace(fmt.Sprintf("$ sleep %s\n", d))
		end := time.After(d)
		// A pod is looked at every second: a job whose pod was deleted
		// or evicted fails, as on a real runner.
		var tick <-chan time.Time
		if pod != "" {
			tk := time.NewTicker(time.Second)
			defer tk.Stop()
			tick = tk.C
		}
	wait:
		for {
			select {
			case <-end:
				trace("Job succeeded\n")
				break wait
			case <-m.abort:
				state, reason = gitlabserver.JobFailed, "runner_system_failure"
				trace("ERROR: Job failed: aborted: the runner was stopped (SIGTERM)\n")
				break wait
			case <-tick:
				if why := m.podGone(context.Background(), r.Kubernetes.Namespace, pod); why != "" {
					m.log("job %d: %s", j.ID, why)
					state, reason = gitlabserver.JobFailed, "runner_system_failure"
					trace("ERROR: Job failed (system failure): " + why + "\n")
					break wait
				}
			}
		}
	}
	if pod != "" {
		// The pod goes before the result is sent, as gitlab-runner's
		// executor cleans up before the job's final update: a manager
		// stopped in between leaves a job GitLab times out, never a pod
		// that holds its capacity (and its RunnerSet's deletion) with no
		// one left to delete it. The manager exits only after this.
		m.deletePod(r.Kubernetes.Namespace, pod)
	} else if unknownPod {
		m.deletePodsOfJob(r.Kubernetes.Namespace, j.ID)
	}
	for attempt := 1; ; attempt++ {
		err := m.update(r, j, state, reason)
		if err == nil {
			break
		}
		if attempt == 5 {
			m.log("job %d: reporting %s: %v (giving up)", j.ID, state, err)
			return
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
	m.log("job %d: %s", j.ID, state)
}

func (m *manager) trace(r Runner, j *jobPayload, offset int, b []byte) error {
	req, err := http.NewRequest(http.MethodPatch, apiURL(r, fmt.Sprintf("jobs/%d/trace", j.ID)), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Job-Token", j.Token)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Content-Range", fmt.Sprintf("%d-%d", offset, offset+len(b)-1))
	resp, err := m.o.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("PATCH trace: %s", resp.Status)
	}
	return nil
}

func (m *manager) update(r Runner, j *jobPayload, state, reason string) error {
	body, _ := json.Marshal(map[string]any{"token": j.Token, "state": state, "failure_reason": reason})
	req, err := http.NewRequest(http.MethodPut, apiURL(r, fmt.Sprintf("jobs/%d", j.ID)), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.o.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT job: %s", resp.Status)
	}
	return nil
}

// serveMetrics writes the families of gitlab-runner that runnerfleet reads.
func (m *manager) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metrics" {
		http.NotFound(w, r)
		return
	}
	m.mu.Lock()
	var b strings.Builder
	b.WriteString("# HELP gitlab_runner_version_info A metric with a constant '1' value labeled by different build stats fields.\n")
	b.WriteString("# TYPE gitlab_runner_version_info gauge\n")
	fmt.Fprintf(&b, "gitlab_runner_version_info{architecture=\"amd64\",name=\"gitlab-runner\",os=\"linux\",version=%q} 1\n", Version)
	b.WriteString("# HELP gitlab_runner_concurrent The current value of concurrent setting\n")
	b.WriteString("# TYPE gitlab_runner_concurrent gauge\n")
	fmt.Fprintf(&b, "gitlab_runner_concurrent %d\n", m.o.Config.Concurrent)
	b.WriteString("# HELP gitlab_runner_jobs The number of running jobs\n")
	b.WriteString("# TYPE gitlab_runner_jobs gauge\n")
	for _, rn := range m.o.Config.Runners {
		fmt.Fprintf(&b, "gitlab_runner_jobs{executor_stage=\"step_script\",runner=%q,stage=\"step_script\",state=\"running\",system_id=%q} %s\n",
			rn.Name, m.o.SystemID, strconv.Itoa(m.running[rn.Name]))
	}
	b.WriteString("# HELP gitlab_runner_api_request_statuses_total The total number of api requests, partitioned by runner, system_id, endpoint and status.\n")
	b.WriteString("# TYPE gitlab_runner_api_request_statuses_total counter\n")
	for _, rn := range m.o.Config.Runners {
		codes := make([]int, 0, len(m.requests[rn.Name]))
		for c := range m.requests[rn.Name] {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		for _, c := range codes {
			fmt.Fprintf(&b, "gitlab_runner_api_request_statuses_total{endpoint=\"request_job\",runner=%q,status=\"%d\",system_id=%q} %d\n",
				rn.Name, c, m.o.SystemID, m.requests[rn.Name][c])
		}
	}
	m.writeQueueMetrics(&b)
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = io.WriteString(w, b.String())
}

// DrainLine starts the log line written once the stand-in has stopped
// asking for jobs after SIGQUIT; its time is the line's first field.
const DrainLine = "SIGQUIT"

// ErrUsage is returned by Main for a command line it does not serve.
var ErrUsage = errors.New("usage: gitlab-runner run --config <config.toml> [--working-directory <dir>]")
