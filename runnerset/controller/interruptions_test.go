package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Issue 25, item 2: a job pod taken away with its node (a spot reclaim) is
// recorded on its RunnerSet, a Warning Event naming the pod and the node,
// and counted in runnerfleet_jobs_interrupted_total; a job that ends
// normally is not (the negative control); a controller restart counts no
// pod twice. envtest runs no kube-controller-manager: what its PodGC does
// to a pod whose node is gone (k8s.io/kubernetes v1.37,
// pkg/controller/podgc: the DisruptionTarget condition with reason
// DeletionByPodGC, phase Failed, then a forced delete) is done here, as the
// API server's eviction does for EvictionByEvictionAPI; the end-to-end test
// lets the real PodGC do it.
func TestAJobPodTakenAwayIsRecordedOnceAndANormalEndIsNot(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "interrupted-token", token)
	rs := runnerSet(ns, "interrupted", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	jobsNS := naming.For(ns, rs.Name).JobsNamespace()
	counted := func(reason string) float64 {
		return testutil.ToFloat64(metrics.JobsInterrupted.WithLabelValues(ns, rs.Name, reason))
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "job-node-" + ns}}
	must(t, k8s.Create(ctx, node))
	running := func(name string, finalizers ...string) *corev1.Pod {
		t.Helper()
		pod := orphanPod(rs, jobsNS, name, resources.ComponentJob)
		pod.Spec.NodeName, pod.Finalizers = node.Name, finalizers
		must(t, k8s.Create(ctx, pod))
		pod.Status.Phase = corev1.PodRunning
		must(t, k8s.Status().Update(ctx, pod))
		return pod
	}
	// disrupted puts on pod what the cluster puts on a pod it takes away,
	// then deletes it (PodGC force-deletes; an eviction deletes gracefully).
	disrupted := func(pod *corev1.Pod, reason, message string) {
		t.Helper()
		pod.Status.Phase = corev1.PodFailed
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason, Message: message, LastTransitionTime: metav1.Now(),
		})
		must(t, k8s.Status().Update(ctx, pod))
		must(t, k8s.Delete(ctx, pod, client.GracePeriodSeconds(0)))
	}
	eventsNaming := func(pod *corev1.Pod) (n int, note string) {
		t.Helper()
		list := &eventsv1.EventList{}
		must(t, k8s.List(ctx, list, client.InNamespace(ns)))
		for _, e := range list.Items {
			if e.Reason == v1alpha1.ReasonJobInterrupted && strings.Contains(e.Note, pod.Namespace+"/"+pod.Name) {
				if e.Type != corev1.EventTypeWarning || e.Regarding.Name != rs.Name || e.Regarding.Kind != "RunnerSet" {
					t.Errorf("Event %s: type %s, regarding %s %s, want a Warning on RunnerSet %s", e.Name, e.Type, e.Regarding.Kind, e.Regarding.Name, rs.Name)
				}
				n++
				if e.Series != nil {
					n += int(e.Series.Count) - 1
				}
				note = e.Note
			}
		}
		return n, note
	}

	// The negative control first: a job that ends, deleted by its manager.
	normal := running("runner-interrupted-project-1-concurrent-0-normal")
	must(t, k8s.Delete(ctx, normal, client.GracePeriodSeconds(0)))

	// The node goes under a running job, as a spot reclaim takes it.
	lost := running("runner-interrupted-project-1-concurrent-1-lost")
	must(t, k8s.Delete(ctx, node))
	disrupted(lost, "DeletionByPodGC", "PodGC: node no longer exists")
	eventually(t, "the lost job counted and its Event", func() error {
		if got := counted("DeletionByPodGC"); got != 1 {
			return fmt.Errorf("runnerfleet_jobs_interrupted_total{reason=DeletionByPodGC} = %v, want 1", got)
		}
		if n, _ := eventsNaming(lost); n != 1 {
			return fmt.Errorf("%d JobInterrupted Events name %s, want 1", n, lost.Name)
		}
		return nil
	})
	if _, note := eventsNaming(lost); !strings.Contains(note, "node "+node.Name) || !strings.Contains(note, "DeletionByPodGC") {
		t.Errorf("the Event's note %q does not name the node %s and the reason", note, node.Name)
	}
	// The normal end, seen by the same watch before the lost one, left nothing.
	if n, note := eventsNaming(normal); n != 0 {
		t.Errorf("a job that ended normally got a JobInterrupted Event: %q", note)
	}
	for _, reason := range append(controller.ReasonsInterrupted, controller.ReasonInterruptedOther) {
		if want := map[string]float64{"DeletionByPodGC": 1}[reason]; counted(reason) != want {
			t.Errorf("runnerfleet_jobs_interrupted_total{reason=%s} = %v, want %v", reason, counted(reason), want)
		}
	}

	// Across a restart: a job pod the cluster marked (an eviction) whose
	// deletion a finalizer holds while the controller restarts is counted
	// once, when it goes; the restarted watch lists it, and a restart
	// never counts a pod it merely lists.
	must(t, k8s.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}))
	held := running("runner-interrupted-project-1-concurrent-2-held", "runnerfleet.dev/test-hold")
	disrupted(held, "EvictionByEvictionAPI", "Eviction API: evicting")
	stopManager()
	must(t, startManager())
	// A pod taken after the restart shows that the new watch runs (one
	// taken before it started is not seen: markers until one is).
	markers := 0
	eventually(t, "the restarted watch counts", func() error {
		if counted("DeletionByTaintManager") > 0 {
			return nil
		}
		markers++
		disrupted(running(fmt.Sprintf("runner-interrupted-project-1-concurrent-marker-%d", markers)),
			"DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")
		time.Sleep(time.Second)
		return fmt.Errorf("runnerfleet_jobs_interrupted_total{reason=DeletionByTaintManager} = 0 after %d markers", markers)
	})
	if got := counted("EvictionByEvictionAPI"); got != 0 {
		t.Errorf("the restart counted the held pod already (%v) before it went", got)
	}
	cur := get(t, jobsNS, held.Name, &corev1.Pod{})
	cur.Finalizers = nil
	must(t, k8s.Update(ctx, cur))
	eventually(t, "the held pod counted once it went", func() error {
		if got := counted("EvictionByEvictionAPI"); got != 1 {
			return fmt.Errorf("runnerfleet_jobs_interrupted_total{reason=EvictionByEvictionAPI} = %v, want 1", got)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	if got := counted("EvictionByEvictionAPI"); got != 1 {
		t.Errorf("runnerfleet_jobs_interrupted_total{reason=EvictionByEvictionAPI} = %v after a restart, want 1", got)
	}
	// The recorder sends Events from its own goroutine: the count can be
	// read before the Event reaches the API server.
	eventually(t, "the held pod's JobInterrupted Event", func() error {
		if n, _ := eventsNaming(held); n != 1 {
			return fmt.Errorf("%d JobInterrupted Events name %s, want 1", n, held.Name)
		}
		return nil
	})
	if got := counted("DeletionByPodGC"); got != 1 {
		t.Errorf("the restart changed the count of the lost job: %v, want 1", got)
	}
}
