package standin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// kubeFixture runs the stand-in on a config.toml rendered by the
// controller's own renderer, against a real kube-apiserver.
type kubeFixture struct {
	*fixture
	c  client.Client
	ns string
}

// One API server serves every test of the package, each in a namespace of
// its own; TestMain stops it.
var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error
	nsSeq   atomic.Int32
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

func startKube(t *testing.T, pollTimeout time.Duration) *kubeFixture {
	t.Helper()
	return startKubeVia(t, pollTimeout, nil)
}

// startKubeVia is startKube with the stand-in's API requests going through
// via (nil: straight to the API server).
func startKubeVia(t *testing.T, pollTimeout time.Duration, via func(http.RoundTripper) http.RoundTripper) *kubeFixture {
	t.Helper()
	envOnce.Do(func() { env, envErr = testenv.Start() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	ctx := context.Background()
	ns := fmt.Sprintf("team-%d", nsSeq.Add(1))
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	rn := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"team"}})
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "build"}, Spec: v1alpha1.RunnerSetSpec{
		Tags: []string{"team"}, Managers: v1alpha1.ManagerSpec{Concurrent: 2},
	}}
	class := &v1alpha1.RunnerClass{Spec: v1alpha1.RunnerClassSpec{GitLabURL: srv.URL()}}
	place := runnerconfig.JobPlacement{
		NodeSelector:    map[string]string{"runnerfleet.dev/tag": "team"},
		NodeTolerations: map[string]string{"runnerfleet.dev/tag=team": "NoSchedule", "runnerfleet.dev/jobs": ""},
		PodLabels:       map[string]string{"runnerfleet.dev/runnerset": "build"},
		PodAnnotations:  map[string]string{"karpenter.sh/do-not-disrupt": "true"},
	}
	cfg := runnerconfig.ForRunnerSet(rs, class, place)
	// Jobs run in the RunnerSet's jobs namespace, which the controller
	// creates; here the test does.
	jobs := cfg.Runners[0].Kubernetes.Namespace
	if jobs == ns {
		t.Fatalf("the rendered config runs jobs in the team's namespace %s", ns)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: jobs}}); err != nil {
		t.Fatal(err)
	}
	if cfg.Runners[0].Kubernetes.ServiceAccount != "" {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: jobs, Name: cfg.Runners[0].Kubernetes.ServiceAccount}}
		if err := env.Client.Create(ctx, sa); err != nil {
			t.Fatal(err)
		}
	}
	b, err := runnerconfig.Render(runnerconfig.WithToken(cfg, rn.Token))
	if err != nil {
		t.Fatal(err)
	}
	// poll_timeout is not a RunnerSet setting yet; the test shortens it.
	text := strings.Replace(string(b), "[runners.kubernetes]\n", "[runners.kubernetes]\n    poll_timeout = "+itoa(int(pollTimeout.Seconds()))+"\n", 1)
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Runners[0].jobPods() {
		t.Fatalf("the rendered config's runner does not run jobs in pods: %+v\n%s", c.Runners[0], text)
	}
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if via != nil {
		hc.Transport = via(hc.Transport)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, sigs: make(chan os.Signal, 4), log: &syncBuffer{}, metrics: "http://" + ln.Addr().String() + "/metrics", exit: make(chan int, 1), exited: make(chan struct{})}
	go func() {
		f.exit <- Run(ctx, Options{Config: c, SystemID: "s_test", Signals: f.sigs, Log: f.log, Listener: ln,
			Kube: &Kube{Server: env.Config.Host, HTTP: hc}})
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
	return &kubeFixture{fixture: f, c: env.Client, ns: jobs}
}

// pods lists the job pods, waiting up to 20s for want of them.
func (f *kubeFixture) pods(t *testing.T, want int) []corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l := &corev1.PodList{}
		if err := f.c.List(context.Background(), l, client.InNamespace(f.ns)); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == want {
			return l.Items
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d job pods, want %d\nlog:\n%s", len(l.Items), want, f.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run marks a pod Running, as the kubelet of the node it landed on would.
func (f *kubeFixture) run(t *testing.T, p *corev1.Pod) {
	t.Helper()
	p.Status.Phase = corev1.PodRunning
	if err := f.c.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func TestAJobRunsInAPodPlacedAsItsConfigSaysAndTheJobEndsWithIt(t *testing.T) {
	f := startKube(t, 60*time.Second)
	id := f.srv.QueueJob([]string{"team"}, 1500*time.Millisecond)
	p := f.pods(t, 1)[0]

	// The pod asks for the tag's capacity exactly as config.toml says.
	if p.Spec.NodeSelector["runnerfleet.dev/tag"] != "team" {
		t.Errorf("nodeSelector = %v", p.Spec.NodeSelector)
	}
	want := map[string]corev1.Toleration{
		"runnerfleet.dev/tag":  {Key: "runnerfleet.dev/tag", Operator: corev1.TolerationOpEqual, Value: "team", Effect: corev1.TaintEffectNoSchedule},
		"runnerfleet.dev/jobs": {Key: "runnerfleet.dev/jobs", Operator: corev1.TolerationOpExists},
	}
	for _, tol := range p.Spec.Tolerations {
		if w, ok := want[tol.Key]; ok && w == tol {
			delete(want, tol.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("tolerations %v lack %v", p.Spec.Tolerations, want)
	}
	if p.Labels["runnerfleet.dev/runnerset"] != "build" || p.Annotations["karpenter.sh/do-not-disrupt"] != "true" {
		t.Errorf("labels %v annotations %v", p.Labels, p.Annotations)
	}
	// The keys gitlab-runner's kubernetes executor sets (buildLabels,
	// buildPodAnnotations): the project's ID as a label and an annotation,
	// the job's ID as an annotation.
	jobID, project := strconv.FormatInt(id, 10), strconv.Itoa(gitlabserver.DefaultProject)
	if p.Labels["project.runner.gitlab.com/id"] != project || p.Annotations["project.runner.gitlab.com/id"] != project || p.Annotations["job.runner.gitlab.com/id"] != jobID {
		t.Errorf("labels %v annotations %v: want project %s (label and annotation) and job %s (annotation)", p.Labels, p.Annotations, project, jobID)
	}
	// No cloud identity asked: the jobs namespace's default ServiceAccount
	// (envtest runs no ServiceAccount admission to fill its name in), and
	// no API token because config.toml turns it off for the job pod, as
	// gitlab-runner's executor reads it.
	if p.Spec.ServiceAccountName != "" || p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q automount %v: want the namespace's default, no API token", p.Spec.ServiceAccountName, p.Spec.AutomountServiceAccountToken)
	}

	// Until the pod runs, the job waits.
	time.Sleep(2 * time.Second)
	if j := f.srv.Jobs()[0]; j.State != gitlabserver.JobRunning || strings.Contains(string(j.Trace), "$ sleep") {
		t.Fatalf("before its pod ran the job is %s with log %q", j.State, j.Trace)
	}
	f.run(t, &p)
	f.waitJobs(t, "the job succeeded", func(j []gitlabserver.Job) bool { return count(j, gitlabserver.JobSuccess) == 1 })
	f.pods(t, 0) // and its pod is gone: capacity can go back to zero
	if j := f.srv.Jobs()[0]; j.ID != id || !strings.Contains(string(j.Trace), "Running on "+p.Name) {
		t.Errorf("job log %q does not name its pod %s", j.Trace, p.Name)
	}
}

// A pod deleted (or evicted) under a running job fails the job: the
// signal the end-to-end tests count as a job lost to a drain or a delete.
func TestAJobWhosePodIsDeletedFails(t *testing.T) {
	f := startKube(t, 60*time.Second)
	f.srv.QueueJob([]string{"team"}, time.Hour)
	p := f.pods(t, 1)[0]
	f.run(t, &p)
	f.waitJobs(t, "the job is in its script", func(j []gitlabserver.Job) bool { return strings.Contains(string(j[0].Trace), "$ sleep") })
	if err := f.c.Delete(context.Background(), &p, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	jobs := f.waitJobs(t, "the job failed", func(j []gitlabserver.Job) bool { return count(j, gitlabserver.JobFailed) == 1 })
	if jobs[0].FailureReason != "runner_system_failure" || !strings.Contains(string(jobs[0].Trace), "pod was deleted") {
		t.Errorf("failure %q log %q", jobs[0].FailureReason, jobs[0].Trace)
	}
}

// busyAPI answers the first create of a pod with 429 (the API server's
// priority and fairness refusing it), the first read of one with 503, and
// cuts the second read's connection, then lets every request through.
type busyAPI struct {
	next http.RoundTripper
	mu   sync.Mutex
	// failed counts the requests it failed, by what it did.
	failed map[string]int
}

func (b *busyAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	podsAt := strings.LastIndex(req.URL.Path, "/pods")
	reply := func(code int) (*http.Response, error) {
		body := fmt.Sprintf(`{"kind":"Status","status":"Failure","message":"busy (test)","code":%d}`, code)
		return &http.Response{StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case podsAt < 0:
	case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/pods") && b.failed["create 429"] == 0:
		b.failed["create 429"]++
		return reply(http.StatusTooManyRequests)
	case req.Method == http.MethodGet && strings.HasPrefix(req.URL.Path[podsAt:], "/pods/") && b.failed["read 503"] == 0:
		b.failed["read 503"]++
		return reply(http.StatusServiceUnavailable)
	case req.Method == http.MethodGet && strings.HasPrefix(req.URL.Path[podsAt:], "/pods/") && b.failed["read cut"] == 0:
		b.failed["read cut"]++
		return nil, errors.New("read: connection reset by peer (test)")
	}
	return b.next.RoundTrip(req)
}

// A job whose manager meets a busy API server while it creates and waits
// for the job's pod runs all the same: gitlab-runner sends such requests
// again (retry_limit), and so does the stand-in.
func TestAJobOutlivesABusyAPIServer(t *testing.T) {
	busy := &busyAPI{failed: map[string]int{}}
	f := startKubeVia(t, 60*time.Second, func(next http.RoundTripper) http.RoundTripper { busy.next = next; return busy })
	f.srv.QueueJob([]string{"team"}, 500*time.Millisecond)
	p := f.pods(t, 1)[0]
	f.waitJobs(t, "the job waits for its pod", func(j []gitlabserver.Job) bool {
		busy.mu.Lock()
		defer busy.mu.Unlock()
		return busy.failed["read cut"] == 1
	})
	f.run(t, &p)
	jobs := f.waitJobs(t, "the job ended", func(j []gitlabserver.Job) bool { return j[0].State != gitlabserver.JobRunning })
	if jobs[0].State != gitlabserver.JobSuccess {
		t.Errorf("the job is %s (%s), log %q; the manager's log:\n%s", jobs[0].State, jobs[0].FailureReason, jobs[0].Trace, f.log.String())
	}
	busy.mu.Lock()
	defer busy.mu.Unlock()
	for _, what := range []string{"create 429", "read 503", "read cut"} {
		if busy.failed[what] != 1 {
			t.Errorf("the API server failed %d requests with %s, want 1: the test did not test it", busy.failed[what], what)
		}
	}
}

// A create that failed with a 5xx may have created the pod: it is not sent
// again (a job with two pods), and the job fails.
func TestAPodCreateThatFailedIsNotSentAgain(t *testing.T) {
	var creates atomic.Int32
	f := startKubeVia(t, 60*time.Second, func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/pods") {
				creates.Add(1)
				return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
					Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"message":"etcd timed out (test)"}`)), Request: req}, nil
			}
			return next.RoundTrip(req)
		})
	})
	f.srv.QueueJob([]string{"team"}, time.Second)
	jobs := f.waitJobs(t, "the job failed", func(j []gitlabserver.Job) bool { return count(j, gitlabserver.JobFailed) == 1 })
	if !strings.Contains(string(jobs[0].Trace), "creating the job's pod") || jobs[0].FailureReason != "runner_system_failure" {
		t.Errorf("failure %q, log %q", jobs[0].FailureReason, jobs[0].Trace)
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("the pod's create was sent %d times, want once", n)
	}
}

// Which failed API requests are sent again, and which fail the job at once.
func TestOnlyRequestsThatMayPassAreSentAgain(t *testing.T) {
	cut := &url.Error{Op: "Get", URL: "https://10.0.0.1/api/v1/namespaces/j/pods/p", Err: errors.New("connection reset by peer")}
	for _, c := range []struct {
		method string
		err    error
		want   bool
	}{
		{http.MethodGet, &kubeError{Code: http.StatusTooManyRequests}, true},
		{http.MethodPost, &kubeError{Code: http.StatusTooManyRequests}, true},
		{http.MethodGet, &kubeError{Code: http.StatusServiceUnavailable}, true},
		{http.MethodDelete, &kubeError{Code: http.StatusGatewayTimeout}, true},
		{http.MethodPost, &kubeError{Code: http.StatusInternalServerError}, false},
		{http.MethodGet, cut, true},
		{http.MethodPost, cut, false},
		{http.MethodGet, &kubeError{Code: http.StatusNotFound}, false},
		{http.MethodGet, &kubeError{Code: http.StatusForbidden}, false},
		{http.MethodPost, &kubeError{Code: http.StatusUnprocessableEntity}, false},
		{http.MethodGet, errors.New("reading the pod: invalid character"), false},
	} {
		if got := transient(c.method, c.err); got != c.want {
			t.Errorf("%s failing with %v: sent again %v, want %v", c.method, c.err, got, c.want)
		}
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestAJobWhosePodNeverRunsFailsAfterPollTimeout(t *testing.T) {
	f := startKube(t, 2*time.Second)
	f.srv.QueueJob([]string{"team"}, time.Second)
	f.pods(t, 1)
	jobs := f.waitJobs(t, "the job failed", func(j []gitlabserver.Job) bool { return count(j, gitlabserver.JobFailed) == 1 })
	if !strings.Contains(string(jobs[0].Trace), "timed out waiting for pod") {
		t.Errorf("log %q", jobs[0].Trace)
	}
	f.pods(t, 0) // the pod that never ran is cleaned up too
}

// SIGQUIT lets a job in its pod finish and deletes the pod; SIGTERM aborts
// it and still deletes the pod, so a stopped manager leaves no job pod.
func TestStopsLeaveNoJobPod(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			f := startKube(t, 60*time.Second)
			f.srv.QueueJob([]string{"team"}, 2*time.Second)
			p := f.pods(t, 1)[0]
			f.run(t, &p)
			f.waitJobs(t, "the job is in its script", func(j []gitlabserver.Job) bool { return strings.Contains(string(j[0].Trace), "$ sleep") })
			f.sigs <- sig
			<-f.exited
			f.pods(t, 0)
			want := map[syscall.Signal]string{syscall.SIGQUIT: gitlabserver.JobSuccess, syscall.SIGTERM: gitlabserver.JobFailed}[sig]
			if j := f.srv.Jobs()[0]; j.State != want {
				t.Errorf("after %s the job is %s, want %s", sig, j.State, want)
			}
		})
	}
}

func TestTolerationsFollowGitLabRunnersFormat(t *testing.T) {
	got := Tolerations(map[string]string{"a=b": "NoSchedule", "c": "", "d": "NoExecute"})
	want := []map[string]string{
		{"key": "a", "operator": "Equal", "value": "b", "effect": "NoSchedule"},
		{"key": "c", "operator": "Exists"},
		{"key": "d", "operator": "Exists", "effect": "NoExecute"},
	}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		for k, v := range want[i] {
			if got[i][k] != v {
				t.Errorf("toleration %d: %v, want %v", i, got[i], want[i])
			}
		}
	}
}
