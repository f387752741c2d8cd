//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// The overflow test's stack: team-a's primary "build" and its overflow
// "build-overflow" (standing for region local-b) share the tag team-a;
// team-b's "build" has the same capacity and no overflow: the negative
// control, its burst queued at the same moment.
const (
	overflowNS        = "team-a"
	overflowPrimary   = "build"
	overflowName      = "build-overflow"
	overflowRegion    = "local-b"
	overflowControlNS = "team-b"
	overflowThreshold = 15 * time.Second
	overflowBurst     = 10
	overflowJob       = 20 * time.Second
)

// overflowStackFile writes stacks/Pulumi.local.yaml with the test's three
// teams: each manager runs two jobs at once.
func overflowStackFile(t *testing.T, root, path string) {
	t.Helper()
	localStackFile(t, root, path, func(config, f map[string]any) {
		managers := func(extra map[string]any) map[string]any {
			m := map[string]any{"concurrent": 2, "shutdownTimeout": "1m", "checkInterval": "1s",
				"resources": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}}}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
		f["teams"] = []any{
			map[string]any{"namespace": overflowNS, "name": overflowPrimary, "tags": []any{overflowNS}, "tokenConfigKey": "teamABuildToken",
				"managers": managers(map[string]any{"replicas": 1})},
			map[string]any{"namespace": overflowNS, "name": overflowName, "tags": []any{overflowNS}, "tokenConfigKey": "teamAOverflowToken",
				"region": overflowRegion,
				"managers": managers(map[string]any{"autoscale": map[string]any{
					"minReplicas": 0, "maxReplicas": 2, "targetRunningJobs": 1, "pollingInterval": "5s", "scaleDownDelay": "30s"}}),
				"overflow": map[string]any{"primary": overflowPrimary, "queueTime": map[string]any{"threshold": overflowThreshold.String(), "window": "1m"}}},
			map[string]any{"namespace": overflowControlNS, "name": "build", "tags": []any{overflowControlNS}, "tokenConfigKey": "teamBBuildToken",
				"managers": managers(map[string]any{"replicas": 1})},
		}
		config["runnerfleet:teamAOverflowToken"] = "glrt-teamAOverflowNotReal-1a2b3c"
		config["runnerfleet:teamBBuildToken"] = "glrt-teamBBuildNotReal-4d5e6f"
	})
}

// promFirstAbove evaluates a PromQL query every second from start to end
// (query_range) and returns the first time its value was above threshold
// (zero when never) and its highest value.
func promFirstAbove(ctx context.Context, addr, q string, start, end time.Time, threshold float64) (time.Time, float64, error) {
	v := url.Values{"query": {q}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix()+1, 10)}, "step": {"1"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/api/v1/query_range?"+v.Encode(), nil)
	if err != nil {
		return time.Time{}, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return time.Time{}, 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Values [][2]any `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return time.Time{}, 0, err
	}
	if out.Status != "success" {
		return time.Time{}, 0, fmt.Errorf("query_range %s: %s", q, out.Error)
	}
	var first time.Time
	peak := 0.0
	for _, r := range out.Data.Result {
		for _, pt := range r.Values {
			ts, _ := pt[0].(float64)
			s, _ := pt[1].(string)
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				continue
			}
			peak = max(peak, f)
			if f > threshold && (first.IsZero() || time.Unix(int64(ts), 0).Before(first)) {
				first = time.Unix(int64(ts), 0)
			}
		}
	}
	return first, peak, nil
}

// p90 is the 90th percentile of ds (nearest rank).
func p90(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)*9+9)/10-1]
}

// The overflow loop on the local stack, on the real node, with KEDA itself
// (operator and metrics adapter) reconciling the ScaledObject the
// controller writes: a burst larger than the primary's capacity makes its
// queue time pass the threshold, the overflow's managers start from zero
// (KEDA's activation), take jobs, scale to their maximum on their running
// jobs (the HPA, through KEDA's external metrics), and go back to zero after
// the burst; every job succeeds. team-b, with the same capacity and burst
// and no overflow, is the negative control: its queue time keeps growing.
func TestAnOverflowTakesOffWhenJobsWaitAndLandsAfter(t *testing.T) {
	root := repoRoot(t)
	onRealNodeWithKEDA(t, root)
	bin := buildBinaries(t, root)
	ctx := context.Background()
	state := stateDir(t)
	stack := filepath.Join(t.TempDir(), "Pulumi.local.yaml")
	overflowStackFile(t, root, stack)
	fleet := localStack(t, root, bin, state, stack)
	start := time.Now()
	fleet(8*time.Minute, "up", "--timeout", "4m")
	t.Logf("fleet up took %s", time.Since(start).Round(time.Millisecond))

	c := clientFor(t, filepath.Join(state, "kubeconfig"))
	cl, err := localcluster.Open(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	prom, err := cl.PrometheusAddress()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(state, "gitlab-control"))
	if err != nil {
		t.Fatal(err)
	}
	control := gitlabserver.Control{URL: strings.TrimSpace(string(b))}

	// The ScaledObject the controller wrote, reconciled by KEDA: Ready, and
	// the query KEDA runs for the primary's queue time.
	var query string
	waitFor(t, 2*time.Minute, "KEDA reports the overflow's ScaledObject Ready", func() error {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(resources.ScaledObjectGVK.GroupVersion().WithKind("ScaledObjectList"))
		if err := c.List(ctx, list, client.InNamespace(overflowNS)); err != nil {
			return err
		}
		for _, so := range list.Items {
			target, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
			if target != naming.For(overflowNS, overflowName).Managers() {
				continue
			}
			triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
			for _, tr := range triggers {
				if q, _, _ := unstructured.NestedString(tr.(map[string]any), "metadata", "query"); strings.Contains(q, "queue_duration") {
					query = q
				}
			}
			conds, _, _ := unstructured.NestedSlice(so.Object, "status", "conditions")
			for _, cd := range conds {
				m := cd.(map[string]any)
				if m["type"] == "Ready" && m["status"] == "True" {
					return nil
				}
			}
			return fmt.Errorf("ScaledObject %s: conditions %v", so.GetName(), conds)
		}
		return fmt.Errorf("no ScaledObject for %s among %d", naming.For(overflowNS, overflowName).Managers(), len(list.Items))
	})
	if query == "" {
		t.Fatal("the overflow's ScaledObject has no trigger on the primary's queue time")
	}
	t.Logf("KEDA's query of the primary's queue time: %s", query)
	overflowReplicas := func() (int32, error) {
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: overflowNS, Name: naming.For(overflowNS, overflowName).Managers()}, d); err != nil {
			return 0, err
		}
		if d.Spec.Replicas == nil {
			return 1, nil
		}
		return *d.Spec.Replicas, nil
	}
	if n, err := overflowReplicas(); err != nil || n != 0 {
		t.Fatalf("the overflow's managers before the burst: %d (%v), want 0", n, err)
	}

	// The bursts, queued as a user would: fleet up --demo-jobs queues them
	// once per tag set (the overflow shares its primary's), each tag's
	// primary runs 2 jobs at once.
	fleet(8*time.Minute, "up", "--timeout", "4m", "--demo-jobs", strconv.Itoa(overflowBurst), "--demo-duration", overflowJob.String())
	queued, err := control.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) != 2*overflowBurst {
		t.Fatalf("fleet up --demo-jobs %d queued %d jobs, want %d: one burst per tag set", overflowBurst, len(queued), 2*overflowBurst)
	}
	burstAt := queued[0].QueuedAt
	var firstOverflowJob, primaryDone, allDone, zeroAgain time.Time
	var maxReplicas int32
	// takenBusy: each overflow manager KEDA's scale-down took (its pod
	// terminating) while it ran jobs, and those jobs: the preStop drain
	// must let them finish.
	takenBusy := map[string][]int64{}
	managersPrefix := naming.For(overflowNS, overflowName).Managers() + "-"
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		now := time.Now()
		n, err := overflowReplicas()
		if err != nil {
			t.Fatal(err)
		}
		if maxReplicas > 0 && n == 0 && zeroAgain.IsZero() {
			zeroAgain = now
			t.Logf("%s after the burst: the overflow's managers are back at 0", now.Sub(burstAt).Round(time.Second))
		}
		maxReplicas = max(maxReplicas, n)
		jobs, err := control.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done, primaryLeft := 0, 0
		for _, j := range jobs {
			if firstOverflowJob.IsZero() && j.Runner == overflowNS+"/"+overflowName && !j.PickedAt.IsZero() {
				firstOverflowJob = j.PickedAt
				t.Logf("%s after the burst: the overflow took its first job (%d)", j.PickedAt.Sub(burstAt).Round(time.Second), j.ID)
			}
			switch {
			case j.State == gitlabserver.JobSuccess || j.State == gitlabserver.JobFailed:
				done++
			case j.Tags[0] == overflowNS:
				primaryLeft++
			}
		}
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(overflowNS)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if _, seen := takenBusy[p.Name]; seen || p.DeletionTimestamp == nil || !strings.HasPrefix(p.Name, managersPrefix) {
				continue
			}
			var running []int64
			for _, j := range jobs {
				if j.SystemID == "s_"+p.Name && j.State == gitlabserver.JobRunning {
					running = append(running, j.ID)
				}
			}
			if len(running) > 0 {
				takenBusy[p.Name] = running
				t.Logf("%s after the burst: the scale-down took manager %s while it ran jobs %v", now.Sub(burstAt).Round(time.Second), p.Name, running)
			}
		}
		if primaryDone.IsZero() && primaryLeft == 0 {
			primaryDone = now
			t.Logf("%s after the burst: team-a's burst ended", now.Sub(burstAt).Round(time.Second))
		}
		if allDone.IsZero() && done == len(jobs) {
			allDone = now
			t.Logf("%s after the burst: all %d jobs ended", now.Sub(burstAt).Round(time.Second), len(jobs))
		}
		if !allDone.IsZero() && !zeroAgain.IsZero() {
			break
		}
		time.Sleep(time.Second)
	}

	// When the query KEDA runs first passed the threshold, as Prometheus
	// evaluates it every second over the burst.
	crossed, peak, err := promFirstAbove(ctx, prom, query, burstAt, time.Now(), overflowThreshold.Seconds())
	if err != nil {
		t.Fatal(err)
	}
	if !crossed.IsZero() {
		t.Logf("%s after the burst: the primary's queue time p90 passed the threshold %s (its peak: %.1fs)", crossed.Sub(burstAt).Round(time.Second), overflowThreshold, peak)
	}
	jobs, err := control.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waits := map[string][]time.Duration{}
	ran := map[string]int{}
	for _, j := range jobs {
		if j.State != gitlabserver.JobSuccess {
			t.Errorf("job %d (%v, runner %q) is %s, want success: a job was lost", j.ID, j.Tags, j.Runner, j.State)
		}
		waits[j.Tags[0]] = append(waits[j.Tags[0]], j.Waited(time.Now()))
		ran[j.Runner]++
	}
	t.Logf("jobs by runner: %v", ran)
	byID := map[int64]gitlabserver.ControlJob{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	for pod, ids := range takenBusy {
		for _, id := range ids {
			if j := byID[id]; j.State != gitlabserver.JobSuccess {
				t.Errorf("job %d ran on %s when the scale-down took it, and is %s: the drain did not let it finish", id, pod, j.State)
			}
		}
	}
	t.Logf("busy managers the scale-down took: %d (their jobs all succeeded unless an error says otherwise)", len(takenBusy))
	withOverflow, without := p90(waits[overflowNS]), p90(waits[overflowControlNS])
	t.Logf("queue time p90 of the burst: %s with the overflow, %s without (team-b, the same burst and capacity)", withOverflow, without)
	switch {
	case crossed.IsZero():
		t.Errorf("the primary's queue time never passed %s", overflowThreshold)
	case firstOverflowJob.IsZero():
		t.Errorf("the overflow took no job")
	default:
		t.Logf("from the threshold crossed to the overflow's first job: %s", firstOverflowJob.Sub(crossed).Round(time.Second))
	}
	if maxReplicas < 2 {
		t.Errorf("the overflow's managers reached %d, want 2 (its maximum, from its running jobs through the HPA)", maxReplicas)
	}
	if zeroAgain.IsZero() {
		t.Errorf("the overflow's managers did not go back to 0 after the burst")
	} else {
		t.Logf("the overflow's managers were back at 0 %s after the burst began, %s after team-a's last job ended (negative: before it, once the queue was short)",
			zeroAgain.Sub(burstAt).Round(time.Second), zeroAgain.Sub(primaryDone).Round(time.Second))
	}
	// The negative control: without the overflow the queue keeps growing,
	// each pair of jobs waits a job's length longer than the one before.
	if lastWait := slices.Max(waits[overflowControlNS]); lastWait < time.Duration(overflowBurst/2-1)*overflowJob*9/10 {
		t.Errorf("team-b's last job waited %s; without an overflow it waits about %s (4 rounds of 2 jobs): the control did not queue", lastWait, time.Duration(overflowBurst/2-1)*overflowJob)
	}
	if withOverflow >= without {
		t.Errorf("queue time p90 %s with the overflow, %s without: the overflow did not shorten the queue", withOverflow, without)
	}

	// fleet status names the region and runner set of each job, and shows
	// KEDA running (a stack whose teams autoscale runs it).
	status := fleet(time.Minute, "status")
	for _, p := range []string{localcluster.KEDAOperator, localcluster.KEDAMetricsAPIServer} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(p) + `\s+running\s+\d+`).MatchString(status) {
			t.Errorf("fleet status does not show %s running:\n%s", p, status)
		}
	}
	if !regexp.MustCompile(`(?m)^\d+\s+` + overflowNS + `\s+\S+\s+success\s+\S+\s+` + overflowNS + "/" + overflowName + `\s+` + overflowRegion + `\s`).MatchString(status) {
		t.Errorf("fleet status does not show a job of %s/%s in region %s:\n%s", overflowNS, overflowName, overflowRegion, status)
	}

	// Bad input with KEDA itself: an overflow whose primary's Prometheus
	// cannot be reached is named on the RunnerSet's Autoscaling condition,
	// and its managers stay as they are (none).
	rs := &v1alpha1.RunnerSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: overflowNS, Name: overflowName}, rs); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(rs.DeepCopy())
	rs.Spec.Overflow.Prometheus = &v1alpha1.PrometheusEndpoint{Address: "http://127.0.0.1:9"}
	if err := c.Patch(ctx, rs, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "the overflow's Autoscaling condition names the Prometheus KEDA cannot reach", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(rs), rs); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionAutoscaling)
		if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "spec.overflow.prometheus") {
			return fmt.Errorf("condition %s: %+v", v1alpha1.ConditionAutoscaling, cond)
		}
		t.Logf("%s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
		return nil
	})
	if n, err := overflowReplicas(); err != nil || n != 0 {
		t.Errorf("the overflow's managers with an unreachable Prometheus: %d (%v), want them left at 0", n, err)
	}
}
