package controller_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	runnertoken "github.com/runnerfleet/runnerfleet/runnerset/controller/token"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

const (
	pat     = "glpat-runnerfleet-test-0123456789"
	groupID = int64(42)
	patName = "gitlab-api"
)

// gitlabServer is a loopback GitLab with a group 42 whose maintainer's token
// can create and manage runners.
func gitlabServer(t *testing.T) *gitlabserver.Server {
	t.Helper()
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	srv.AddUser(pat, gitlabserver.User{Scopes: []string{gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner}, Groups: []int64{groupID}})
	return srv
}

// createdRunnerSet asks the controller to create a group runner in srv.
func createdRunnerSet(srv *gitlabserver.Server, ns, name, class string) *v1alpha1.RunnerSet {
	rs := runnerSet(ns, name, class)
	rs.Spec.GitLab = v1alpha1.GitLabSpec{
		URL: srv.URL(),
		Runner: &v1alpha1.RunnerRegistration{
			Type:              v1alpha1.RunnerTypeGroup,
			GroupID:           ptr.To(groupID),
			APITokenSecretRef: v1alpha1.SecretKeyRef{Name: patName},
			Protected:         true,
			MaximumTimeout:    &metav1.Duration{Duration: time.Hour},
			MaintenanceNote:   "owned by team " + ns,
		},
	}
	return rs
}

func runnersOf(srv *gitlabserver.Server, uid string) []gitlabserver.Runner {
	var out []gitlabserver.Runner
	for _, r := range srv.Runners() {
		if strings.Contains(r.Description, runnertoken.Marker(uid)) {
			out = append(out, r)
		}
	}
	return out
}

func storedToken(t *testing.T, ns, name string) (string, error) {
	sec := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: naming.For(ns, name).RunnerToken()}, sec); err != nil {
		return "", err
	}
	return string(sec.Data["token"]), nil
}

func TestACreatedRunnerLivesAndDiesWithItsRunnerSet(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "made", class.Name)
	rs.Spec.Tags = []string{"team-a", "docker"}
	rs.Spec.RunUntagged = true
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)

	runners := runnersOf(srv, string(cur.UID))
	if len(runners) != 1 {
		t.Fatalf("GitLab has %d runners of this RunnerSet, want 1: %+v", len(runners), runners)
	}
	r := runners[0]
	if r.Type != gitlabserver.GroupType || r.GroupID != groupID || strings.Join(r.Tags, ",") != "team-a,docker" || !r.RunUntagged ||
		r.AccessLevel != gitlabserver.RefProtected || r.MaximumTimeout != 3600 || r.MaintenanceNote != "owned by team "+ns {
		t.Errorf("runner in GitLab: %+v", r)
	}
	if cur.Status.RunnerID != r.ID {
		t.Errorf("status.runnerID %d, GitLab runner %d", cur.Status.RunnerID, r.ID)
	}
	tok, err := storedToken(t, ns, "made")
	must(t, err)
	if !srv.ValidToken(tok) {
		t.Error("the stored token does not authenticate the runner")
	}
	d := get(t, ns, naming.For(ns, "made").Managers(), &appsv1.Deployment{})
	if mounted := secretsOf(d.Spec.Template.Spec); len(mounted) != 1 || mounted[0] != naming.For(ns, "made").Config() {
		t.Errorf("managers read Secrets %v, want only the config Secret", mounted)
	}
	if cfg := get(t, ns, naming.For(ns, "made").Config(), &corev1.Secret{}); !strings.Contains(string(cfg.Data[resources.ConfigKey]), `token = "`+tok+`"`) {
		t.Error("the managers' config.toml does not hold the created runner's token")
	}
	assertNoLeak(t, ns, tok)

	// A tag change reaches GitLab; the runner and its token stay.
	update(t, cur, func(r *v1alpha1.RunnerSet) {
		r.Spec.Tags = []string{"team-a", "docker", "arm64"}
	})
	eventually(t, "tags updated in GitLab", func() error {
		r := runnersOf(srv, string(cur.UID))
		if len(r) != 1 || strings.Join(r[0].Tags, ",") != "team-a,docker,arm64" || r[0].TokenResets != 0 {
			return fmt.Errorf("%+v", r)
		}
		return nil
	})

	// The runner cannot move to another group, nor become a stored token.
	// The controller patches status meanwhile: an update that lost that
	// race is tried again on the latest version, as admission's answer is
	// what is tested.
	refused := func(change func(*v1alpha1.RunnerSet)) error {
		for {
			must(t, k8s.Get(ctx, client.ObjectKeyFromObject(cur), cur))
			changed := cur.DeepCopy()
			change(changed)
			if err := k8s.Update(ctx, changed); !apierrors.IsConflict(err) {
				return err
			}
		}
	}
	if err := refused(func(r *v1alpha1.RunnerSet) { r.Spec.GitLab.Runner.GroupID = ptr.To[int64](43) }); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("moving the runner to another group: %v", err)
	}
	if err := refused(func(r *v1alpha1.RunnerSet) {
		r.Spec.GitLab.Runner, r.Spec.GitLab.TokenSecretRef = nil, &v1alpha1.SecretKeyRef{Name: "x"}
	}); err == nil || !strings.Contains(err.Error(), "orphan a runner") {
		t.Errorf("switching to a stored token: %v", err)
	}

	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(cur), cur))
	must(t, k8s.Delete(ctx, cur))
	eventually(t, "runner deleted from GitLab and RunnerSet gone", func() error {
		if n := len(runnersOf(srv, string(cur.UID))); n != 0 {
			return fmt.Errorf("%d runners left in GitLab", n)
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), &v1alpha1.RunnerSet{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("RunnerSet still there (%v)", err)
		}
		return nil
	})
	if _, err := storedToken(t, ns, "made"); !apierrors.IsNotFound(err) {
		t.Errorf("token Secret left behind (%v)", err)
	}
}

// assertNoLeak checks that tok appears in no log line, Event or status.
func assertNoLeak(t *testing.T, ns, tok string) {
	t.Helper()
	if strings.Contains(logs.String(), tok) || strings.Contains(logs.String(), pat) {
		t.Error("a token appears in the controller's logs")
	}
	list := &v1alpha1.RunnerSetList{}
	must(t, k8s.List(ctx, list, client.InNamespace(ns)))
	for _, rs := range list.Items {
		if strings.Contains(fmt.Sprintf("%+v", rs.Status), tok) {
			t.Errorf("RunnerSet %s status holds the token", rs.Name)
		}
	}
	events := &corev1.EventList{}
	must(t, k8s.List(ctx, events, client.InNamespace(ns)))
	for _, e := range events.Items {
		if strings.Contains(e.Message, tok) || strings.Contains(e.Message, pat) {
			t.Errorf("Event %s holds a token", e.Name)
		}
	}
}

func TestAResponseLostAfterCreationIsAdoptedNotDuplicated(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	// GitLab creates the runner, then the answer is lost on the way back.
	srv.DropAfterNext("POST", "/api/v4/user/runners", 1)
	rs := createdRunnerSet(srv, ns, "lost", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	runners := runnersOf(srv, string(cur.UID))
	if len(runners) != 1 || runners[0].TokenResets != 1 {
		t.Fatalf("want the one runner created before the lost answer, adopted by a token reset; got %+v", runners)
	}
	tok, err := storedToken(t, ns, "lost")
	must(t, err)
	if !srv.ValidToken(tok) || tok != runners[0].Token {
		t.Error("the stored token is not the adopted runner's")
	}
}

func TestDuplicatesAnEarlierAttemptLeftAreDeleted(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	rs := createdRunnerSet(srv, ns, "dups", class.Name)
	must(t, k8s.Create(ctx, rs)) // no API token yet: nothing happens
	cur := waitCondition(t, rs, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonAPITokenMissing)
	for range 3 {
		srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.GroupType, GroupID: groupID, Description: "x " + runnertoken.Marker(string(cur.UID))})
	}
	newSecret(t, ns, patName, pat)
	cur = waitReady(t, rs)
	runners := runnersOf(srv, string(cur.UID))
	if len(runners) != 1 || runners[0].ID != cur.Status.RunnerID {
		t.Fatalf("want exactly the oldest runner kept; got %+v (status %d)", runners, cur.Status.RunnerID)
	}
}

func TestTokensAreRotatedBeforeTheyExpireAndTheManagersRoll(t *testing.T) {
	srv := gitlabServer(t)
	srv.SetTokenLifetime(6 * time.Second) // rotated 4 s into its life
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "rot", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	first, err := storedToken(t, ns, "rot")
	must(t, err)
	hash := get(t, ns, naming.For(ns, "rot").Managers(), &appsv1.Deployment{}).Spec.Template.Annotations[resources.AnnotationConfigHash]
	eventually(t, "token rotated", func() error {
		tok, err := storedToken(t, ns, "rot")
		if err != nil || tok == first {
			return errors.New("not yet")
		}
		if !srv.ValidToken(tok) || srv.ValidToken(first) {
			return errors.New("the new token must work and the old one not")
		}
		return nil
	})
	eventually(t, "managers rolled to the new token", func() error {
		d := get(t, ns, naming.For(ns, "rot").Managers(), &appsv1.Deployment{})
		if d.Spec.Template.Annotations[resources.AnnotationConfigHash] == hash {
			return errors.New("pod template unchanged")
		}
		return nil
	})
	if runners := runnersOf(srv, string(cur.UID)); len(runners) != 1 {
		t.Errorf("rotation made %d runners", len(runners))
	}
	srv.SetTokenLifetime(0)
	must(t, k8s.Delete(ctx, cur))
}

func TestGitLabRefusalsSayWhatToFixWithoutARetryStorm(t *testing.T) {
	srv := gitlabServer(t)
	srv.AddUser("glpat-no-scope-000000000000", gitlabserver.User{Scopes: []string{gitlabserver.ScopeReadAPI}, Groups: []int64{groupID}})
	srv.AddUser("glpat-expired-0000000000000", gitlabserver.User{Scopes: []string{gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner}, ExpiresAt: time.Now().Add(-time.Hour)})
	ns := newNamespace(t)
	class := newClass(t, nil)
	cases := []struct {
		name   string
		token  string
		mutate func(*v1alpha1.RunnerRegistration)
		reason string
		says   string
	}{
		{"unknown token", "glpat-unknown-000000000000", nil, v1alpha1.ReasonGitLabUnauthorized, "wrong, revoked or expired"},
		{"expired token", "glpat-expired-0000000000000", nil, v1alpha1.ReasonGitLabUnauthorized, "wrong, revoked or expired"},
		{"token without create_runner", "glpat-no-scope-000000000000", nil, v1alpha1.ReasonGitLabForbidden, "create_runner and manage_runner scopes"},
		{"instance runner without an admin", pat, func(r *v1alpha1.RunnerRegistration) {
			r.Type, r.GroupID = v1alpha1.RunnerTypeInstance, nil
		}, v1alpha1.ReasonGitLabForbidden, "administrator's token"},
		{"group that does not exist", pat, func(r *v1alpha1.RunnerRegistration) { r.GroupID = ptr.To[int64](404404) }, v1alpha1.ReasonGitLabNotFound, "spec.gitlab.runner.groupID"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("refused-%d", i)
			sec := newSecret(t, ns, name+"-pat", tc.token)
			rs := createdRunnerSet(srv, ns, name, class.Name)
			rs.Spec.GitLab.Runner.APITokenSecretRef.Name = sec.Name
			if tc.mutate != nil {
				tc.mutate(rs.Spec.GitLab.Runner)
			}
			must(t, k8s.Create(ctx, rs))
			cur := waitCondition(t, rs, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, tc.reason)
			if msg := condition(cur, v1alpha1.ConditionRunnerRegistered).Message; !strings.Contains(msg, tc.says) || strings.Contains(msg, tc.token) {
				t.Errorf("message %q should say %q and never hold the token", msg, tc.says)
			}
			// The pass that the status write brings and one that a late
			// event of the Secret brings may each still ask once; a retry
			// with backoff (5 ms doubling) asks five times or more in 2 s.
			before := srv.Calls("POST", "/api/v4/user/runners") + srv.Calls("GET", "/api/v4/*")
			time.Sleep(2 * time.Second)
			if after := srv.Calls("POST", "/api/v4/user/runners") + srv.Calls("GET", "/api/v4/*"); after-before > 2 {
				t.Errorf("%d more GitLab calls in 2 s after a refusal: a retry storm", after-before)
			}
		})
	}
}

func TestAGitLabOutageIsRetriedWithBackoff(t *testing.T) {
	srv := gitlabServer(t)
	srv.FailNext("POST", "/api/v4/user/runners", 503, 4)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "outage", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitCondition(t, rs, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonGitLabUnavailable)
	cur := waitReady(t, rs)
	if n := len(runnersOf(srv, string(cur.UID))); n != 1 {
		t.Errorf("%d runners after the outage", n)
	}
}

func TestARunnerDeletedInGitLabDoesNotBlockDeletion(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "gone", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	// Someone removes it in GitLab's UI.
	api, err := gitlab.New(srv.URL(), pat, gitlab.Options{})
	must(t, err)
	must(t, api.DeleteRunner(ctx, cur.Status.RunnerID))
	must(t, k8s.Delete(ctx, cur))
	eventually(t, "RunnerSet deleted although its runner was already gone (404)", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), &v1alpha1.RunnerSet{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// After many random creates, updates, deletes and controller crashes —
// including answers lost after GitLab acted — the runners in GitLab are
// exactly the RunnerSets that exist, each with one valid token in its Secret.
func TestPropertyGitLabRunnersMatchRunnerSetsThroughCrashes(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	live := map[string]bool{}
	next := 0
	for step := range 40 {
		switch op := rnd.IntN(10); {
		case op < 4 || len(live) == 0: // create
			name := fmt.Sprintf("p%03d", next)
			next++
			if rnd.IntN(3) == 0 {
				srv.DropAfterNext("POST", "/api/v4/user/runners", 1)
			}
			must(t, k8s.Create(ctx, createdRunnerSet(srv, ns, name, class.Name)))
			live[name] = true
		case op < 6: // update tags
			name := pick(rnd, live)
			cur := get(t, ns, name, &v1alpha1.RunnerSet{})
			cur.Spec.Tags = append(cur.Spec.Tags, fmt.Sprintf("s%d", step))
			_ = k8s.Update(ctx, cur) // a conflict is fine: the controller moved on
		case op < 8: // delete
			name := pick(rnd, live)
			cur := get(t, ns, name, &v1alpha1.RunnerSet{})
			must(t, k8s.Delete(ctx, cur))
			delete(live, name)
		default: // the controller crashes mid-flight and comes back
			time.Sleep(time.Duration(rnd.IntN(300)) * time.Millisecond)
			stopManager()
			if rnd.IntN(2) == 0 {
				srv.DropAfterNext("POST", "/api/v4/runners/*", 1) // a reset answer lost too
			}
			must(t, startManager())
		}
		time.Sleep(time.Duration(rnd.IntN(200)) * time.Millisecond)
	}
	srv.Reset() // no faults left pending

	eventuallyWithin(t, 2*time.Minute, "GitLab's runners are exactly the RunnerSets", func() error {
		list := &v1alpha1.RunnerSetList{}
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) != len(live) {
			return fmt.Errorf("%d RunnerSets, want %d", len(list.Items), len(live))
		}
		want := map[string]bool{}
		for _, rs := range list.Items {
			if !rs.IsReady() {
				return fmt.Errorf("%s not Ready: %+v", rs.Name, rs.Status.Conditions)
			}
			mine := runnersOf(srv, string(rs.UID))
			if len(mine) != 1 {
				return fmt.Errorf("%s has %d runners in GitLab", rs.Name, len(mine))
			}
			if !slices.Equal(mine[0].Tags, rs.Spec.Tags) {
				return fmt.Errorf("%s: GitLab has tags %v, the spec %v", rs.Name, mine[0].Tags, rs.Spec.Tags)
			}
			tok, err := storedToken(t, ns, rs.Name)
			if err != nil || !srv.ValidToken(tok) || tok != mine[0].Token {
				return fmt.Errorf("%s: stored token is not its runner's valid token (%v)", rs.Name, err)
			}
			want[mine[0].Description] = true
		}
		for _, r := range srv.Runners() {
			if !want[r.Description] {
				return fmt.Errorf("runner %d (%q) belongs to no RunnerSet: leaked", r.ID, r.Description)
			}
		}
		return nil
	})
}

func pick(rnd *rand.Rand, set map[string]bool) string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys[rnd.IntN(len(keys))]
}

func TestATokenResetOutsideRunnerfleetIsReplaced(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "reset", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	stale, err := storedToken(t, ns, "reset")
	must(t, err)

	// Someone resets the token in GitLab's UI: the stored one stops working.
	api, err := gitlab.New(srv.URL(), pat, gitlab.Options{})
	must(t, err)
	_, err = api.ResetToken(ctx, cur.Status.RunnerID)
	must(t, err)
	if srv.ValidToken(stale) {
		t.Fatal("the fake still accepts the old token")
	}
	// Any change brings the RunnerSet back to the controller.
	update(t, cur, func(r *v1alpha1.RunnerSet) {
		r.Spec.Tags = append(r.Spec.Tags, "nudge")
	})
	eventually(t, "a working token stored again", func() error {
		tok, err := storedToken(t, ns, "reset")
		if err != nil || tok == stale || !srv.ValidToken(tok) {
			return errors.New("not yet")
		}
		return nil
	})
	if n := len(runnersOf(srv, string(cur.UID))); n != 1 {
		t.Errorf("%d runners after replacing the token", n)
	}
}
