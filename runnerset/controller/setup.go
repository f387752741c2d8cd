// Setup: the client limits, the cache's filters, the field indexes the
// controllers share and the RunnerSet controller's watches, which bring a
// RunnerSet back when something it owns or reads changes.

package controller

import (
	"context"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Field indexes that map Secrets and RunnerClasses back to RunnerSets.
const (
	indexTokenSecret = "spec.gitlab.tokenSecretRef.name"
	indexClassName   = "spec.className"
	// indexPrimary maps a RunnerSet to the overflows that name it.
	indexPrimary = "spec.overflow.primary"
)

// Client rate limits of the controller: a fleet of a thousand RunnerSets
// converges in minutes without crowding the API server (see BENCHMARKS.md).
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// concurrentReconciles is how many RunnerSets are reconciled at once. A
// new RunnerSet's pass waits on about a dozen requests in a row (most of
// them on a different kind's client rate limit); eight passes at once keep
// those limits, not the round trips, the bound when a thousand arrive.
const concurrentReconciles = 8

// CacheOptions keeps the informer caches to what runnerfleet manages: owned
// objects by their managed-by label, so the controller's memory does not grow
// with the rest of the cluster.
func CacheOptions(scheme *runtime.Scheme, mapper meta.RESTMapper) cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedBy})}
	byObject := map[client.Object]cache.ByObject{
		&appsv1.Deployment{}:            managed,
		&corev1.ConfigMap{}:             managed,
		&corev1.ServiceAccount{}:        managed,
		&corev1.Service{}:               managed,
		&rbacv1.Role{}:                  managed,
		&rbacv1.RoleBinding{}:           managed,
		&policyv1.PodDisruptionBudget{}: managed,
		&corev1.Namespace{}:             managed,
		&networkingv1.NetworkPolicy{}:   managed,
		&corev1.ResourceQuota{}:         managed,
	}
	// Manager pods, by metadata only, for the drain metrics: the selector
	// keeps every other pod of the cluster out of memory.
	managerPods := &metav1.PartialObjectMetadata{}
	managerPods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	byObject[managerPods] = cache.ByObject{Label: labels.SelectorFromSet(resources.ManagerPods())}
	// Nodes, by their name and the few labels that tell a tag's nodes
	// apart, for the nodes-per-RunnerSet metric (cost).
	nodes, nodeCache := metrics.NodeCache()
	byObject[nodes] = nodeCache
	// KEDA's ScaledObjects, where KEDA is installed: only runnerfleet's.
	if _, err := mapper.RESTMapping(resources.ScaledObjectGVK.GroupKind(), resources.ScaledObjectGVK.Version); err == nil {
		byObject[scaledObject()] = managed
	}
	// Capacity kinds are filtered too, but only those the cluster has: an
	// EKS cluster has no ComputeClass, a GKE cluster no EC2NodeClass.
	for _, obj := range []client.Object{&karpv1.NodePool{}, &awsv1.EC2NodeClass{}, &kwokv1alpha1.KWOKNodeClass{}} {
		gvk, err := apiutil.GVKForObject(obj, scheme)
		if err != nil {
			continue
		}
		if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
			byObject[obj] = managed
		}
	}
	return cache.Options{ByObject: byObject}
}

// indexFields adds the field indexes the controllers share to mgr, before
// it starts: RunnerSets by the Secrets they name (the RunnerSet
// controller's Secret watch) and by their class (its RunnerClass watch,
// and the RunnerClass controller's count).
func indexFields(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1alpha1.RunnerSet{}, indexTokenSecret, func(o client.Object) []string {
		var names []string
		g := o.(*v1alpha1.RunnerSet).Spec.GitLab
		if g.TokenSecretRef != nil {
			names = append(names, g.TokenSecretRef.Name)
		}
		if g.Runner != nil {
			names = append(names, g.Runner.APITokenSecretRef.Name)
		}
		return names
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1alpha1.RunnerSet{}, indexPrimary, func(o client.Object) []string {
		if ov := o.(*v1alpha1.RunnerSet).Spec.Overflow; ov != nil && ov.Prometheus == nil {
			return []string{ov.Primary}
		}
		return nil
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &v1alpha1.RunnerSet{}, indexClassName, func(o client.Object) []string {
		return []string{o.(*v1alpha1.RunnerSet).Spec.ClassName}
	})
}

// scaledObject is an empty ScaledObject, for the cache and the watch.
func scaledObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(resources.ScaledObjectGVK)
	return u
}

// Name is the RunnerSet controller's name (Controller).
func (r *Reconciler) Name() string { return Name }

// Register adds the RunnerSet controller and its watches to mgr; its map
// functions read the field indexes Register adds.
func (r *Reconciler) Register(_ context.Context, mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&v1alpha1.RunnerSet{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		// Token Secrets are watched by metadata only: the controller never
		// holds every Secret of the cluster in memory; it reads the one it
		// needs from the API server. The config Secret the managers mount
		// brings back its owner when someone edits or deletes it.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretOwners), builder.OnlyMetadata).
		// A class's spec brings back its RunnerSets; its status (written by
		// the RunnerClass controller as they change) must not, or every
		// RunnerSet's change would reconcile all of its class.
		Watches(&v1alpha1.RunnerClass{}, handler.EnqueueRequestsFromMapFunc(r.runnerSetsFor(indexClassName, false)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A primary's tags (or its coming and going) bring back its
		// overflows, which check them.
		Watches(&v1alpha1.RunnerSet{}, handler.EnqueueRequestsFromMapFunc(r.runnerSetsFor(indexPrimary, true)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrentReconciles})
	// KEDA's status of a ScaledObject (Ready, Active) brings back its
	// RunnerSet, where KEDA is installed. Without it no ScaledObject is
	// written (ConditionAutoscaling says so).
	if _, err := mgr.GetRESTMapper().RESTMapping(resources.ScaledObjectGVK.GroupKind(), resources.ScaledObjectGVK.Version); err == nil {
		b = b.Owns(scaledObject(), builder.WithPredicates(predicate.Funcs{UpdateFunc: kedaStatusChanged}))
	}
	// The jobs namespace and what lives in it cannot carry an
	// ownerReference to the RunnerSet: they are mapped back through their
	// owner labels.
	for _, obj := range []client.Object{&corev1.Namespace{}, &networkingv1.NetworkPolicy{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.ResourceQuota{}} {
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(ownerOfCapacity))
	}
	// Cluster-scoped capacity cannot carry an ownerReference to a namespaced
	// RunnerSet: it is mapped back through its owner labels, for the kinds
	// this cluster has.
	for _, gvk := range capacityKinds {
		if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			continue
		}
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		// A class's node class, shared by its RunnerSets, brings them back
		// only when its spec changes or it goes: Karpenter writes its
		// status often, and a class may have a thousand RunnerSets.
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(r.capacityOwners), builder.OnlyMetadata,
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.NewPredicateFuncs(ownedByARunnerSet))))
	}
	return b.Complete(r)
}

// ownerOfCapacity maps a capacity object, or an object of a jobs
// namespace, to the RunnerSet its labels name.
func ownerOfCapacity(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	ns, name := l[capacity.LabelOwnerNamespace], l[capacity.LabelOwnerName]
	if ns == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// ownedByARunnerSet reports whether o carries the owner labels of a
// RunnerSet.
func ownedByARunnerSet(o client.Object) bool {
	l := o.GetLabels()
	return l[capacity.LabelOwnerNamespace] != "" && l[capacity.LabelOwnerName] != ""
}

// capacityOwners maps a capacity object to the RunnerSet its labels name,
// or, for a node class its RunnerClass controls, to every RunnerSet of
// that class.
func (r *Reconciler) capacityOwners(ctx context.Context, o client.Object) []reconcile.Request {
	if reqs := ownerOfCapacity(ctx, o); reqs != nil {
		return reqs
	}
	if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "RunnerClass" && ref.APIVersion == v1alpha1.GroupVersion.String() {
		return r.runnerSetsFor(indexClassName, false)(ctx, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: ref.Name}})
	}
	return nil
}

// secretOwners maps a Secret to the RunnerSets that name it and to the
// RunnerSet that owns it.
func (r *Reconciler) secretOwners(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := r.runnerSetsFor(indexTokenSecret, true)(ctx, o)
	if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "RunnerSet" && ref.APIVersion == v1alpha1.GroupVersion.String() {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}})
	}
	return reqs
}

// runnerSetsFor maps an object to the RunnerSets whose index field names it.
func (r *Reconciler) runnerSetsFor(index string, sameNamespace bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &v1alpha1.RunnerSetList{}
		opts := []client.ListOption{client.MatchingFields{index: o.GetName()}}
		if sameNamespace {
			opts = append(opts, client.InNamespace(o.GetNamespace()))
		}
		if err := r.Client.List(ctx, list, opts...); err != nil {
			log.FromContext(ctx).Error(err, "Listing RunnerSets to enqueue", "index", index)
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, rs := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&rs)})
		}
		return reqs
	}
}
