//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/localstack/chartrepo"
	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// The shared fleet of the test's local stack: one docker+machine group of
// one manager, its jobs tagged sharedTag.
const (
	sharedFleetName = "local-shared"
	sharedManager   = "local-shared-linux-0"
	sharedTag       = "shared-local"
	sharedToken     = "glrt-sharedLocalLinuxNotReal-5e6f7a"
)

// EnvSharedLongJob overrides the long job's 100 s, for a run by hand with
// a job as long as a real one: RUNNERFLEET_E2E_SHARED_JOB=30m.
const EnvSharedLongJob = "RUNNERFLEET_E2E_SHARED_JOB"

func sharedLongJob(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv(EnvSharedLongJob)
	if v == "" {
		return 100 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		t.Fatalf("%s=%q: a duration of at least 1m, such as 30m", EnvSharedLongJob, v)
	}
	return d
}

// sharedFleetStackFile writes stacks/Pulumi.local.yaml with a shared fleet
// of one docker+machine group whose chart comes from repo, its idle time
// idle (a change of it is a new generation of the manager).
func sharedFleetStackFile(t *testing.T, root, path, repo, idle string) {
	t.Helper()
	localStackFile(t, root, path, func(config, f map[string]any) {
		f["local"] = map[string]any{"chartRepository": repo}
		f["sharedFleets"] = []any{map[string]any{
			"name":         sharedFleetName,
			"managerImage": localcluster.StandinImage,
			"vmNetwork":    map[string]any{"cidr": "10.30.0.0/20"},
			"groups": []any{map[string]any{
				"name": "linux", "tokenConfigKey": "sharedLocalLinuxToken", "zone": "us-east1-b",
				"machineType": "n2d-standard-2", "image": "runner-vm", "maxVMs": 2, "idleCount": 0, "idleTime": idle,
			}},
		}}
		config["runnerfleet:sharedLocalLinuxToken"] = sharedToken
	})
}

// localStackFile writes to path the checkout's stacks/Pulumi.local.yaml as
// edit changes it: edit gets the file's config and its runnerfleet:fleet.
func localStackFile(t *testing.T, root, path string, edit func(config, fleet map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "stacks", "Pulumi.local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]map[string]any
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	edit(file["config"], file["config"]["runnerfleet:fleet"].(map[string]any))
	out, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// localStack runs fleet on a local stack of the test's own, from the stack
// file stack, in state (stateDir): the returned func runs a fleet command
// on it, and fleet down runs when the test ends.
func localStack(t *testing.T, root, bin, state, stack string) func(timeout time.Duration, args ...string) string {
	t.Helper()
	t.Cleanup(func() {
		out, err := exec.Command(filepath.Join(bin, "fleet"), "down", "--stack", "local", "--state-dir", state, "--config", stack).CombinedOutput()
		t.Logf("cleanup: fleet down: %v\n%s", err, out)
	})
	return func(timeout time.Duration, args ...string) string {
		t.Helper()
		return run(t, root, timeout, filepath.Join(bin, "fleet"), append(args, "--stack", "local", "--state-dir", state, "--config", stack)...)
	}
}

// A change of a running shared fleet while a long job runs, on the real
// node: pulumi up (fleet up, the same path as every local stack) returns
// while the old generation's manager drains its job, the new generation
// takes new jobs at once on a state volume of its own, the long job
// succeeds, and the old release, its pod and its claim (and volume) are
// gone after the drain (docs/concepts/shared-fleet.md, Generations).
func TestSharedFleetChangeWhileAJobRuns(t *testing.T) {
	onRealNode(t)
	root := repoRoot(t)
	bin := buildBinaries(t, root)
	ctx := context.Background()
	longJob := sharedLongJob(t)

	// The loopback chart repository the program's releases take the
	// stand-in chart from.
	chart, err := chartrepo.StandinChart()
	if err != nil {
		t.Fatal(err)
	}
	h, err := chartrepo.Handler(chart)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	repo := "http://" + ln.Addr().String()

	state := stateDir(t)
	stack := filepath.Join(t.TempDir(), "Pulumi.local.yaml")
	sharedFleetStackFile(t, root, stack, repo, "10m")
	fleet := localStack(t, root, bin, state, stack)
	start := time.Now()
	fleet(8*time.Minute, "up", "--timeout", "4m")
	t.Logf("fleet up with the shared fleet took %s", time.Since(start).Round(time.Millisecond))

	c := clientFor(t, filepath.Join(state, "kubeconfig"))
	b, err := os.ReadFile(filepath.Join(state, "gitlab-control"))
	if err != nil {
		t.Fatal(err)
	}
	control := gitlabserver.Control{URL: strings.TrimSpace(string(b))}
	if err := control.AddRunner(ctx, sharedToken, []string{sharedTag}); err != nil {
		t.Fatal(err)
	}
	ns := sharedFleetName

	managerPod := func(release string) (*corev1.Pod, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{shared.LabelRelease: sharedManager}); err != nil {
			return nil, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if release == "" || p.Labels[shared.LabelChartApp] == release {
				return p, nil
			}
		}
		return nil, fmt.Errorf("no pod of release %q among %d manager pods", release, len(pods.Items))
	}
	ready := func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.ContainersReady && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}
	var old *corev1.Pod
	waitFor(t, 3*time.Minute, "the shared fleet's manager Running on the real node", func() error {
		p, err := managerPod("")
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || !ready(p) || p.Spec.NodeName != localcluster.NodeName {
			return fmt.Errorf("pod %s is %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
		}
		old = p
		return nil
	})
	oldRelease := old.Labels[shared.LabelChartApp]
	var oldClaim string
	for _, v := range old.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			oldClaim = v.PersistentVolumeClaim.ClaimName
		}
	}
	oldPVC := &corev1.PersistentVolumeClaim{}
	waitFor(t, time.Minute, "the old generation's state claim Bound", func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: oldClaim}, oldPVC); err != nil {
			return err
		}
		if oldPVC.Status.Phase != corev1.ClaimBound {
			return fmt.Errorf("claim %s is %s", oldClaim, oldPVC.Status.Phase)
		}
		return nil
	})
	t.Logf("manager %s (release %s) runs on %s with its state on claim %s (volume %s)", old.Name, oldRelease, old.Spec.NodeName, oldClaim, oldPVC.Spec.VolumeName)

	jobOf := func(id int64) (gitlabserver.ControlJob, error) {
		jobs, err := control.Jobs(ctx)
		if err != nil {
			return gitlabserver.ControlJob{}, err
		}
		for _, j := range jobs {
			if j.ID == id {
				return j, nil
			}
		}
		return gitlabserver.ControlJob{}, fmt.Errorf("no job %d", id)
	}
	newestJob := func() (int64, error) {
		jobs, err := control.Jobs(ctx)
		if err != nil {
			return 0, err
		}
		var id int64
		for _, j := range jobs {
			id = max(id, j.ID)
		}
		return id, nil
	}
	if err := control.QueueJobs(ctx, []string{sharedTag}, longJob, 1); err != nil {
		t.Fatal(err)
	}
	long, err := newestJob()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the old manager takes the long job", func() error {
		j, err := jobOf(long)
		if err != nil {
			return err
		}
		if j.State != gitlabserver.JobRunning || j.SystemID != "s_"+old.Name {
			return fmt.Errorf("job %d is %s by %q", long, j.State, j.SystemID)
		}
		return nil
	})
	jobStart := time.Now()

	// The change: a new generation of the manager.
	sharedFleetStackFile(t, root, stack, repo, "11m")
	start = time.Now()
	fleet(8*time.Minute, "up", "--timeout", "4m")
	upTook := time.Since(start)
	j, err := jobOf(long)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet up (pulumi up of the change) took %s with job %d running for %s of its %s", upTook.Round(time.Millisecond), long, time.Since(jobStart).Round(time.Second), longJob)
	if j.State != gitlabserver.JobRunning {
		t.Fatalf("after pulumi up of the change, job %d is %s; want it still running on the draining manager (pulumi up waited for the drain?)", long, j.State)
	}
	p := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), p); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("the old generation's pod %s: %v, deleting since %v; want it draining", old.Name, err, p.DeletionTimestamp)
	}
	status := fleet(time.Minute, "status")
	if !regexp.MustCompile(`(?m)^\S+\s+` + sharedManager + `\s+` + oldRelease + `\s+` + old.Name + `\s+draining\s`).MatchString(status) {
		t.Errorf("fleet status does not show %s of release %s draining:\n%s", old.Name, oldRelease, status)
	}

	// The new generation takes a new job at once, on a volume of its own.
	var next *corev1.Pod
	waitFor(t, 2*time.Minute, "the new generation's manager Running", func() error {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{shared.LabelRelease: sharedManager}); err != nil {
			return err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Labels[shared.LabelChartApp] != oldRelease && p.Status.Phase == corev1.PodRunning && ready(p) {
				next = p
				return nil
			}
		}
		return fmt.Errorf("%d manager pods, none of a new release Running", len(pods.Items))
	})
	var newClaim string
	for _, v := range next.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			newClaim = v.PersistentVolumeClaim.ClaimName
		}
	}
	newPVC := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: newClaim}, newPVC); err != nil {
		t.Fatal(err)
	}
	if newClaim == oldClaim || newPVC.Spec.VolumeName == "" || newPVC.Spec.VolumeName == oldPVC.Spec.VolumeName {
		t.Errorf("the new generation's claim %s (volume %s) is not a volume of its own beside %s (volume %s)", newClaim, newPVC.Spec.VolumeName, oldClaim, oldPVC.Spec.VolumeName)
	}
	if err := control.QueueJobs(ctx, []string{sharedTag}, 5*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	short, err := newestJob()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the new generation takes a new job", func() error {
		j, err := jobOf(short)
		if err != nil {
			return err
		}
		if j.State == gitlabserver.JobPending || j.SystemID != "s_"+next.Name {
			return fmt.Errorf("job %d is %s by %q; want it taken by %s", short, j.State, j.SystemID, next.Name)
		}
		return nil
	})
	t.Logf("the new generation %s (claim %s, volume %s) took job %d while %s drained", next.Name, newClaim, newPVC.Spec.VolumeName, short, old.Name)

	// The long job succeeds; then the old pod, its claim and its volume go.
	waitFor(t, longJob+time.Minute, "the long job succeeded", func() error {
		j, err := jobOf(long)
		if err != nil {
			return err
		}
		if j.State != gitlabserver.JobSuccess {
			return fmt.Errorf("job %d is %s", long, j.State)
		}
		return nil
	})
	drained := time.Now()
	t.Logf("job %d succeeded after %s", long, drained.Sub(jobStart).Round(time.Second))
	waitFor(t, 2*time.Minute, "the old generation's pod, claim and volume gone", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(old), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s: %v", old.Name, err)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: oldClaim}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("claim %s: %v", oldClaim, err)
		}
		if err := c.Get(ctx, client.ObjectKey{Name: oldPVC.Spec.VolumeName}, &corev1.PersistentVolume{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("volume %s: %v", oldPVC.Spec.VolumeName, err)
		}
		return nil
	})
	t.Logf("the old generation's pod, claim and volume were gone %s after its job ended", time.Since(drained).Round(time.Second))
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": oldRelease}); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("the old release %s is still installed: %d release Secrets", oldRelease, len(secrets.Items))
	}
	if j, err := jobOf(short); err != nil || j.State != gitlabserver.JobSuccess {
		t.Errorf("the new generation's job: %+v, %v; want success", j, err)
	}
}
