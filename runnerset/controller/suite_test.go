package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

var (
	env  *testenv.Env
	k8s  client.WithWatch
	logs = &syncBuffer{}
)

// syncBuffer collects the controller's logs so tests can prove no token leaks.
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

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// KEDA's ScaledObject CRD, as KEDA ships it: autoscaled managers'
	// ScaledObjects must pass its schema (autoscale_test.go).
	keda, err := testenv.KEDACRDs(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err = testenv.Start(testenv.WithCRDs(keda...))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	k8s, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs), zap.Level(zapcore.DebugLevel), zap.JSONEncoder()))
	// The executor's ClusterRole comes with the controller: each install
	// path creates it from runnerset/install, as this does.
	if err := k8s.Create(context.Background(), install.ExecutorClusterRole(install.Defaults())); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// So does the finalizer's admission policy, where the API server
	// serves it (envtest's does): installed as every install path installs
	// it, and in force before the first test.
	if err := installAdmissionPolicies(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := startManager(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopManager()
	go func() {
		_ = testenv.SimulateDeployments(ctx, k8s, func(d *appsv1.Deployment) bool {
			return strings.HasPrefix(d.Namespace, manualPrefix)
		})
	}()
	return m.Run()
}

// installAdmissionPolicies creates install.AdmissionPolicies and waits
// until the API server applies them: a dry-run create of a RunnerSet,
// which passes admission, comes back with the finalizer.
func installAdmissionPolicies(ctx context.Context) error {
	for _, obj := range install.AdmissionPolicies(install.Defaults()) {
		if err := k8s.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	return waitForFinalizerPolicy(ctx, true)
}

// waitForFinalizerPolicy waits until a RunnerSet created now gets the
// drain finalizer at admission (inForce) or does not (!inForce).
func waitForFinalizerPolicy(ctx context.Context, inForce bool) error {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		probe := runnerSet("default", "policy-probe", "none")
		// Refused while the CRD is new to the client, then admitted.
		err := k8s.Create(ctx, probe, client.DryRunAll)
		if err == nil && slices.Contains(probe.Finalizers, controller.Finalizer) == inForce {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the finalizer's admission policy in force: want %v, after 30 s the dry-run create of a RunnerSet has finalizers %v (%v)", inForce, probe.Finalizers, err)
		}
	}
}

var (
	managerMu   sync.Mutex
	stopCurrent func()
)

// startManager starts the controller manager. The manager talks through a
// counting transport with the rate limits the controller binary uses, so
// that benchmarks measure what production does.
func startManager() error {
	managerMu.Lock()
	defer managerMu.Unlock()
	mgrConfig := rest.CopyConfig(env.Config)
	mgrConfig.QPS, mgrConfig.Burst = controller.DefaultQPS, controller.DefaultBurst
	mgrConfig.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt} }
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, must2(rest.HTTPClientFor(env.Config)))
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(mgrConfig, ctrl.Options{
		Scheme:  env.Scheme,
		Cache:   controller.CacheOptions(env.Scheme, mapper),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Each restart registers the same controller name anew.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cs := controller.NewControllers(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(controller.Name),
		controller.WithGitLab(func(url, pat string) (gitlab.Client, error) {
			return gitlab.New(url, pat, gitlab.Options{Timeout: 2 * time.Second, Retries: 1})
		}),
		controller.WithClock(func() time.Time { return time.Now().Add(time.Duration(clockAhead.Load())) }),
		controller.WithJobRetry(controller.JobRetryOptions{Poll: 100 * time.Millisecond, Wait: time.Minute}))
	if err := controller.Register(ctx, mgr, cs...); err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	stopCurrent = func() { cancel(); <-done }
	return nil
}

// stopManager stops the controller manager as a crash would: whatever it
// was doing is cut off.
func stopManager() {
	managerMu.Lock()
	defer managerMu.Unlock()
	if stopCurrent != nil {
		stopCurrent()
		stopCurrent = nil
	}
}

// clockAhead is how far the controller's clock runs ahead of the wall
// clock: tests move it to simulate hours passing.
var clockAhead atomic.Int64

// writes counts the controller's mutating API requests.
var writes atomic.Int64

type countingTransport struct{ next http.RoundTripper }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if refuse := refuseStatusPatch.Load(); refuse != nil && req.Method == http.MethodPatch &&
		strings.HasSuffix(req.URL.Path, "/namespaces/"+refuse.namespace+"/runnersets/"+refuse.name+"/status") &&
		refuseStatusPatch.CompareAndSwap(refuse, nil) {
		// What the API server answers a write whose resourceVersion
		// another write overtook.
		body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Operation cannot be fulfilled on runnersets.runnerfleet.dev %q: the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":%q,"group":"runnerfleet.dev","kind":"runnersets"},"code":409}`, refuse.name, refuse.name)
		return &http.Response{
			StatusCode: http.StatusConflict, Status: "409 Conflict", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:  http.Header{"Content-Type": []string{"application/json"}},
			Body:    io.NopCloser(strings.NewReader(body)),
			Request: req,
		}, nil
	}
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		writes.Add(1)
		writeKinds.add(req)
		writeLog.add(req)
	case http.MethodGet:
		if !req.URL.Query().Has("watch") {
			readLog.add(req)
		}
	}
	return c.next.RoundTrip(req)
}

// refuseStatusPatch, when set, makes the API server refuse the next status
// patch of that RunnerSet with a conflict, as a write that raced another
// one is refused.
var refuseStatusPatch atomic.Pointer[objectName]

type objectName struct{ namespace, name string }

// writeKinds counts writes by verb and resource ("POST serviceaccounts",
// "PATCH runnersets/status", "POST nodepools (dry run)").
var writeKinds = &writeCounter{m: map[string]int{}}

type writeCounter struct {
	mu sync.Mutex
	m  map[string]int
}

func (w *writeCounter) add(req *http.Request) {
	key := writeKey(req)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.m[key]++
}

// writeKey names a write by verb and resource.
func writeKey(req *http.Request) string {
	seg := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// /api/v1/... or /apis/group/version/..., then namespaces/ns/, then resource[/name[/sub]]
	i := 2
	if seg[0] == "apis" {
		i = 3
	}
	if i+1 < len(seg) && seg[i] == "namespaces" && i+2 < len(seg) {
		i += 2
	}
	res := ""
	if i < len(seg) {
		res = seg[i]
		if i+2 < len(seg) {
			res += "/" + seg[i+2]
		}
	}
	key := req.Method + " " + res
	if req.URL.Query().Has("dryRun") {
		key += " (dry run)"
	}
	return key
}

// writeLog keeps every write the controller sent: what, in which
// namespace, to which object, so a test can count the writes one
// RunnerSet caused while others converge beside it.
var writeLog = &writeRecorder{}

// readLog keeps every GET the controller sent to the API server (not its
// watches): reads its caches did not answer.
var readLog = &writeRecorder{}

// writeEntry is one write: its kind as writeKinds counts it, and the
// object it went to ("" namespace for a cluster-scoped one).
type writeEntry struct{ kind, namespace, name string }

type writeRecorder struct {
	mu      sync.Mutex
	entries []writeEntry
}

func (w *writeRecorder) add(req *http.Request) {
	e := writeEntry{kind: writeKey(req)}
	seg := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	i := 2
	if seg[0] == "apis" {
		i = 3
	}
	if i+1 < len(seg) && seg[i] == "namespaces" {
		e.namespace = seg[i+1]
		if i+2 < len(seg) {
			i += 2
		} else {
			e.name, e.namespace = e.namespace, "" // the namespace itself
		}
	}
	if i+1 < len(seg) {
		e.name = seg[i+1]
	}
	if req.Method == http.MethodPost && req.GetBody != nil {
		// A create names its object in the body.
		// (JSON or, for Kubernetes' own kinds, protobuf).
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(body)
			_ = body.Close()
			obj, _, err := serializer.NewCodecFactory(env.Scheme).UniversalDeserializer().Decode(b, nil, nil)
			if o, ok := obj.(metav1.Object); ok && err == nil && o.GetName() != "" {
				e.name = o.GetName()
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.entries = append(w.entries, e)
}

// since returns the entries after the first n, and how many there are now.
func (w *writeRecorder) since(n int) ([]writeEntry, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.entries[n:]), len(w.entries)
}

func (w *writeRecorder) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.entries)
}

// snapshot returns the counts so far.
func (w *writeCounter) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.m)
}

// Token is a well-formed runner token; tests check it never leaks.
const token = "glrt-t3st_T0ken-never.in-logs"

// manualPrefix marks namespaces whose Deployments tests roll out by hand.
const manualPrefix = "manual-"

func newNamespace(t *testing.T) string {
	t.Helper()
	return newNamespaceNamed(t, "t-"+rand.String(8))
}

func newNamespaceNamed(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	must(t, k8s.Create(context.Background(), ns))
	return ns.Name
}

func newClass(t *testing.T, mutate func(*v1alpha1.RunnerClass)) *v1alpha1.RunnerClass {
	t.Helper()
	c := &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "class-" + rand.String(6)},
		Spec: v1alpha1.RunnerClassSpec{
			Provider: v1alpha1.CapacityProviderKWOK,
			Policy: v1alpha1.RunnerClassPolicy{Identity: v1alpha1.IdentityPolicy{
				AWSRoleARNPatterns: []string{"arn:aws:iam::123456789012:role/ci-{namespace}.*"},
			}},
		},
	}
	if mutate != nil {
		mutate(c)
	}
	must(t, k8s.Create(context.Background(), c))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), c) })
	return c
}

func newSecret(t *testing.T, ns, name, tok string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string][]byte{"token": []byte(tok)},
	}
	must(t, k8s.Create(context.Background(), s))
	return s
}

func runnerSet(ns, name, class string) *v1alpha1.RunnerSet {
	return &v1alpha1.RunnerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RunnerSetSpec{
			ClassName: class,
			Tags:      []string{"team-" + name},
			GitLab:    v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: name + "-token"}},
		},
	}
}

// eventually polls cond until it returns nil or 30 s pass.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	eventuallyWithin(t, 30*time.Second, what, cond)
}

// eventuallyWithin polls cond until it returns nil or d passes.
func eventuallyWithin(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: still not true after %s: %v", what, d, err)
}

// update re-reads rs, applies change and writes it, retrying when the
// controller wrote in between.
func update(t *testing.T, rs *v1alpha1.RunnerSet, change func(*v1alpha1.RunnerSet)) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(rs), rs); err != nil {
			return err
		}
		change(rs)
		return k8s.Update(context.Background(), rs)
	}))
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
