package controller_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
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
	// No cloud identity: job pods run as the jobs namespace's default
	// ServiceAccount (Kubernetes' own, which envtest does not create:
	// impersonated by name all the same).
	jobSA := v1alpha1.Effective(rs, class).JobServiceAccount
	if jobSA != "" {
		t.Fatalf("a RunnerSet without a cloud identity runs its jobs as %s, want the namespace's default", jobSA)
	}
	jobSA = "default"
	job := serviceAccount(t, jobs, jobSA)
	nobody := serviceAccount(t, ns, "nobody-"+rand.String(5)) // no Role at all
	managerUser := "system:serviceaccount:" + ns + ":" + n.ManagerServiceAccount()
	eventually(t, "the managers' RoleBindings are in effect", func() error {
		if !can(t, managerUser, jobs, "create", "pods", "") {
			return errors.New("not yet")
		}
		return nil
	})

	getSecret := func(ns, name string) func(client.Client) error {
		return func(c client.Client) error {
			return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{})
		}
	}
	podIn := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{ServiceAccountName: jobSA, AutomountServiceAccountToken: ptr.To(false), RestartPolicy: corev1.RestartPolicyNever,
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
			{"create, read and delete a job Secret in the jobs namespace", true, createThenDelete(jobSecret(jobs))},
			{"create, read and delete a job pod in the jobs namespace", true, createThenDelete(jobPod(jobs))},
		})
		// The admin is the negative control of what the manager may not do.
		runChecks(t, manager, k8s, []check{
			{"read the GitLab API token", false, getSecret(ns, patName)},
			{"read the created runner's token Secret", false, getSecret(ns, n.RunnerToken())},
			{"read its own config Secret through the API (the kubelet mounts it)", false, getSecret(ns, n.Config())},
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

	t.Run("pod security of the jobs namespace", func(t *testing.T) {
		// Baseline: a privileged job pod is refused by the API server's Pod
		// Security admission, even for the managers, which may create pods
		// there. The control: the same pod where no level is enforced.
		privileged := podIn(jobs, "runner-privileged")
		privileged.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		err := manager.Create(ctx, privileged, client.DryRunAll)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
			t.Errorf("a privileged job pod in the jobs namespace: %v, want refused by PodSecurity", err)
		}
		privileged.Namespace, privileged.Spec.ServiceAccountName = ns, ""
		if err := k8s.Create(ctx, privileged, client.DryRunAll); err != nil {
			t.Errorf("negative control: a privileged pod where no level is enforced was refused too: %v", err)
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

// nothingCreated fails when any object of RunnerSet ns/name exists: its
// managers, config, ServiceAccounts, Role, capacity or runner token.
func nothingCreated(t *testing.T, ns, name string) {
	t.Helper()
	n := naming.For(ns, name)
	for _, o := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.Managers()}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.Config()}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.RunnerToken()}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.ManagerServiceAccount()}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.ManagerRole()}},
	} {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s/%s was created (%v)", o, o.GetNamespace(), o.GetName(), err)
		}
	}
	np := &unstructured.Unstructured{}
	np.SetGroupVersionKind(capacity.KarpenterGroupVersion.WithKind("NodePool"))
	if err := k8s.Get(ctx, client.ObjectKey{Name: n.Capacity()}, np); !apierrors.IsNotFound(err) {
		t.Errorf("NodePool %s was created (%v)", n.Capacity(), err)
	}
}

// Issue 19, bad input: a jobs namespace that exists and is not the
// controller's, one the RunnerClass forbids, and one that would be another
// team's: a condition naming the field and the fix, and nothing created.
func TestBadJobsNamespacesAreRefusedNamingTheFieldAndNothingIsCreated(t *testing.T) {
	t.Run("a namespace that exists and is not runnerfleet's", func(t *testing.T) {
		ns := newNamespace(t)
		class := newClass(t, nil)
		newSecret(t, ns, "squat-token", token)
		jobs := naming.For(ns, "squat").JobsNamespace()
		theirs := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: jobs, Labels: map[string]string{"owner": "someone-else"}}}
		must(t, k8s.Create(ctx, theirs))
		t.Cleanup(func() { _ = k8s.Delete(ctx, theirs) })
		rs := runnerSet(ns, "squat", class.Name)
		must(t, k8s.Create(ctx, rs))
		cur := waitCondition(t, rs, v1alpha1.ConditionJobsNamespaceReady, metav1.ConditionFalse, v1alpha1.ReasonJobsNamespaceTaken)
		msg := condition(cur, v1alpha1.ConditionJobsNamespaceReady).Message
		for _, want := range []string{"jobs namespace " + jobs, "spec.jobs.namespace is empty", "not created by runnerfleet", "Delete namespace " + jobs, "recreate the RunnerSet"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q does not say %q", msg, want)
			}
		}
		if r := condition(cur, v1alpha1.ConditionReady); r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.ReasonJobsNamespaceTaken {
			t.Errorf("Ready %s/%s", r.Status, r.Reason)
		}
		nothingCreated(t, ns, "squat")
		got := get(t, "", jobs, &corev1.Namespace{})
		if got.Labels["owner"] != "someone-else" || got.Labels[resources.LabelOwnerName] != "" || got.Annotations[resources.AnnotationSpecHash] != "" {
			t.Errorf("the controller took the namespace over: %+v", got.ObjectMeta)
		}
		list := &rbacv1.RoleList{}
		must(t, k8s.List(ctx, list, client.InNamespace(jobs)))
		if len(list.Items) != 0 {
			t.Errorf("Roles written into a namespace that is not runnerfleet's: %d", len(list.Items))
		}

		// Deleting the refused RunnerSet neither waits for pods of the
		// namespace that is not its own nor deletes that namespace.
		theirPod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: jobs, Name: "theirs", Labels: map[string]string{resources.LabelRunnerSet: "squat"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "alpine:3.22"}}},
		}
		must(t, k8s.Create(ctx, theirPod))
		must(t, k8s.Delete(ctx, rs))
		eventually(t, "the refused RunnerSet gone", func() error {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), &v1alpha1.RunnerSet{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
		if got := get(t, "", jobs, &corev1.Namespace{}); !got.DeletionTimestamp.IsZero() {
			t.Error("the controller deleted a namespace it did not create")
		}
	})

	t.Run("a namespace the RunnerClass forbids", func(t *testing.T) {
		ns := newNamespace(t)
		class := newClass(t, func(c *v1alpha1.RunnerClass) { c.Spec.Policy.JobNamespaces = []string{"ci-{namespace}"} })
		for i, tc := range []struct{ jobs, says string }{
			{"ci-other-team", "matching ci-" + ns},
			{ns, "the RunnerSet's own namespace"},
		} {
			name := fmt.Sprintf("forbidden-%d", i)
			newSecret(t, ns, name+"-token", token)
			rs := runnerSet(ns, name, class.Name)
			rs.Spec.Jobs.Namespace = tc.jobs
			must(t, k8s.Create(ctx, rs))
			cur := waitCondition(t, rs, v1alpha1.ConditionClassAccepted, metav1.ConditionFalse, v1alpha1.ReasonJobsNamespaceForbidden)
			msg := condition(cur, v1alpha1.ConditionClassAccepted).Message
			for _, want := range []string{"spec.jobs.namespace", tc.says, "without spec.jobs.namespace to use " + naming.For(ns, name).JobsNamespace()} {
				if !strings.Contains(msg, want) {
					t.Errorf("%s: message %q does not say %q", tc.jobs, msg, want)
				}
			}
			nothingCreated(t, ns, name)
			if tc.jobs != ns {
				if err := k8s.Get(ctx, client.ObjectKey{Name: tc.jobs}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
					t.Errorf("namespace %s was created (%v)", tc.jobs, err)
				}
			}
		}
	})

	t.Run("another team's jobs namespace", func(t *testing.T) {
		// Two classes' patterns reach one name from two namespaces: ci-x-ci
		// is "{namespace}-ci" of namespace ci-x and "ci-{namespace}" of x-ci.
		srv := gitlabServer(t)
		r := "x" + rand.String(6)
		first, second := newNamespaceNamed(t, "ci-"+r), newNamespaceNamed(t, r+"-ci")
		shared := "ci-" + r + "-ci"
		class := newClass(t, func(c *v1alpha1.RunnerClass) {
			c.Spec.Policy.JobNamespaces = []string{"{namespace}-ci", "ci-{namespace}"}
		})
		newSecret(t, first, "a-token", token)
		a := runnerSet(first, "a", class.Name)
		a.Spec.Jobs.Namespace = shared
		must(t, k8s.Create(ctx, a))
		waitReady(t, a)
		t.Cleanup(func() { _ = k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shared}}) })

		newSecret(t, second, patName, pat)
		b := createdRunnerSet(srv, second, "b", class.Name)
		b.Spec.Jobs.Namespace = shared
		must(t, k8s.Create(ctx, b))
		cur := waitCondition(t, b, v1alpha1.ConditionJobsNamespaceReady, metav1.ConditionFalse, v1alpha1.ReasonJobsNamespaceTaken)
		msg := condition(cur, v1alpha1.ConditionJobsNamespaceReady).Message
		for _, want := range []string{"spec.jobs.namespace: namespace " + shared, "jobs namespace of RunnerSet " + first + "/a", "recreate the RunnerSet"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q does not say %q", msg, want)
			}
		}
		nothingCreated(t, second, "b")
		if len(runnersOf(srv, string(cur.UID))) != 0 {
			t.Error("a runner was created in GitLab for the refused RunnerSet")
		}
		if l := get(t, "", shared, &corev1.Namespace{}).Labels; l[resources.LabelOwnerNamespace] != first || l[resources.LabelOwnerName] != "a" {
			t.Errorf("the first team's jobs namespace changed hands: %v", l)
		}
		waitReady(t, a)
	})
}

// The jobs namespace's objects carry no ownerReference (none crosses
// namespaces), so their owner labels bring the RunnerSet back when someone
// widens the managers' RoleBinding there (another subject) or deletes the
// NetworkPolicy.
func TestAnEditedJobsNamespaceObjectIsPutBack(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "back-token", token)
	rs := runnerSet(ns, "back", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	n := naming.For(ns, "back")
	jobs := n.JobsNamespace()

	rb := get(t, jobs, n.ManagerExecutorBinding(), &rbacv1.RoleBinding{})
	want := len(rb.Subjects)
	rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"})
	delete(rb.Annotations, resources.AnnotationSpecHash)
	must(t, k8s.Update(ctx, rb))
	must(t, k8s.Delete(ctx, get(t, jobs, n.JobsNetworkPolicy(), &networkingv1.NetworkPolicy{})))
	eventually(t, "the RoleBinding and the NetworkPolicy put back", func() error {
		if got := len(get(t, jobs, n.ManagerExecutorBinding(), &rbacv1.RoleBinding{}).Subjects); got != want {
			return fmt.Errorf("the RoleBinding has %d subjects, want %d", got, want)
		}
		return k8s.Get(ctx, client.ObjectKey{Namespace: jobs, Name: n.JobsNetworkPolicy()}, &networkingv1.NetworkPolicy{})
	})
}

// The managers' NetworkPolicy (no job pod reaches a manager) is written
// with the managers, selects their pods, and is put back when deleted.
func TestTheManagersNetworkPolicyIsWrittenAndPutBack(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "fence-token", token)
	rs := runnerSet(ns, "fence", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	n := naming.For(ns, "fence")
	np := get(t, ns, n.Managers(), &networkingv1.NetworkPolicy{})
	pods, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	must(t, err)
	if tmpl := get(t, ns, n.Managers(), &appsv1.Deployment{}).Spec.Template.Labels; !pods.Matches(labels.Set(tmpl)) {
		t.Fatalf("the managers' NetworkPolicy selects %s, not the manager pods (%v)", pods, tmpl)
	}
	must(t, k8s.Delete(ctx, np))
	eventually(t, "the managers' NetworkPolicy put back", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Managers()}, &networkingv1.NetworkPolicy{})
	})
}
