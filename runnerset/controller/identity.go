package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// legacyPoll is how often a RunnerSet whose managers or jobs of the layout
// before jobs namespaces still run looks whether they are gone.
const legacyPoll = 30 * time.Second

// identityStep writes the job ServiceAccount when jobs have a cloud
// identity (v1alpha1.Settings.JobServiceAccount) and the binding of the executor's ClusterRole in the jobs namespace, and
// the managers' ServiceAccount in the team's namespace, where they hold no
// rights at all: their config Secret reaches them as a volume, which the
// kubelet reads. Only while managers or jobs of the layout before jobs
// namespaces still run do the managers keep the Role they had in the
// team's namespace, as it is (the controller holds none of its rules and
// could not write it).
type identityStep struct{ *writer }

func (r identityStep) run(ctx context.Context, s *state) (bool, time.Duration, error) {
	jobs := s.settings.JobsNamespace
	legacy, err := r.legacyRunning(ctx, s.rs, jobs)
	if err != nil {
		return false, 0, err
	}
	// The job ServiceAccount is written only for a cloud identity, which
	// binds to it by name; without one, job pods run as the jobs
	// namespace's default ServiceAccount. One written before (by an
	// earlier version, or while the RunnerSet had an identity) is kept,
	// stripped of any identity, for the job pods of managers that still
	// run with a config that names it: a read of the cache when there is
	// none.
	jobSA := r.apply
	if s.settings.JobServiceAccount == "" {
		jobSA = r.applyIfPresent
	}
	if err := jobSA(ctx, s.rs, resources.JobServiceAccount(s.rs, jobs)); err != nil {
		return false, 0, err
	}
	for _, obj := range []client.Object{
		resources.ManagerExecutorRoleBinding(s.rs, jobs),
		resources.ManagerServiceAccountFor(s.rs, s.settings),
	} {
		if err := r.apply(ctx, s.rs, obj); err != nil {
			return false, 0, err
		}
	}
	// The managers' own Role and its binding in the jobs namespace, which
	// earlier versions wrote for every RunnerSet, go once the binding of
	// the executor's ClusterRole (the same rules) is in place: a read of
	// the cache when there are none.
	n := naming.For(s.rs.Namespace, s.rs.Name)
	earlier := metav1.ObjectMeta{Namespace: jobs, Name: n.ManagerRole()}
	for _, obj := range []client.Object{&rbacv1.RoleBinding{ObjectMeta: earlier}, &rbacv1.Role{ObjectMeta: earlier}} {
		if err := r.deleteOwned(ctx, s.rs, obj); err != nil {
			return false, 0, err
		}
	}
	if legacy {
		s.rs.SetCondition(v1alpha1.ConditionIdentityReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled, fmt.Sprintf(
			"managers take jobs in namespace %s; managers or jobs started before jobs namespaces still run in %s and keep their rights there until they have finished",
			jobs, s.rs.Namespace))
		return true, legacyPoll, nil
	}
	// Nothing of the old layout runs: its Role and binding in the team's
	// namespace go (a read of the cache when there are none).
	for _, obj := range []client.Object{resources.LegacyManagerRoleBinding(s.rs), resources.LegacyManagerRole(s.rs)} {
		if err := r.deleteOwned(ctx, s.rs, obj); err != nil {
			return false, 0, err
		}
	}
	if err := r.deleteLegacyJobServiceAccount(ctx, s.rs); err != nil {
		return false, 0, err
	}
	sa := "the jobs namespace's default ServiceAccount (no cloud identity asked)"
	if s.settings.JobServiceAccount != "" {
		sa = "ServiceAccount " + s.settings.JobServiceAccount + " (with the cloud identity of spec.jobs.identity)"
	}
	s.rs.SetCondition(v1alpha1.ConditionIdentityReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled, fmt.Sprintf(
		"job pods run as %s with no API token, and the managers' rights are in namespace %s; in %s the managers have no rights (their config Secret is mounted)", sa, jobs, s.rs.Namespace))
	return true, 0, nil
}

// legacyRunning reports whether managers or job pods of the layout before
// jobs namespaces still run in the team's namespace: job pods there, or
// manager pods that do not create their jobs in jobs. Pods are listed only
// while the managers still have a Role in the team's namespace that
// carries job rights, so a migrated RunnerSet costs no read.
func (r identityStep) legacyRunning(ctx context.Context, rs *v1alpha1.RunnerSet, jobs string) (bool, error) {
	role := &rbacv1.Role{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: naming.For(rs.Namespace, rs.Name).ManagerRole()}, role)
	if apierrors.IsNotFound(err) {
		return false, nil // a new RunnerSet: nothing ran before
	}
	if err != nil {
		return false, fmt.Errorf("getting the managers' Role: %w", err)
	}
	if !slices.ContainsFunc(role.Rules, func(p rbacv1.PolicyRule) bool { return slices.Contains(p.Resources, "pods") }) {
		return false, nil // no job rights: nothing of the old layout can run
	}
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.APIReader.List(ctx, pods, client.InNamespace(rs.Namespace),
		client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{resources.LabelRunnerSet: rs.Name})}); err != nil {
		return false, fmt.Errorf("listing pods: %w", err)
	}
	for _, p := range pods.Items {
		if p.Labels[resources.LabelComponent] != resources.ComponentManager || p.Annotations[resources.AnnotationJobsNamespace] != jobs {
			return true, nil
		}
	}
	return false, nil
}

// deleteLegacyJobServiceAccount deletes the job ServiceAccount the layout
// before jobs namespaces kept in the team's namespace, once nothing of that
// layout runs: no pod may use it any more, and the cloud trusts the one in
// the jobs namespace. Only the RunnerSet's own is deleted, and only when
// the cache holds one, so a migrated RunnerSet costs no request.
func (r identityStep) deleteLegacyJobServiceAccount(ctx context.Context, rs *v1alpha1.RunnerSet) error {
	sa := &corev1.ServiceAccount{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: naming.For(rs.Namespace, rs.Name).JobServiceAccount()}, sa)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting the old job ServiceAccount: %w", err)
	}
	if !metav1.IsControlledBy(sa, rs) {
		return nil // not ours: left alone
	}
	if err := r.Client.Delete(ctx, sa, client.Preconditions{UID: &sa.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the old job ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	log.FromContext(ctx).Info("Deleted the job ServiceAccount of the layout before jobs namespaces", "serviceAccount", sa.Name)
	return nil
}
