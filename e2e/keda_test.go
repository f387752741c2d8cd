//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// EnvKEDAControl, set to "noapiservice", runs TestKEDAScalesADeploymentBetween0And3
// as its negative control: the APIService of the external metrics API is
// deleted once KEDA runs, so the HPA KEDA writes cannot read the metric,
// and the step to 3 replicas must fail (the operator alone scales only
// between 0 and 1).
const EnvKEDAControl = "RUNNERFLEET_E2E_KEDA_CONTROL"

// TestKEDAScalesADeploymentBetween0And3 runs KEDA's own operator and
// metrics adapter on the local control plane (localcluster.Options.KEDA)
// and a Prometheus server scraping a gauge this test serves, and scales a
// Deployment with a ScaledObject on a Prometheus trigger (threshold 1,
// activation above 0.5, 0..3 replicas): gauge 0 → 0 replicas; 0.8 → 1
// (KEDA's activation); 3 → 3 (the HPA KEDA wrote, reading the metric
// through the external metrics API the adapter serves, which the test
// reads too); 1 → 1 (the HPA, down); 0 → 0 again (KEDA's deactivation).
// It logs how long each step took.
func TestKEDAScalesADeploymentBetween0And3(t *testing.T) {
	onKWOKCluster(t)
	if kc := existingKubeconfig(); kc != "" {
		t.Skipf("runs KEDA's operator and adapter beside its own local control plane; %s=%s runs the suite on an existing cluster", EnvKubeconfig, kc)
	}
	ctx := context.Background()
	start := time.Now()
	cl := startCluster(t, localcluster.Options{Name: "keda", RepoRoot: repoRoot(t), KEDA: true})
	c := cl.Client
	t.Logf("local control plane with KEDA up in %s", time.Since(start).Round(100*time.Millisecond))

	cs, err := kubernetes.NewForConfig(cl.local.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/external.metrics.k8s.io/v1beta1").DoRaw(ctx); err != nil {
		t.Fatalf("GET /apis/external.metrics.k8s.io/v1beta1: %v", err)
	}
	if os.Getenv(EnvKEDAControl) == "noapiservice" {
		as := &unstructured.Unstructured{}
		as.SetAPIVersion("apiregistration.k8s.io/v1")
		as.SetKind("APIService")
		as.SetName(localcluster.ExternalMetricsAPIService)
		if err := c.Delete(ctx, as); err != nil {
			t.Fatal(err)
		}
		t.Logf("negative control (%s=noapiservice): APIService %s deleted", EnvKEDAControl, localcluster.ExternalMetricsAPIService)
	}

	// The gauge, in Prometheus' text format, scraped every second.
	var gauge atomic.Value
	gauge.Store("0")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE runnerfleet_e2e_queue gauge\nrunnerfleet_e2e_queue %s\n", gauge.Load())
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	promURL, err := cl.local.StartPrometheus(ctx, map[string][]byte{localcluster.PrometheusConfig: []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
- job_name: queue
  static_configs:
  - targets: ["%s"]
`, ln.Addr()))}, 2*time.Minute, &logWriter{t: t, prefix: "localcluster: "})
	if err != nil {
		t.Fatal(err)
	}

	ns := "keda-e2e"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "queue-worker"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "queue-worker", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// kwok's fake nodes run it (they run no code).
					Containers:  []corev1.Container{{Name: "worker", Image: "registry.invalid/queue-worker:1"}},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				},
			},
		},
	}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	so := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": resources.ScaledObjectGVK.GroupVersion().String(),
		"kind":       resources.ScaledObjectGVK.Kind,
		"metadata":   map[string]any{"name": dep.Name, "namespace": ns},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": dep.Name},
			"pollingInterval": int64(1),
			"cooldownPeriod":  int64(1),
			"minReplicaCount": int64(0),
			"maxReplicaCount": int64(3),
			"advanced": map[string]any{"horizontalPodAutoscalerConfig": map[string]any{"behavior": map[string]any{
				"scaleDown": map[string]any{
					"stabilizationWindowSeconds": int64(0),
					"policies":                   []any{map[string]any{"type": "Percent", "value": int64(100), "periodSeconds": int64(1)}},
				},
			}}},
			"triggers": []any{map[string]any{
				"type": "prometheus",
				"metadata": map[string]any{
					"serverAddress":       promURL,
					"query":               "max(runnerfleet_e2e_queue)",
					"threshold":           "1",
					"activationThreshold": "0.5",
				},
			}},
		},
	}}
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}

	replicas := func() (int32, error) {
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(dep), d); err != nil {
			return 0, err
		}
		return ptr.Deref(d.Spec.Replicas, 1), nil
	}
	step := func(value string, want int32, timeout time.Duration) {
		t.Helper()
		gauge.Store(value)
		start := time.Now()
		var got int32
		waitFor(t, timeout, fmt.Sprintf("queue-worker at %d replicas with the gauge at %s", want, value), func() error {
			var err error
			if got, err = replicas(); err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%d replicas; %s", got, scaledObjectState(ctx, c, so, ns))
			}
			return nil
		})
		t.Logf("gauge %s: %d replicas after %s", value, want, time.Since(start).Round(100*time.Millisecond))
	}
	step("0", 0, 2*time.Minute)
	step("0.8", 1, 2*time.Minute)
	step("3", 3, 2*time.Minute)
	// The HPA reads what the adapter serves: the gauge's value, through
	// kube-apiserver.
	b, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/external.metrics.k8s.io/v1beta1/namespaces/"+ns+"/s0-prometheus").
		Param("labelSelector", "scaledobject.keda.sh/name="+dep.Name).DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the external metric s0-prometheus: %v", err)
	}
	var metrics struct {
		Items []struct {
			Value string `json:"value"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &metrics); err != nil || len(metrics.Items) != 1 || metrics.Items[0].Value != "3" {
		t.Errorf("the external metric s0-prometheus is not the gauge's 3 (%v): %s", err, b)
	}
	// Down between replicas: the HPA again (the operator keeps it active).
	step("1", 1, 2*time.Minute)
	step("0", 0, 2*time.Minute)
}

// scaledObjectState says what KEDA reports on the ScaledObject and its
// HPA, for a wait's message.
func scaledObjectState(ctx context.Context, c client.Client, so *unstructured.Unstructured, ns string) string {
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(so.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(so), got); err != nil {
		return err.Error()
	}
	conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
	out := "ScaledObject conditions:"
	for _, cond := range conds {
		m, _ := cond.(map[string]any)
		out += fmt.Sprintf(" %v=%v (%v)", m["type"], m["status"], m["message"])
	}
	hpa := &unstructured.Unstructured{}
	hpa.SetAPIVersion("autoscaling/v2")
	hpa.SetKind("HorizontalPodAutoscaler")
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keda-hpa-" + so.GetName()}, hpa); err != nil {
		return out + "; HPA: " + err.Error()
	}
	desired, _, _ := unstructured.NestedInt64(hpa.Object, "status", "desiredReplicas")
	hconds, _, _ := unstructured.NestedSlice(hpa.Object, "status", "conditions")
	out += "; HPA desired " + strconv.FormatInt(desired, 10) + ":"
	for _, cond := range hconds {
		m, _ := cond.(map[string]any)
		out += fmt.Sprintf(" %v=%v (%v)", m["type"], m["status"], m["message"])
	}
	return out
}

// onRealNodeWithKEDA makes t a test of the real node lane that runs KEDA
// through fleet up. It first waits for KEDA's build (hack/tools.sh keda,
// which make test starts beside the suite and which waits for a build
// already under way): cold, that takes 7 minutes on idle cores and over
// half an hour beside a cold suite. Waiting before the lane lets the lane's
// other tests run meanwhile, and keeps the build out of the deadlines the
// test sets on fleet up.
func onRealNodeWithKEDA(t *testing.T, root string) {
	t.Helper()
	needsRealNode(t)
	t.Parallel()
	start := time.Now()
	cmd := exec.Command(filepath.Join(root, "hack", "tools.sh"), "keda")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building KEDA with hack/tools.sh keda: %v\n%s", err, out)
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %s for KEDA's build", d.Round(time.Second))
	}
	takeLane(t, realNodeLane, "real node")
}
