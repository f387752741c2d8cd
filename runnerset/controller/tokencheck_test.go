package controller_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// gitlabCalls counts every API request srv answered (faulted ones included).
func gitlabCalls(srv *gitlabserver.Server) int {
	n := 0
	for _, p := range []string{"/api/v4/*", "/api/v4/*/*", "/api/v4/*/*/*", "/api/v4/*/*/*/*"} {
		n += srv.Calls("*", p)
	}
	return n
}

// tokenCalls counts the GitLab requests srv answered but the reads of
// GitLab's view (GET /runners/:id/managers, gitlabview.go), which come on
// a schedule of their own.
func tokenCalls(srv *gitlabserver.Server) int {
	return gitlabCalls(srv) - srv.Calls("GET", "/api/v4/runners/*/managers")
}

// nudge brings rs back to the controller without changing its spec.
func nudge(t *testing.T, rs *v1alpha1.RunnerSet, n int) {
	t.Helper()
	cur := get(t, rs.Namespace, rs.Name, &v1alpha1.RunnerSet{})
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations["test.runnerfleet.dev/nudge"] = fmt.Sprint(n)
	must(t, k8s.Patch(ctx, cur, patch))
}

// moveClock runs the controller's clock d ahead for the rest of the test.
func moveClock(t *testing.T, d time.Duration) {
	clockAhead.Add(int64(d))
	t.Cleanup(func() { clockAhead.Add(-int64(d)) })
}

func TestAConvergedFleetMakesNoGitLabCallsEvenAcrossARestart(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	var sets []*v1alpha1.RunnerSet
	for i := range 3 {
		rs := createdRunnerSet(srv, ns, fmt.Sprintf("quiet-%d", i), class.Name)
		must(t, k8s.Create(ctx, rs))
		sets = append(sets, rs)
	}
	for _, rs := range sets {
		waitReady(t, rs)
	}
	time.Sleep(time.Second) // the last passes' status events
	before := gitlabCalls(srv)
	for round := range 3 {
		for _, rs := range sets {
			nudge(t, rs, round)
		}
		time.Sleep(time.Second)
		if round == 1 {
			stopManager()
			must(t, startManager())
		}
	}
	time.Sleep(2 * time.Second)
	if d := gitlabCalls(srv) - before; d != 0 {
		t.Errorf("%d GitLab calls from 3 converged RunnerSets reconciled 9 times and a restart; want 0", d)
	}
}

func TestTokensAreCheckedHourlyWithoutPosingAsAManagerAndADeletedRunnerIsReplaced(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "hourly", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	time.Sleep(time.Second)
	srv.Reset()

	// Within the hour: no call.
	moveClock(t, 59*time.Minute)
	nudge(t, rs, 1)
	time.Sleep(time.Second)
	if n := tokenCalls(srv); n != 0 {
		t.Fatalf("%d GitLab calls within an hour of the last check", n)
	}
	// After two hours a check is certainly due: one GET /runners/:id, no verify.
	moveClock(t, 61*time.Minute)
	nudge(t, rs, 2)
	eventually(t, "one check", func() error {
		if n := srv.Calls("GET", fmt.Sprintf("/api/v4/runners/%d", cur.Status.RunnerID)); n != 1 {
			return fmt.Errorf("%d GET /runners/:id", n)
		}
		return nil
	})
	nudge(t, rs, 3)
	time.Sleep(time.Second)
	if n := tokenCalls(srv); n != 1 || srv.Calls("POST", "/api/v4/runners/verify") != 0 {
		t.Errorf("%d GitLab calls (verify %d) for one due check; want exactly the one GET", n, srv.Calls("POST", "/api/v4/runners/verify"))
	}

	// The runner is deleted in GitLab: the next check replaces it.
	api, err := gitlab.New(srv.URL(), pat, gitlab.Options{})
	must(t, err)
	must(t, api.DeleteRunner(ctx, cur.Status.RunnerID))
	moveClock(t, 2*time.Hour+time.Minute)
	nudge(t, rs, 4)
	eventually(t, "a new runner with a working stored token", func() error {
		mine := runnersOf(srv, string(cur.UID))
		tok, err := storedToken(t, ns, "hourly")
		if err != nil || len(mine) != 1 || mine[0].ID == cur.Status.RunnerID || tok != mine[0].Token {
			return fmt.Errorf("runners %d, stored token matches: %v (%v)", len(mine), len(mine) == 1 && tok == mine[0].Token, err)
		}
		if s := get(t, ns, "hourly", &v1alpha1.RunnerSet{}); s.Status.RunnerID != mine[0].ID {
			return fmt.Errorf("status.runnerID is %d, the runner %d", s.Status.RunnerID, mine[0].ID)
		}
		return nil
	})
}

func TestVerifyCarriesTheControllersOwnStableSystemID(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "sysid", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	for i := range 2 { // spec changes make the controller verify
		update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Tags = append(r.Spec.Tags, fmt.Sprintf("v%d", i)) })
		eventually(t, "verified", func() error {
			if srv.Calls("POST", "/api/v4/runners/verify") < i+1 {
				return errors.New("not yet")
			}
			return nil
		})
	}
	mine := runnersOf(srv, string(cur.UID))
	if len(mine) != 1 || !slices.Equal(srv.Managers(mine[0].ID), []string{gitlab.SystemID}) {
		t.Errorf("runner managers GitLab recorded: %v; want only %q", srv.Managers(cur.Status.RunnerID), gitlab.SystemID)
	}
}

// waitRecovered waits until rs has exactly one runner in GitLab, other than
// old, whose valid token is the stored one, and rs is Ready.
func waitRecovered(t *testing.T, srv *gitlabserver.Server, rs *v1alpha1.RunnerSet, old int64) {
	t.Helper()
	eventuallyWithin(t, time.Minute, "one working replacement runner, the old one deleted", func() error {
		cur := get(t, rs.Namespace, rs.Name, &v1alpha1.RunnerSet{})
		mine := runnersOf(srv, string(cur.UID))
		if len(mine) != 1 || mine[0].ID == old {
			ids := []int64{}
			for _, r := range mine {
				ids = append(ids, r.ID)
			}
			return fmt.Errorf("runners %v (old %d)", ids, old)
		}
		tok, err := storedToken(t, rs.Namespace, rs.Name)
		if err != nil || tok != mine[0].Token || !srv.ValidToken(tok) {
			return fmt.Errorf("stored token is not the new runner's valid token (%v)", err)
		}
		if !cur.IsReady() || cur.Status.RunnerID != mine[0].ID {
			return fmt.Errorf("not Ready with runner %d: %+v", mine[0].ID, cur.Status)
		}
		return nil
	})
}

func TestARunnerGitLabWillNotRenewIsReplacedAndDeletedAfterTheManagersRoll(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "revoked", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	old := cur.Status.RunnerID
	hash := get(t, ns, naming.For(ns, "revoked").Managers(), &appsv1.Deployment{}).Spec.Template.Annotations[resources.AnnotationConfigHash]
	// The token stops working and GitLab refuses to reset it.
	api, err := gitlab.New(srv.URL(), pat, gitlab.Options{})
	must(t, err)
	_, err = api.ResetToken(ctx, old)
	must(t, err)
	srv.FailNext("POST", fmt.Sprintf("/api/v4/runners/%d/reset_authentication_token", old), 403, 1000)
	t.Cleanup(srv.Reset)
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Tags = append(r.Spec.Tags, "nudge") })
	waitRecovered(t, srv, rs, old)
	if h := get(t, ns, naming.For(ns, "revoked").Managers(), &appsv1.Deployment{}).Spec.Template.Annotations[resources.AnnotationConfigHash]; h == hash {
		t.Error("the managers did not roll to the new token")
	}
	sec := get(t, ns, naming.For(ns, "revoked").RunnerToken(), &corev1.Secret{})
	if v, ok := sec.Data["retired-runner-ids"]; ok {
		t.Errorf("the replaced runner is still listed for deletion: %q", v)
	}
}

func TestATokenSecretEditedToGarbageIsReplacedWhileManagersKeepRunning(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "garbage", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	d := get(t, ns, naming.For(ns, "garbage").Managers(), &appsv1.Deployment{})
	for i, garbage := range []string{"not a token at all\n", "glrt-looks-right-but-unknown-0000"} {
		sec := get(t, ns, naming.For(ns, "garbage").RunnerToken(), &corev1.Secret{})
		sec.Data["token"] = []byte(garbage)
		must(t, k8s.Update(ctx, sec))
		eventually(t, fmt.Sprintf("garbage %d replaced by a working token", i), func() error {
			tok, err := storedToken(t, ns, "garbage")
			mine := runnersOf(srv, string(cur.UID))
			if err != nil || !srv.ValidToken(tok) || len(mine) != 1 || mine[0].ID != cur.Status.RunnerID {
				return fmt.Errorf("token valid %v, runners %d", srv.ValidToken(tok), len(mine))
			}
			return nil
		})
	}
	now := get(t, ns, naming.For(ns, "garbage").Managers(), &appsv1.Deployment{})
	if now.UID != d.UID || ptr.Deref(now.Spec.Replicas, 1) == 0 {
		t.Error("the managers' Deployment was replaced or scaled down")
	}
}

// TestEachRunnerTypeWorksWithTheLeastScopesGitLabDocuments runs the whole
// life of a created runner (create, settings change, rotation, deletion)
// with tokens holding only the scopes docs/reference/gitlab-scopes.md lists for each type.
func TestEachRunnerTypeWorksWithTheLeastScopesGitLabDocuments(t *testing.T) {
	const projectID = int64(77)
	cases := []struct {
		typ    v1alpha1.RunnerType
		user   gitlabserver.User
		mutate func(*v1alpha1.RunnerRegistration)
	}{
		{v1alpha1.RunnerTypeGroup, gitlabserver.User{Scopes: []string{gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner}, Groups: []int64{groupID}}, nil},
		{v1alpha1.RunnerTypeProject, gitlabserver.User{Scopes: []string{gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner}, Projects: []int64{projectID}},
			func(r *v1alpha1.RunnerRegistration) {
				r.Type, r.GroupID, r.ProjectID = v1alpha1.RunnerTypeProject, nil, ptr.To(projectID)
			}},
		{v1alpha1.RunnerTypeInstance, gitlabserver.User{Admin: true, Scopes: []string{gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner, gitlabserver.ScopeReadAPI}},
			func(r *v1alpha1.RunnerRegistration) { r.Type, r.GroupID = v1alpha1.RunnerTypeInstance, nil }},
	}
	for _, tc := range cases {
		t.Run(string(tc.typ), func(t *testing.T) {
			srv := gitlabserver.New()
			t.Cleanup(srv.Close)
			srv.AddUser(pat, tc.user)
			srv.SetTokenLifetime(6 * time.Second)
			ns := newNamespace(t)
			class := newClass(t, nil)
			newSecret(t, ns, patName, pat)
			rs := createdRunnerSet(srv, ns, "least", class.Name)
			if tc.mutate != nil {
				tc.mutate(rs.Spec.GitLab.Runner)
			}
			srv.DropAfterNext("POST", "/api/v4/user/runners", 1) // adoption must work too
			must(t, k8s.Create(ctx, rs))
			cur := waitReady(t, rs)
			first, err := storedToken(t, ns, "least")
			must(t, err)
			update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Tags = []string{"changed"} })
			eventually(t, "tags in GitLab and the token rotated", func() error {
				mine := runnersOf(srv, string(cur.UID))
				tok, _ := storedToken(t, ns, "least")
				if len(mine) != 1 || !slices.Equal(mine[0].Tags, []string{"changed"}) || tok == first || !srv.ValidToken(tok) {
					return fmt.Errorf("runners %+v", mine)
				}
				return nil
			})
			srv.SetTokenLifetime(0)
			must(t, k8s.Delete(ctx, cur))
			eventually(t, "runner deleted with the RunnerSet", func() error {
				if n := len(srv.Runners()); n != 0 {
					return fmt.Errorf("%d runners left", n)
				}
				return nil
			})
		})
	}
}

func TestAnInstanceRunnerWithoutAListingScopeSaysWhichScopeToAdd(t *testing.T) {
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	srv.AddUser(pat, gitlabserver.User{Admin: true, Scopes: []string{gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner}})
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "instance", class.Name)
	rs.Spec.GitLab.Runner.Type, rs.Spec.GitLab.Runner.GroupID = v1alpha1.RunnerTypeInstance, nil
	must(t, k8s.Create(ctx, rs))
	cur := waitCondition(t, rs, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonGitLabForbidden)
	msg := condition(cur, v1alpha1.ConditionRunnerRegistered).Message
	for _, want := range []string{"GET /runners/all", "read_api", patName} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if n := len(srv.Runners()); n != 0 {
		t.Errorf("%d runners created although none could be found again after a crash", n)
	}
}

// TestPropertyRecoveryThroughACrashAtEveryStepLeaksNoRunner replaces a
// runner whose token GitLab refuses to renew, with the answer of one step
// of the recovery lost (GitLab acted, the controller never heard) and the
// controller restarted at that moment, for every step in turn: in the end
// there is exactly one runner, the new one, and none was created twice.
func TestPropertyRecoveryThroughACrashAtEveryStepLeaksNoRunner(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	steps := []struct{ method, pattern string }{
		{"POST", "/api/v4/runners/verify"},
		{"POST", "/api/v4/runners/%d/reset_authentication_token"}, // the refused reset
		{"GET", "/api/v4/groups/*/runners"},
		{"POST", "/api/v4/user/runners"},
		{"POST", "/api/v4/runners/*/reset_authentication_token"}, // adopting what a lost create left
		{"PUT", "/api/v4/runners/*"},
		{"DELETE", "/api/v4/runners/%d"}, // retiring the old runner
		{"", ""},                         // a crash with no GitLab call in flight
	}
	for i, st := range steps {
		t.Run(fmt.Sprintf("%d %s %s", i, st.method, st.pattern), func(t *testing.T) {
			name := fmt.Sprintf("crash-%d", i)
			rs := createdRunnerSet(srv, ns, name, class.Name)
			must(t, k8s.Create(ctx, rs))
			cur := waitReady(t, rs)
			old := cur.Status.RunnerID
			api, err := gitlab.New(srv.URL(), pat, gitlab.Options{})
			must(t, err)
			_, err = api.ResetToken(ctx, old)
			must(t, err)
			srv.Reset()
			t.Cleanup(srv.Reset)
			srv.FailNext("POST", fmt.Sprintf("/api/v4/runners/%d/reset_authentication_token", old), 403, 1000)
			if st.method != "" {
				p := st.pattern
				if strings.Contains(p, "%d") {
					p = fmt.Sprintf(p, old)
				}
				srv.DropAfterNext(st.method, p, 1)
			}
			update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Tags = append(r.Spec.Tags, "nudge") })
			time.Sleep(time.Duration(100*i) * time.Millisecond)
			stopManager()
			must(t, startManager())
			waitRecovered(t, srv, rs, old)
			if n := srv.Calls("POST", "/api/v4/user/runners"); n != 1 {
				t.Errorf("%d runners created to replace one", n)
			}
		})
	}
}

func TestGitLabDownDuringARestartChangesNothingAndManagersKeepRunning(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "down", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	d := get(t, ns, naming.For(ns, "down").Managers(), &appsv1.Deployment{})
	time.Sleep(time.Second)
	srv.Reset()
	t.Cleanup(srv.Reset)
	for _, p := range []string{"/api/v4/*", "/api/v4/*/*", "/api/v4/*/*/*"} {
		srv.FailNext("*", p, 503, 100000)
	}
	stopManager()
	must(t, startManager())
	nudge(t, rs, 1)
	time.Sleep(3 * time.Second)
	cur := get(t, ns, "down", &v1alpha1.RunnerSet{})
	if !cur.IsReady() {
		t.Errorf("a GitLab outage during a restart made the RunnerSet not Ready: %+v", cur.Status.Conditions)
	}
	now := get(t, ns, naming.For(ns, "down").Managers(), &appsv1.Deployment{})
	if now.Generation != d.Generation || ptr.Deref(now.Spec.Replicas, 1) == 0 {
		t.Error("the managers' Deployment changed while GitLab was down")
	}
	if n := gitlabCalls(srv); n != 0 {
		t.Errorf("%d GitLab calls after a restart of a converged fleet", n)
	}
}

// TestGitLabAnswering429ForMinutesIsRetriedWithBackoffNotAHotLoop: a
// RunnerSet whose runner GitLab will not create (429 throughout) is retried
// with the controller's exponential backoff; the calls are reported.
func TestGitLabAnswering429ForMinutesIsRetriedWithBackoffNotAHotLoop(t *testing.T) {
	srv := gitlabServer(t)
	t.Cleanup(srv.Reset)
	for _, p := range []string{"/api/v4/*", "/api/v4/*/*", "/api/v4/*/*/*"} {
		srv.FailNext("*", p, 429, 100000)
	}
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "throttled", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitCondition(t, rs, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonGitLabUnavailable)
	_, logStart := writeLog.since(0)
	first := gitlabCalls(srv)
	time.Sleep(10 * time.Second)
	mid := gitlabCalls(srv)
	time.Sleep(10 * time.Second)
	last := gitlabCalls(srv)
	t.Logf("GitLab calls under 429: %d until the condition said so, %d in the next 10 s, %d in the 10 s after", first, mid-first, last-mid)
	// The controller's backoff doubles from 5 ms per failed pass, and each
	// pass takes one to two seconds (two calls, the client's retry waiting
	// between them): the backoff counts passes, not seconds, so 10 s in it
	// has reached only about the eighth pass, and the next few follow
	// 0.6, 1.3, 2.6 s apart: 2 to 5 passes, 4 to 10 calls in the window,
	// depending on how long the passes take. Nothing else brings the
	// RunnerSet back: no write of the controller's own (a status that
	// changes each pass would, through the watch, at once and outside the
	// backoff; 17 calls in such a window before that was fixed), which the
	// write log checks below (one status write is allowed: under load a
	// call may time out instead, a new message). The server is the
	// suite's: other tests' RunnerSets, refused by the same 429s, are
	// counted too.
	if last-mid > 10 {
		t.Errorf("%d GitLab calls in 10 s after 10 s of 429s: the retries do not back off", last-mid)
	}
	after, _ := writeLog.since(logStart)
	var own []string
	for _, e := range after {
		if e.namespace == ns && e.kind != "POST events" && e.kind != "PATCH events" {
			own = append(own, e.kind+" "+e.name)
		}
	}
	if len(own) > 1 {
		t.Errorf("the controller wrote %d times while GitLab refused every call (%v): each such write brings the RunnerSet back at once, outside the backoff", len(own), own)
	}
	if len(srv.Runners()) != 0 {
		t.Error("a runner was created although GitLab refused every call")
	}
}
