package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Interrupted jobs. A job pod that ends normally is deleted by its
// manager (gitlab-runner's kubernetes executor) with a plain DELETE. A job
// pod that a disruption takes away carries, in its last state, the
// DisruptionTarget condition the cluster puts on it (k8s.io/kubernetes
// v1.37): kube-controller-manager's PodGC marks a pod whose node no longer
// exists Failed with reason DeletionByPodGC and deletes it (a spot reclaim,
// a node deleted under its pods); its taint eviction controller says
// DeletionByTaintManager (a node NotReady past the pod's toleration), the
// API server EvictionByEvictionAPI (a drain, Karpenter's included), the
// scheduler PreemptionByScheduler, the kubelet TerminationByKubelet (node
// shutdown, node-pressure eviction). The watch below sees each job pod's
// deletion with that last state and records the ones so taken: a Warning
// Event on the RunnerSet naming the pod and its node, and
// runnerfleet_jobs_interrupted_total.
//
// Counted once: only a deletion seen by the watch counts, never a pod the
// watch lists when it starts (a controller restart or a new leader sees
// the pods that exist as added, not deleted), and a pod is deleted once.
// A pod deleted while no controller watched is not counted. Nothing is
// written for a job that ends normally, and nothing is read from the API
// server: the pods come from the watch, the RunnerSet and its jobs
// namespace from the manager's cache.

// ReasonsInterrupted are the reasons a job pod's DisruptionTarget
// condition takes, as the metric's reason label; any other is counted as
// ReasonInterruptedOther, so that the label's values stay few.
var ReasonsInterrupted = []string{
	"DeletionByPodGC",
	"DeletionByTaintManager",
	"EvictionByEvictionAPI",
	corev1.PodReasonPreemptionByScheduler,
	corev1.PodReasonTerminationByKubelet,
}

// ReasonInterruptedOther is the reason label of a DisruptionTarget reason
// not in ReasonsInterrupted.
const ReasonInterruptedOther = "Other"

// jobPods selects the job pods of every RunnerSet, as the executor labels
// them from config.toml's pod_labels.
func jobPods() labels.Selector {
	return labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedBy, resources.LabelComponent: resources.ComponentJob})
}

// Interrupted says whether pod's last state shows a disruption took it
// away while its job ran, and the reason (one of ReasonsInterrupted or
// ReasonInterruptedOther) and the condition's message.
func Interrupted(pod *corev1.Pod) (reason, message string, ok bool) {
	if pod.Spec.NodeName == "" {
		return "", "", false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.DisruptionTarget || c.Status != corev1.ConditionTrue {
			continue
		}
		reason = c.Reason
		if !slices.Contains(ReasonsInterrupted, reason) {
			reason = ReasonInterruptedOther
		}
		return reason, c.Message, true
	}
	return "", "", false
}

// interruptions watches job pods and records those a disruption took. It
// runs on the leader only, so that two replicas do not both count.
type interruptions struct {
	// Reader is the manager's cache: RunnerSets and jobs namespaces.
	Reader   client.Reader
	Recorder events.EventRecorder
	// retrier retries the jobs of RunnerSets that opt in (jobretry.go).
	retrier *jobRetrier
	// newCache builds the cache of job pods, started by Start.
	newCache func() (cache.Cache, error)
}

// watchInterruptions registers the watch of job pods with mgr.
func watchInterruptions(mgr ctrl.Manager, rec events.EventRecorder, retry JobRetryOptions, now func() time.Time) error {
	return mgr.Add(&interruptions{
		Reader:   mgr.GetClient(),
		Recorder: rec,
		retrier:  newJobRetrier(mgr.GetClient(), mgr.GetClient(), mgr.GetAPIReader(), rec, retry, now),
		newCache: func() (cache.Cache, error) {
			return cache.New(mgr.GetConfig(), cache.Options{
				HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
				ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: jobPods(), Transform: trimJobPod}},
			})
		},
	})
}

// NeedLeaderElection: only the leader counts.
func (w *interruptions) NeedLeaderElection() bool { return true }

// Start watches job pods until ctx ends.
func (w *interruptions) Start(ctx context.Context) error {
	c, err := w.newCache()
	if err != nil {
		return fmt.Errorf("job pods' cache: %w", err)
	}
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("job pods' informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) { w.deleted(ctx, obj) },
	}); err != nil {
		return err
	}
	if w.retrier != nil {
		if err := w.retrier.resume(ctx); err != nil {
			log.FromContext(ctx).Error(err, "Resuming the retries of interrupted jobs")
		}
	}
	return c.Start(ctx)
}

// deleted records pod if a disruption took it.
func (w *interruptions) deleted(ctx context.Context, obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	reason, message, ok := Interrupted(pod)
	if !ok {
		return
	}
	logger := log.FromContext(ctx).WithValues("pod", pod.Namespace+"/"+pod.Name, "node", pod.Spec.NodeName, "reason", reason)
	rs, err := w.runnerSetOf(ctx, pod)
	if err != nil || rs == nil {
		logger.Info("A job pod was interrupted, of no RunnerSet found", "error", err)
		return
	}
	metrics.JobsInterrupted.WithLabelValues(rs.Namespace, rs.Name, reason).Inc()
	logger.Info("A job pod was interrupted", "runnerset", rs.Namespace+"/"+rs.Name)
	w.Recorder.Eventf(rs, pod, corev1.EventTypeWarning, v1alpha1.ReasonJobInterrupted, "Interrupt",
		"Job pod %s/%s on node %s was taken away while its job ran (%s: %s): the job fails as its pod is lost.",
		pod.Namespace, pod.Name, pod.Spec.NodeName, reason, message)
	if w.retrier != nil {
		w.retrier.interrupted(ctx, rs, pod)
		w.retrier.countForFallback(ctx, rs)
	}
}

// runnerSetOf finds the RunnerSet of a job pod: its jobs namespace names
// it (owner labels); a job pod of the layout before jobs namespaces runs
// in the RunnerSet's own namespace.
func (w *interruptions) runnerSetOf(ctx context.Context, pod *corev1.Pod) (*v1alpha1.RunnerSet, error) {
	name := pod.Labels[resources.LabelRunnerSet]
	key := types.NamespacedName{Namespace: pod.Namespace, Name: name}
	ns := &corev1.Namespace{}
	if err := w.Reader.Get(ctx, client.ObjectKey{Name: pod.Namespace}, ns); client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	if owner := ns.Labels[capacity.LabelOwnerNamespace]; owner != "" {
		key = types.NamespacedName{Namespace: owner, Name: ns.Labels[capacity.LabelOwnerName]}
	}
	rs := &v1alpha1.RunnerSet{}
	if err := w.Reader.Get(ctx, key, rs); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return rs, nil
}

// trimJobPod keeps of a job pod only what deleted reads, so that the
// controller's memory does not hold every running job's spec: of its
// annotations, the executor's that name its GitLab job.
func trimJobPod(in any) (any, error) {
	pod, ok := in.(*corev1.Pod)
	if !ok {
		return in, nil
	}
	var annotations map[string]string
	for _, k := range []string{podKeyJobID, podKeyProjectID} {
		if v, ok := pod.Annotations[k]; ok {
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[k] = v
		}
	}
	out := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Labels: pod.Labels, Annotations: annotations, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	return out, nil
}
