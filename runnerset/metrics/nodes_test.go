package metrics_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// nodeSeries gathers RunnerSetNodes from reg as "namespace/runnerset
// capacity_type instance_type" → value.
func nodeSeries(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != metrics.RunnerSetNodes {
			continue
		}
		for _, m := range f.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			out[fmt.Sprintf("%s/%s %s %s", l[metrics.LabelNamespace], l[metrics.LabelRunnerSet], l[metrics.LabelCapacityType], l[metrics.LabelInstanceType])] = m.GetGauge().GetValue()
		}
	}
	return out
}

func waitNodes(t *testing.T, reg prometheus.Gatherer, want map[string]float64, what string) {
	t.Helper()
	var got map[string]float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = nodeSeries(t, reg); maps.Equal(got, want) {
			return
		}
	}
	t.Fatalf("%s: %s is\n%v\nwant\n%v", what, metrics.RunnerSetNodes, got, want)
}

// The controller's cache of nodes, as cmd/runnerset-controller sets it up,
// follows nodes as they appear and go: RunnerSetNodes counts every
// RunnerSet's nodes by capacity type and instance type, from its NodePool
// (Karpenter's labels), its capacity label on its class's shared NodePool,
// or its ComputeClass (GKE's), and nothing else; only
// the leader exports it; and the cache keeps no more of a node than the
// labels it counts by.
func TestNodesPerRunnerSetFollowTheNodeWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Cache:      controller.CacheOptions(env.Scheme, mapper),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	elected := make(chan struct{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(&metrics.Nodes{Reader: mgr.GetCache(), Elected: elected})

	c := env.Client
	for _, ns := range []string{"team-a", "team-b"} {
		mustT(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		mustT(t, c.Create(ctx, &v1alpha1.RunnerSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "build"},
			Spec:       v1alpha1.RunnerSetSpec{ClassName: "local", Tags: []string{ns}, GitLab: v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "token"}}},
		}))
	}
	poolA := naming.For("team-a", "build").Capacity()
	classB := naming.For("team-b", "build").Capacity()
	node := func(name string, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"example.com/big": strings.Repeat("x", 4096)}}}
	}
	karpenter := func(name, capType, instanceType string) *corev1.Node {
		return node(name, map[string]string{karpv1.NodePoolLabelKey: poolA, karpv1.CapacityTypeLabelKey: capType, corev1.LabelInstanceTypeStable: instanceType, "example.com/other": "x"})
	}
	gke := func(name string, spot bool, machineType string) *corev1.Node {
		l := map[string]string{naming.LabelComputeClass: classB, corev1.LabelInstanceTypeStable: machineType}
		if spot {
			l[naming.LabelGKESpot] = "true"
		}
		return node(name, l)
	}
	nodes := []*corev1.Node{
		karpenter("a-spot-1", karpv1.CapacityTypeSpot, "m7i.large"),
		karpenter("a-spot-2", karpv1.CapacityTypeSpot, "m7i.large"),
		karpenter("a-od-1", karpv1.CapacityTypeOnDemand, "m6a.large"),
		// Team a's node on its class's shared NodePool: its tag is the
		// label Karpenter stamped from the job pod.
		node("a-shared-1", map[string]string{karpv1.NodePoolLabelKey: naming.ClassCapacity("local"), naming.LabelCapacity: poolA, karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeSpot, corev1.LabelInstanceTypeStable: "c7i.large"}),
		gke("b-spot-1", true, "n2d-standard-4"),
		gke("b-std-1", false, "n2d-standard-4"),
		// Nodes of no RunnerSet: the managers' pool, a NodePool that is
		// not a tag's, a node of nobody's.
		node("system-1", map[string]string{karpv1.NodePoolLabelKey: "system", karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand, corev1.LabelInstanceTypeStable: "m7i.large"}),
		node("other-1", map[string]string{naming.LabelComputeClass: "rf-team-c.gone", corev1.LabelInstanceTypeStable: "n2d-standard-4"}),
		node("bare-1", nil),
	}
	for _, n := range nodes {
		mustT(t, c.Create(ctx, n))
	}
	want := map[string]float64{
		"team-a/build spot m7i.large":           2,
		"team-a/build on-demand m6a.large":      1,
		"team-a/build spot c7i.large":           1,
		"team-b/build spot n2d-standard-4":      1,
		"team-b/build on-demand n2d-standard-4": 1,
	}

	// A standby exports nothing, however long it waits.
	time.Sleep(2 * time.Second)
	if got := nodeSeries(t, reg); len(got) != 0 {
		t.Fatalf("a replica that does not lead exports %v", got)
	}
	close(elected)
	waitNodes(t, reg, want, "nodes created")

	// Nodes go (a spot reclaim, a consolidation) and come.
	mustT(t, c.Delete(ctx, nodes[0]))
	mustT(t, c.Delete(ctx, nodes[4]))
	mustT(t, c.Create(ctx, gke("b-spot-2", true, "n2d-standard-8")))
	want["team-a/build spot m7i.large"] = 1
	delete(want, "team-b/build spot n2d-standard-4")
	want["team-b/build spot n2d-standard-8"] = 1
	waitNodes(t, reg, want, "nodes deleted and added")

	// Every node of a RunnerSet gone: its series go with them.
	for _, n := range []string{"a-spot-2", "a-od-1", "a-shared-1"} {
		mustT(t, c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	delete(want, "team-a/build spot m7i.large")
	delete(want, "team-a/build on-demand m6a.large")
	delete(want, "team-a/build spot c7i.large")
	waitNodes(t, reg, want, "team-a's nodes all deleted")

	// The cache holds a node's name and the labels counted by, not its
	// annotations or other labels.
	cached := &metav1.PartialObjectMetadataList{}
	cached.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	mustT(t, mgr.GetCache().List(ctx, cached))
	if len(cached.Items) != 5 {
		t.Errorf("the cache holds %d nodes, want the 5 that exist", len(cached.Items))
	}
	for _, n := range cached.Items {
		if len(n.Annotations) > 0 || len(n.ManagedFields) > 0 || n.Labels["example.com/other"] != "" {
			t.Errorf("the cache keeps node %s's annotations %d, managed fields %d, labels %v", n.Name, len(n.Annotations), len(n.ManagedFields), slices.Sorted(maps.Keys(n.Labels)))
		}
	}
}
