//go:build linux

package vmfleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
	rfaws "github.com/runnerfleet/runnerfleet/providers/aws"
	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
	"github.com/runnerfleet/runnerfleet/provisioning/drainagent"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// The test binary doubles as a stand-in gitlab-runner: with RF_STANDIN set
// it runs jobs of the lengths in RF_JOBS (milliseconds), serves
// gitlab_runner_jobs on RF_METRICS, and on SIGQUIT stops taking jobs,
// finishes the running ones and exits; each finished job leaves a file.
// With RF_JOBS_FROM_QUIT=1 each job's length counts from the SIGQUIT: a job
// that still has that long to go when the drain reaches its runner, however
// long a loaded machine took to start the runners and the new color.
func TestMain(m *testing.M) {
	if os.Getenv("RF_STANDIN") == "1" {
		standIn()
		return
	}
	os.Exit(m.Run())
}

func standIn() {
	// SIGQUIT is caught before anything else: its default action would end
	// the process at once, jobs and all, and the test takes the metrics
	// answering (below) as the sign that the stand-in is ready for it.
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGQUIT)
	dir := os.Getenv("RF_DIR")
	fromQuit, quitting := os.Getenv("RF_JOBS_FROM_QUIT") == "1", make(chan struct{})
	var running atomic.Int64
	var wg sync.WaitGroup
	for i, ms := range strings.Split(os.Getenv("RF_JOBS"), ",") {
		d, _ := strconv.Atoi(ms)
		running.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if fromQuit {
				<-quitting
			}
			time.Sleep(time.Duration(d) * time.Millisecond)
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("job-%d.finished", i)), nil, 0o644)
			running.Add(-1)
		}()
	}
	// The metrics listener is inherited (fd 3), bound by the test before
	// the start: no other listener can take its port in between.
	ln, err := net.FileListener(os.NewFile(3, "metrics"))
	if err != nil {
		os.Exit(3)
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "# TYPE gitlab_runner_jobs gauge\ngitlab_runner_jobs{runner=\"x\",state=\"running\"} %d\n", running.Load())
		}))
	}()
	<-quit
	_ = os.WriteFile(filepath.Join(dir, "quit"), []byte(time.Now().Format(time.RFC3339Nano)), 0o644)
	close(quitting)
	wg.Wait() // graceful: every running job finishes
	_ = os.WriteFile(filepath.Join(dir, "exited"), []byte(time.Now().Format(time.RFC3339Nano)), 0o644)
	os.Exit(0)
}

// manager is an old-color VM: an instance in the EC2 fake, a stand-in
// runner holding jobs, and the real drain agent talking to the VM's IMDS.
type manager struct {
	name string
	dir  string
	jobs []int
	cmd  *exec.Cmd
}

func startManager(t testing.TB, ctx context.Context, srv *ec2test.Server, name, color string, gen int, jobs []int, env ...string) *manager {
	t.Helper()
	id := srv.AddInstance(ec2test.Instance{
		ImageID: "ami-old", InstanceType: "c7i.xlarge", Zone: "us-east-1a", State: "running", MetadataTags: true,
		Tags: map[string]string{"Name": name, vmfleet.LabelGroup: "wsrm", vmfleet.LabelColor: color,
			vmfleet.LabelGeneration: strconv.Itoa(gen), vmfleet.LabelRole: vmfleet.RoleManager},
	})
	self, err := rfaws.NewSelf(ctx, srv.Config(), rfaws.SelfOptions{IMDSEndpoint: srv.IMDSFor(id).URL(), PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return runManager(t, ctx, self, name, jobs, env...)
}

// runManager starts the stand-in runner, with env added to its
// environment, and the real drain agent of a VM.
func runManager(t testing.TB, ctx context.Context, self providers.Self, name string, jobs []int, env ...string) *manager {
	t.Helper()
	m := &manager{name: name, dir: t.TempDir(), jobs: jobs}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // the child has its own copy
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	metrics := ln.Addr().String()
	var ms []string
	for _, j := range jobs {
		ms = append(ms, strconv.Itoa(j))
	}
	m.cmd = exec.Command(os.Args[0], "run")
	m.cmd.Env = append(append(os.Environ(), "RF_STANDIN=1", "RF_DIR="+m.dir, "RF_JOBS="+strings.Join(ms, ",")), env...)
	m.cmd.ExtraFiles = []*os.File{lf}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.cmd.Process.Kill(); _, _ = m.cmd.Process.Wait() })
	go func() { _, _ = m.cmd.Process.Wait() }() // reap, as init would
	// A real runner has long been up when a rotation comes; the stand-in
	// is up once its metrics answer (it catches SIGQUIT before serving).
	// Without this wait, a loaded machine let the drain's SIGQUIT reach a
	// stand-in still starting, which SIGQUIT's default action ended.
	resp, err := (&http.Client{Timeout: time.Minute}).Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatalf("stand-in runner %s did not come up: %v", name, err)
	}
	_ = resp.Body.Close()
	runner, err := drainagent.NewRunnerControl(drainagent.RunnerOptions{PID: m.cmd.Process.Pid}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	agent := &drainagent.Agent{Self: self, Runner: runner, Jobs: &drainagent.MetricsJobCounter{URL: "http://" + metrics + "/metrics"},
		Interval: 200 * time.Millisecond, Poll: 50 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go func() { _ = agent.Run(ctx) }()
	return m
}

func (m *manager) finished() int {
	n := 0
	for i := range m.jobs {
		if _, err := os.Stat(filepath.Join(m.dir, fmt.Sprintf("job-%d.finished", i))); err == nil {
			n++
		}
	}
	return n
}

// at reads the time the stand-in wrote into file (quit, exited).
func (m *manager) at(t *testing.T, file string) time.Time {
	b, err := os.ReadFile(filepath.Join(m.dir, file))
	if err != nil {
		t.Fatalf("%s: no %s: %v", m.name, file, err)
	}
	at, _ := time.Parse(time.RFC3339Nano, string(b))
	return at
}

func compute(srv *ec2test.Server) *rfaws.Compute {
	c := rfaws.New(srv.Config())
	c.WaitMinDelay, c.WaitMaxDelay = 50*time.Millisecond, 200*time.Millisecond
	return c
}

func instancesByTag(srv *ec2test.Server, key, value string) []ec2test.Instance {
	var out []ec2test.Instance
	for _, in := range srv.Instances() {
		if in.Tags[key] == value && in.State != "terminated" && in.State != "shutting-down" {
			out = append(out, in)
		}
	}
	return out
}

// newImage registers the image the new color boots from.
func newImage(srv *ec2test.Server) string {
	for _, im := range srv.Images() {
		if im.Name == "wsrm-new" {
			return im.ID
		}
	}
	return srv.AddImage(ec2test.Image{Name: "wsrm-new", CreationDate: time.Now(), Tags: map[string]string{"family": "wsrm-managers"}})
}

func rotation(srv *ec2test.Server, notify func(context.Context, vmfleet.Report), progress io.Writer) *vmfleet.Rotation {
	return &vmfleet.Rotation{
		Compute: compute(srv), Group: "wsrm", Prefix: "wsrm",
		Template: providers.InstanceSpec{Zone: "us-east-1a", MachineType: "c7i.xlarge", Image: newImage(srv)},
		Poll:     100 * time.Millisecond, HealthTimeout: 30 * time.Second, DrainTimeout: 60 * time.Second,
		Progress: progress, Notify: notify,
	}
}

// Four managers hold jobs of different lengths. The rotation drains them all
// at once: no job is lost, no VM is deleted before its jobs are done, and
// every old runner is asked to stop before any of them has finished (so the
// rotation takes about the longest job, not the sum).
func TestRotationLosesNoJobAndDrainsAllOldManagersAtOnce(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	srv.SetLatency(100*time.Millisecond, 100*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every manager still runs its jobs when the drain comes: their lengths
	// count from its SIGQUIT. (Counted from the runners' start, a loaded
	// machine once started the four runners and the new color so slowly
	// that a runner's only job had ended before the drain, and that idle
	// runner exited before the last SIGQUIT went out.) Drained one after
	// another, a runner would exit at least 2.5 s before the next SIGQUIT.
	jobs := [][]int{{3000}, {2500, 2800}, {4000, 2500}, {2600}}
	var olds []*manager
	for i, j := range jobs {
		olds = append(olds, startManager(t, ctx, srv, fmt.Sprintf("wsrm-blue-%d", i+1), "blue", 1, j, "RF_JOBS_FROM_QUIT=1"))
	}
	var reports []vmfleet.Report
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep vmfleet.Report
		_ = json.NewDecoder(r.Body).Decode(&rep)
		reports = append(reports, rep)
	}))
	defer hook.Close()
	var progress strings.Builder
	start := time.Now()
	notify, err := vmfleet.Webhook(hook.URL, vmfleet.NotifyJSON, &progress)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := rotation(srv, notify, &progress).Run(ctx)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Logf("rotation of 4 managers with jobs of 2.5–4 s (17.4 s of jobs in all) took %s\n%s", took.Round(10*time.Millisecond), progress.String())

	for _, m := range olds {
		if n := m.finished(); n != len(m.jobs) {
			t.Errorf("%s finished %d of %d jobs: a job was lost", m.name, n, len(m.jobs))
		}
	}
	// Every old runner got its graceful stop before any of them had exited:
	// the drains ran side by side, not one after the other.
	var lastQuit, firstExit time.Time
	for _, m := range olds {
		if q := m.at(t, "quit"); q.After(lastQuit) {
			lastQuit = q
		}
		if e := m.at(t, "exited"); firstExit.IsZero() || e.Before(firstExit) {
			firstExit = e
		}
	}
	if !lastQuit.Before(firstExit) {
		t.Errorf("drains were sequential: the last SIGQUIT came at %s, after a runner exited at %s", lastQuit, firstExit)
	}
	if got := instancesByTag(srv, vmfleet.LabelColor, "blue"); len(got) != 0 {
		t.Errorf("old VMs left: %v", got)
	}
	green := instancesByTag(srv, vmfleet.LabelColor, "green")
	if len(green) != 4 {
		t.Fatalf("%d new VMs, want 4", len(green))
	}
	for _, g := range green {
		if g.ImageID != newImage(srv) || g.Tags[vmfleet.LabelGeneration] != "2" || g.PublicIP != "" {
			t.Errorf("new VM %+v", g)
		}
	}
	if rep.Result != "succeeded" || len(rep.Deleted) != 4 || len(reports) != 1 || reports[0].Result != "succeeded" || reports[0].Step != "" {
		t.Errorf("report %+v, webhook got %+v", rep, reports)
	}
}

func TestANewColorThatNeverBecomesHealthyLeavesTheOldServing(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	ctx := context.Background()
	srv.AddInstance(ec2test.Instance{ImageID: "ami-old", Zone: "us-east-1a", State: "running",
		Tags: map[string]string{"Name": "wsrm-blue-1", vmfleet.LabelGroup: "wsrm", vmfleet.LabelColor: "blue", vmfleet.LabelGeneration: "1"}})
	r := rotation(srv, nil, io.Discard)
	r.HealthTimeout = 500 * time.Millisecond
	r.Healthy = func(context.Context, providers.Instance) error { return errors.New("runner never contacted GitLab") }
	rep, err := r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "never became healthy") || !strings.Contains(err.Error(), "keep serving") {
		t.Fatalf("error %v", err)
	}
	if rep.Step != vmfleet.StepHealthy {
		t.Errorf("step %q, want %q", rep.Step, vmfleet.StepHealthy)
	}
	if srv.Calls("CreateTags") > 1 { // the new VM's tags come with RunInstances; no drain tag may be set
		for _, req := range srv.Requests("CreateTags") {
			if req.Get("Tag.1.Key") == providers.EC2DrainTag {
				t.Error("an old VM was asked to drain although the new color is not healthy")
			}
		}
	}
	if len(instancesByTag(srv, vmfleet.LabelColor, "blue")) != 1 {
		t.Error("the old color was touched")
	}
}

func TestATimeoutIsReportedAndNothingStillRunningJobsIsDeleted(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := startManager(t, ctx, srv, "wsrm-blue-1", "blue", 1, []int{60_000})
	var got vmfleet.Report
	r := rotation(srv, func(_ context.Context, rep vmfleet.Report) { got = rep }, io.Discard)
	// Long enough for the agent's first draining report on a loaded
	// machine, far short of the 60 s job.
	r.DrainTimeout = 5 * time.Second
	_, err := r.Run(ctx)
	if !errors.Is(err, vmfleet.ErrTimeout) || !strings.Contains(err.Error(), "wsrm-blue-1 still run 1 jobs") {
		t.Fatalf("error %v", err)
	}
	if got.Result != "timeout" || len(got.Waiting) != 1 || got.Step != vmfleet.StepDelete {
		t.Errorf("notified %+v", got)
	}
	if len(instancesByTag(srv, "Name", "wsrm-blue-1")) != 1 || slow.finished() != 0 {
		t.Error("a VM still running a job was deleted")
	}
}

func TestAnInterruptedRotationResumesWhereItStopped(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	agents, stopAgents := context.WithCancel(context.Background())
	defer stopAgents()
	for i := range 2 {
		startManager(t, agents, srv, fmt.Sprintf("wsrm-blue-%d", i+1), "blue", 1, []int{1500})
	}
	first, cut := context.WithCancel(context.Background())
	var progress strings.Builder
	r := rotation(srv, nil, &progress)
	go func() { // cut the rotation off while the old color drains
		for !strings.Contains(progress.String(), "Asked 2 old blue VMs to drain") {
			time.Sleep(20 * time.Millisecond)
		}
		cut()
	}()
	if _, err := r.Run(first); err == nil {
		t.Fatal("the interrupted rotation reported success")
	}
	created := srv.Calls("RunInstances")
	progress.Reset()
	rep, err := rotation(srv, nil, &progress).Run(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if srv.Calls("RunInstances") != created || !strings.Contains(progress.String(), "Resuming") {
		t.Errorf("the rerun created VMs again or did not resume:\n%s", progress.String())
	}
	if len(instancesByTag(srv, vmfleet.LabelColor, "green")) != 2 || len(instancesByTag(srv, vmfleet.LabelColor, "blue")) != 0 || rep.Result != "succeeded" {
		t.Errorf("after resuming: %+v", rep)
	}
}

func TestRotatingAGroupThatDoesNotExistSaysSo(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	_, err := rotation(srv, nil, io.Discard).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "group wsrm does not exist") {
		t.Fatalf("error %v", err)
	}
}

func TestGCPrunesImagesAndSpotRequestsOnlyWithApply(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	for i, day := range []int{1, 2, 3, 4} {
		srv.AddImage(ec2test.Image{Name: fmt.Sprintf("wsrm-%d", i), CreationDate: time.Now().AddDate(0, 0, -day), Tags: map[string]string{"family": "wsrm"}})
	}
	srv.AddSpotRequest(ec2test.SpotRequest{State: "open", Type: "one-time", Zone: "us-east-1a"})
	gc := func(apply bool) vmfleet.Plan {
		plan, err := (&vmfleet.GC{
			Compute: compute(srv), Sources: []vmfleet.Source{&vmfleet.VMSource{Compute: compute(srv)}},
			ImageFamilies: []string{"wsrm"}, Keep: 2, Apply: apply,
		}).Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return plan
	}
	if dry := gc(false); len(dry.SpotRequests) != 1 || len(dry.Images) != 2 {
		t.Fatalf("plan %+v", dry)
	}
	if len(srv.Images()) != 4 {
		t.Fatal("a dry run deleted something")
	}
	gc(true)
	if len(srv.Images()) != 2 {
		t.Errorf("%d images left, want the newest 2", len(srv.Images()))
	}
	for _, sr := range srv.SpotRequests() {
		if sr.State != "cancelled" {
			t.Errorf("spot request %s is %s", sr.ID, sr.State)
		}
	}
}

// The same rotation on GCE: the drain request is instance metadata that
// wakes each VM's metadata long poll; agents report through guest attributes.
func TestRotationOnGCELosesNoJob(t *testing.T) {
	srv := gcetest.New(gcetest.WithOperationLatency(50 * time.Millisecond))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const zone = "us-east1-b"
	var olds []*manager
	for i, jobs := range [][]int{{2500}, {3000, 2600}, {2700}} {
		name := fmt.Sprintf("wsrm-blue-%d", i+1)
		srv.AddInstance(gcetest.Instance{Name: name, Zone: zone, MachineType: "n2d-standard-4", SourceImage: "wsrm-old",
			Labels:   map[string]string{vmfleet.LabelGroup: "wsrm", vmfleet.LabelColor: "blue", vmfleet.LabelGeneration: "1", vmfleet.LabelRole: vmfleet.RoleManager},
			Metadata: map[string]string{"enable-guest-attributes": "TRUE"}})
		self := &gcp.Self{BaseURL: srv.MetadataServerFor(zone, name).BaseURL()}
		olds = append(olds, runManager(t, ctx, self, name, jobs))
	}
	srv.AddImage(gcetest.Image{Name: "wsrm-new", Family: "wsrm"})
	c, err := gcp.New(ctx, "test-project", []string{zone}, srv.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	start := time.Now()
	rep, err := (&vmfleet.Rotation{
		Compute: c, Group: "wsrm", Prefix: "wsrm", Poll: 100 * time.Millisecond, DrainTimeout: time.Minute, Progress: &progress,
		Template: providers.InstanceSpec{Zone: zone, MachineType: "n2d-standard-4", Image: "wsrm-new"},
	}).Run(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Logf("GCE rotation of 3 managers with jobs of 2.5–3 s took %s", time.Since(start).Round(10*time.Millisecond))
	for _, m := range olds {
		if n := m.finished(); n != len(m.jobs) {
			t.Errorf("%s finished %d of %d jobs", m.name, n, len(m.jobs))
		}
	}
	var green, blue int
	for _, in := range srv.Instances() {
		switch in.Labels[vmfleet.LabelColor] {
		case "green":
			green++
			if in.ExternalIP {
				t.Errorf("new manager %s has an external IP", in.Name)
			}
		case "blue":
			blue++
		}
	}
	if green != 3 || blue != 0 || len(rep.Deleted) != 3 {
		t.Errorf("green %d, blue %d, report %+v", green, blue, rep)
	}
}

// A cloud API error mid-way leaves a state a rerun continues from, and
// nothing that runs jobs is deleted.
func TestACloudErrorMidwayIsResumedByARerun(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	for i := range 2 {
		srv.AddInstance(ec2test.Instance{ImageID: "ami-old", Zone: "us-east-1a", State: "running", Tags: map[string]string{
			"Name": fmt.Sprintf("wsrm-blue-%d", i+1), vmfleet.LabelGroup: "wsrm", vmfleet.LabelColor: "blue", vmfleet.LabelGeneration: "1",
			providers.EC2PhaseTag: string(providers.DrainDone), providers.EC2JobsLeftTag: "0",
		}})
	}
	newImage(srv)
	// The first new VM is made; creating the second fails past the SDK's retries.
	failSecond := writerFunc(func(line string) {
		if strings.Contains(line, "Creating wsrm-green-2") {
			srv.FailNext("RunInstances", "InternalError", 500, 3)
		}
	})
	_, err := rotation(srv, nil, failSecond).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "rerun to continue") {
		t.Fatalf("error %v", err)
	}
	if n := len(instancesByTag(srv, vmfleet.LabelColor, "blue")); n != 2 {
		t.Fatalf("%d old VMs left after the failed run, want both: nothing may be drained before the new color is up", n)
	}
	for _, req := range srv.Requests("CreateTags") {
		for k, v := range req {
			if strings.HasPrefix(k, "Tag.") && strings.HasSuffix(k, ".Key") && len(v) > 0 && v[0] == providers.EC2DrainTag {
				t.Fatal("an old VM was asked to drain before the new color was complete")
			}
		}
	}
	var progress strings.Builder
	rep, err := rotation(srv, nil, &progress).Run(context.Background())
	if err != nil {
		t.Fatalf("rerun: %v\n%s", err, progress.String())
	}
	if len(instancesByTag(srv, vmfleet.LabelColor, "green")) != 2 || len(instancesByTag(srv, vmfleet.LabelColor, "blue")) != 0 || len(rep.Created) != 1 {
		t.Errorf("after the rerun: %+v\n%s", rep, progress.String())
	}
}

// writerFunc calls f with each write.
type writerFunc func(string)

func (f writerFunc) Write(p []byte) (int, error) {
	f(string(p))
	return len(p), nil
}
