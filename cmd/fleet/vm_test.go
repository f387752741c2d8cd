package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/testenv"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

func ec2Fleet(t *testing.T) *ec2test.Server {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIATESTTESTTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	return srv
}

func fleetCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestFleetRotateReplacesAWindowsManagerWhoseRunnerHasDrained(t *testing.T) {
	srv := ec2Fleet(t)
	img := srv.AddImage(ec2test.Image{Name: "wsrm-2026-11", CreationDate: time.Now()})
	srv.AddInstance(ec2test.Instance{ImageID: "ami-old", Zone: srv.Region() + "a", State: "running", Tags: map[string]string{
		"Name": "wsrm-blue-1", vmfleet.LabelGroup: vmfleet.WindowsGroup, vmfleet.LabelColor: "blue", vmfleet.LabelGeneration: "1",
		// Its drain agent already finished (a rerun after the agent reported).
		providers.EC2PhaseTag: string(providers.DrainDone), providers.EC2JobsLeftTag: "0",
	}})
	out, err := fleetCmd(t, "rotate", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--windows",
		"--image", img, "--zone", srv.Region()+"a", "--machine-type", "m7i.xlarge", "--poll", "50ms",
		// The fake VM has no runner to ask (vmfleet's tests check --health runner).
		"--health", "running", "--settle", "0s")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"Creating wsrm-green-1", "Asked 1 old blue VMs to drain", "Deleted wsrm-blue-1", "Rotation of windows-shared-runners-manager succeeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestFleetGCIsADryRunUnlessAppliedAndDeletesAfterTheGrace(t *testing.T) {
	srv := ec2Fleet(t)
	srv.SetLatency(0, 0)
	l := vmfleet.Owner{Fleet: "win", Group: "wsrm", Manager: "wsrm-blue-9", Host: vmfleet.HostVM}.Labels()
	l["Name"] = "runner-ab12cd34e-wsrm-blue-9-1700000000-0badcafe"
	id := srv.AddInstance(ec2test.Instance{ImageID: "ami-r", Zone: srv.Region() + "a", State: "stopped", LaunchTime: time.Now().Add(-5 * time.Hour), Tags: l})
	args := []string{"gc", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--source", "vm"}
	out, err := fleetCmd(t, args...)
	if err != nil || !strings.Contains(out, "noted") || !strings.Contains(out, "rerun with --apply") {
		t.Fatalf("%v\n%s", err, out)
	}
	if srv.Calls("TerminateInstances") != 0 || srv.Calls("CreateTags") != 0 {
		t.Fatal("a dry run wrote to the cloud")
	}
	if out, err := fleetCmd(t, append(args, "--apply")...); err != nil || srv.Calls("TerminateInstances") != 0 || srv.Calls("CreateTags") != 1 {
		t.Fatalf("first --apply: %v, want a note and no deletion\n%s", err, out)
	}
	// An hour and more later (the note says so), the stopped orphan goes.
	in, _ := srv.Instance(id)
	_ = in
	tagInstance(t, srv, id, providers.EC2NotePrefix+vmfleet.NoteOrphanedSince, time.Now().Add(-61*time.Minute).UTC().Format(time.RFC3339))
	out, err = fleetCmd(t, append(args, "--apply", "-o", "json")...)
	if err != nil || srv.Calls("TerminateInstances") != 1 {
		t.Fatalf("second --apply: %v\n%s", err, out)
	}
	var plan vmfleet.Plan
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan.Rows) != 1 || !plan.Rows[0].Deleted {
		t.Errorf("-o json: %v\n%s", err, out)
	}
}

func tagInstance(t *testing.T, srv *ec2test.Server, id, k, v string) {
	t.Helper()
	_, err := ec2.NewFromConfig(srv.Config()).CreateTags(context.Background(), &ec2.CreateTagsInput{
		Resources: []string{id}, Tags: []types.Tag{{Key: aws.String(k), Value: aws.String(v)}}})
	if err != nil {
		t.Fatal(err)
	}
}

// Every bad input is refused before anything is deleted, created or
// drained, naming the flag and the fix.
func TestBadInputIsRefusedNamingTheFlagAndNothingIsDeleted(t *testing.T) {
	srv := ec2Fleet(t)
	srv.SetLatency(0, 0)
	l := vmfleet.Owner{Manager: "gone", Host: vmfleet.HostKubernetes}.Labels()
	l["Name"] = "orphan"
	id := srv.AddInstance(ec2test.Instance{ImageID: "ami-r", State: "stopped", LaunchTime: time.Now().Add(-5 * time.Hour), Tags: l})
	tagInstance(t, srv, id, providers.EC2NotePrefix+vmfleet.NoteOrphanedSince, time.Now().Add(-3*time.Hour).UTC().Format(time.RFC3339))
	old := srv.AddInstance(ec2test.Instance{ImageID: "ami-old", State: "running", Tags: map[string]string{
		"Name": "wsrm-blue-1", vmfleet.LabelGroup: "wsrm", vmfleet.LabelColor: "blue", vmfleet.LabelGeneration: "1"}})
	_ = old
	ami := srv.AddImage(ec2test.Image{Name: "wsrm-new", CreationDate: time.Now()})
	unreachable := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A manager's pod says its IdleTime is 2h.
	ec2 := []string{"--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL()}
	rot := append([]string{"rotate"}, ec2...)
	rot = append(rot, "--group", "wsrm", "--zone", srv.Region()+"a", "--machine-type", "m7i.xlarge", "--poll", "10ms")
	for _, tc := range []struct {
		args []string
		says []string
	}{
		{append(append([]string{"gc"}, ec2...), "--apply"), []string{"--source kubernetes", "--source vm", "nothing was deleted"}},
		{append(append([]string{"gc"}, ec2...), "--apply", "--source", "kubernetes", "--kubeconfig", "/nonexistent/kubeconfig"), []string{"--kubeconfig /nonexistent/kubeconfig cannot be read", "give the kubeconfig"}},
		{append(append([]string{"gc"}, ec2...), "--apply", "--source", "kubernetes", "--kubeconfig", unreachable), []string{"fleet gc --apply refused", "kubernetes", "nothing was deleted", "--kubeconfig/--context"}},
		{append(append([]string{"gc"}, ec2...), "--apply", "--source", "kubernetes", "--kubeconfig", unreachable, "--context", "nope"), []string{"--kubeconfig/--context", "context"}},
		{append(append([]string{"gc"}, ec2...), "--apply", "--source", "vms"), []string{`--source "vms" is not kubernetes or vm`}},
		{append(append([]string{"gc"}, ec2...), "--apply", "--source", "vm", "--grace", "0s"), []string{"--grace 0s must be positive"}},
		{append(rot, "--image", "ami-0000000000000dead"), []string{"--image ami-0000000000000dead does not exist", "nothing was created or drained"}},
		{append(rot, "--image", ami, "--drain-timeout", "30m"), []string{"--drain-timeout 30m0s is below the longest job timeout 3h0m0s (--job-timeout)", "use --drain-timeout 3h10m0s"}},
		{append(rot, "--image", ami, "--health", "maybe"), []string{`--health "maybe" is not runner or running`}},
		{append(rot, "--image", ami, "--notify-format", "teams"), []string{`--notify-format: notification format "teams": want slack or json`, "nothing was created or drained"}},
		{append(rot, "--image", ami, "--gitlab-url", "https://gitlab.example.com"), []string{"needs --gitlab-url, --gitlab-token-file and --gitlab-runner-id together", "add --gitlab-token-file, --gitlab-runner-id"}},
		{append(rot, "--image", ami, "--gitlab-url", "https://gitlab.example.com", "--gitlab-runner-id", "7", "--gitlab-token-file", "/nonexistent/token"), []string{"--gitlab-token-file", "no such file"}},
		{append(rot, "--image", ami, "--health", "running", "--gitlab-url", "https://gitlab.example.com", "--gitlab-runner-id", "7", "--gitlab-token-file", "/dev/null"), []string{"use --health runner"}},
		{[]string{"rotate", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--image", "ami-1"}, []string{"--group"}},
		{[]string{"rotate", "--provider", "azure", "--group", "g", "--image", "i", "--zone", "z", "--machine-type", "m"}, []string{`--provider "azure" is not one of gce, ec2`}},
		{[]string{"rotate", "--provider", "gce", "--project", "", "--group", "g", "--image", "i", "--zone", "z", "--machine-type", "m"}, []string{"--project is required"}},
		{[]string{"rotate", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--group", "nope", "--image", ami, "--zone", "z", "--machine-type", "m"}, []string{"group nope does not exist"}},
	} {
		out, err := fleetCmd(t, tc.args...)
		for _, want := range tc.says {
			if err == nil || !strings.Contains(out+err.Error(), want) {
				t.Errorf("fleet %s: %v\n%s\nwant %q", strings.Join(tc.args, " "), err, out, want)
			}
		}
	}
	if n := srv.Calls("TerminateInstances") + srv.Calls("RunInstances") + srv.Calls("CreateTags") - 1; n != 0 {
		t.Errorf("bad input changed the cloud: %d terminations, %d launches, %d tag writes", srv.Calls("TerminateInstances"), srv.Calls("RunInstances"), srv.Calls("CreateTags")-1)
	}
	// Negative control: with a working source the same orphan goes.
	if out, err := fleetCmd(t, append(append([]string{"gc"}, ec2...), "--apply", "--source", "vm", "--source", "kubernetes", "--kubeconfig", goodKubeconfig(t))...); err != nil || srv.Calls("TerminateInstances") != 1 {
		t.Errorf("negative control: %v\n%s", err, out)
	}
}

var (
	kubeOnce sync.Once
	kubeEnv  *testenv.Env
	kubeErr  error
)

// cluster is a real kube-apiserver (envtest), started once.
func cluster(t *testing.T) *testenv.Env {
	t.Helper()
	kubeOnce.Do(func() { kubeEnv, kubeErr = testenv.Start() })
	if kubeErr != nil {
		t.Fatal(kubeErr)
	}
	return kubeEnv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if kubeEnv != nil {
		_ = kubeEnv.Stop()
	}
	os.Exit(code)
}

// goodKubeconfig is a kubeconfig of the test cluster, context "test".
func goodKubeconfig(t *testing.T) string {
	t.Helper()
	cfg := cluster(t).Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// fleet gc learns the cluster's managers from a real kube-apiserver: a
// manager pod's VMs are kept, those of its earlier pod (state lost) and of
// a manager that is gone are orphans, and a pod's IdleTime sets the least
// grace.
func TestFleetGCLearnsKubernetesManagersFromTheCluster(t *testing.T) {
	env := cluster(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "production"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "production-linux-0-5d4c9-x2x7q", Namespace: "production",
			Labels:      map[string]string{vmfleet.PodLabelManager: "production-linux-0"},
			Annotations: map[string]string{vmfleet.AnnotationIdleTime: "30m0s"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "gitlab/gitlab-runner"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	srv := ec2Fleet(t)
	srv.SetLatency(0, 0)
	longAgo := time.Now().Add(-3 * time.Hour).UTC().Format(time.RFC3339)
	vm := func(name, manager, incarnation string) string {
		l := vmfleet.Owner{Fleet: "production", Group: "linux", Manager: manager, Host: vmfleet.HostKubernetes, Incarnation: incarnation}.Labels()
		l["Name"] = name
		id := srv.AddInstance(ec2test.Instance{ImageID: "ami-r", State: "stopped", LaunchTime: time.Now().Add(-5 * time.Hour), Tags: l})
		tagInstance(t, srv, id, providers.EC2NotePrefix+vmfleet.NoteOrphanedSince, longAgo)
		return id
	}
	vm("of-the-pod", "production-linux-0", vmfleet.IncarnationOfPod(pod.Name))
	vm("of-an-earlier-pod", "production-linux-0", "production-linux-0-5d4c9-aaaaa")
	vm("of-a-gone-manager", "production-linux-1", "production-linux-1-5d4c9-bbbbb")
	// Another fleet's idle VM in the same region: its manager is not in
	// this namespace, so without the fleet's selector (vmfleet.FleetSelector,
	// the default with one --namespace, and the gc CronJob's --autoscaled)
	// it would look orphaned.
	other := vmfleet.Owner{Fleet: "staging", Group: "linux", Manager: "staging-linux-0", Host: vmfleet.HostKubernetes, Incarnation: "staging-linux-0-5d4c9-ccccc"}.Labels()
	other["Name"] = "of-another-fleet"
	otherID := srv.AddInstance(ec2test.Instance{ImageID: "ami-r", State: "stopped", LaunchTime: time.Now().Add(-5 * time.Hour), Tags: other})
	tagInstance(t, srv, otherID, providers.EC2NotePrefix+vmfleet.NoteOrphanedSince, longAgo)
	args := []string{"gc", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(),
		"--source", "kubernetes", "--kubeconfig", goodKubeconfig(t), "--context", "test", "--namespace", "production", "--apply"}
	out, err := fleetCmd(t, append(args, "--grace", "10m")...)
	if err == nil || !strings.Contains(out+err.Error(), "--grace 10m0s is below manager production-linux-0's IdleTime 30m0s") || srv.Calls("TerminateInstances") != 0 {
		t.Fatalf("a grace below the IdleTime: %v\n%s", err, out)
	}
	out, err = fleetCmd(t, append(args, "-o", "json", "--event-cronjob", "production-gc")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var events corev1.EventList
	if err := env.Client.List(ctx, &events, client.InNamespace("production")); err != nil || len(events.Items) != 1 ||
		events.Items[0].InvolvedObject.Name != "production-gc" || events.Items[0].Reason != "GarbageCollected" || !strings.Contains(events.Items[0].Message, "2 deleted") {
		t.Errorf("events %+v, %v", events.Items, err)
	}
	var plan vmfleet.Plan
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range plan.Rows {
		got[r.Name] = r.Verdict
		if r.Deleted {
			got[r.Name] = "deleted"
		}
	}
	if got["of-the-pod"] != vmfleet.VerdictOwned || got["of-an-earlier-pod"] != "deleted" || got["of-a-gone-manager"] != "deleted" || got["of-another-fleet"] != "" {
		t.Errorf("verdicts %v\n%s", got, out)
	}
}

// fleet takes AWS credentials the way the AWS CLI does: here from a
// shared config profile, with nothing in the environment.
func TestFleetUsesAnAWSProfile(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config")
	if err := os.WriteFile(cfg, []byte("[profile ci]\nregion = "+srv.Region()+"\naws_access_key_id = AKIAPROFILECI0000000\naws_secret_access_key = profile-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", cfg)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	out, err := fleetCmd(t, "gc", "--provider", "ec2", "--profile", "ci", "--endpoint", srv.URL(), "--source", "vm")
	if err != nil || srv.AccessKeys()["AKIAPROFILECI0000000"] == 0 {
		t.Fatalf("%v, keys %v\n%s", err, srv.AccessKeys(), out)
	}
	// Without the profile there are no credentials at all: a clear refusal.
	out, err = fleetCmd(t, "gc", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--source", "vm")
	if err == nil || !strings.Contains(err.Error(), "no usable credentials") {
		t.Fatalf("without credentials: %v\n%s", err, out)
	}
}
