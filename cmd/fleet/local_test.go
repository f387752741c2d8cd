package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

func TestManagerTroubleNamesAnImageTheNodeLacks(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build-manager-1", Labels: map[string]string{resources.LabelComponent: resources.ComponentManager}},
		Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{
			Name:  "config",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: `failed to pull "registry.example.com/runner:1"`}},
		}}},
	}
	pending := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build-manager-2", Labels: map[string]string{resources.LabelComponent: resources.ComponentManager}},
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

// The local stack names what fleet up provides: the stand-in image it
// imports into the real node and the loopback GitLab it runs.
func TestLocalStackNamesTheRealNodesImageAndTheLoopbackGitLab(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "stacks", "Pulumi.local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Config map[string]any `yaml:"config"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(doc.Config["runnerfleet:fleet"])
	if err != nil {
		t.Fatal(err)
	}
	f, err := stackconfig.Decode(raw, "local")
	if err != nil {
		t.Fatal(err)
	}
	if f.GitLabURL != localGitLabURL() {
		t.Errorf("stacks/Pulumi.local.yaml gitlabURL = %q, want the loopback GitLab fleet up runs, %q", f.GitLabURL, localGitLabURL())
	}
	if f.Defaults.ManagerImage != localcluster.StandinImage {
		t.Errorf("stacks/Pulumi.local.yaml defaults.managerImage = %q, want the image fleet up imports into the real node, %q", f.Defaults.ManagerImage, localcluster.StandinImage)
	}
}

// The local stack's drain names its own parts: the controller process and
// the real node's kubelet when they have exited, with their logs, and
// suggests commands for the state directory the user gave.
func TestLocalDrainNamesTheControllerProcessTheKubeletAndTheCommands(t *testing.T) {
	dir := t.TempDir()
	s, err := newLocalStack(common{stack: stackLocal, stateDir: dir}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := &localcluster.Cluster{Dir: dir, Client: fake.NewClientBuilder().WithScheme(localcluster.Scheme()).Build()}
	d := s.drainer(cl, downOptions{timeout: time.Minute, stall: time.Minute})
	ctx := context.Background()
	if got := d.controllerDown(ctx); !strings.Contains(got, "runnerset-controller process has exited") || !strings.Contains(got, localcluster.LogFile(dir, localcluster.Controller)) {
		t.Errorf("controllerDown = %q", got)
	}
	if got := strings.Join(d.notes(ctx), "\n"); !strings.Contains(got, "kubelet has exited") || !strings.Contains(got, localcluster.NodeName) || !strings.Contains(got, "--force") {
		t.Errorf("notes = %q", got)
	}
	for _, c := range []string{d.again, d.force} {
		if !strings.Contains(c, "down --stack local --state-dir "+dir) {
			t.Errorf("command %q does not name the state directory", c)
		}
	}
	if !strings.HasSuffix(d.force, " --force") {
		t.Errorf("force command %q", d.force)
	}
}

// fleet status's job table names, for each job, the RunnerSet that ran it
// (its runner's description), that RunnerSet's region (the stack's when
// it names none) and how long the job waited.
func TestTheJobTableNamesTheRunnerSetAndRegionOfEachJob(t *testing.T) {
	queued := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	rows := []runnerSetRow{
		{Namespace: "team-a", Name: "build"},
		{Namespace: "team-a", Name: "build-overflow", Region: "local-b"},
	}
	jobs := []gitlabserver.ControlJob{
		{ID: 1, Tags: []string{"team-a"}, Duration: "30s", State: gitlabserver.JobSuccess, SystemID: "s_build-0", Runner: "team-a/build", QueuedAt: queued, PickedAt: queued.Add(2 * time.Second)},
		{ID: 2, Tags: []string{"team-a"}, Duration: "30s", State: gitlabserver.JobRunning, SystemID: "s_build-overflow-0", Runner: "team-a/build-overflow", QueuedAt: queued, PickedAt: queued.Add(41 * time.Second)},
		{ID: 3, Tags: []string{"team-a"}, Duration: "30s", State: gitlabserver.JobPending, QueuedAt: queued},
	}
	var b strings.Builder
	printJobTable(&b, jobs, runnerSetRegions(rows, stackLocal), queued.Add(time.Minute))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := [][]string{
		{"JOB", "TAGS", "DURATION", "STATE", "WAITED", "RUNNER", "SET", "REGION", "MANAGER"},
		{"1", "team-a", "30s", "success", "2s", "team-a/build", "local", "build-0"},
		{"2", "team-a", "30s", "running", "41s", "team-a/build-overflow", "local-b", "build-overflow-0"},
		{"3", "team-a", "30s", "pending", "1m0s", "-", "-", "-"},
	}
	if len(lines) != len(want) {
		t.Fatalf("job table:\n%s", b.String())
	}
	for i, l := range lines {
		if got := strings.Fields(l); !slices.Equal(got, want[i]) {
			t.Errorf("line %d: %q, want %q", i, got, want[i])
		}
	}
}
