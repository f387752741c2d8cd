package main

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
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
	rfaws "github.com/runnerfleet/runnerfleet/providers/aws"
	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

const miniRunnerEnv = "FLEET_AGENT_TEST_RUNNER"

func TestMain(m *testing.M) {
	if os.Getenv(miniRunnerEnv) != "" {
		miniRunner(os.Getenv(miniRunnerEnv))
		return
	}
	os.Exit(m.Run())
}

// miniRunner is a minimal gitlab-runner: one job on its metrics endpoint
// until SIGQUIT, then the job finishes (300ms) and it exits 0. It writes its
// metrics address, then "quit" and "finished", to files in dir.
func miniRunner(dir string) {
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGQUIT)
	var jobs atomic.Int32
	jobs.Store(1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(1)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE gitlab_runner_jobs gauge\ngitlab_runner_jobs{runner=\"tok\",state=\"running\"} %d\n", jobs.Load())
	}))
	os.WriteFile(filepath.Join(dir, "pid"), []byte(fmt.Sprint(os.Getpid())), 0o644)
	os.WriteFile(filepath.Join(dir, "addr.tmp"), []byte(ln.Addr().String()), 0o644)
	os.Rename(filepath.Join(dir, "addr.tmp"), filepath.Join(dir, "addr"))
	<-quit
	os.WriteFile(filepath.Join(dir, "quit"), nil, 0o644)
	time.Sleep(300 * time.Millisecond)
	jobs.Store(0)
	os.WriteFile(filepath.Join(dir, "finished"), nil, 0o644)
	time.Sleep(100 * time.Millisecond)
	os.Exit(0)
}

// syncBuffer is a bytes.Buffer safe for the agent's goroutines.
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

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--provider is required"},
		{[]string{"--provider", "azure"}, `unknown --provider "azure": want gce or ec2`},
		{[]string{"--provider", "ec2", "extra"}, "unexpected arguments"},
		{[]string{"--provider", "ec2", "--interval", "0s"}, "must be positive"},
		{[]string{"--nope"}, "flag provided but not defined"},
	} {
		var stderr syncBuffer
		err := run(t.Context(), tc.args, &stderr)
		if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("run %q = %v, stderr %q; want a usage error saying %q", tc.args, err, stderr.String(), tc.want)
		}
		if code := exitCode(t.Context(), err); code != 2 {
			t.Errorf("run %q: exit code %d, want 2", tc.args, code)
		}
	}
}

func TestProviderNotBuiltIn(t *testing.T) {
	// Whatever is built in today: a known provider without a constructor.
	saved := selfConstructors
	t.Cleanup(func() { selfConstructors = saved })
	selfConstructors = map[string]func(context.Context, selfOptions) (providers.Self, error){}
	var stderr syncBuffer
	err := run(t.Context(), []string{"--provider", "gce", "--runner-pid", "1"}, &stderr)
	if err == nil || err.Error() != "provider gce is not built into this agent" {
		t.Fatalf("run = %v, want \"provider gce is not built into this agent\"", err)
	}
	if !strings.Contains(stderr.String(), `"err":"provider gce is not built into this agent"`) {
		t.Errorf("log %q does not say so", stderr.String())
	}
	if code := exitCode(t.Context(), err); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
}

// miniRunnerProc is a running miniRunner.
type miniRunnerProc struct {
	dir     string
	metrics string
	exited  chan error
}

func startMiniRunner(t *testing.T) *miniRunnerProc {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the runner is found through /proc")
	}
	r := &miniRunnerProc{dir: t.TempDir(), exited: make(chan error, 1)}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "run")
	cmd.Env = append(os.Environ(), miniRunnerEnv+"="+r.dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	for deadline := time.Now().Add(20 * time.Second); ; {
		if addr, err := os.ReadFile(filepath.Join(r.dir, "addr")); err == nil {
			r.metrics = "http://" + string(addr) + "/metrics"
			return r
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *miniRunnerProc) has(name string) bool {
	_, err := os.Stat(filepath.Join(r.dir, name))
	return err == nil
}

// drainThroughMain runs main's run with the provider's args against r,
// requests the drain once the agent is up, and checks that run returns nil
// after the runner finished its job and exited 0.
func drainThroughMain(t *testing.T, ctx context.Context, r *miniRunnerProc, providerArgs []string, requestDrain func()) {
	t.Helper()
	var log syncBuffer
	done := make(chan error, 1)
	args := append(providerArgs,
		"--runner-pid-file", filepath.Join(r.dir, "pid"),
		"--runner-process-name", "",
		"--metrics-url", r.metrics,
		"--interval", "100ms", "--poll", "20ms")
	go func() { done <- run(ctx, args, &log) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", log.String())
		}
	})

	time.Sleep(200 * time.Millisecond)
	if r.has("quit") {
		t.Fatal("the runner was signalled before the drain request")
	}
	requestDrain()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the agent did not finish")
	}
	if err := <-r.exited; err != nil {
		t.Errorf("the runner: %v, want exit 0", err)
	}
	if !r.has("quit") || !r.has("finished") {
		t.Error("the runner did not get SIGQUIT or its job did not finish")
	}
	// The log is JSON lines.
	for line := range strings.Lines(log.String()) {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil || v["msg"] == nil {
			t.Errorf("log line %q is not JSON with a msg", line)
		}
	}
	if !strings.Contains(log.String(), `"msg":"drain done"`) {
		t.Error("no \"drain done\" in the log")
	}
}

// TestDrainOnEC2 runs the agent as main wires it, against the EC2 and
// instance metadata fakes, with a real runner process.
func TestDrainOnEC2(t *testing.T) {
	r := startMiniRunner(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	ami := srv.AddImage(ec2test.Image{Name: "runner-manager-1", Tags: map[string]string{"family": "runner-manager"}})
	compute := rfaws.New(srv.Config())
	compute.WaitMinDelay, compute.WaitMaxDelay = 10*time.Millisecond, 50*time.Millisecond
	in, err := compute.CreateInstance(ctx, providers.InstanceSpec{
		Name: "manager-1", Zone: "us-east-1b", MachineType: "c7i.xlarge", Image: ami,
		Labels: map[string]string{"runnerfleet:role": "manager"},
	})
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")

	drainThroughMain(t, ctx, r, []string{
		"--provider", "ec2",
		"--imds-endpoint", srv.IMDSFor(in.ID).URL(),
		"--ec2-endpoint", srv.URL(),
		"--ec2-poll", "50ms",
	}, func() {
		if err := compute.RequestDrain(ctx, in.Zone, in.Name); err != nil {
			t.Fatalf("RequestDrain: %v", err)
		}
	})
	st, err := compute.DrainState(ctx, in.Zone, in.Name)
	if err != nil || st.Phase != providers.DrainDone || st.JobsLeft != 0 || st.UpdatedAt.IsZero() {
		t.Errorf("DrainState = %+v, %v; want done, 0 jobs", st, err)
	}
}

// TestDrainOnGCE: the same against the GCE metadata server fake.
func TestDrainOnGCE(t *testing.T) {
	r := startMiniRunner(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	md := gcetest.NewMetadataServer()
	t.Cleanup(md.Close)

	drainThroughMain(t, ctx, r, []string{"--provider", "gce", "--gce-metadata-url", md.BaseURL()}, func() {
		md.SetAttribute(providers.GCEDrainKey, "true")
	})
	attrs := md.GuestAttributes()
	ns := providers.GCEGuestNamespace + "/"
	if attrs[ns+providers.GCEGuestPhaseKey] != string(providers.DrainDone) || attrs[ns+providers.GCEGuestJobsLeftKey] != "0" ||
		attrs[ns+providers.GCEGuestUpdatedAtKey] == "" {
		t.Errorf("guest attributes %v, want done with 0 jobs", attrs)
	}
}

// TestDrainOnEC2WithTheInstanceRole: no credentials in the environment or
// in files; the agent finds the instance role's through IMDS, as the AWS
// SDK's default chain does, and signs its reports with them.
func TestDrainOnEC2WithTheInstanceRole(t *testing.T) {
	r := startMiniRunner(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	ami := srv.AddImage(ec2test.Image{Name: "runner-manager-1", Tags: map[string]string{"family": "runner-manager"}})
	compute := rfaws.New(srv.Config())
	compute.InstanceProfile = "arn:aws:iam::123456789012:instance-profile/runner-manager"
	compute.WaitMinDelay, compute.WaitMaxDelay = 10*time.Millisecond, 50*time.Millisecond
	in, err := compute.CreateInstance(ctx, providers.InstanceSpec{Name: "manager-1", Zone: "us-east-1b", MachineType: "c7i.xlarge", Image: ami})
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ROLE_ARN",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	key := ec2test.InstanceRoleAccessKey(in.ID)
	drainThroughMain(t, ctx, r, []string{
		"--provider", "ec2", "--imds-endpoint", srv.IMDSFor(in.ID).URL(), "--ec2-endpoint", srv.URL(), "--ec2-poll", "50ms",
	}, func() {
		if err := compute.RequestDrain(ctx, in.Zone, in.Name); err != nil {
			t.Fatalf("RequestDrain: %v", err)
		}
	})
	if srv.AccessKeys()[key] == 0 {
		t.Errorf("no request was signed with the instance role's key %s; keys seen: %v", key, srv.AccessKeys())
	}
	if st, err := compute.DrainState(ctx, in.Zone, in.Name); err != nil || st.Phase != providers.DrainDone {
		t.Errorf("DrainState = %+v, %v; want done", st, err)
	}
}

// The job reporter the shared fleet's docker+machine VMs start
// (vmfleet.StartupScript of vmfleet.JobReporter) is fleet-agent reporting jobs, with
// arguments fleet-agent accepts, reading the Docker engine whose socket
// the script mounts.
func TestTheVMStartupScriptsJobReporterArgumentsAreFleetAgents(t *testing.T) {
	for _, p := range knownProviders {
		var stderr strings.Builder
		c, err := parse(vmfleet.JobReporterArgs(p), &stderr)
		if err != nil || !c.reportJobs || c.provider != p {
			t.Errorf("fleet-agent %v: %+v, %v\n%s", vmfleet.JobReporterArgs(p), c, err, stderr.String())
		}
		socket := strings.TrimPrefix(c.dockerHost, "unix://")
		script, err := vmfleet.StartupScript(vmfleet.JobReporter("registry.example.com/fleet-agent:v1", p))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(script, "--volume "+socket+":"+socket+" ") {
			t.Errorf("the script does not mount the engine fleet-agent reads (%s):\n%s", c.dockerHost, script)
		}
	}
	// Negative control: without --report-jobs fleet-agent waits for a drain.
	if c, err := parse([]string{"--provider", "gce", "--runner-pid", "1"}, io.Discard); err != nil || c.reportJobs {
		t.Errorf("fleet-agent --provider gce: %+v, %v", c, err)
	}
}
