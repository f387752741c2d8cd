package controller_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	runnertoken "github.com/runnerfleet/runnerfleet/runnerset/controller/token"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// managersConfig is the config.toml a manager that starts now would run:
// the file in the Secret its pod template mounts.
func managersConfig(t *testing.T, ns, name string) (config map[string]any, hash string) {
	t.Helper()
	n := naming.For(ns, name)
	d := get(t, ns, n.Managers(), &appsv1.Deployment{})
	mounted := secretsOf(d.Spec.Template.Spec)
	if len(mounted) != 1 || mounted[0] != n.Config() {
		t.Fatalf("the managers read Secrets %v, not only the controller's %s", mounted, n.Config())
	}
	sec := get(t, ns, n.Config(), &corev1.Secret{})
	if !metav1.IsControlledBy(sec, get(t, ns, name, &v1alpha1.RunnerSet{})) {
		t.Fatalf("Secret %s is not the controller's", n.Config())
	}
	if _, err := toml.Decode(string(sec.Data[resources.ConfigKey]), &config); err != nil {
		t.Fatalf("config.toml does not parse: %v", err)
	}
	return config, d.Spec.Template.Annotations[resources.AnnotationConfigHash]
}

func tokenOf(config map[string]any) any {
	return config["runners"].([]map[string]any)[0]["token"]
}

// 11.1: whoever can write the team's token Secret cannot inject anything
// into a manager's config.toml: a refused token never reaches a manager,
// not even one that starts after the refusal, and config.toml keeps the
// last token the controller accepted.
func TestARefusedTokenNeverReachesAManagerEvenOneThatRestarts(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, func(c *v1alpha1.RunnerClass) { c.Spec.GitLabURL = "https://gitlab.example.com" })
	sec := newSecret(t, ns, "inj-token", token)
	rs := runnerSet(ns, "inj", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	before, hash := managersConfig(t, ns, "inj")
	if tokenOf(before) != token {
		t.Fatalf("config.toml holds token %q", tokenOf(before))
	}

	for _, bad := range []string{
		token + "|;s|https://gitlab.example.com|https://evil.example.com", // sed commands
		token + "&",  // sed's whole match
		token + "\n", // a pasted newline
		token + "\"\nurl = \"https://evil.example.com\"", // TOML
	} {
		sec.Data["token"] = []byte(bad)
		must(t, k8s.Update(ctx, sec))
		waitCondition(t, rs, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonTokenMalformed)
		// A manager that restarts now mounts the same Secret.
		after, h := managersConfig(t, ns, "inj")
		if h != hash || tokenOf(after) != token || fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("after the refused token %q the managers' config changed (hash %s -> %s):\n%v", bad, hash, h, after)
		}
	}
	// The team fixes its Secret: the managers roll onto the new token.
	sec.Data["token"] = []byte(token + "-next")
	must(t, k8s.Update(ctx, sec))
	waitReady(t, rs)
	after, h := managersConfig(t, ns, "inj")
	if tokenOf(after) != token+"-next" || h == hash {
		t.Fatalf("a valid new token did not reach the managers: token %q, hash %s", tokenOf(after), h)
	}
	if after["runners"].([]map[string]any)[0]["url"] != "https://gitlab.example.com" {
		t.Fatalf("url changed: %v", after["runners"])
	}
}

// 11.1: the config Secret is the controller's alone; an edit is put back.
func TestAnEditedConfigSecretIsPutBack(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "edit-token", token)
	rs := runnerSet(ns, "edit", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	n := naming.For(ns, "edit")
	sec := get(t, ns, n.Config(), &corev1.Secret{})
	good := string(sec.Data[resources.ConfigKey])
	sec.Data[resources.ConfigKey] = []byte(strings.Replace(good, "https://gitlab.com", "https://evil.example.com", 1))
	must(t, k8s.Update(ctx, sec))
	eventually(t, "config.toml restored", func() error {
		if got := string(get(t, ns, n.Config(), &corev1.Secret{}).Data[resources.ConfigKey]); got != good {
			return errors.New("still edited")
		}
		return nil
	})
}

// 11.6: an object the RunnerSet needs that someone else made, without
// runnerfleet's labels (so the controller's cache cannot see it), stops
// the step that needs it with a condition naming it; it is not touched.
func TestAnUnlabelledObjectInTheWayIsNamedInItsStepsCondition(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "way-token", token)
	n := naming.For(ns, "way")
	theirs := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.ManagerServiceAccount(),
		Annotations: map[string]string{"owner": "someone-else"}}}
	must(t, k8s.Create(ctx, theirs))
	rs := runnerSet(ns, "way", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitCondition(t, rs, v1alpha1.ConditionIdentityReady, metav1.ConditionFalse, v1alpha1.ReasonObjectInTheWay)
	msg := condition(cur, v1alpha1.ConditionIdentityReady).Message
	for _, want := range []string{"ServiceAccount " + ns + "/" + n.ManagerServiceAccount(), "delete or rename it"} {
		if !strings.Contains(msg, want) {
			t.Errorf("IdentityReady message %q does not say %q", msg, want)
		}
	}
	if r := condition(cur, v1alpha1.ConditionReady); r.Reason != v1alpha1.ReasonObjectInTheWay || !strings.Contains(r.Message, n.ManagerServiceAccount()) {
		t.Errorf("Ready does not carry the cause: %+v", r)
	}
	got := get(t, ns, n.ManagerServiceAccount(), &corev1.ServiceAccount{})
	if len(got.OwnerReferences) > 0 || got.Annotations["owner"] != "someone-else" || got.Annotations[resources.AnnotationSpecHash] != "" {
		t.Errorf("the controller took the ServiceAccount over: %+v", got.ObjectMeta)
	}
	// Once it is gone the RunnerSet proceeds.
	must(t, k8s.Delete(ctx, theirs))
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Managers.Concurrent = 11 }) // no watch sees the deletion: nudge
	waitReady(t, rs)
}

// 11.5: a Secret the team made under the name of a created runner's token
// Secret is neither overwritten, nor read as the token, nor deleted.
func TestAUsersSecretIsNeitherTakenOverNorDeleted(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	name := naming.For(ns, "mine").RunnerToken()
	users := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string][]byte{"token": []byte("the-teams-own-data"), "other": []byte("keep")}}
	must(t, k8s.Create(ctx, users))
	rs := createdRunnerSet(srv, ns, "mine", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitCondition(t, rs, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonObjectInTheWay)
	if msg := condition(cur, v1alpha1.ConditionRunnerRegistered).Message; !strings.Contains(msg, "Secret "+ns+"/"+name) {
		t.Errorf("message does not name the Secret: %q", msg)
	}
	if n := len(runnersOf(srv, string(cur.UID))); n != 0 {
		t.Errorf("%d runners created in GitLab while their token could not be kept", n)
	}
	must(t, k8s.Delete(ctx, cur))
	eventually(t, "RunnerSet gone", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), &v1alpha1.RunnerSet{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	got := get(t, ns, name, &corev1.Secret{})
	if string(got.Data["token"]) != "the-teams-own-data" || string(got.Data["other"]) != "keep" || len(got.OwnerReferences) > 0 {
		t.Errorf("the team's Secret was taken over: %+v", got)
	}
}

// 11.4: deleting a namespace (the real namespace controller of
// kube-controller-manager deletes everything in it at once, the API token
// Secret included) ends with the runner gone from GitLab, the namespace
// gone, and no finalizer left behind.
func TestDeletingTheNamespaceReleasesTheRunnerAndFinishes(t *testing.T) {
	stop, err := env.StartControllers("namespace")
	must(t, err)
	defer stop()
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	var uids []string
	for _, name := range []string{"one", "two"} { // two RunnerSets share the API token
		rs := createdRunnerSet(srv, ns, name, class.Name)
		must(t, k8s.Create(ctx, rs))
		cur := waitReady(t, rs)
		uids = append(uids, string(cur.UID))
		if api := get(t, ns, patName, &corev1.Secret{}); !controllerutil.ContainsFinalizer(api, runnertoken.ReleaseFinalizer(cur)) {
			t.Fatalf("the API token Secret is not held for %s: %v", name, api.Finalizers)
		}
	}
	// GitLab is down while the namespace controller deletes everything in
	// the namespace (pods first, then the rest at once): the RunnerSets
	// cannot release their runners before the API token Secret is deleted.
	srv.FailNext("GET", "/api/v4/groups/*/runners", 503, 1<<30)
	must(t, k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	eventuallyWithin(t, time.Minute, "the namespace controller deleted the API token Secret", func() error {
		api := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: patName}, api); err == nil && api.DeletionTimestamp.IsZero() {
			return errors.New("API token Secret not deleted yet")
		}
		return nil
	})
	srv.Reset() // GitLab is back
	eventuallyWithin(t, 2*time.Minute, "namespace gone with both runners released", func() error {
		for _, uid := range uids {
			if n := len(runnersOf(srv, uid)); n != 0 {
				return fmt.Errorf("%d runners of %s left in GitLab", n, uid)
			}
		}
		err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		if !apierrors.IsNotFound(err) {
			left := &v1alpha1.RunnerSetList{}
			_ = k8s.List(ctx, left, client.InNamespace(ns))
			var conds []string
			for _, rs := range left.Items {
				if c := condition(&rs, v1alpha1.ConditionReady); c != nil {
					conds = append(conds, rs.Name+": "+c.Message)
				}
			}
			return fmt.Errorf("namespace still there (%v); RunnerSets left: %v", err, conds)
		}
		return nil
	})
}

// A RunnerSet that moves to another API token Secret lets go of the old
// one, which would otherwise stay held (and its namespace Terminating).
func TestAnAPITokenSecretNoLongerNamedIsLetGo(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	newSecret(t, ns, "gitlab-api-new", pat)
	rs := createdRunnerSet(srv, ns, "moves", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.GitLab.Runner.APITokenSecretRef.Name = "gitlab-api-new" })
	eventually(t, "the old Secret let go, the new one held", func() error {
		if old := get(t, ns, patName, &corev1.Secret{}); controllerutil.ContainsFinalizer(old, runnertoken.ReleaseFinalizer(cur)) {
			return fmt.Errorf("old Secret still held: %v", old.Finalizers)
		}
		if n := get(t, ns, "gitlab-api-new", &corev1.Secret{}); !controllerutil.ContainsFinalizer(n, runnertoken.ReleaseFinalizer(cur)) {
			return fmt.Errorf("new Secret not held: %v", n.Finalizers)
		}
		return nil
	})
	must(t, k8s.Delete(ctx, cur))
	eventually(t, "no Secret held after deletion", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), &v1alpha1.RunnerSet{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("RunnerSet still there (%v)", err)
		}
		for _, name := range []string{patName, "gitlab-api-new"} {
			if s := get(t, ns, name, &corev1.Secret{}); len(s.Finalizers) > 0 {
				return fmt.Errorf("Secret %s still held: %v", name, s.Finalizers)
			}
		}
		return nil
	})
}

// A RunnerSet whose API token Secret is gone with its namespace (made
// before the Secret was held) still lets the namespace go: an Event names
// the runner left in GitLab.
func TestANamespaceWhoseAPITokenIsAlreadyGoneStillFinishes(t *testing.T) {
	stop, err := env.StartControllers("namespace")
	must(t, err)
	defer stop()
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	rs := createdRunnerSet(srv, ns, "old", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	// As a RunnerSet from before ReleaseFinalizer: the token is not held.
	api := get(t, ns, patName, &corev1.Secret{})
	controllerutil.RemoveFinalizer(api, runnertoken.ReleaseFinalizer(cur))
	stopManager()
	must(t, k8s.Update(ctx, api))
	must(t, k8s.Delete(ctx, api))
	must(t, startManager())
	must(t, k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	eventuallyWithin(t, 2*time.Minute, "namespace gone", func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace still there (%v)", err)
		}
		return nil
	})
	if n := len(runnersOf(srv, string(cur.UID))); n != 1 {
		t.Errorf("%d runners in GitLab; the one left is expected, named by an Event", n)
	}
	if !strings.Contains(logs.String(), "Runner left in GitLab") {
		t.Error("no log line names the runner left in GitLab")
	}
}
