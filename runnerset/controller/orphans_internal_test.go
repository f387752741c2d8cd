package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

func podMeta(ns, name, component string, terminating bool) metav1.PartialObjectMetadata {
	p := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{resources.LabelRunnerSet: "build", resources.LabelComponent: component}}}
	if terminating {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	return p
}

// A job pod is an orphan only when no manager pod of its RunnerSet is
// left, a terminating one included, and it is not already being deleted;
// a pod that is neither a manager nor a job is never one.
func TestOrphansAreJobPodsWithNoManagerPodLeft(t *testing.T) {
	const team, jobs = "team-a", "team-a-build-j6"
	cases := []struct {
		name string
		pods []metav1.PartialObjectMetadata
		want []string
	}{
		{"a running manager", []metav1.PartialObjectMetadata{
			podMeta(team, "build-managers-1", resources.ComponentManager, false),
			podMeta(jobs, "runner-job-1", resources.ComponentJob, false),
		}, nil},
		{"a terminating manager", []metav1.PartialObjectMetadata{
			podMeta(team, "build-managers-1", resources.ComponentManager, true),
			podMeta(jobs, "runner-job-1", resources.ComponentJob, false),
		}, nil},
		{"no manager", []metav1.PartialObjectMetadata{
			podMeta(jobs, "runner-job-1", resources.ComponentJob, false),
			podMeta(jobs, "runner-job-2", resources.ComponentJob, true),
			podMeta(team, "runner-job-3", resources.ComponentJob, false), // the layout before jobs namespaces
			podMeta(jobs, "someone-elses", "", false),
		}, []string{"team-a-build-j6/runner-job-1", "team-a/runner-job-3"}},
		{"a manager-labelled pod outside the RunnerSet's namespace is no manager", []metav1.PartialObjectMetadata{
			podMeta(jobs, "looks-like-a-manager", resources.ComponentManager, false),
			podMeta(jobs, "runner-job-1", resources.ComponentJob, false),
		}, []string{"team-a-build-j6/runner-job-1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var left leftPods
			for _, p := range tc.pods {
				left.add(p, team)
			}
			if left.total() != len(tc.pods) {
				t.Errorf("total %d, want %d", left.total(), len(tc.pods))
			}
			var got []string
			for _, o := range left.orphans() {
				got = append(got, o.Namespace+"/"+o.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("orphans %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodNamesNameTheFirstFive(t *testing.T) {
	var pods []metav1.PartialObjectMetadata
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		pods = append(pods, podMeta("j", n, resources.ComponentJob, false))
	}
	if got, want := podNames(pods), "j/a, j/b, j/c, j/d, j/e, and 2 more"; got != want {
		t.Errorf("podNames = %q, want %q", got, want)
	}
}
