package controller_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// Issue 19, item 4: a RunnerSet from before jobs namespaces (its jobs, job
// ServiceAccount and the managers' job rights in the team's namespace)
// moves to its jobs namespace with no job lost: the new managers take jobs
// in the jobs namespace while an old manager still finishes its job in the
// team's namespace (exec, then deleting the job's pod), and only once the
// old manager and its job are gone do the managers lose their rights in
// the team's namespace and the old job ServiceAccount go.
func TestAnExistingRunnerSetMovesToItsJobsNamespaceWithoutLosingAJob(t *testing.T) {
	ns := newNamespaceNamed(t, manualPrefix+rand.String(8))
	class := newClass(t, nil)
	newSecret(t, ns, "old-token", token)
	rs := runnerSet(ns, "old", class.Name)
	n := naming.For(ns, "old")

	// The layout before jobs namespaces, as the previous controller left
	// it, written while no controller runs.
	stopManager()
	running := false
	t.Cleanup(func() {
		if !running {
			_ = startManager()
		}
	})
	must(t, k8s.Create(ctx, rs))
	own := func(o client.Object) client.Object {
		must(t, controllerutil.SetControllerReference(rs, o, env.Scheme))
		return o
	}
	oldJobSA := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.JobServiceAccount(), Labels: resources.Labels(rs, "job")}}
	for _, o := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.ManagerRole(), Labels: resources.Labels(rs, "manager")}, Rules: resources.ExecutorRules()},
		resources.LegacyManagerRoleBinding(rs),
		resources.ManagerServiceAccountFor(rs, v1alpha1.Effective(rs, nil)),
		oldJobSA,
	} {
		must(t, k8s.Create(ctx, own(o)))
	}
	// An old manager runs a job in the team's namespace.
	oldManager := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "old-manager-1", Labels: resources.Labels(rs, "manager"),
			Annotations: map[string]string{resources.AnnotationConfigHash: "before-jobs-namespaces"}},
		Spec: corev1.PodSpec{ServiceAccountName: n.ManagerServiceAccount(), Containers: []corev1.Container{{Name: "manager", Image: "gitlab-runner"}}},
	}
	oldJob := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runner-old-project-1-concurrent-0", Labels: resources.Labels(rs, "job")},
		Spec: corev1.PodSpec{ServiceAccountName: n.JobServiceAccount(), RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "build", Image: "alpine:3.22"}}},
	}
	must(t, k8s.Create(ctx, oldManager))
	must(t, k8s.Create(ctx, oldJob))

	// The new controller takes over.
	must(t, startManager())
	running = true
	eventually(t, "managers rolled out by hand", func() error {
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Managers()}, d); err != nil {
			return err
		}
		return testenv.MarkAvailable(ctx, k8s, d)
	})
	cur := waitReady(t, rs)
	jobs := n.JobsNamespace()
	if cur.Status.JobsNamespace != jobs {
		t.Fatalf("status.jobsNamespace %q, want %q", cur.Status.JobsNamespace, jobs)
	}
	if toml := string(get(t, ns, n.Config(), &corev1.Secret{}).Data[resources.ConfigKey]); !strings.Contains(toml, `namespace = "`+jobs+`"`) {
		t.Errorf("config.toml does not send jobs to %s:\n%s", jobs, toml)
	}
	if got := get(t, ns, n.Managers(), &appsv1.Deployment{}).Spec.Template.Annotations[resources.AnnotationJobsNamespace]; got != jobs {
		t.Errorf("the manager template names jobs namespace %q, want %q: the managers would not roll", got, jobs)
	}
	if msg := condition(cur, v1alpha1.ConditionIdentityReady).Message; !strings.Contains(msg, "still run in "+ns) {
		t.Errorf("IdentityReady does not say old managers still run: %q", msg)
	}

	manager := serviceAccount(t, ns, n.ManagerServiceAccount())
	managerUser := "system:serviceaccount:" + ns + ":" + n.ManagerServiceAccount()
	// A new manager takes a job in the jobs namespace...
	newJob := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: jobs, Name: "runner-new-project-1-concurrent-0", Labels: resources.Labels(rs, "job")},
		Spec: corev1.PodSpec{ServiceAccountName: n.JobServiceAccount(), RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "build", Image: "alpine:3.22"}}},
	}
	eventually(t, "a new manager creates its job pod in the jobs namespace", func() error { return manager.Create(ctx, newJob) })
	// ...while the old one runs the rest of its job in the team's namespace.
	for _, verb := range []string{"pods/exec", "pods/attach"} {
		if !can(t, managerUser, ns, "create", verb, oldJob.Name) {
			t.Errorf("the old manager may no longer create %s on its running job", verb)
		}
	}
	must(t, manager.Get(ctx, client.ObjectKeyFromObject(oldJob), &corev1.Pod{}))
	get(t, ns, oldJobSA.Name, &corev1.ServiceAccount{}) // its job still runs as it
	// The negative control of the end state: the old layout lets the
	// managers read the team's Secrets, as the checks below can tell.
	if err := manager.Get(ctx, client.ObjectKey{Namespace: ns, Name: "old-token"}, &corev1.Secret{}); err != nil {
		t.Fatalf("the old layout's Role does not grant what the test expects (%v): the checks below prove nothing", err)
	}
	time.Sleep(2 * time.Second) // a few passes: nothing narrows while the old job runs
	must(t, manager.Get(ctx, client.ObjectKeyFromObject(oldJob), &corev1.Pod{}))

	// The old job ends: its manager deletes its pod, then exits.
	must(t, manager.Delete(ctx, oldJob))
	must(t, k8s.Delete(ctx, oldManager, client.GracePeriodSeconds(0)))

	eventuallyWithin(t, 90*time.Second, "the managers' Role and RoleBinding in the team's namespace deleted", func() error {
		for _, o := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}} {
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.ManagerRole()}, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T still there (%v)", o, err)
			}
		}
		return nil
	})
	eventually(t, "the old job ServiceAccount deleted", func() error {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(oldJobSA), &corev1.ServiceAccount{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	eventually(t, "the manager can no longer read the team's Secrets or run pods there", func() error {
		if err := manager.Get(ctx, client.ObjectKey{Namespace: ns, Name: "old-token"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
			return fmt.Errorf("reading the team's token Secret: %v", err)
		}
		if can(t, managerUser, ns, "create", "pods", "") {
			return errors.New("may still create pods in the team's namespace")
		}
		return nil
	})
	// The new job was never touched and finishes as usual.
	must(t, manager.Delete(ctx, newJob))
	// The pass that deleted the old Role writes its status last: wait for it.
	eventually(t, "IdentityReady no longer speaks of old managers", func() error {
		if msg := condition(waitReady(t, rs), v1alpha1.ConditionIdentityReady).Message; strings.Contains(msg, "still run") {
			return fmt.Errorf("IdentityReady: %q", msg)
		}
		return nil
	})
}
