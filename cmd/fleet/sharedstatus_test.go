package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// answer is a proxied GET's answer.
type answer struct {
	body []byte
	err  error
}

func (a answer) DoRaw(context.Context) ([]byte, error) { return a.body, a.err }
func (a answer) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(a.body)), a.err
}

var _ restclient.ResponseWrapper = answer{}

// proxies answers the API server's pod and service proxy: pods[name] is a
// pod's metrics, prometheus the fleet's Prometheus's query answer; a
// missing pod or an empty prometheus is an error. queries records the
// Prometheus queries.
func proxies(pods map[string]string, prometheus string, queries *[]string) *kubefake.Clientset {
	cs := kubefake.NewClientset()
	cs.PrependProxyReactor("*", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		p := a.(k8stesting.ProxyGetAction)
		switch {
		case p.GetResource().Resource == "pods" && p.GetPort() == "9252" && p.GetPath() == "metrics":
			if m, ok := pods[p.GetName()]; ok {
				return true, answer{body: []byte(m)}, nil
			}
			return true, answer{err: errors.New("dial tcp 10.0.0.9:9252: i/o timeout")}, nil
		case p.GetResource().Resource == "services" && p.GetName() == shared.PrometheusService && p.GetPort() == "9090" && p.GetPath() == "api/v1/query":
			*queries = append(*queries, p.GetParams()["query"])
			if prometheus == "" {
				return true, answer{err: errors.New("no endpoints available for service \"prometheus\"")}, nil
			}
			return true, answer{body: []byte(prometheus)}, nil
		}
		return true, answer{err: errors.New("unexpected proxy " + p.GetResource().Resource + " " + p.GetName() + ":" + p.GetPort() + "/" + p.GetPath())}, nil
	})
	return cs
}

func metricsWithJobs(n string) string {
	return "# TYPE gitlab_runner_jobs gauge\ngitlab_runner_jobs{state=\"running\",stage=\"step_script\"} " + n + "\n"
}

func managerPod(name, manager, release string, deleting *time.Time) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "production", Labels: map[string]string{
			shared.LabelManagerPod: "production-linux", shared.LabelRelease: manager, shared.LabelChartApp: release,
		}},
		Spec:   corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](11400)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if deleting != nil {
		// The API server sets a deleted pod's deletionTimestamp to the
		// request's time plus the grace; the fake client keeps one only
		// on an object with a finalizer.
		p.DeletionTimestamp = &metav1.Time{Time: *deleting}
		p.DeletionGracePeriodSeconds = ptr.To[int64](11400)
		p.Finalizers = []string{"example.com/hold"}
	}
	return p
}

// fleet status lists every manager pod of each shared fleet: the old
// generation's pod that drains (its jobs, the time its grace has left) and
// the new one beside it; jobs come from each pod's metrics, else from the
// fleet's Prometheus, else are unknown, and it says which.
func TestStatusShowsASharedFleetsDrainingManagersTheirJobsAndTimeLeft(t *testing.T) {
	now := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	end := now.Add(2*time.Hour + 30*time.Minute)
	objs := []runtime.Object{
		managerPod("production-linux-0-aaaaaaaa-5d4c-x1", "production-linux-0", "production-linux-0-aaaaaaaa", &end),
		managerPod("production-linux-0-bbbbbbbb-7f9d-y2", "production-linux-0", "production-linux-0-bbbbbbbb", nil),
		// Not a manager: the fleet's Prometheus.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-0", Namespace: "production", Labels: map[string]string{"app": "prometheus"}}},
	}
	pending := managerPod("production-linux-1-cccccccc-1a2b-z3", "production-linux-1", "production-linux-1-cccccccc", nil)
	pending.Status.Phase = corev1.PodPending
	other := managerPod("staging-linux-0-dddddddd-9z-q", "staging-linux-0", "staging-linux-0-dddddddd", nil)
	other.Namespace = "staging"
	objs = append(objs, pending, other)
	c := fake.NewClientBuilder().WithScheme(scheme()).WithRuntimeObjects(objs...).Build()
	fleets := []fleetspec.SharedFleet{{Name: "production", Namespace: "production"}}

	type want struct {
		pod      string
		draining bool
		left     string
		jobs     *int
	}
	check := func(t *testing.T, got []sharedFleetStatus, wants []want, from string) {
		t.Helper()
		if len(got) != 1 || got[0].Namespace != "production" || len(got[0].Managers) != len(wants) {
			t.Fatalf("statuses %+v", got)
		}
		for i, w := range wants {
			m := got[0].Managers[i]
			if m.Pod != w.pod || m.Draining != w.draining || m.TimeLeft != w.left || (m.Jobs == nil) != (w.jobs == nil) || (m.Jobs != nil && *m.Jobs != *w.jobs) {
				t.Errorf("row %d: %+v (jobs %v), want %+v (jobs %v)", i, m, m.Jobs, w, w.jobs)
			}
		}
		if !strings.Contains(got[0].JobsFrom, from) {
			t.Errorf("jobs from %q, want it to say %q", got[0].JobsFrom, from)
		}
	}

	t.Run("from each manager's metrics", func(t *testing.T) {
		var queries []string
		cs := proxies(map[string]string{
			"production-linux-0-aaaaaaaa-5d4c-x1": metricsWithJobs("3"),
			"production-linux-0-bbbbbbbb-7f9d-y2": metricsWithJobs("1"),
		}, "", &queries)
		got, err := sharedFleetStatuses(context.Background(), c, jobReader{cs: cs}, fleets, now)
		if err != nil {
			t.Fatal(err)
		}
		check(t, got, []want{
			{"production-linux-0-aaaaaaaa-5d4c-x1", true, "2h30m0s", ptr.To(3)},
			{"production-linux-0-bbbbbbbb-7f9d-y2", false, "", ptr.To(1)},
			{"production-linux-1-cccccccc-1a2b-z3", false, "", nil},
		}, "each manager's metrics")
		if len(queries) != 0 {
			t.Errorf("asked Prometheus %v though every pod answered", queries)
		}
		var out bytes.Buffer
		printSharedFleets(&out, got)
		for _, s := range []string{"Shared fleet production (namespace production): 3 manager pods, 1 draining",
			"production-linux-0-aaaaaaaa", "draining", "2h30m0s", "pending"} {
			if !strings.Contains(out.String(), s) {
				t.Errorf("the table lacks %q:\n%s", s, out.String())
			}
		}
	})

	t.Run("from the fleet's Prometheus when the pods' metrics cannot be reached", func(t *testing.T) {
		var queries []string
		cs := proxies(nil, `{"status":"success","data":{"resultType":"vector","result":[`+
			`{"metric":{"pod":"production-linux-0-aaaaaaaa-5d4c-x1"},"value":[1764968400,"2"]},`+
			`{"metric":{"pod":"production-linux-0-bbbbbbbb-7f9d-y2"},"value":[1764968400,"0"]}]}}`, &queries)
		got, err := sharedFleetStatuses(context.Background(), c, jobReader{cs: cs}, fleets, now)
		if err != nil {
			t.Fatal(err)
		}
		check(t, got, []want{
			{"production-linux-0-aaaaaaaa-5d4c-x1", true, "2h30m0s", ptr.To(2)},
			{"production-linux-0-bbbbbbbb-7f9d-y2", false, "", ptr.To(0)},
			{"production-linux-1-cccccccc-1a2b-z3", false, "", nil},
		}, "the fleet's Prometheus (pod production/production-linux-0-aaaaaaaa-5d4c-x1's metrics: dial tcp")
		if len(queries) != 1 || queries[0] != `sum by (pod) (gitlab_runner_jobs{job="runner-managers", namespace="production"})` {
			t.Errorf("Prometheus queries %q, want one by pod of the fleet's managers", queries)
		}
	})

	t.Run("unknown when neither answers", func(t *testing.T) {
		var queries []string
		got, err := sharedFleetStatuses(context.Background(), c, jobReader{cs: proxies(nil, "", &queries)}, fleets, now)
		if err != nil {
			t.Fatal(err)
		}
		check(t, got, []want{
			{"production-linux-0-aaaaaaaa-5d4c-x1", true, "2h30m0s", nil},
			{"production-linux-0-bbbbbbbb-7f9d-y2", false, "", nil},
			{"production-linux-1-cccccccc-1a2b-z3", false, "", nil},
		}, `nowhere: pod production/production-linux-0-aaaaaaaa-5d4c-x1's metrics: dial tcp 10.0.0.9:9252: i/o timeout; the fleet's Prometheus (service production/prometheus): no endpoints`)
		var out bytes.Buffer
		printSharedFleets(&out, got)
		if !strings.Contains(out.String(), "?") {
			t.Errorf("unknown jobs are not marked:\n%s", out.String())
		}
	})
}

// fleet status --stack gke-shared --kubeconfig reads the stack's shared
// fleets from its config and shows their manager pods, on a real
// kube-apiserver: a pod being deleted is draining, with the time its grace
// has left (the API server's deletionTimestamp: the request's time plus the
// grace).
func TestStatusOfAClusterStackShowsItsSharedFleets(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	kc := kubeconfigFor(t, env.Config, "")
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "production"}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{
		managerPod("production-linux-0-aaaaaaaa-5d4c-x1", "production-linux-0", "production-linux-0-aaaaaaaa", nil),
		managerPod("production-linux-0-bbbbbbbb-7f9d-y2", "production-linux-0", "production-linux-0-bbbbbbbb", nil),
	} {
		p.Spec.Containers = []corev1.Container{{Name: "runner", Image: "example.invalid/runner:v1"}}
		// Bound to a node: the API server deletes an unbound pod at once,
		// without its grace.
		p.Spec.NodeName = "managers-1"
		p.Finalizers = []string{"example.com/hold"} // keeps the deleted pod (no kubelet here)
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "production", Name: "production-linux-0-aaaaaaaa-5d4c-x1"}}
	if err := env.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{"production-linux-0-aaaaaaaa-5d4c-x1", "production-linux-0-bbbbbbbb-7f9d-y2"} {
			p := &corev1.Pod{}
			if env.Client.Get(ctx, client.ObjectKey{Namespace: "production", Name: n}, p) == nil {
				p.Finalizers = nil
				_ = env.Client.Update(ctx, p)
			}
		}
	})
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"status", "--stack", "gke-shared", "--kubeconfig", kc, "-o", "json"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var rep statusReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var production *sharedFleetStatus
	for i := range rep.SharedFleets {
		if rep.SharedFleets[i].Name == "production" {
			production = &rep.SharedFleets[i]
		}
	}
	if len(rep.SharedFleets) != 2 || production == nil || len(production.Managers) != 2 {
		t.Fatalf("shared fleets %+v, want production's two manager pods and staging's none", rep.SharedFleets)
	}
	d := production.Managers[0]
	left, err := time.ParseDuration(d.TimeLeft)
	if !d.Draining || d.Pod != "production-linux-0-aaaaaaaa-5d4c-x1" || d.Release != "production-linux-0-aaaaaaaa" || err != nil ||
		left <= 11300*time.Second || left > 11400*time.Second || production.Managers[1].Draining {
		t.Errorf("managers %+v, want the deleted pod draining with about its whole grace (11400 s) left", production.Managers)
	}
	out.Reset()
	if err := run(ctx, []string{"status", "--stack", "gke-shared", "--kubeconfig", kc}, &out, &errOut); err != nil || !strings.Contains(out.String(), "Shared fleet production (namespace production): 2 manager pods, 1 draining") {
		t.Errorf("status table: %v\n%s", err, out.String())
	}
}
