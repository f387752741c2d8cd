package controller_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Issue 31, item 2: a job whose pod a spot reclaim took away is retried
// through GitLab's API, once GitLab reports it failed with
// runner_system_failure, by a RunnerSet that opts in
// (spec.jobs.retryOnInterruption). The loopback GitLab
// (localstack/gitlabserver) answers the real client-go; the test plays
// gitlab-runner through GitLab's runner API (take a job, report its end)
// and what the cluster does to a reclaimed node's pod (PodGC's
// DisruptionTarget, then the delete), as interruptions_test.go does.

// retryProject is the GitLab project of the jobs of these tests.
const retryProject = 42

// retryFixture is a RunnerSet that retries interrupted jobs, its GitLab
// and the node its job pods run on.
type retryFixture struct {
	srv    *gitlabserver.Server
	pat    string
	runner gitlabserver.Runner
	rs     *v1alpha1.RunnerSet
	jobsNS string
	node   *corev1.Node
	seq    int
}

// newRetryFixture makes a RunnerSet whose retryOnInterruption allows
// maxRetries, with an api-scoped token of a member of retryProject (or the
// scopes given).
func newRetryFixture(t *testing.T, maxRetries int32, scopes ...string) *retryFixture {
	t.Helper()
	if len(scopes) == 0 {
		scopes = []string{gitlabserver.ScopeAPI}
	}
	f := &retryFixture{srv: gitlabserver.New(), pat: "glpat-retry-" + rand.String(12)}
	t.Cleanup(f.srv.Close)
	f.srv.AddUser(f.pat, gitlabserver.User{Scopes: scopes, Projects: []int64{retryProject}})
	ns := newNamespace(t)
	class := newClass(t, nil)
	name := "retrying"
	newSecret(t, ns, name+"-token", token)
	newSecret(t, ns, "retry-api", f.pat)
	rs := runnerSet(ns, name, class.Name)
	rs.Spec.GitLab.URL = f.srv.URL()
	rs.Spec.Jobs.RetryOnInterruption = &v1alpha1.RetryOnInterruption{MaxRetries: maxRetries, APITokenSecretRef: &v1alpha1.SecretKeyRef{Name: "retry-api"}}
	must(t, k8s.Create(ctx, rs))
	f.rs = waitReady(t, rs)
	f.runner = f.srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: rs.Spec.Tags})
	f.jobsNS = naming.For(ns, name).JobsNamespace()
	f.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "reclaimed-" + ns}}
	must(t, k8s.Create(ctx, f.node))
	return f
}

// take is gitlab-runner asking for a job (POST /jobs/request); it returns
// the job's ID and token.
func (f *retryFixture) take(t *testing.T) (int64, string) {
	t.Helper()
	var got struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	status := f.runnerAPI(t, http.MethodPost, "/api/v4/jobs/request", map[string]any{"token": f.runner.Token}, &got)
	if status != http.StatusCreated {
		t.Fatalf("POST /jobs/request: %d, want a job (201)", status)
	}
	return got.ID, got.Token
}

// end is gitlab-runner reporting a job's end (PUT /jobs/:id).
func (f *retryFixture) end(t *testing.T, id int64, jobToken, state, reason string) {
	t.Helper()
	if status := f.runnerAPI(t, http.MethodPut, "/api/v4/jobs/"+strconv.FormatInt(id, 10),
		map[string]any{"token": jobToken, "state": state, "failure_reason": reason}, nil); status != http.StatusOK {
		t.Fatalf("PUT /jobs/%d %s: %d", id, state, status)
	}
}

func (f *retryFixture) runnerAPI(t *testing.T, method, path string, in, out any) int {
	t.Helper()
	b, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, method, f.srv.URL()+path, bytes.NewReader(b))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	if out != nil && resp.StatusCode/100 == 2 {
		must(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

// pod starts the job pod of job id on the fixture's node, with the keys
// gitlab-runner's kubernetes executor puts on it.
func (f *retryFixture) pod(t *testing.T, id int64) *corev1.Pod {
	t.Helper()
	f.seq++
	pod := orphanPod(f.rs, f.jobsNS, fmt.Sprintf("runner-retrying-project-%d-concurrent-%d", retryProject, f.seq), resources.ComponentJob)
	pod.Labels[naming.LabelGitLabProjectID] = strconv.Itoa(retryProject)
	pod.Annotations = map[string]string{naming.LabelGitLabJobID: strconv.FormatInt(id, 10), naming.LabelGitLabProjectID: strconv.Itoa(retryProject)}
	pod.Spec.NodeName = f.node.Name
	must(t, k8s.Create(ctx, pod))
	pod.Status.Phase = corev1.PodRunning
	must(t, k8s.Status().Update(ctx, pod))
	return pod
}

// reclaim does to pod what PodGC does to a pod whose node is gone.
func (f *retryFixture) reclaim(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists", LastTransitionTime: metav1.Now(),
	})
	must(t, k8s.Status().Update(ctx, pod))
	must(t, k8s.Delete(ctx, pod, client.GracePeriodSeconds(0)))
}

// retries is how many retries GitLab was asked for.
func (f *retryFixture) retries() int {
	return f.srv.Calls(http.MethodPost, fmt.Sprintf("/api/v4/projects/%d/jobs/*/retry", retryProject))
}

// job is GitLab's record of job id.
func (f *retryFixture) job(t *testing.T, id int64) gitlabserver.Job {
	t.Helper()
	for _, j := range f.srv.Jobs() {
		if j.ID == id {
			return j
		}
	}
	t.Fatalf("GitLab has no job %d", id)
	return gitlabserver.Job{}
}

// record waits for the RunnerSet's record of job id in state.
func (f *retryFixture) record(t *testing.T, id int64, state string) v1alpha1.JobRetry {
	t.Helper()
	var out v1alpha1.JobRetry
	eventually(t, fmt.Sprintf("job %d recorded %s", id, state), func() error {
		cur := &v1alpha1.RunnerSet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(f.rs), cur); err != nil {
			return err
		}
		for _, r := range cur.Status.JobRetries {
			if r.JobID == id && r.ProjectID == retryProject {
				if out = r; r.State == state {
					return nil
				}
				return fmt.Errorf("recorded %+v", r)
			}
		}
		return fmt.Errorf("no record among %+v", cur.Status.JobRetries)
	})
	return out
}

// events are the notes of the RunnerSet's Events of reason, once there
// is at least one: the recorder sends Events from its own goroutine, so
// one can reach the API server after the status write the caller waited
// for (a CI run read an empty list 0.2 s after the record).
func (f *retryFixture) events(t *testing.T, reason string) []string {
	t.Helper()
	var out []string
	eventually(t, "an Event of reason "+reason, func() error {
		list := &eventsv1.EventList{}
		if err := k8s.List(ctx, list, client.InNamespace(f.rs.Namespace)); err != nil {
			return err
		}
		out = out[:0]
		for _, e := range list.Items {
			if e.Reason == reason && e.Regarding.Name == f.rs.Name {
				out = append(out, e.Note)
			}
		}
		if len(out) == 0 {
			return fmt.Errorf("none yet among %d Events", len(list.Items))
		}
		return nil
	})
	return out
}

func (f *retryFixture) counted(result string) float64 {
	return testutil.ToFloat64(metrics.JobRetries.WithLabelValues(f.rs.Namespace, f.rs.Name, result))
}

// noTokenAnywhere fails when the API token is in the controller's logs,
// the RunnerSet's Events or its status.
func (f *retryFixture) noTokenAnywhere(t *testing.T) {
	t.Helper()
	if strings.Contains(logs.String(), f.pat) {
		t.Error("the API token is in the controller's logs")
	}
	list := &eventsv1.EventList{}
	must(t, k8s.List(ctx, list, client.InNamespace(f.rs.Namespace)))
	for _, e := range list.Items {
		if strings.Contains(e.Note, f.pat) {
			t.Errorf("the API token is in Event %s", e.Name)
		}
	}
	cur := &v1alpha1.RunnerSet{}
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(f.rs), cur))
	b, _ := json.Marshal(cur.Status)
	if strings.Contains(string(b), f.pat) {
		t.Error("the API token is in the RunnerSet's status")
	}
}

// A reclaimed node's job is retried once GitLab reports it failed for its
// lost runner, and the retry runs to success.
func TestAReclaimedNodesJobIsRetriedOnceAndSucceeds(t *testing.T) {
	f := newRetryFixture(t, 1)
	// Opting in costs nothing while no job is interrupted: no write, no
	// GitLab call.
	steady := writeLog.len()
	time.Sleep(2 * time.Second)
	if n := f.statusWrites(t, steady); n != 0 {
		t.Errorf("%d status writes of a converged RunnerSet that retries jobs, want 0", n)
	}
	if n := f.srv.Calls("*", "/api/v4/projects/*/jobs/*"); n != 0 {
		t.Errorf("%d GitLab job calls with no job interrupted, want 0", n)
	}
	lost := f.srv.QueueProjectJob(retryProject, f.rs.Spec.Tags, time.Minute)
	interrupted := writeLog.len()
	id, jobToken := f.take(t)
	if id != lost {
		t.Fatalf("took job %d, want %d", id, lost)
	}
	pod := f.pod(t, id)
	must(t, k8s.Delete(ctx, f.node))
	f.reclaim(t, pod)

	// GitLab still reports it running: the controller waits.
	f.record(t, id, v1alpha1.JobRetryWaiting)
	time.Sleep(time.Second)
	if n := f.retries(); n != 0 {
		t.Fatalf("%d retries asked while GitLab reports the job running", n)
	}
	// The manager finds the pod gone and fails the job, as on a real runner.
	f.end(t, id, jobToken, gitlabserver.JobFailed, "runner_system_failure")
	rec := f.record(t, id, v1alpha1.JobRetryRetried)
	if rec.RetriedAs == 0 || rec.Node != f.node.Name || rec.Pod != pod.Name || rec.Retries != 0 {
		t.Errorf("record %+v: want retriedAs the new job, the node %s and pod %s, 0 earlier retries", rec, f.node.Name, pod.Name)
	}
	if j := f.job(t, rec.RetriedAs); j.RetryOf != id || j.State != gitlabserver.JobPending || j.ProjectID != retryProject {
		t.Errorf("GitLab's job %d: %+v, want a pending retry of %d", rec.RetriedAs, j, id)
	}
	// The retry runs (on a node that stays) and succeeds.
	again, againToken := f.take(t)
	if again != rec.RetriedAs {
		t.Fatalf("took job %d, want the retry %d", again, rec.RetriedAs)
	}
	f.end(t, again, againToken, gitlabserver.JobSuccess, "")
	if j := f.job(t, again); j.State != gitlabserver.JobSuccess {
		t.Errorf("the retry ended %s, want success", j.State)
	}
	time.Sleep(2 * time.Second)
	if n := f.retries(); n != 1 {
		t.Errorf("GitLab was asked %d times to retry, want once", n)
	}
	if notes := f.events(t, v1alpha1.ReasonJobRetried); len(notes) != 1 || !strings.Contains(notes[0], fmt.Sprintf("retried as job %d", again)) {
		t.Errorf("JobRetried Events: %q, want one naming job %d", notes, again)
	}
	if got := f.counted(metrics.ResultRetried); got != 1 {
		t.Errorf("%s{result=Retried} = %v, want 1", metrics.JobRetriesTotal, got)
	}
	// The record's three writes (Waiting, Retrying, Retried), no more.
	if n := f.statusWrites(t, interrupted); n != 3 {
		t.Errorf("%d status writes for one retried job, want 3", n)
	}
	f.noTokenAnywhere(t)
}

// statusWrites counts the controller's status patches of the RunnerSet
// since the write log had since entries.
func (f *retryFixture) statusWrites(t *testing.T, since int) int {
	t.Helper()
	entries, _ := writeLog.since(since)
	n := 0
	for _, e := range entries {
		if e.namespace == f.rs.Namespace && e.name == f.rs.Name && e.kind == "PATCH runnersets/status" {
			n++
		}
	}
	return n
}

// The negative control: a job that failed on its own is never retried,
// whether its pod ended normally (deleted by its manager) or a reclaim
// took the pod of a job GitLab already had as failed (script_failure) or
// succeeded.
func TestAJobThatFailedOnItsOwnIsNeverRetried(t *testing.T) {
	f := newRetryFixture(t, 3)
	queue := func() (int64, string, *corev1.Pod) {
		f.srv.QueueProjectJob(retryProject, f.rs.Spec.Tags, time.Minute)
		id, tok := f.take(t)
		return id, tok, f.pod(t, id)
	}
	// Its script failed; its manager deleted its pod.
	failed, failedToken, failedPod := queue()
	f.end(t, failed, failedToken, gitlabserver.JobFailed, "script_failure")
	must(t, k8s.Delete(ctx, failedPod, client.GracePeriodSeconds(0)))
	// Its script failed, then a reclaim took the pod before its manager
	// deleted it.
	scripted, scriptedToken, scriptedPod := queue()
	f.end(t, scripted, scriptedToken, gitlabserver.JobFailed, "script_failure")
	f.reclaim(t, scriptedPod)
	// It succeeded, and the same.
	passed, passedToken, passedPod := queue()
	f.end(t, passed, passedToken, gitlabserver.JobSuccess, "")
	f.reclaim(t, passedPod)

	if rec := f.record(t, scripted, v1alpha1.JobRetryNotRetried); !strings.Contains(rec.Message, "script_failure") {
		t.Errorf("record of job %d: %q does not say script_failure", scripted, rec.Message)
	}
	f.record(t, passed, v1alpha1.JobRetryNotRetried)
	time.Sleep(2 * time.Second)
	if n := f.retries(); n != 0 {
		t.Errorf("GitLab was asked %d times to retry jobs that failed on their own, want never", n)
	}
	cur := get(t, f.rs.Namespace, f.rs.Name, &v1alpha1.RunnerSet{})
	for _, r := range cur.Status.JobRetries {
		if r.JobID == failed {
			t.Errorf("job %d, whose pod ended normally, has a record: %+v", failed, r)
		}
	}
	if got := f.counted(metrics.ResultRetried); got != 0 {
		t.Errorf("%s{result=Retried} = %v, want 0", metrics.JobRetriesTotal, got)
	}
}

// maxRetries holds along a job's chain of retries: the retry's retry
// counts as the job's second.
func TestTheRetryLimitHoldsAlongAJobsRetries(t *testing.T) {
	f := newRetryFixture(t, 2)
	f.srv.QueueProjectJob(retryProject, f.rs.Spec.Tags, time.Minute)
	var chain []int64
	for i := range 3 {
		id, tok := f.take(t)
		chain = append(chain, id)
		f.reclaim(t, f.pod(t, id))
		f.end(t, id, tok, gitlabserver.JobFailed, "runner_system_failure")
		if i < 2 {
			if rec := f.record(t, id, v1alpha1.JobRetryRetried); rec.Retries != int32(i) {
				t.Errorf("job %d: %d earlier retries, want %d", id, rec.Retries, i)
			}
		}
	}
	rec := f.record(t, chain[2], v1alpha1.JobRetryNotRetried)
	if rec.Retries != 2 || !strings.Contains(rec.Message, "spec.jobs.retryOnInterruption.maxRetries (2)") {
		t.Errorf("the third job's record %+v: want 2 earlier retries and the limit named", rec)
	}
	time.Sleep(2 * time.Second)
	if n := f.retries(); n != 2 {
		t.Errorf("GitLab was asked %d times to retry, want 2 (maxRetries)", n)
	}
	if notes := f.events(t, v1alpha1.ReasonJobNotRetried); len(notes) != 1 || !strings.Contains(notes[0], "maxRetries") {
		t.Errorf("JobNotRetried Events: %q, want one naming maxRetries", notes)
	}
}

// A controller restart neither forgets a job it waited for nor retries a
// job twice: the record of a job waiting when the controller stopped is
// resumed by the next one and retried once; a job seen interrupted twice
// (two pods of one job) is retried once; a retry the last controller may
// have sent when it stopped is never sent again.
func TestARestartNeitherForgetsAJobNorRetriesOneTwice(t *testing.T) {
	f := newRetryFixture(t, 5)
	f.srv.QueueProjectJob(retryProject, f.rs.Spec.Tags, time.Minute)
	first, firstToken := f.take(t)
	f.reclaim(t, f.pod(t, first))
	f.record(t, first, v1alpha1.JobRetryWaiting)
	stopManager()
	// The job fails while no controller runs.
	f.end(t, first, firstToken, gitlabserver.JobFailed, "runner_system_failure")
	must(t, startManager())
	second := f.record(t, first, v1alpha1.JobRetryRetried).RetriedAs
	time.Sleep(time.Second)
	if n := f.retries(); n != 1 {
		t.Fatalf("GitLab was asked %d times to retry job %d, want once", n, first)
	}

	// Two pods of one job taken away: one retry.
	id, tok := f.take(t)
	if id != second {
		t.Fatalf("took job %d, want %d", id, second)
	}
	f.reclaim(t, f.pod(t, second))
	f.reclaim(t, f.pod(t, second))
	f.record(t, second, v1alpha1.JobRetryWaiting)
	f.end(t, second, tok, gitlabserver.JobFailed, "runner_system_failure")
	third := f.record(t, second, v1alpha1.JobRetryRetried).RetriedAs
	time.Sleep(2 * time.Second)
	if n := f.retries(); n != 2 {
		t.Errorf("GitLab was asked %d times to retry, want twice: job %d, seen interrupted twice, once", n, second)
	}

	// A controller stopped between its Retrying record and GitLab's answer.
	id, tok = f.take(t)
	if id != third {
		t.Fatalf("took job %d, want %d", id, third)
	}
	f.end(t, id, tok, gitlabserver.JobFailed, "runner_system_failure")
	stopManager()
	cur := get(t, f.rs.Namespace, f.rs.Name, &v1alpha1.RunnerSet{})
	now := metav1.Now()
	cur.Status.JobRetries = append(cur.Status.JobRetries, v1alpha1.JobRetry{
		ProjectID: retryProject, JobID: id, Retries: 2, Pod: "p", Node: "n", InterruptedAt: now, State: v1alpha1.JobRetryRetrying, UpdatedAt: now,
	})
	must(t, k8s.Status().Update(ctx, cur))
	must(t, startManager())
	if rec := f.record(t, id, v1alpha1.JobRetryNotRetried); !strings.Contains(rec.Message, "not asked again") {
		t.Errorf("record %+v: want it settled as not asked again", rec)
	}
	time.Sleep(2 * time.Second)
	if n := f.retries(); n != 2 {
		t.Errorf("GitLab was asked %d times to retry, want still 2: job %d's retry may have been sent already", n, id)
	}
}

// A token GitLab will not retry with is named, with its fix, in the
// record and a Warning Event; nothing is retried.
func TestATokenWithoutTheAPIScopeIsNamedWithItsFix(t *testing.T) {
	f := newRetryFixture(t, 1, gitlabserver.ScopeReadAPI)
	f.srv.QueueProjectJob(retryProject, f.rs.Spec.Tags, time.Minute)
	id, tok := f.take(t)
	f.reclaim(t, f.pod(t, id))
	f.end(t, id, tok, gitlabserver.JobFailed, "runner_system_failure")
	rec := f.record(t, id, v1alpha1.JobRetryNotRetried)
	for _, want := range []string{"spec.jobs.retryOnInterruption.apiTokenSecretRef", "api scope", f.rs.Namespace + "/retry-api"} {
		if !strings.Contains(rec.Message, want) {
			t.Errorf("record's message %q does not say %q", rec.Message, want)
		}
	}
	if notes := f.events(t, v1alpha1.ReasonJobNotRetried); len(notes) != 1 || !strings.Contains(notes[0], "api scope") {
		t.Errorf("JobNotRetried Events: %q", notes)
	}
	f.noTokenAnywhere(t)
}

// Admission refuses an opt-in without a token and a limit outside 1..10,
// naming the field; the limit defaults to 1.
func TestAdmissionRefusesARetryWithoutATokenOrWithABadLimit(t *testing.T) {
	ns := newNamespace(t)
	ref := &v1alpha1.SecretKeyRef{Name: "retry-api"}
	for name, tc := range map[string]struct {
		retry *v1alpha1.RetryOnInterruption
		want  []string
	}{
		"no token":       {&v1alpha1.RetryOnInterruption{}, []string{"spec.jobs.retryOnInterruption", "needs apiTokenSecretRef", "api scope", "Developer role"}},
		"negative limit": {&v1alpha1.RetryOnInterruption{APITokenSecretRef: ref, MaxRetries: -1}, []string{"spec.jobs.retryOnInterruption.maxRetries", "between 1 and 10"}},
		"limit 11":       {&v1alpha1.RetryOnInterruption{APITokenSecretRef: ref, MaxRetries: 11}, []string{"spec.jobs.retryOnInterruption.maxRetries", "between 1 and 10"}},
	} {
		t.Run(name, func(t *testing.T) {
			rs := runnerSet(ns, "bad-retry", "any")
			rs.Spec.Jobs.RetryOnInterruption = tc.retry
			err := k8s.Create(ctx, rs)
			if err == nil {
				_ = k8s.Delete(ctx, rs)
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
	// A limit of 0 written as such (a Go client omits it, and the default
	// applies) is refused too.
	zero := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "RunnerSet",
		"metadata": map[string]any{"namespace": ns, "name": "zero-retry"},
		"spec": map[string]any{
			"className": "any", "tags": []any{"t"}, "gitlab": map[string]any{"tokenSecretRef": map[string]any{"name": "t"}},
			"jobs": map[string]any{"retryOnInterruption": map[string]any{"maxRetries": int64(0), "apiTokenSecretRef": map[string]any{"name": "retry-api"}}},
		},
	}}
	if err := k8s.Create(ctx, zero); err == nil || !strings.Contains(err.Error(), "spec.jobs.retryOnInterruption.maxRetries") || !strings.Contains(err.Error(), "between 1 and 10") {
		t.Errorf("maxRetries: 0 admitted, or refused without naming the field: %v", err)
	}
	rs := runnerSet(ns, "default-retry", "any")
	rs.Spec.Jobs.RetryOnInterruption = &v1alpha1.RetryOnInterruption{APITokenSecretRef: ref}
	must(t, k8s.Create(ctx, rs))
	if got := get(t, ns, rs.Name, &v1alpha1.RunnerSet{}).Spec.Jobs.RetryOnInterruption.MaxRetries; got != 1 {
		t.Errorf("maxRetries defaulted to %d, want 1", got)
	}
}
