package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Nodes of a tag. Every node Karpenter launches for a tag's NodePool
// carries karpenter.sh/nodepool (the NodePool's name, the tag's capacity
// name, naming.Runner.Capacity), karpenter.sh/capacity-type and
// node.kubernetes.io/instance-type; every node GKE creates for a tag's
// ComputeClass carries cloud.google.com/compute-class (the same name),
// cloud.google.com/gke-spot on a Spot VM, and the instance type. A node
// of a tag on its class's shared NodePool (spec.nodePools of the
// RunnerClass) carries the shared NodePool's name there; its tag is in
// runnerfleet.dev/capacity, which Karpenter stamps from the job pod (and
// which a tag's own NodePool sets on its nodes too), and is read first. The
// controller exports, from its cache of the nodes' labels, how many nodes
// each RunnerSet has by capacity type and instance type, at scrape time
// and only while it leads; the recording rules of runnerset/monitoring
// integrate that gauge into node-seconds and money.
//
// A gauge and not a counter of node-seconds kept by the controller: the
// gauge is the cluster's state, read afresh at every scrape, so a restarted
// or a new leader exports exactly what the old one did, and the integral
// lives in Prometheus, which outlives the controller. A counter kept in
// the controller's memory starts again from zero at every restart and
// leader change; counted from each node's creation instead, a restart would
// raise it by the age of every node at once, which Prometheus takes for a
// counter reset and counts again. Either way only the minutes no replica
// leads (a restart, a failover) go uncounted.

// RunnerSetNodes is the gauge of a RunnerSet's nodes.
const RunnerSetNodes = Prefix + "runnerset_nodes"

// Labels of RunnerSetNodes.
const (
	LabelCapacityType = "capacity_type"
	LabelInstanceType = "instance_type"
)

// Unknown is the instance_type of a node without
// node.kubernetes.io/instance-type, and the capacity_type of a Karpenter
// node without karpenter.sh/capacity-type.
const Unknown = "unknown"

var descNodes = prometheus.NewDesc(RunnerSetNodes,
	"Nodes of the RunnerSet's capacity (its NodePool's by karpenter.sh/nodepool, its ComputeClass's by cloud.google.com/compute-class), by capacity type (spot, on-demand, reserved) and instance type; runnerfleet's recording rules integrate it into node-seconds and cost.",
	[]string{LabelNamespace, LabelRunnerSet, LabelCapacityType, LabelInstanceType}, nil)

// nodeLabels are the only labels the controller keeps of a node.
var nodeLabels = []string{naming.LabelCapacity, karpv1.NodePoolLabelKey, naming.LabelComputeClass, karpv1.CapacityTypeLabelKey, naming.LabelGKESpot, corev1.LabelInstanceTypeStable}

// NodeCache is the cache entry of the nodes: their metadata only, and of
// that only the name, resource version, deletion time and the labels
// RunnerSetNodes reads, so that the controller's memory holds a few dozen
// bytes per node whatever else nodes carry.
func NodeCache() (client.Object, cache.ByObject) {
	nodes := &metav1.PartialObjectMetadata{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	return nodes, cache.ByObject{Transform: trimNode}
}

var _ toolscache.TransformFunc = trimNode

func trimNode(in any) (any, error) {
	n, ok := in.(*metav1.PartialObjectMetadata)
	if !ok {
		return in, nil
	}
	keep := map[string]string{}
	for _, k := range nodeLabels {
		if v, ok := n.Labels[k]; ok {
			keep[k] = v
		}
	}
	n.ObjectMeta = metav1.ObjectMeta{
		Name:              n.Name,
		UID:               n.UID,
		ResourceVersion:   n.ResourceVersion,
		CreationTimestamp: n.CreationTimestamp,
		DeletionTimestamp: n.DeletionTimestamp,
		Labels:            keep,
	}
	return n, nil
}

// Nodes exports RunnerSetNodes from the manager's cache at scrape time.
type Nodes struct {
	// Reader is the manager's cache, with NodeCache's entry.
	Reader client.Reader
	// Elected is closed once this replica leads; until then it exports
	// nothing. Nil exports always.
	Elected <-chan struct{}
	// Timeout bounds one collection; default 10s.
	Timeout time.Duration
}

var _ prometheus.Collector = (*Nodes)(nil)

// Describe implements prometheus.Collector.
func (c *Nodes) Describe(ch chan<- *prometheus.Desc) { ch <- descNodes }

// NodeKey is one series of RunnerSetNodes.
type NodeKey struct{ Namespace, RunnerSet, CapacityType, InstanceType string }

// Collect implements prometheus.Collector.
func (c *Nodes) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel, ok := scrapeContext(c.Elected, c.Timeout)
	if !ok {
		return
	}
	defer cancel()
	counts, err := CountNodes(ctx, c.Reader)
	if err != nil {
		log.Log.WithName("metrics").Error(err, "Listing nodes for metrics")
		return
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(n), k.Namespace, k.RunnerSet, k.CapacityType, k.InstanceType)
	}
}

// CountNodes counts the nodes of every RunnerSet that r has, by capacity
// type and instance type. A node of no RunnerSet's capacity (the managers',
// the system's, a capacity whose RunnerSet is gone) is not counted.
func CountNodes(ctx context.Context, r client.Reader) (map[NodeKey]int, error) {
	rss := &v1alpha1.RunnerSetList{}
	if err := r.List(ctx, rss, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	owner := make(map[string]*v1alpha1.RunnerSet, len(rss.Items))
	for i := range rss.Items {
		rs := &rss.Items[i]
		owner[naming.For(rs.Namespace, rs.Name).Capacity()] = rs
	}
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	counts := map[NodeKey]int{}
	for i := range nodes.Items {
		l := nodes.Items[i].Labels
		capacity, capType := l[naming.LabelCapacity], l[karpv1.CapacityTypeLabelKey]
		if capacity == "" {
			capacity = l[karpv1.NodePoolLabelKey]
		}
		if capacity == "" {
			capacity, capType = l[naming.LabelComputeClass], cost.OnDemand
			if l[naming.LabelGKESpot] == "true" {
				capType = cost.Spot
			}
		}
		rs := owner[capacity]
		if capacity == "" || rs == nil {
			continue
		}
		it := l[corev1.LabelInstanceTypeStable]
		if it == "" {
			it = Unknown
		}
		if capType == "" {
			capType = Unknown
		}
		counts[NodeKey{rs.Namespace, rs.Name, capType, it}]++
	}
	return counts, nil
}
