package controller_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	runnertoken "github.com/runnerfleet/runnerfleet/runnerset/controller/token"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// pastAViewInterval is more than the longest gap between two reads of
// GitLab's view: a pass after it reads.
const pastAViewInterval = runnertoken.RunnerViewInterval + runnertoken.RunnerViewJitter + time.Second

// statusWrites counts the status patches the controller sent for the
// RunnerSet ns/name since entry start of the write log.
func statusWrites(start int, ns, name string) int {
	entries, _ := writeLog.since(start)
	n := 0
	for _, e := range entries {
		if e.kind == "PATCH runnersets/status" && e.namespace == ns && e.name == name {
			n++
		}
	}
	return n
}

// readOnce moves the controller's clock past a view interval, brings rs
// back, and waits until GitLab answered one more request to path.
func readOnce(t *testing.T, srv *gitlabserver.Server, rs *v1alpha1.RunnerSet, method, path string, round int) {
	t.Helper()
	before := srv.Calls(method, path)
	moveClock(t, pastAViewInterval)
	nudge(t, rs, round)
	eventually(t, "a read of GitLab's view", func() error {
		if n := srv.Calls(method, path); n != before+1 {
			return fmt.Errorf("%d %s %s, want %d", n, method, path, before+1)
		}
		return nil
	})
}

// RunnerOnline is GitLab's own view of the runner's managers, read once per
// interval and never because a pass ran: never contacted, online, offline,
// stale. A simulated hour of reads that find nothing new writes no status.
func TestRunnerOnlineIsGitLabsViewOfTheManagersReadOncePerInterval(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "seen", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	id := cur.Status.RunnerID
	managersPath := fmt.Sprintf("/api/v4/runners/%d/managers", id)
	time.Sleep(time.Second)
	srv.Reset()

	// Within the first interval: passes, but no read and no condition.
	moveClock(t, runnertoken.RunnerViewInterval-runnertoken.RunnerViewJitter-time.Minute)
	for i := range 3 {
		nudge(t, cur, i)
	}
	time.Sleep(time.Second)
	if n := gitlabCalls(srv); n != 0 {
		t.Fatalf("%d GitLab calls within the first view interval", n)
	}
	if c := condition(get(t, ns, "seen", &v1alpha1.RunnerSet{}), v1alpha1.ConditionRunnerOnline); c != nil {
		t.Fatalf("RunnerOnline before GitLab was read: %+v", c)
	}

	// No manager ever contacted GitLab (envtest runs no gitlab-runner).
	readOnce(t, srv, cur, "GET", managersPath, 10)
	waitCondition(t, cur, v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonNeverContacted)

	// A manager contacts GitLab: online at the next read.
	srv.SetManager(id, gitlabserver.Manager{SystemID: "r_seenpod0001"})
	readOnce(t, srv, cur, "GET", managersPath, 11)
	online := waitCondition(t, cur, v1alpha1.ConditionRunnerOnline, metav1.ConditionTrue, v1alpha1.ReasonOnline)
	if !online.IsReady() {
		t.Errorf("not Ready beside RunnerOnline: %+v", online.Status.Conditions)
	}

	// A simulated hour: one read per interval, one GitLab call each, and
	// no status write while GitLab's view does not change.
	time.Sleep(time.Second)
	srv.Reset()
	start := writeLog.len()
	const reads = 6 // within the hour after which the token's own check may come
	for i := range reads {
		srv.SetManager(id, gitlabserver.Manager{SystemID: "r_seenpod0001", ContactedAt: time.Now()}) // it keeps polling
		readOnce(t, srv, cur, "GET", managersPath, 20+i)
		nudge(t, cur, 40+i) // a pass within the interval reads nothing
	}
	time.Sleep(time.Second)
	if n := gitlabCalls(srv); n != reads {
		t.Errorf("%d GitLab calls for %d reads of a created runner's view, want one each (GET /runners/:id/managers)", n, reads)
	}
	if n := statusWrites(start, ns, "seen"); n != 0 {
		t.Errorf("%d status writes over %d reads that found GitLab's view unchanged, want 0", n, reads)
	}
	t.Logf("a created runner: %d GitLab calls for %d reads %v apart; at one read per %v, 1000 RunnerSets make %d GitLab calls an hour",
		gitlabCalls(srv), reads, pastAViewInterval, runnertoken.RunnerViewInterval, 1000*int(time.Hour/runnertoken.RunnerViewInterval))

	// GitLab last heard from it 3 hours ago: offline, naming when.
	last := time.Now().Add(-3 * time.Hour).UTC().Truncate(time.Second)
	srv.SetManager(id, gitlabserver.Manager{SystemID: "r_seenpod0001", ContactedAt: last})
	readOnce(t, srv, cur, "GET", managersPath, 60)
	off := waitCondition(t, cur, v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonOffline)
	if msg := condition(off, v1alpha1.ConditionRunnerOnline).Message; !strings.Contains(msg, last.Format(time.RFC3339)) {
		t.Errorf("the offline message does not say when GitLab last heard from a manager (%s): %s", last.Format(time.RFC3339), msg)
	}
	if !off.IsReady() {
		t.Errorf("RunnerOnline rolled up into Ready: %+v", condition(off, v1alpha1.ConditionReady))
	}

	// Eight days: stale.
	srv.SetManager(id, gitlabserver.Manager{SystemID: "r_seenpod0001", CreatedAt: time.Now().Add(-9 * 24 * time.Hour), ContactedAt: time.Now().Add(-8 * 24 * time.Hour)})
	readOnce(t, srv, cur, "GET", managersPath, 61)
	waitCondition(t, cur, v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonStale)
}

const readPAT = "glpat-read-only-runners-0000000001"

// teamRunnerSet uses the glrt- token of a runner the team created in
// GitLab, and a read_api token to read GitLab's record of it.
func teamRunnerSet(t *testing.T, srv *gitlabserver.Server, ns, name, class, runnerToken string, tags ...string) *v1alpha1.RunnerSet {
	t.Helper()
	newSecret(t, ns, name+"-token", runnerToken)
	rs := runnerSet(ns, name, class)
	rs.Spec.Tags = tags
	rs.Spec.GitLab.URL = srv.URL()
	rs.Spec.GitLab.ReadTokenSecretRef = &v1alpha1.SecretKeyRef{Name: "gitlab-read"}
	must(t, k8s.Create(ctx, rs))
	return rs
}

// With a token the team brings, spec.tags never reaches GitLab: the view
// compares the runner's tags there with spec.tags, naming what differs,
// and a spec change compares again at once. Its runner is found once by
// verify, which the view never counts as a manager.
func TestTagsMatchComparesATeamRunnersTagsInGitLabWithSpecTags(t *testing.T) {
	srv := gitlabServer(t)
	srv.AddUser(readPAT, gitlabserver.User{Scopes: []string{gitlabserver.ScopeReadAPI}, Groups: []int64{groupID}})
	r := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.GroupType, GroupID: groupID, Tags: []string{"team-x", "docker"}})
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "gitlab-read", readPAT)
	rs := teamRunnerSet(t, srv, ns, "tags", class.Name, r.Token, "team-x", "gpu")
	cur := waitReady(t, rs)
	if cur.Status.RunnerID != 0 {
		t.Errorf("status.runnerID %d for a team's runner: Release would delete it", cur.Status.RunnerID)
	}
	time.Sleep(time.Second)
	srv.Reset()

	detailsPath := fmt.Sprintf("/api/v4/runners/%d", r.ID)
	readOnce(t, srv, cur, "GET", detailsPath, 1)
	differ := waitCondition(t, cur, v1alpha1.ConditionTagsMatch, metav1.ConditionFalse, v1alpha1.ReasonTagsDiffer)
	msg := condition(differ, v1alpha1.ConditionTagsMatch).Message
	if !strings.Contains(msg, "missing in GitLab: gpu") || !strings.Contains(msg, "not in spec.tags: docker") {
		t.Errorf("TagsDiffer does not name the missing and extra tags: %s", msg)
	}
	waitCondition(t, cur, v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonNeverContacted)
	if got := srv.Managers(r.ID); !slices.Equal(got, []string{gitlab.SystemID}) {
		t.Errorf("managers GitLab recorded: %v; want only the controller's verify", got)
	}
	calls := map[string]int{
		"POST /runners/verify": srv.Calls("POST", "/api/v4/runners/verify"),
		"GET /runners/:id":     srv.Calls("GET", detailsPath),
		"GET managers":         srv.Calls("GET", detailsPath+"/managers"),
	}
	if calls["POST /runners/verify"] != 1 || calls["GET /runners/:id"] != 1 || calls["GET managers"] != 1 || gitlabCalls(srv) != 3 {
		t.Errorf("the first read of a team runner's view: %v, %d calls in all; want one verify, one details, one managers", calls, gitlabCalls(srv))
	}

	// The team fixes spec.tags: compared again at once, without verify.
	srv.Reset()
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Tags = []string{"docker", "team-x"} })
	waitCondition(t, cur, v1alpha1.ConditionTagsMatch, metav1.ConditionTrue, v1alpha1.ReasonTagsMatch)
	time.Sleep(time.Second)
	if n, v := gitlabCalls(srv), srv.Calls("POST", "/api/v4/runners/verify"); n != 2 || v != 0 {
		t.Errorf("%d GitLab calls (verify %d) to compare changed tags; want 2 (details, managers) and no verify", n, v)
	}

	// A later read: the same two calls.
	srv.Reset()
	readOnce(t, srv, cur, "GET", detailsPath, 2)
	time.Sleep(time.Second)
	if n := gitlabCalls(srv); n != 2 {
		t.Errorf("%d GitLab calls for a read of a team runner's view, want 2", n)
	}
	t.Logf("a team's runner: %d GitLab calls a read; 1000 RunnerSets make %d an hour, and one verify each per controller start", gitlabCalls(srv), 2*1000*int(time.Hour/runnertoken.RunnerViewInterval))

	// A token GitLab refuses: RunnerOnline says so.
	revoked := teamRunnerSet(t, srv, ns, "revoked", class.Name, "glrt-revoked_token-0000000", "team-x")
	waitReady(t, revoked)
	moveClock(t, pastAViewInterval)
	nudge(t, revoked, 1)
	waitCondition(t, revoked, v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonTokenRefused)

	// No read token: neither condition, and no GitLab call.
	srv.Reset()
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.GitLab.ReadTokenSecretRef = nil })
	eventually(t, "the view's conditions gone", func() error {
		c := get(t, ns, "tags", &v1alpha1.RunnerSet{})
		if condition(c, v1alpha1.ConditionRunnerOnline) != nil || condition(c, v1alpha1.ConditionTagsMatch) != nil {
			return errors.New("still there")
		}
		return nil
	})
	moveClock(t, pastAViewInterval)
	nudge(t, cur, 3)
	time.Sleep(time.Second)
	if n := srv.Calls("GET", detailsPath+"/managers") + srv.Calls("GET", detailsPath); n != 0 {
		t.Errorf("%d reads of GitLab's view without a read token", n)
	}
}

// What a read of GitLab's view found, when its status write is refused (a
// conflict with another write, as a nudge racing a requeued pass causes),
// is written by the next pass: not lost for a whole interval, and not read
// again (a second read could find less: the first one's cleanup deletes
// the stale records it reports). Without gitlabView.keep the condition
// never appears within the wait.
func TestAViewReadWhoseStatusWriteFailedIsWrittenByTheNextPass(t *testing.T) {
	srv := gitlabServer(t)
	srv.AddUser(readPAT, gitlabserver.User{Scopes: []string{gitlabserver.ScopeReadAPI}, Groups: []int64{groupID}})
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "gitlab-read", readPAT)
	revoked := teamRunnerSet(t, srv, ns, "lost", class.Name, "glrt-revoked_token-0000001", "team-x")
	waitReady(t, revoked)
	time.Sleep(time.Second) // the last passes' status writes
	before := srv.Calls("POST", "/api/v4/runners/verify")
	refuseStatusPatch.Store(&objectName{ns, "lost"})
	t.Cleanup(func() { refuseStatusPatch.Store(nil) })
	moveClock(t, pastAViewInterval)
	nudge(t, revoked, 1)
	waitCondition(t, revoked, v1alpha1.ConditionRunnerOnline, metav1.ConditionFalse, v1alpha1.ReasonTokenRefused)
	if refuseStatusPatch.Load() != nil {
		t.Fatal("no status patch was refused: the test proved nothing")
	}
	if n := srv.Calls("POST", "/api/v4/runners/verify") - before; n != 1 {
		t.Errorf("%d verify calls; want 1: the read whose write was refused, and no other", n)
	}
}

// The manager records that pods which no longer exist left behind are
// deleted with the runner's token; the record of a live pod, even offline,
// and a record in use, never are (negative controls).
func TestStaleManagersOfPodsThatNoLongerExistAreDeletedNeverALivePods(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "tidy", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	id := cur.Status.RunnerID

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tidy-manager-live", Labels: resources.Labels(cur, resources.ComponentManager)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "gitlab-runner"}}},
	}
	must(t, k8s.Create(ctx, pod))
	t0 := pod.CreationTimestamp.Time
	// Three hours pass for GitLab: what was contacted at t0 is offline.
	srv.SetClock(func() time.Time { return time.Now().Add(3 * time.Hour) })
	srv.SetManager(id, gitlabserver.Manager{SystemID: "r_deadpod0001", CreatedAt: t0.Add(-time.Hour), ContactedAt: t0.Add(-time.Hour)})
	srv.SetManager(id, gitlabserver.Manager{SystemID: "r_livepod0001", CreatedAt: t0.Add(time.Second), ContactedAt: t0.Add(time.Second)})
	srv.SetManager(id, gitlabserver.Manager{SystemID: "s_sharedid001", CreatedAt: t0.Add(-time.Hour), ContactedAt: time.Now().Add(3 * time.Hour)})

	managersPath := fmt.Sprintf("/api/v4/runners/%d/managers", id)
	readOnce(t, srv, cur, "GET", managersPath, 1)
	eventually(t, "the dead pod's manager deleted", func() error {
		if got := srv.Managers(id); !slices.Equal(got, []string{"r_livepod0001", "s_sharedid001"}) {
			return fmt.Errorf("managers %v", got)
		}
		return nil
	})
	// Another read: the live pod's offline record stays.
	readOnce(t, srv, cur, "GET", managersPath, 2)
	time.Sleep(time.Second)
	if got := srv.Managers(id); !slices.Equal(got, []string{"r_livepod0001", "s_sharedid001"}) {
		t.Fatalf("managers after a second read: %v; the live pod's and the one in use must stay", got)
	}
	if n := srv.Calls("DELETE", "/api/v4/runners/managers"); n != 1 {
		t.Errorf("%d DELETE /runners/managers, want 1", n)
	}

	// The pod goes: its record goes at the next read; the one in use stays.
	must(t, k8s.Delete(ctx, pod, client.GracePeriodSeconds(0)))
	eventually(t, "the pod gone", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); err == nil {
			return errors.New("still there")
		}
		return nil
	})
	readOnce(t, srv, cur, "GET", managersPath, 3)
	eventually(t, "the gone pod's manager deleted", func() error {
		if got := srv.Managers(id); !slices.Equal(got, []string{"s_sharedid001"}) {
			return fmt.Errorf("managers %v", got)
		}
		return nil
	})
}
