package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runnerfleet/runnerfleet/provisioning/localcluster"
)

func TestManagerTroubleNamesAnImageTheNodeLacks(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build-manager-1", Labels: map[string]string{"app.kubernetes.io/component": "manager"}},
		Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{
			Name:  "config",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: `failed to pull "registry.example.com/runner:1"`}},
		}}},
	}
	pending := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build-manager-2", Labels: map[string]string{"app.kubernetes.io/component": "manager"}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/1 nodes are available: 1 node(s) were unschedulable",
		}}},
	}
	cl := &localcluster.Cluster{Client: fake.NewClientBuilder().WithScheme(localcluster.Scheme()).WithObjects(pod, pending).Build()}
	got := managerTrouble(cl)
	for _, want := range []string{
		"pod team-a/build-manager-1 container config: ErrImagePull", "registry.example.com/runner:1", localcluster.StandinImage,
		"pod team-a/build-manager-2 is not scheduled: 0/1 nodes are available",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("managerTrouble = %q\nwant it to say %q", got, want)
		}
	}
	if got := managerTrouble(&localcluster.Cluster{Client: fake.NewClientBuilder().WithScheme(localcluster.Scheme()).Build()}); got != "" {
		t.Errorf("no manager pods: %q, want nothing", got)
	}
}
