package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

var (
	descRunnerSets = prometheus.NewDesc(RunnerSets,
		"RunnerSets by condition type, status and reason.",
		[]string{LabelCondition, LabelStatus, LabelReason}, nil)
	descReady = prometheus.NewDesc(RunnerSetReady,
		"1 when the RunnerSet is Ready at its current generation, else 0; capacity names its NodePool or ComputeClass.",
		[]string{LabelNamespace, LabelRunnerSet, LabelClass, LabelCapacity}, nil)
	descTokenExpiry = prometheus.NewDesc(TokenExpiry,
		"When the RunnerSet's runner authentication token expires, in Unix seconds; absent for a token that does not expire or whose expiry is unknown.",
		[]string{LabelNamespace, LabelRunnerSet}, nil)
	descDrainingPods = prometheus.NewDesc(DrainingManagerPods,
		"Manager pods of the RunnerSet that were asked to stop and are finishing their jobs; absent when none is.",
		[]string{LabelNamespace, LabelRunnerSet}, nil)
	descDrainDeadline = prometheus.NewDesc(DrainDeadline,
		"When the first draining manager pod of the RunnerSet reaches its shutdown timeout (its deletion timestamp), in Unix seconds; absent when none drains.",
		[]string{LabelNamespace, LabelRunnerSet}, nil)
	descDeleting = prometheus.NewDesc(RunnerSetsDeleting,
		"RunnerSets being deleted: draining their managers, then releasing their runner and capacity.",
		nil, nil)
	descCapacity = prometheus.NewDesc(CapacityObjects,
		"Cluster-scoped capacity objects (NodePool, EC2NodeClass, KWOKNodeClass, ComputeClass) runnerfleet manages, by kind.",
		[]string{LabelKind}, nil)
)

// Expiries remembers the token expiry of each RunnerSet, as the token step
// last saw it; the Collector exports it for the RunnerSets that exist.
type Expiries struct {
	m sync.Map // types.NamespacedName → time.Time
}

// TokenExpiries is the controller's one Expiries.
var TokenExpiries = &Expiries{}

// Set records when the token of RunnerSet key expires; zero forgets it.
func (e *Expiries) Set(key types.NamespacedName, at time.Time) {
	if at.IsZero() {
		e.m.Delete(key)
		return
	}
	e.m.Store(key, at)
}

// Get returns the recorded expiry of key.
func (e *Expiries) Get(key types.NamespacedName) (time.Time, bool) {
	v, ok := e.m.Load(key)
	if !ok {
		return time.Time{}, false
	}
	return v.(time.Time), true
}

// Collector exports the state of the fleet from the manager's cache at
// scrape time.
type Collector struct {
	// Reader is the manager's cache.
	Reader client.Reader
	// Mapper tells which CapacityKinds the cluster has.
	Mapper meta.RESTMapper
	// CapacityKinds are the kinds counted in runnerfleet_capacity_objects.
	CapacityKinds []schema.GroupVersionKind
	// Elected is closed once this replica leads; until then it exports
	// nothing, so that standby replicas do not double the fleet's counts.
	// Nil exports always.
	Elected <-chan struct{}
	// Expiries are the token expiries the token step recorded.
	Expiries *Expiries
	// Timeout bounds one collection; default 10s.
	Timeout time.Duration
}

var _ prometheus.Collector = (*Collector)(nil)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunnerSets, descReady, descTokenExpiry, descDrainingPods, descDrainDeadline, descDeleting, descCapacity} {
		ch <- d
	}
}

// scrapeContext is a collector's gate and deadline: ok is false on a replica
// that does not lead (it exports nothing: only the leader's informers are
// filled), and the context ends after timeout (10s when 0).
func scrapeContext(elected <-chan struct{}, timeout time.Duration) (context.Context, context.CancelFunc, bool) {
	if elected != nil {
		select {
		case <-elected:
		default:
			return nil, nil, false
		}
	}
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	return ctx, cancel, true
}

type stateKey struct{ condition, status, reason string }

// Collect implements prometheus.Collector. A list that fails is logged and
// its metrics left out: the rest of the scrape still serves.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel, ok := scrapeContext(c.Elected, c.Timeout)
	if !ok {
		return
	}
	defer cancel()
	logger := log.Log.WithName("metrics")

	list := &v1alpha1.RunnerSetList{}
	if err := c.Reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		logger.Error(err, "Listing RunnerSets for metrics")
	} else {
		c.collectRunnerSets(ch, list.Items)
	}
	if err := c.collectDrains(ctx, ch); err != nil {
		logger.Error(err, "Listing manager pods for metrics")
	}
	for _, gvk := range c.CapacityKinds {
		if _, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			continue // the cluster does not have this kind
		}
		objs := &metav1.PartialObjectMetadataList{}
		objs.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.Reader.List(ctx, objs, client.MatchingLabels{resources.LabelManagedBy: resources.ManagedBy}, client.UnsafeDisableDeepCopy); err != nil {
			logger.Error(err, "Listing capacity for metrics", "kind", gvk.Kind)
			continue
		}
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(len(objs.Items)), gvk.Kind)
	}
}

func (c *Collector) collectRunnerSets(ch chan<- prometheus.Metric, items []v1alpha1.RunnerSet) {
	states := map[stateKey]int{}
	deleting := 0
	for i := range items {
		rs := &items[i]
		for _, cond := range rs.Status.Conditions {
			states[stateKey{cond.Type, string(cond.Status), cond.Reason}]++
		}
		if !rs.DeletionTimestamp.IsZero() {
			deleting++
		}
		ready := 0.0
		if rs.IsReady() {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready, rs.Namespace, rs.Name, rs.Spec.ClassName, rs.Status.Capacity)
		if c.Expiries != nil {
			if at, ok := c.Expiries.Get(types.NamespacedName{Namespace: rs.Namespace, Name: rs.Name}); ok {
				ch <- prometheus.MustNewConstMetric(descTokenExpiry, prometheus.GaugeValue, float64(at.Unix()), rs.Namespace, rs.Name)
			}
		}
	}
	for k, n := range states {
		ch <- prometheus.MustNewConstMetric(descRunnerSets, prometheus.GaugeValue, float64(n), k.condition, k.status, k.reason)
	}
	ch <- prometheus.MustNewConstMetric(descDeleting, prometheus.GaugeValue, float64(deleting))
	if c.Expiries != nil {
		// Forget the RunnerSets that are gone.
		exists := make(map[types.NamespacedName]bool, len(items))
		for i := range items {
			exists[types.NamespacedName{Namespace: items[i].Namespace, Name: items[i].Name}] = true
		}
		c.Expiries.m.Range(func(k, _ any) bool {
			if !exists[k.(types.NamespacedName)] {
				c.Expiries.m.Delete(k)
			}
			return true
		})
	}
}

type drain struct {
	pods     int
	deadline time.Time
}

func (c *Collector) collectDrains(ctx context.Context, ch chan<- prometheus.Metric) error {
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := c.Reader.List(ctx, pods, client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(resources.ManagerPods())}, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	drains := map[types.NamespacedName]*drain{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() {
			continue
		}
		key := types.NamespacedName{Namespace: p.Namespace, Name: p.Labels[resources.LabelRunnerSet]}
		d := drains[key]
		if d == nil {
			d = &drain{deadline: p.DeletionTimestamp.Time}
			drains[key] = d
		}
		d.pods++
		if p.DeletionTimestamp.Time.Before(d.deadline) {
			d.deadline = p.DeletionTimestamp.Time
		}
	}
	for k, d := range drains {
		ch <- prometheus.MustNewConstMetric(descDrainingPods, prometheus.GaugeValue, float64(d.pods), k.Namespace, k.Name)
		ch <- prometheus.MustNewConstMetric(descDrainDeadline, prometheus.GaugeValue, float64(d.deadline.Unix()), k.Namespace, k.Name)
	}
	return nil
}
