package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Orphaned job pods. gitlab-runner's kubernetes executor deletes the pod of
// each job it ran; no ownerReference ties that pod to anything, only the
// manager process that made it. A manager that exits without deleting it
// (killed after its grace period, or refused by the API server) leaves a
// pod no one will ever delete, and a RunnerSet being deleted waits for its
// pods: forever. Once no manager pod of the RunnerSet is left at all, the
// controller gives such pods spec.managers.orphanedJobGracePeriod, counted
// from when it first saw them orphaned (status.orphanedJobPodsSince, so a
// restart does not start the count again), then deletes them with a
// Warning Event. While any manager pod exists, terminating ones included,
// nothing is deleted: that manager may still be cleaning up.
//
// A live RunnerSet is left alone: its Deployment brings managers back, and
// a manager pod that exists may own any job pod.

// leftPods are the pods a RunnerSet being deleted still has.
type leftPods struct {
	// managers are its manager pods, terminating ones included.
	managers int
	// jobs are its job pods (labelled by the executor from config.toml's
	// pod_labels; the CRD keeps teams from setting the component label),
	// terminating ones included.
	jobs []metav1.PartialObjectMetadata
	// other pods carry its runnerset label and are neither: they are
	// waited for and never deleted.
	other int
}

func (p leftPods) total() int { return p.managers + len(p.jobs) + p.other }

// orphans are the job pods no manager will delete: none while any manager
// pod exists, else the job pods not already being deleted.
func (p leftPods) orphans() []metav1.PartialObjectMetadata {
	if p.managers > 0 {
		return nil
	}
	var out []metav1.PartialObjectMetadata
	for _, pod := range p.jobs {
		if pod.DeletionTimestamp.IsZero() {
			out = append(out, pod)
		}
	}
	return out
}

// classify sorts a pod listed by its runnerset label.
func (p *leftPods) add(pod metav1.PartialObjectMetadata, rsNamespace string) {
	l := pod.Labels
	switch {
	case l[resources.LabelComponent] == resources.ComponentManager && pod.Namespace == rsNamespace:
		p.managers++
	case l[resources.LabelComponent] == resources.ComponentJob:
		p.jobs = append(p.jobs, pod)
	default:
		p.other++
	}
}

// waitForPods holds a RunnerSet being deleted while it has pods left, and
// deletes its orphaned job pods once their grace has passed. It says in
// Ready what it waits for, and until when.
func (r *Reconciler) waitForPods(ctx context.Context, before, rs *v1alpha1.RunnerSet, left leftPods) (reconcile.Result, error) {
	now := r.now()
	requeue := drainPoll
	orphans := left.orphans()
	var msg string
	switch {
	case left.managers > 0:
		// A manager may still delete its pods; the count starts again
		// when the last one is gone.
		rs.Status.OrphanedJobPodsSince = nil
		msg = fmt.Sprintf("waiting for %d manager pods and %d job pods to finish their jobs", left.managers, len(left.jobs))
	case len(orphans) == 0 && len(left.jobs) == 0:
		msg = "no manager or job pod left"
	case len(orphans) == 0:
		msg = fmt.Sprintf("waiting for %d job pods being deleted", len(left.jobs))
	default:
		if rs.Status.OrphanedJobPodsSince == nil {
			// Seconds, as the API server stores it: the deadline read back
			// after a restart is the one written now.
			since := metav1.NewTime(now.Truncate(time.Second))
			rs.Status.OrphanedJobPodsSince = &since
		}
		since := rs.Status.OrphanedJobPodsSince.Time
		grace := rs.Spec.Managers.OrphanedJobGracePeriodOrDefault()
		deadline := since.Add(grace)
		if now.Before(deadline) {
			// The deadline, not the time left: the message (and status)
			// stays the same from pass to pass, so waiting writes nothing.
			msg = fmt.Sprintf("0 manager pods and %d orphaned job pods left (%s): no manager pod is left to delete them since %s; "+
				"they are deleted at %s, when spec.managers.orphanedJobGracePeriod (%s) has passed",
				len(orphans), podNames(orphans), since.UTC().Format(time.RFC3339), deadline.UTC().Format(time.RFC3339), grace)
			if d := deadline.Sub(now); d < requeue {
				requeue = d
			}
			break
		}
		if err := r.deleteOrphans(ctx, rs, orphans, since, grace); err != nil {
			return reconcile.Result{}, err
		}
		msg = fmt.Sprintf("deleted %d orphaned job pods (%s): no manager pod was left to delete them since %s and spec.managers.orphanedJobGracePeriod (%s) has passed",
			len(orphans), podNames(orphans), since.UTC().Format(time.RFC3339), grace)
	}
	if left.other > 0 {
		msg += fmt.Sprintf("; waiting for %d other pods labelled %s=%s, which runnerfleet does not delete", left.other, resources.LabelRunnerSet, rs.Name)
	}
	rs.SetCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting, msg)
	r.recordTransitions(before, rs)
	if err := r.patchStatus(ctx, before, rs); err != nil {
		return conflictIsRequeue(err)
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// deleteOrphans deletes each orphaned job pod, by UID so that a pod of the
// same name made since is not touched, with a Warning Event naming it.
func (r *Reconciler) deleteOrphans(ctx context.Context, rs *v1alpha1.RunnerSet, orphans []metav1.PartialObjectMetadata, since time.Time, grace time.Duration) error {
	for _, o := range orphans {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, UID: o.UID}}
		err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &o.UID})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue // gone, or another pod by now: not this orphan
		}
		if err != nil {
			return fmt.Errorf("deleting orphaned job pod %s/%s: %w", o.Namespace, o.Name, err)
		}
		r.Recorder.Eventf(rs, pod, corev1.EventTypeWarning, v1alpha1.ReasonOrphanedJobPodDeleted, "Delete",
			"deleted job pod %s/%s: no manager pod of this RunnerSet was left to delete it since %s, and spec.managers.orphanedJobGracePeriod (%s) has passed; a manager exited without cleaning up its job pod (check the managers' logs)",
			o.Namespace, o.Name, since.UTC().Format(time.RFC3339), grace)
		log.FromContext(ctx).Info("Deleted orphaned job pod", "pod", client.ObjectKeyFromObject(pod), "orphanedSince", since, "gracePeriod", grace)
	}
	return nil
}

// podNames lists pods as namespace/name, the first few only.
func podNames(pods []metav1.PartialObjectMetadata) string {
	const most = 5
	names := make([]string, 0, most+1)
	for i, p := range pods {
		if i == most {
			names = append(names, fmt.Sprintf("and %d more", len(pods)-most))
			break
		}
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return strings.Join(names, ", ")
}

// podsLeft lists the pods of rs, terminating ones included: in its jobs
// namespace, if that is its own (pods of a namespace someone else made are
// none of its business), and in its namespace (managers, and jobs of the
// layout before jobs namespaces). The jobs namespace comes first: a job pod
// listed was made before the managers were, so when no manager pod is
// listed none left can have made it.
func (r *Reconciler) podsLeft(ctx context.Context, rs *v1alpha1.RunnerSet) (leftPods, error) {
	var namespaces []string
	jobs, err := r.ownJobsNamespace(ctx, rs)
	if err != nil {
		return leftPods{}, err
	}
	if jobs != nil {
		namespaces = append(namespaces, jobs.Name)
	}
	namespaces = append(namespaces, rs.Namespace)
	var left leftPods
	for _, ns := range namespaces {
		pods := &metav1.PartialObjectMetadataList{}
		pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := r.APIReader.List(ctx, pods, client.InNamespace(ns),
			client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{resources.LabelRunnerSet: rs.Name})}); err != nil {
			return leftPods{}, fmt.Errorf("listing pods in %s: %w", ns, err)
		}
		for _, p := range pods.Items {
			left.add(p, rs.Namespace)
		}
	}
	return left, nil
}
