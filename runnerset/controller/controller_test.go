package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

var ctx = context.Background()

func get[T client.Object](t *testing.T, ns, name string, obj T) T {
	t.Helper()
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj))
	return obj
}

func condition(rs *v1alpha1.RunnerSet, typ string) *metav1.Condition {
	return meta.FindStatusCondition(rs.Status.Conditions, typ)
}

func waitReady(t *testing.T, rs *v1alpha1.RunnerSet) *v1alpha1.RunnerSet {
	t.Helper()
	cur := &v1alpha1.RunnerSet{}
	eventually(t, "RunnerSet Ready", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), cur); err != nil {
			return err
		}
		if !cur.IsReady() {
			return fmt.Errorf("conditions: %+v", cur.Status.Conditions)
		}
		return nil
	})
	return cur
}

func waitCondition(t *testing.T, rs *v1alpha1.RunnerSet, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.RunnerSet {
	t.Helper()
	cur := &v1alpha1.RunnerSet{}
	eventually(t, fmt.Sprintf("%s=%s (%s)", typ, status, reason), func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), cur); err != nil {
			return err
		}
		c := condition(cur, typ)
		if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != cur.Generation {
			return fmt.Errorf("conditions: %+v", cur.Status.Conditions)
		}
		return nil
	})
	return cur
}

func TestRunnerSetBecomesReadyWithEveryObjectItNeeds(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Defaults.Cache = &v1alpha1.CacheSpec{Type: v1alpha1.CacheTypeS3, Bucket: "ci-cache", Region: "eu-west-1"}
	})
	newSecret(t, ns, "build-token", token)
	rs := runnerSet(ns, "build", class.Name)
	rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: "arn:aws:iam::123456789012:role/ci-" + ns + ".build"}
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)

	n := naming.For(ns, "build")
	if !strings.Contains(strings.Join(cur.Finalizers, ","), controller.Finalizer) {
		t.Errorf("finalizer %s missing: %v", controller.Finalizer, cur.Finalizers)
	}
	if cur.Status.Managers != "1/1" || cur.Status.ObservedGeneration != cur.Generation {
		t.Errorf("status managers=%q observedGeneration=%d generation=%d", cur.Status.Managers, cur.Status.ObservedGeneration, cur.Generation)
	}

	jobs := n.JobsNamespace()
	if cur.Status.JobsNamespace != jobs {
		t.Errorf("status.jobsNamespace %q, want %q", cur.Status.JobsNamespace, jobs)
	}
	if l := get(t, "", jobs, &corev1.Namespace{}).Labels; l[resources.LabelOwnerNamespace] != ns || l[resources.LabelOwnerName] != "build" {
		t.Errorf("jobs namespace labels %v", l)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.JobServiceAccount()}, &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("a job ServiceAccount in the team's namespace (%v)", err)
	}
	jobSA := get(t, jobs, n.JobServiceAccount(), &corev1.ServiceAccount{})
	if got := jobSA.Annotations[resources.AnnotationIRSA]; got != rs.Spec.Jobs.Identity.AWSRoleARN {
		t.Errorf("job ServiceAccount IRSA annotation = %q", got)
	}
	if jobSA.AutomountServiceAccountToken == nil || *jobSA.AutomountServiceAccountToken {
		t.Error("job ServiceAccount mounts a Kubernetes token")
	}
	// The class's default S3 cache is signed by the managers: they carry the
	// job's role too.
	if got := get(t, ns, n.ManagerServiceAccount(), &corev1.ServiceAccount{}).Annotations[resources.AnnotationIRSA]; got != rs.Spec.Jobs.Identity.AWSRoleARN {
		t.Errorf("manager ServiceAccount IRSA annotation = %q, want the job's role, which signs the class's cache URLs", got)
	}
	for _, o := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.ManagerRole()}, o); !apierrors.IsNotFound(err) {
			t.Errorf("a managers' %T in the team's namespace (%v): they need no rights there", o, err)
		}
	}
	// The executor's rules come from the ClusterRole installed with the
	// controller, bound in the jobs namespace only; no Role of its own.
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: jobs, Name: n.ManagerRole()}, &rbacv1.Role{}); !apierrors.IsNotFound(err) {
		t.Errorf("a managers' Role in the jobs namespace (%v): they hold the executor's ClusterRole there", err)
	}
	rb := get(t, jobs, n.ManagerExecutorBinding(), &rbacv1.RoleBinding{})
	if rb.Subjects[0].Name != n.ManagerServiceAccount() || rb.Subjects[0].Namespace != ns || rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != resources.ExecutorClusterRole {
		t.Errorf("RoleBinding binds %v to %v", rb.Subjects, rb.RoleRef)
	}

	cfgSecret := get(t, ns, n.Config(), &corev1.Secret{})
	toml := string(cfgSecret.Data[resources.ConfigKey])
	if !strings.Contains(toml, `token = "`+token+`"`) || strings.Contains(toml, runnerconfig.TokenPlaceholder) {
		t.Errorf("config.toml must hold the validated token:\n%s", toml)
	}
	if !metav1.IsControlledBy(cfgSecret, cur) {
		t.Error("the config Secret is not controlled by the RunnerSet")
	}
	schema, err := oracle.Load(ctx)
	must(t, err)
	if err := schema.Check([]byte(toml)); err != nil {
		t.Errorf("gitlab-runner would not accept the config.toml in the config Secret: %v", err)
	}
	for _, want := range []string{`namespace = "` + jobs + `"`, `service_account = "build-job"`, `"karpenter.sh/do-not-disrupt" = "true"`, `BucketName = "ci-cache"`} {
		if !strings.Contains(toml, want) {
			t.Errorf("config.toml lacks %s:\n%s", want, toml)
		}
	}

	d := get(t, ns, n.Managers(), &appsv1.Deployment{})
	pod := d.Spec.Template.Spec
	if *pod.TerminationGracePeriodSeconds != int64((3 * time.Hour).Seconds()) {
		t.Errorf("terminationGracePeriodSeconds = %d, want the 3h default", *pod.TerminationGracePeriodSeconds)
	}
	if pre := pod.Containers[0].Lifecycle.PreStop; pre == nil || !strings.Contains(strings.Join(pre.Exec.Command, " "), "kill -QUIT 1") {
		t.Errorf("manager has no SIGQUIT preStop hook: %+v", pod.Containers[0].Lifecycle)
	}
	if d.Spec.Template.Annotations[resources.AnnotationConfigHash] != cur.Status.ConfigHash || cur.Status.ConfigHash == "" {
		t.Errorf("pod template config hash %q, status %q", d.Spec.Template.Annotations[resources.AnnotationConfigHash], cur.Status.ConfigHash)
	}
	if mounted := secretsOf(pod); len(mounted) != 1 || mounted[0] != n.Config() {
		t.Errorf("the managers mount Secrets %v, want only the controller's %s", mounted, n.Config())
	}
	if !metav1.IsControlledBy(d, cur) {
		t.Error("Deployment is not controlled by the RunnerSet")
	}
	// One manager: a budget of one unavailable would protect nothing.
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Managers()}, &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
		t.Errorf("a PodDisruptionBudget for a single manager: %v", err)
	}
}

func TestManagersHaveADisruptionBudgetFromTwoReplicasOn(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "pdb-token", token)
	rs := runnerSet(ns, "pdb", class.Name)
	rs.Spec.Managers.Replicas = ptr.To[int32](2)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	n := naming.For(ns, "pdb")
	pdb := get(t, ns, n.Managers(), &policyv1.PodDisruptionBudget{})
	if pdb.Spec.MaxUnavailable.IntValue() != 1 || !metav1.IsControlledBy(pdb, cur) {
		t.Errorf("PDB maxUnavailable = %v, controlled by the RunnerSet: %v", pdb.Spec.MaxUnavailable, metav1.IsControlledBy(pdb, cur))
	}
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Managers.Replicas = ptr.To[int32](1) })
	eventually(t, "the budget gone with the second manager", func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Managers()}, &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

func TestConfigOrTokenChangeRollsTheManagers(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	sec := newSecret(t, ns, "roll-token", token)
	rs := runnerSet(ns, "roll", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	n := naming.For(ns, "roll")
	hash := func() string {
		return get(t, ns, n.Managers(), &appsv1.Deployment{}).Spec.Template.Annotations[resources.AnnotationConfigHash]
	}
	first := hash()

	update(t, cur, func(r *v1alpha1.RunnerSet) {
		r.Spec.Managers.Concurrent = 25
	})
	eventually(t, "config.toml has concurrent = 25 and the pod template rolled", func() error {
		cfg := get(t, ns, n.Config(), &corev1.Secret{})
		if !strings.Contains(string(cfg.Data[resources.ConfigKey]), "concurrent = 25") {
			return errors.New("config Secret not updated")
		}
		if hash() == first {
			return errors.New("pod template config hash unchanged")
		}
		return nil
	})
	second := hash()
	waitReady(t, rs)

	sec.Data["token"] = []byte(token + "-rotated")
	must(t, k8s.Update(ctx, sec))
	eventually(t, "a new token rolls the managers", func() error {
		if hash() == second {
			return errors.New("pod template config hash unchanged after token change")
		}
		return nil
	})
	waitReady(t, rs)
}

// Job pods run as a ServiceAccount of the RunnerSet's own only when a cloud
// identity binds to it by name: without one, the controller writes none
// (a write less per new RunnerSet) and config.toml leaves the jobs
// namespace's default to them, with the pod's API token turned off. An
// identity added later gets its ServiceAccount; one removed leaves it,
// stripped of the identity, for the job pods of managers that still run
// with a config that names it.
func TestJobPodsRunAsTheirNamespacesDefaultUnlessACloudIdentityIsAsked(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "plain-token", token)
	rs := runnerSet(ns, "plain", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	n := naming.For(ns, "plain")
	jobs := n.JobsNamespace()
	configTOML := func() string {
		return string(get(t, ns, n.Config(), &corev1.Secret{}).Data[resources.ConfigKey])
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: jobs, Name: n.JobServiceAccount()}, &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("a job ServiceAccount without a cloud identity (%v): a write nothing needs", err)
	}
	if c := configTOML(); strings.Contains(c, "service_account =") || !strings.Contains(c, "automount_service_account_token = false") {
		t.Errorf("without a cloud identity config.toml must leave the ServiceAccount to the namespace's default and turn its token off:\n%s", c)
	}

	arn := "arn:aws:iam::123456789012:role/ci-" + ns + ".plain"
	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: arn} })
	eventually(t, "the job ServiceAccount with its role, named in config.toml", func() error {
		sa := &corev1.ServiceAccount{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: jobs, Name: n.JobServiceAccount()}, sa); err != nil {
			return err
		}
		if sa.Annotations[resources.AnnotationIRSA] != arn || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			return fmt.Errorf("job ServiceAccount annotations %v automount %v", sa.Annotations, sa.AutomountServiceAccountToken)
		}
		if c := configTOML(); !strings.Contains(c, `service_account = "`+n.JobServiceAccount()+`"`) || !strings.Contains(c, "automount_service_account_token = false") {
			return fmt.Errorf("config.toml does not name the job ServiceAccount with no token:\n%s", c)
		}
		return nil
	})

	update(t, cur, func(r *v1alpha1.RunnerSet) { r.Spec.Jobs.Identity = nil })
	eventually(t, "the namespace's default again, the job ServiceAccount kept without its role", func() error {
		if c := configTOML(); strings.Contains(c, "service_account =") {
			return fmt.Errorf("config.toml still names a ServiceAccount:\n%s", c)
		}
		sa := &corev1.ServiceAccount{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: jobs, Name: n.JobServiceAccount()}, sa); err != nil {
			return fmt.Errorf("the job ServiceAccount the managers' old config names is gone: %w", err)
		}
		if len(sa.Annotations[resources.AnnotationIRSA]) > 0 {
			return fmt.Errorf("job ServiceAccount keeps the role removed from spec.jobs.identity: %v", sa.Annotations)
		}
		return nil
	})
	waitReady(t, rs)
}

// The managers sign the cache URLs the jobs use, so they carry the job
// identity once the RunnerSet has a cloud cache, and not before.
func TestTheManagerServiceAccountCarriesTheJobIdentityOnlyWithACache(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil) // no default cache
	newSecret(t, ns, "sign-token", token)
	rs := runnerSet(ns, "sign", class.Name)
	arn := "arn:aws:iam::123456789012:role/ci-" + ns + ".sign"
	rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: arn}
	must(t, k8s.Create(ctx, rs))
	cur := waitReady(t, rs)
	n := naming.For(ns, "sign")
	if a := get(t, ns, n.ManagerServiceAccount(), &corev1.ServiceAccount{}).Annotations; a[resources.AnnotationIRSA] != "" || a[resources.AnnotationWorkloadIdentity] != "" {
		t.Errorf("manager ServiceAccount has a cloud identity without a cache: %v", a)
	}
	if get(t, n.JobsNamespace(), n.JobServiceAccount(), &corev1.ServiceAccount{}).Annotations[resources.AnnotationIRSA] != arn {
		t.Error("job ServiceAccount lacks its role")
	}

	update(t, cur, func(r *v1alpha1.RunnerSet) {
		r.Spec.Cache = &v1alpha1.CacheSpec{Type: v1alpha1.CacheTypeS3, Bucket: "ci-cache", Region: "eu-west-1"}
	})
	eventually(t, "the manager ServiceAccount carries the job's role", func() error {
		if got := get(t, ns, n.ManagerServiceAccount(), &corev1.ServiceAccount{}).Annotations[resources.AnnotationIRSA]; got != arn {
			return fmt.Errorf("manager ServiceAccount IRSA role %q, want %q", got, arn)
		}
		return nil
	})
	waitReady(t, rs)
	if get(t, ns, n.Managers(), &appsv1.Deployment{}).Spec.Template.Annotations[resources.AnnotationIdentityHash] == "" {
		t.Error("the manager pod template does not follow the identity: a new role would not reach running managers")
	}
}

func TestDeletionWaitsForManagersAndJobsToDrain(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "drain-token", token)
	rs := runnerSet(ns, "drain", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)

	// A job pod still running in the jobs namespace, as the kubernetes
	// executor labels it.
	jobs := naming.For(ns, "drain").JobsNamespace()
	job := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: jobs, Name: "runner-job-1", Labels: map[string]string{resources.LabelRunnerSet: rs.Name, "app.kubernetes.io/component": "job"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "build", Image: "alpine"}}},
	}
	must(t, k8s.Create(ctx, job))
	must(t, k8s.Delete(ctx, rs))

	n := naming.For(ns, "drain")
	eventually(t, "managers scaled to zero", func() error {
		d := get(t, ns, n.Managers(), &appsv1.Deployment{})
		if *d.Spec.Replicas != 0 {
			return fmt.Errorf("replicas %d", *d.Spec.Replicas)
		}
		return nil
	})
	held := waitCondition(t, rs, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting)
	// envtest runs no ReplicaSets: no manager pod exists, so the job pod
	// is an orphan, kept for spec.managers.orphanedJobGracePeriod (5m).
	if !strings.Contains(condition(held, v1alpha1.ConditionReady).Message, "0 manager pods and 1 orphaned job pods left") {
		t.Errorf("Deleting message: %q", condition(held, v1alpha1.ConditionReady).Message)
	}
	time.Sleep(500 * time.Millisecond)
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(rs), &v1alpha1.RunnerSet{})) // still held

	if ns := get(t, "", jobs, &corev1.Namespace{}); !ns.DeletionTimestamp.IsZero() {
		t.Fatal("the jobs namespace is being deleted while a job runs in it")
	}

	must(t, k8s.Delete(ctx, job, client.GracePeriodSeconds(0)))
	eventually(t, "RunnerSet gone once its last job pod is", func() error {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), &v1alpha1.RunnerSet{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	// envtest runs no namespace controller: the namespace stays Terminating.
	if ns := get(t, "", jobs, &corev1.Namespace{}); ns.DeletionTimestamp.IsZero() {
		t.Error("the jobs namespace was not deleted after the managers drained")
	}
}

func TestRunnerClassPolicyRefusesWithAReasonAndCreatesNothing(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, func(c *v1alpha1.RunnerClass) { c.Spec.Policy.MaxConcurrency = ptr.To[int32](20) })
	cases := []struct {
		name   string
		mutate func(*v1alpha1.RunnerSet)
		reason string
		says   string
	}{
		{"identity of another namespace", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: "arn:aws:iam::123456789012:role/ci-other-team.build"}
		}, v1alpha1.ReasonIdentityForbidden, "spec.jobs.identity.awsRoleARN"},
		{"gcp identity where the class allows none", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{GCPServiceAccount: "ci@p.iam.gserviceaccount.com"}
		}, v1alpha1.ReasonIdentityForbidden, "allows no gcpServiceAccount identities"},
		{"privileged", func(rs *v1alpha1.RunnerSet) { rs.Spec.Jobs.Privileged = true }, v1alpha1.ReasonPrivilegedForbidden, "spec.jobs.privileged"},
		{"on-demand", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeSpot, v1alpha1.CapacityTypeOnDemand}
		}, v1alpha1.ReasonCapacityTypeForbidden, "spec.capacity.capacityTypes"},
		{"too much concurrency", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.Replicas = ptr.To[int32](3)
		}, v1alpha1.ReasonConcurrencyTooHigh, "replicas × concurrent is 30"},
		{"missing class", func(rs *v1alpha1.RunnerSet) { rs.Spec.ClassName = "no-such-class" }, v1alpha1.ReasonRunnerClassNotFound, `"no-such-class"`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("refused-%d", i)
			newSecret(t, ns, name+"-token", token)
			rs := runnerSet(ns, name, class.Name)
			tc.mutate(rs)
			must(t, k8s.Create(ctx, rs))
			cur := waitCondition(t, rs, v1alpha1.ConditionClassAccepted, metav1.ConditionFalse, tc.reason)
			msg := condition(cur, v1alpha1.ConditionClassAccepted).Message
			if !strings.Contains(msg, tc.says) {
				t.Errorf("message %q does not say %q", msg, tc.says)
			}
			ready := condition(cur, v1alpha1.ConditionReady)
			if ready.Status != metav1.ConditionFalse || ready.Reason != tc.reason {
				t.Errorf("Ready = %s/%s, want False/%s", ready.Status, ready.Reason, tc.reason)
			}
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: naming.For(ns, name).Managers()}, &appsv1.Deployment{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("a refused RunnerSet got managers (err=%v)", err)
			}
		})
	}

	t.Run("a class created later is picked up", func(t *testing.T) {
		newSecret(t, ns, "late-token", token)
		rs := runnerSet(ns, "late", "late-class")
		must(t, k8s.Create(ctx, rs))
		waitCondition(t, rs, v1alpha1.ConditionClassAccepted, metav1.ConditionFalse, v1alpha1.ReasonRunnerClassNotFound)
		late := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "late-class"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
		must(t, k8s.Create(ctx, late))
		t.Cleanup(func() { _ = k8s.Delete(ctx, late) })
		waitReady(t, rs)
	})
}

func TestTokenProblemsAreConditionsAndTheTokenNeverLeaks(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)

	rs := runnerSet(ns, "tok", class.Name)
	must(t, k8s.Create(ctx, rs))
	cur := waitCondition(t, rs, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonTokenSecretNotFound)
	if msg := condition(cur, v1alpha1.ConditionRunnerRegistered).Message; !strings.Contains(msg, ns+"/tok-token") {
		t.Errorf("message does not name the Secret: %q", msg)
	}

	registration := "GR1348941" + "abcdefghijklmnopqrst"
	sec := newSecret(t, ns, "tok-token", registration)
	cur = waitCondition(t, rs, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonRegistrationToken)
	if msg := condition(cur, v1alpha1.ConditionRunnerRegistered).Message; !strings.Contains(msg, "410") || strings.Contains(msg, registration) {
		t.Errorf("registration token message: %q", msg)
	}

	malformed := token + "\n"
	sec.Data["token"] = []byte(malformed)
	must(t, k8s.Update(ctx, sec))
	cur = waitCondition(t, rs, v1alpha1.ConditionRunnerRegistered, metav1.ConditionFalse, v1alpha1.ReasonTokenMalformed)
	if msg := condition(cur, v1alpha1.ConditionRunnerRegistered).Message; strings.Contains(msg, token) {
		t.Errorf("condition message leaks the token: %q", msg)
	}

	sec.Data["token"] = []byte(token)
	must(t, k8s.Update(ctx, sec))
	cur = waitReady(t, rs)

	events := &eventsv1.EventList{}
	eventually(t, "Events recorded for the token problems", func() error {
		must(t, k8s.List(ctx, events, client.InNamespace(ns)))
		if len(events.Items) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	for _, e := range events.Items {
		if strings.Contains(e.Note, token) {
			t.Errorf("Event %s leaks the token: %q", e.Name, e.Note)
		}
	}
	for _, c := range cur.Status.Conditions {
		if strings.Contains(c.Message, token) {
			t.Errorf("condition %s leaks the token", c.Type)
		}
	}
	if strings.Contains(logs.String(), token) {
		t.Error("the controller's logs contain the token")
	}
	if !strings.Contains(logs.String(), `"level"`) {
		t.Error("the controller's logs are not JSON")
	}
}

func TestASteadyRunnerSetCausesNoWrites(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "calm-token", token)
	rs := runnerSet(ns, "calm", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	time.Sleep(time.Second) // let the last status patch's watch event settle

	jobs := naming.For(ns, "calm").JobsNamespace()
	versions := func() map[string]string {
		out := map[string]string{}
		for _, in := range []string{ns, jobs} {
			for _, l := range []client.ObjectList{&v1alpha1.RunnerSetList{}, &appsv1.DeploymentList{}, &corev1.SecretList{},
				&corev1.ServiceAccountList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &policyv1.PodDisruptionBudgetList{},
				&networkingv1.NetworkPolicyList{}} {
				must(t, k8s.List(ctx, l, client.InNamespace(in)))
				must(t, meta.EachListItem(l, func(o runtime.Object) error {
					obj := o.(client.Object)
					out[fmt.Sprintf("%T/%s/%s", obj, in, obj.GetName())] = obj.GetResourceVersion()
					return nil
				}))
			}
		}
		out["Namespace/"+jobs] = get(t, "", jobs, &corev1.Namespace{}).ResourceVersion
		out["NodePool/"+naming.For(ns, "calm").Capacity()] = get(t, "", naming.For(ns, "calm").Capacity(), &karpv1.NodePool{}).ResourceVersion
		out["KWOKNodeClass/"+naming.ClassCapacity(class.Name)] = get(t, "", naming.ClassCapacity(class.Name), &kwokv1alpha1.KWOKNodeClass{}).ResourceVersion
		if len(out) < 11 {
			t.Fatalf("only %d objects watched: %v", len(out), out)
		}
		return out
	}
	before := versions()
	time.Sleep(3 * time.Second)
	after := versions()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s was written while nothing changed (resourceVersion %s -> %s)", k, v, after[k])
		}
	}
}

// A RunnerSet is not Ready on a new config until the Deployment controller has
// rolled it out, even though a cached read of the Deployment right after the
// update still shows the old template fully available.
func TestNotReadyOnANewConfigUntilItIsRolledOut(t *testing.T) {
	ns := newNamespaceNamed(t, manualPrefix+rand.String(8))
	class := newClass(t, nil)
	newSecret(t, ns, "slow-token", token)
	rs := runnerSet(ns, "slow", class.Name)
	must(t, k8s.Create(ctx, rs))
	n := naming.For(ns, "slow")
	rollOut := func() {
		eventually(t, "managers rolled out by hand", func() error {
			d := &appsv1.Deployment{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Managers()}, d); err != nil {
				return err
			}
			return testenv.MarkAvailable(ctx, k8s, d)
		})
	}
	rollOut()
	cur := waitReady(t, rs)
	oldHash := cur.Status.ConfigHash

	update(t, cur, func(r *v1alpha1.RunnerSet) {
		r.Spec.Managers.Concurrent = 30
	})
	eventually(t, "status on the new config", func() error {
		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(cur), cur))
		if cur.Status.ConfigHash == oldHash || cur.Status.ObservedGeneration != cur.Generation {
			return errors.New("not yet")
		}
		return nil
	})
	for range 20 {
		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(cur), cur))
		if cur.IsReady() {
			t.Fatalf("Ready on config %s before its managers rolled out: %+v", cur.Status.ConfigHash, cur.Status.Conditions)
		}
		if c := condition(cur, v1alpha1.ConditionManagersAvailable); c.Reason != v1alpha1.ReasonRollingOut {
			t.Fatalf("ManagersAvailable %s/%s, want RollingOut", c.Status, c.Reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rollOut()
	waitReady(t, rs)
}

// secretsOf lists every Secret a pod reads: volumes, environment, image
// pull Secrets.
func secretsOf(pod corev1.PodSpec) []string {
	var out []string
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			out = append(out, v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					out = append(out, src.Secret.Name)
				}
			}
		}
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				out = append(out, e.ValueFrom.SecretKeyRef.Name)
			}
		}
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil {
				out = append(out, e.SecretRef.Name)
			}
		}
	}
	for _, p := range pod.ImagePullSecrets {
		out = append(out, p.Name)
	}
	return out
}
