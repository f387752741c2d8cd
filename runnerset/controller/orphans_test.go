package controller_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// orphanPod is a pod labelled as a component of RunnerSet rs: a manager
// in its namespace, a job in its jobs namespace, as the Deployment and the
// executor (config.toml's pod_labels) label them.
func orphanPod(rs *v1alpha1.RunnerSet, ns, name, component string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: resources.Labels(rs, component)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "alpine:3.22"}}},
	}
}

// exists reports whether pod is still there and not being deleted.
func exists(t *testing.T, pod *corev1.Pod) bool {
	t.Helper()
	cur := &corev1.Pod{}
	err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), cur)
	if apierrors.IsNotFound(err) {
		return false
	}
	must(t, err)
	return cur.DeletionTimestamp.IsZero()
}

// Issue 32, item 1: a job pod its manager left behind held a RunnerSet's
// deletion forever. Once no manager pod of the RunnerSet is left, the
// controller deletes such a pod after spec.managers.orphanedJobGracePeriod,
// counted from when it first saw it orphaned (kept in status across a
// controller restart), with a Warning Event naming it; never while any
// manager pod exists, however long that takes; and before the grace the
// RunnerSet stays Deleting, saying until when. The controller's clock is
// moved, not waited for.
func TestAJobPodNoManagerIsLeftToDeleteIsDeletedAfterItsGrace(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "orphans-token", token)
	rs := runnerSet(ns, "orphans", class.Name)
	grace := 10 * time.Minute
	rs.Spec.Managers.OrphanedJobGracePeriod = &metav1.Duration{Duration: grace}
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	n := naming.For(ns, rs.Name)

	// envtest runs no ReplicaSets: the manager pod is made here, as is
	// the job pod its manager will not delete.
	manager := orphanPod(rs, ns, n.Managers()+"-7d9f-abcde", resources.ComponentManager)
	job := orphanPod(rs, n.JobsNamespace(), "runner-orphans-job-1-xyz", resources.ComponentJob)
	must(t, k8s.Create(ctx, manager))
	must(t, k8s.Create(ctx, job))
	must(t, k8s.Delete(ctx, rs))

	held := waitCondition(t, rs, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting)
	if msg := condition(held, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "waiting for 1 manager pods and 1 job pods") {
		t.Errorf("Deleting message with a manager pod left: %q", msg)
	}

	// A manager pod exists: its job pod is never deleted, however far the
	// clock runs past the grace.
	moveClock(t, 24*time.Hour)
	time.Sleep(controllerPasses)
	if !exists(t, job) {
		t.Fatal("a job pod was deleted while a manager pod of its RunnerSet existed")
	}
	if cur := get(t, ns, rs.Name, &v1alpha1.RunnerSet{}); cur.Status.OrphanedJobPodsSince != nil {
		t.Errorf("orphanedJobPodsSince %s set while a manager pod exists", cur.Status.OrphanedJobPodsSince)
	}

	// The last manager goes without deleting its pod: the grace starts.
	must(t, k8s.Delete(ctx, manager, client.GracePeriodSeconds(0)))
	var since time.Time
	eventually(t, "the orphaned job pod's grace started", func() error {
		cur := get(t, ns, rs.Name, &v1alpha1.RunnerSet{})
		if cur.Status.OrphanedJobPodsSince == nil {
			return errors.New("status.orphanedJobPodsSince is not set")
		}
		since = cur.Status.OrphanedJobPodsSince.Time
		deadline := since.Add(grace).UTC().Format(time.RFC3339)
		msg := condition(cur, v1alpha1.ConditionReady).Message
		for _, want := range []string{"0 manager pods and 1 orphaned job pods left", job.Namespace + "/" + job.Name,
			"deleted at " + deadline, "spec.managers.orphanedJobGracePeriod (10m0s)"} {
			if !strings.Contains(msg, want) {
				return fmt.Errorf("Ready message %q does not say %q", msg, want)
			}
		}
		return nil
	})

	// Before the grace has passed, across a controller restart, the pod
	// stays and so does the RunnerSet; the grace is not counted again.
	stopManager()
	must(t, startManager())
	logged := writeLog.len()
	time.Sleep(controllerPasses)
	if !exists(t, job) {
		t.Fatal("the orphaned job pod was deleted before its grace passed")
	}
	cur := get(t, ns, rs.Name, &v1alpha1.RunnerSet{})
	if got := cur.Status.OrphanedJobPodsSince; got == nil || !got.Time.Equal(since) {
		t.Errorf("after a restart orphanedJobPodsSince is %v, want %s: the grace started again", got, since)
	}
	// Waiting writes nothing: the message names the deadline, not the
	// time left, so it is the same from pass to pass.
	written, _ := writeLog.since(logged)
	for _, w := range written {
		if w.namespace == ns && w.name == rs.Name {
			t.Errorf("%s to the RunnerSet while it waits for the grace", w.kind)
		}
	}

	// The grace passes: the pod is deleted, with a Warning Event naming
	// it, and the RunnerSet goes.
	moveClock(t, grace)
	eventually(t, "the orphaned job pod deleted and the RunnerSet gone", func() error {
		if exists(t, job) {
			return errors.New("the job pod is still there")
		}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), &v1alpha1.RunnerSet{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the RunnerSet is still there (%v)", err)
		}
		return nil
	})
	eventually(t, "a Warning Event naming the deleted pod", func() error {
		list := &eventsv1.EventList{}
		must(t, k8s.List(ctx, list, client.InNamespace(ns)))
		for _, e := range list.Items {
			if e.Reason == v1alpha1.ReasonOrphanedJobPodDeleted && e.Type == corev1.EventTypeWarning && e.ReportingController == controller.Name &&
				e.Regarding.Name == rs.Name && strings.Contains(e.Note, job.Namespace+"/"+job.Name) && strings.Contains(e.Note, "orphanedJobGracePeriod (10m0s)") {
				return nil
			}
		}
		return fmt.Errorf("none among %d Events", len(list.Items))
	})
}

// controllerPasses is long enough for a RunnerSet being deleted to be
// reconciled twice (it looks again every 5 s).
const controllerPasses = 11 * time.Second
