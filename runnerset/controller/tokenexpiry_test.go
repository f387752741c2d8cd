package controller_test

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	runnertoken "github.com/runnerfleet/runnerfleet/runnerset/controller/token"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// A token the team stored expires as its Secret's annotation says: the
// RunnerSet says so when that time comes (nothing else happens then: the
// controller came back by itself), tells the team what to do, leaves the
// running managers alone, and is Ready again once a new token is stored.
func TestStoredTokenExpiryIsReportedWithWhatToDoAndManagersKeepRunning(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	sec := newSecret(t, ns, "build-token", token)
	sec.Annotations = map[string]string{runnertoken.AnnotationTokenExpiresAt: time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.RFC3339)}
	must(t, k8s.Update(ctx, sec))
	rs := runnerSet(ns, "build", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	dep := get(t, ns, naming.For(ns, "build").Managers(), &appsv1.Deployment{})

	// The team learns its token expires in a few seconds: the controller
	// comes back at that time by itself.
	expires := time.Now().Add(4 * time.Second).UTC().Truncate(time.Second)
	sec = get(t, ns, "build-token", &corev1.Secret{})
	sec.Annotations[runnertoken.AnnotationTokenExpiresAt] = expires.Format(time.RFC3339)
	must(t, k8s.Update(ctx, sec))
	cur = waitCondition(t, cur, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonTokenExpired)
	msg := condition(cur, v1alpha1.ConditionRunnerRegistered).Message
	for _, want := range []string{"Secret " + ns + "/build-token", expires.Format(time.RFC3339), "reset", "spec.gitlab.runner"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the TokenExpired message does not say %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, token) {
		t.Errorf("the condition carries the token: %s", msg)
	}
	if cur.IsReady() {
		t.Error("Ready with an expired token")
	}
	after := get(t, ns, dep.Name, &appsv1.Deployment{})
	if after.Generation != dep.Generation || after.DeletionTimestamp != nil {
		t.Errorf("the managers' Deployment changed when the token expired (generation %d → %d)", dep.Generation, after.Generation)
	}

	// The team stores a new token with a later expiry: Ready again.
	sec = get(t, ns, "build-token", &corev1.Secret{})
	sec.Data["token"] = []byte(token + "-new")
	sec.Annotations[runnertoken.AnnotationTokenExpiresAt] = time.Now().Add(90 * 24 * time.Hour).UTC().Format(time.RFC3339)
	must(t, k8s.Update(ctx, sec))
	waitReady(t, cur)
}
