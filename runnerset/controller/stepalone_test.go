package controller_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	runnertoken "github.com/runnerfleet/runnerfleet/runnerset/controller/token"
)

// A step is read and tested alone: built with only its own dependencies
// against the suite's kube-apiserver, with no manager and no other step.
// The RunnerSets here exist only in memory, so the running controller never
// sees them.

// The class step, with nothing but a reader: a missing RunnerClass stops
// the pass and says how to fix spec.className; a class whose policy refuses
// the RunnerSet's identity stops it too; the class that allows it is accepted.
func TestClassStepAloneAcceptsOnlyAnExistingClassThatAllowsTheRunnerSet(t *testing.T) {
	ns := "team-" + rand.String(6)
	rs := runnerSet(ns, "build", "class-missing-"+rand.String(6))
	rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: "arn:aws:iam::123456789012:role/ci-" + ns + ".build"}

	done, requeue, err := controller.RunClassStep(ctx, k8s, rs)
	must(t, err)
	c := condition(rs, v1alpha1.ConditionClassAccepted)
	if done || requeue != 0 || c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonRunnerClassNotFound ||
		!strings.Contains(c.Message, "spec.className") || !strings.Contains(c.Message, rs.Spec.ClassName) {
		t.Fatalf("missing class: done=%v requeue=%v, ClassAccepted %+v; want a stopped pass, RunnerClassNotFound naming spec.className", done, requeue, c)
	}

	refusing := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Policy.Identity.AWSRoleARNPatterns = []string{"arn:aws:iam::123456789012:role/other-{namespace}"}
	})
	rs.Spec.ClassName = refusing.Name
	done, _, err = controller.RunClassStep(ctx, k8s, rs)
	must(t, err)
	if c := condition(rs, v1alpha1.ConditionClassAccepted); done || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonIdentityForbidden {
		t.Fatalf("refusing class: done=%v, ClassAccepted %+v; want a stopped pass, IdentityForbidden", done, c)
	}

	allowing := newClass(t, nil) // allows role/ci-{namespace}.*
	rs.Spec.ClassName = allowing.Name
	done, _, err = controller.RunClassStep(ctx, k8s, rs)
	must(t, err)
	if c := condition(rs, v1alpha1.ConditionClassAccepted); !done || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, allowing.Name) {
		t.Fatalf("allowing class: done=%v, ClassAccepted %+v; want the pass to go on, True naming the class", done, c)
	}
}

// The token step, with nothing but a TokenSource (the team's Secret, read
// from the API server) and a clock the test sets: before the expiry the
// Secret's annotation states, the token is accepted and the step asks to
// come back at that time; from then on it stops the pass with TokenExpired.
func TestTokenStepAloneReportsAStoredTokensExpiryByItsClock(t *testing.T) {
	ns := newNamespace(t)
	sec := newSecret(t, ns, "build-token", token)
	expires := time.Date(2030, 1, 31, 0, 0, 0, 0, time.UTC)
	sec.Annotations = map[string]string{runnertoken.AnnotationTokenExpiresAt: expires.Format(time.RFC3339)}
	must(t, k8s.Update(ctx, sec))
	tokens := runnertoken.SecretTokens{Reader: k8s}

	rs := runnerSet(ns, "build", "unused")
	done, requeue, err := controller.RunTokenStep(ctx, tokens, func() time.Time { return expires.Add(-time.Hour) }, rs)
	must(t, err)
	if c := condition(rs, v1alpha1.ConditionRunnerRegistered); !done || requeue != time.Hour || c.Status != metav1.ConditionTrue {
		t.Fatalf("an hour before expiry: done=%v requeue=%v, RunnerRegistered %+v; want the pass to go on and a requeue in 1h", done, requeue, c)
	}

	rs = runnerSet(ns, "build", "unused")
	done, _, err = controller.RunTokenStep(ctx, tokens, func() time.Time { return expires }, rs)
	must(t, err)
	c := condition(rs, v1alpha1.ConditionRunnerRegistered)
	if done || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonTokenExpired || !strings.Contains(c.Message, expires.Format(time.RFC3339)) {
		t.Fatalf("at expiry: done=%v, RunnerRegistered %+v; want a stopped pass, TokenExpired naming the expiry", done, c)
	}
	if strings.Contains(c.Message, token) {
		t.Fatal("the condition carries the token")
	}
}

// The class step alone refuses a job timeout the class's job nodes cannot
// keep a job for, naming the field and the limit, and accepts the longest
// one they can.
func TestClassStepAloneRefusesAJobTimeoutNoJobNodeKeeps(t *testing.T) {
	class := newClass(t, nil)
	rs := runnerSet("team-"+rand.String(6), "build", class.Name)
	rs.Spec.GitLab = v1alpha1.GitLabSpec{Runner: &v1alpha1.RunnerRegistration{
		Type: v1alpha1.RunnerTypeInstance, APITokenSecretRef: v1alpha1.SecretKeyRef{Name: "pat"},
		MaximumTimeout: &metav1.Duration{Duration: capacity.MaxKarpenterJobTimeout + time.Second},
	}}
	done, _, err := controller.RunClassStep(ctx, k8s, rs)
	must(t, err)
	c := condition(rs, v1alpha1.ConditionClassAccepted)
	if done || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonJobTimeoutTooLong ||
		!strings.Contains(c.Message, "spec.gitlab.runner.maximumTimeout") || !strings.Contains(c.Message, capacity.MaxKarpenterJobTimeout.String()) {
		t.Fatalf("done=%v, ClassAccepted %+v; want a stopped pass, JobTimeoutTooLong naming the field and %s", done, c, capacity.MaxKarpenterJobTimeout)
	}
	rs.Spec.GitLab.Runner.MaximumTimeout.Duration = capacity.MaxKarpenterJobTimeout
	done, _, err = controller.RunClassStep(ctx, k8s, rs)
	must(t, err)
	if c := condition(rs, v1alpha1.ConditionClassAccepted); !done || c.Status != metav1.ConditionTrue {
		t.Fatalf("the longest job timeout allowed: done=%v, ClassAccepted %+v", done, c)
	}
}
