package controller_test

import (
	"errors"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// serviceAccount is a client acting as the ServiceAccount ns/name, as its
// pods would: the API server authenticates it as that user and its groups.
func serviceAccount(t *testing.T, ns, name string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	must(t, err)
	return c
}

// can asks the API server (SubjectAccessReview) whether c's user may do
// verb on resource (with subresource after '/') in ns, by name when given.
func can(t *testing.T, user, ns, verb, resource, name string) bool {
	t.Helper()
	res, sub := resource, ""
	for i := range resource {
		if resource[i] == '/' {
			res, sub = resource[:i], resource[i+1:]
		}
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		Groups:             []string{"system:serviceaccounts", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: res, Subresource: sub, Name: name},
	}}
	must(t, k8s.Create(ctx, sar))
	return sar.Status.Allowed
}

// check runs one request as a ServiceAccount and wants it allowed or
// forbidden. Its control runs the same request where the outcome must be
// the other one (the admin for a forbidden request, a ServiceAccount with
// no Role for an allowed one), so a check cannot pass because the request
// itself is malformed or the object missing.
type check struct {
	what    string
	allowed bool
	do      func(c client.Client) error
}

func runChecks(t *testing.T, as client.Client, control client.Client, checks []check) {
	t.Helper()
	for _, c := range checks {
		err := c.do(as)
		switch {
		case c.allowed && err != nil:
			t.Errorf("%s: want allowed, got %v", c.what, err)
		case !c.allowed && !apierrors.IsForbidden(err):
			t.Errorf("%s: want forbidden, got %v", c.what, err)
		}
		cerr := c.do(control)
		switch {
		case c.allowed && !apierrors.IsForbidden(cerr):
			t.Errorf("%s, negative control: a ServiceAccount without the Role was not forbidden (%v): the check proves nothing", c.what, cerr)
		case !c.allowed && cerr != nil:
			t.Errorf("%s, negative control: the admin could not do it either (%v): the check proves nothing", c.what, cerr)
		}
	}
}

// Issue 19, item 3: with the Roles the controller generated, on the real
// API server, acting as the manager's and the job's ServiceAccounts.
func TestManagersAndJobsHoldOnlyWhatTheyNeedOnTheRealAPIServer(t *testing.T) {
	srv := gitlabServer(t)
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, patName, pat)
	newSecret(t, ns, "team-secret", "a team's own Secret")
	rs := createdRunnerSet(srv, ns, "least", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	n := naming.For(ns, "least")
	jobs := n.JobsNamespace()

	manager := serviceAccount(t, ns, n.ManagerServiceAccount())
	job := serviceAccount(t, jobs, n.JobServiceAccount())
	nobody := serviceAccount(t, ns, "nobody-"+rand.String(5)) // no Role at all
	managerUser := "system:serviceaccount:" + ns + ":" + n.ManagerServiceAccount()
	eventually(t, "the managers' RoleBindings are in effect", func() error {
		if !can(t, managerUser, jobs, "create", "pods", "") || !can(t, managerUser, ns, "get", "secrets", n.Config()) {
			return errors.New("not yet")
		}
		return nil
	})

	getSecret := func(ns, name string) func(client.Client) error {
		return func(c client.Client) error { return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{}) }
	}
	podIn := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{ServiceAccountName: n.JobServiceAccount(), RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "build", Image: "alpine:3.22"}}},
		}
	}
	seq := 0
	// createThenDelete creates obj (a fresh name each time) and deletes it
	// again with the same client: what the executor does for every job.
	createThenDelete := func(obj func(name string) client.Object) func(client.Client) error {
		return func(c client.Client) error {
			seq++
			o := obj(fmt.Sprintf("runner-job-%d", seq))
			if err := c.Create(ctx, o); err != nil {
				return err
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return err
			}
			return c.Delete(ctx, o)
		}
	}
	jobSecret := func(ns string) func(string) client.Object {
		return func(name string) client.Object {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{"config.json": "{}"}}
		}
	}
	jobPod := func(ns string) func(string) client.Object {
		return func(name string) client.Object { return podIn(ns, name) }
	}

	t.Run("as the manager", func(t *testing.T) {
		runChecks(t, manager, nobody, []check{
			{"read its own config Secret (its runner token) by name", true, getSecret(ns, n.Config())},
			{"create, read and delete a job Secret in the jobs namespace", true, createThenDelete(jobSecret(jobs))},
			{"create, read and delete a job pod in the jobs namespace", true, createThenDelete(jobPod(jobs))},
		})
		// The admin is the negative control of what the manager may not do.
		runChecks(t, manager, k8s, []check{
			{"read the GitLab API token", false, getSecret(ns, patName)},
			{"read the created runner's token Secret", false, getSecret(ns, n.RunnerToken())},
			{"read a team's other Secret", false, getSecret(ns, "team-secret")},
			{"list the team's Secrets", false, func(c client.Client) error { return c.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)) }},
			{"create a Secret in the team's namespace", false, createThenDelete(jobSecret(ns))},
			{"create a pod in the team's namespace", false, createThenDelete(jobPod(ns))},
			{"replace its own config Secret", false, func(c client.Client) error {
				s := &corev1.Secret{}
				must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Config()}, s))
				return c.Update(ctx, s, client.DryRunAll)
			}},
			{"delete its own config Secret", false, func(c client.Client) error {
				return c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.Config()}}, client.DryRunAll)
			}},
			{"list the jobs namespace's Secrets", false, func(c client.Client) error { return c.List(ctx, &corev1.SecretList{}, client.InNamespace(jobs)) }},
		})
		// Subresources the executor needs, which envtest (no kubelet) cannot
		// serve: asked of the authorizer.
		for _, sub := range []string{"pods/exec", "pods/attach"} {
			if !can(t, managerUser, jobs, "create", sub, "") {
				t.Errorf("the manager may not create %s in the jobs namespace", sub)
			}
			if can(t, managerUser, ns, "create", sub, "") {
				t.Errorf("the manager may create %s in the team's namespace", sub)
			}
		}
	})

	t.Run("as the job", func(t *testing.T) {
		inJobs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: jobs, Name: "runner-registry-creds"}, StringData: map[string]string{"x": "y"}}
		must(t, manager.Create(ctx, inJobs))
		runChecks(t, job, k8s, []check{
			{"read a job Secret in the jobs namespace", false, getSecret(jobs, inJobs.Name)},
			{"list the jobs namespace's Secrets", false, func(c client.Client) error { return c.List(ctx, &corev1.SecretList{}, client.InNamespace(jobs)) }},
			{"read the GitLab API token", false, getSecret(ns, patName)},
			{"read the managers' config Secret", false, getSecret(ns, n.Config())},
			{"read the created runner's token Secret", false, getSecret(ns, n.RunnerToken())},
			{"list the team's Secrets", false, func(c client.Client) error { return c.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)) }},
		})
	})

	// The controller alone reads the API token: no Role or RoleBinding in
	// either namespace names it, nor grants Secrets without a name in the
	// team's namespace.
	cur := &v1alpha1.RunnerSet{}
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(rs), cur))
	if cur.Status.JobsNamespace != jobs {
		t.Errorf("status.jobsNamespace %q, want %q", cur.Status.JobsNamespace, jobs)
	}
}
