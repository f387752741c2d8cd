// The writer: how the steps write a RunnerSet's objects (apply by spec
// hash, dry run, owned deletes), the memory of objects just created and
// Secrets just written, and InTheWay, the refusal to touch an object
// runnerfleet did not create for the RunnerSet.

package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/controller/internal/ownership"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// createdObjects remembers the objects this controller created in the
// last seconds: a pass right after the one that created them may run
// before the cache has seen them, and reads them from the API server
// rather than trying to create them again. Any other object the cache
// does not hold is created without a read first.
type createdObjects struct {
	mu sync.Mutex
	m  map[string]time.Time
	// pruned is when entries older than createdRecently were last dropped:
	// at most once a second, not on every add (a thousand new RunnerSets
	// add eight thousand entries in seconds).
	pruned time.Time
}

// createdRecently is how long a created object may stay unseen by the cache.
const createdRecently = 30 * time.Second

func (c *createdObjects) add(key string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]time.Time{}
	}
	if now.Sub(c.pruned) >= time.Second {
		for k, at := range c.m {
			if now.Sub(at) > createdRecently {
				delete(c.m, k)
			}
		}
		c.pruned = now
	}
	c.m[key] = now
}

func (c *createdObjects) recent(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.m[key]
	return ok && now.Sub(at) <= createdRecently
}

func (c *createdObjects) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// writer writes a RunnerSet's objects for the steps: apply, dry run and
// delete of what the RunnerSet owns, and nothing else. Client reads the
// cache and writes, and knows the scheme; APIReader reads what the cache
// does not hold (Secrets) or has not seen yet (created, in created).
type writer struct {
	Client    client.Client
	APIReader client.Reader
	created   *createdObjects
	// secrets remembers the Secrets written, so a pass need not read them.
	secrets *writtenSecrets
	now     func() time.Time
}

// apply creates desired, or updates the live object when the spec hash the
// builder recorded differs. Comparing hashes instead of fields means a field
// the API server defaults never causes a rewrite, so a steady fleet makes no
// writes at all. Namespaced objects are owned by the RunnerSet through a
// controller reference; cluster-scoped ones through capacity labels.
func (r *writer) apply(ctx context.Context, owner *v1alpha1.RunnerSet, desired client.Object) error {
	_, err := r.write(ctx, owner, desired, false)
	return err
}

// applyIfPresent is apply for an object that is no longer created: when
// the cache holds one (owner's, by the same rules as apply), it is brought
// to desired; when it holds none, nothing is written.
func (r *writer) applyIfPresent(ctx context.Context, owner *v1alpha1.RunnerSet, desired client.Object) error {
	live := desired.DeepCopyObject().(client.Object)
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
		return client.IgnoreNotFound(err)
	}
	return r.apply(ctx, owner, desired)
}

// applyAndGet is apply that also returns the object as the API server has it
// now: the response of a write, never a cache that may lag behind it.
func (r *writer) applyAndGet(ctx context.Context, owner *v1alpha1.RunnerSet, desired client.Object) (client.Object, error) {
	return r.write(ctx, owner, desired, false)
}

// dryRun sends what apply would write as a server-side dry run, when it
// would update an object; a create is not dry run (the caller judged the
// new object offline).
func (r *writer) dryRun(ctx context.Context, owner *v1alpha1.RunnerSet, desired client.Object) error {
	_, err := r.write(ctx, owner, desired.DeepCopyObject().(client.Object), true)
	return err
}

func (r *writer) write(ctx context.Context, owner *v1alpha1.RunnerSet, desired client.Object, dryRun bool) (client.Object, error) {
	// An ownerReference never crosses namespaces: cluster-scoped objects
	// and those in the jobs namespace are tied to the RunnerSet by labels.
	clusterScoped := desired.GetNamespace() != owner.Namespace
	if !clusterScoped {
		if err := controllerutil.SetControllerReference(owner, desired, r.Client.Scheme()); err != nil {
			return nil, err
		}
	}
	kind := r.kindOf(desired)
	live := desired.DeepCopyObject().(client.Object)
	// The cache holds only objects labelled as runnerfleet's, and no
	// Secrets at all: Secrets are read from the API server. An object
	// someone else made under the name is found by the create that fails
	// (AlreadyExists) and judged, never overwritten.
	var reader client.Reader = r.Client
	if _, ok := desired.(*corev1.Secret); ok {
		reader = r.APIReader
	}
	key := kind + "/" + desired.GetNamespace() + "/" + desired.GetName()
	if sec, ok := desired.(*corev1.Secret); ok && !dryRun && r.secrets.unchanged(ctx, r.Client, key, sec) {
		return desired, nil // as this controller wrote it, and it would write the same
	}
	err := reader.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if err == nil {
		r.created.forget(key)
	}
	if apierrors.IsNotFound(err) && reader != r.APIReader && r.created.recent(key, r.now()) {
		// Created moments ago and not in the cache yet: ask the API server.
		err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), live)
	}
	switch {
	case apierrors.IsNotFound(err) && dryRun:
		return desired, nil
	case apierrors.IsNotFound(err):
		// Not in the cache (or, for a Secret, not there at all): create it.
		// An object of that name the cache does not see (someone else's,
		// or one without runnerfleet's label) makes the create fail with
		// AlreadyExists and is then read from the API server and judged:
		// one write for a new object, no read before it.
		var createOpts []client.CreateOption
		if dryRun {
			createOpts = append(createOpts, client.DryRunAll)
		}
		err := r.Client.Create(ctx, desired, createOpts...)
		if err == nil {
			if !dryRun {
				r.created.add(key, r.now())
				r.secrets.record(key, desired, desired)
				log.FromContext(ctx).V(1).Info("Created object", "kind", kind, "name", desired.GetName())
			}
			return desired, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating %s %s: %w", kind, desired.GetName(), err)
		}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
			return nil, fmt.Errorf("getting %s %s: %w", kind, desired.GetName(), err)
		}
	case err != nil:
		return nil, fmt.Errorf("getting %s %s: %w", kind, desired.GetName(), err)
	}
	itw := inTheWay(owner, live, kind, clusterScoped)
	if ref := metav1.GetControllerOf(desired); ref != nil && clusterScoped {
		// Shared by the RunnerSets of a RunnerClass (its node class): the
		// class must be its controller.
		itw = sharedInTheWay(owner, live, kind, ref)
	}
	if itw != nil {
		return nil, itw
	}
	if resources.SpecHash(live) == resources.SpecHash(desired) && sameData(live, desired) {
		r.secrets.record(key, desired, live)
		return live, nil
	}
	keepScale(live, desired)
	desired.SetResourceVersion(live.GetResourceVersion())
	// Keep finalizers others put on the object (Karpenter's termination finalizer).
	desired.SetFinalizers(live.GetFinalizers())
	var updateOpts []client.UpdateOption
	if dryRun {
		updateOpts = append(updateOpts, client.DryRunAll)
	}
	if err := r.Client.Update(ctx, desired, updateOpts...); err != nil {
		return nil, fmt.Errorf("updating %s %s: %w", kind, desired.GetName(), err)
	}
	if !dryRun {
		r.secrets.record(key, desired, desired)
		log.FromContext(ctx).Info("Updated object", "kind", kind, "name", desired.GetName())
	}
	return desired, nil
}

// writtenSecrets remembers, for each Secret this controller wrote (or
// found as it would write it), the resourceVersion the API server had
// and a digest of the content: while the metadata cache (every Secret's,
// watched by metadata for the token Secrets) shows that resourceVersion,
// the Secret is unchanged, and a pass that would write the same content
// needs no read from the API server. Secrets are not cached whole; without
// this, each pass of a thousand RunnerSets read each config Secret, a
// request each on the client's rate limit for Secrets.
type writtenSecrets struct {
	mu sync.Mutex
	m  map[string]writtenSecret
}

type writtenSecret struct{ resourceVersion, digest string }

// secretDigest covers what write compares of a Secret: its spec hash (the
// builder's labels, annotations and type) and its data.
func secretDigest(s *corev1.Secret) string {
	h := sha256.New()
	h.Write([]byte(resources.SpecHash(s)))
	for _, k := range slices.Sorted(maps.Keys(s.Data)) {
		fmt.Fprintf(h, "\x00%s\x00%d\x00", k, len(s.Data[k]))
		h.Write(s.Data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// record remembers live's resourceVersion for key when desired is a
// Secret: live holds desired's content.
func (w *writtenSecrets) record(key string, desired, live client.Object) {
	s, ok := desired.(*corev1.Secret)
	if !ok || live.GetResourceVersion() == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]writtenSecret{}
	}
	w.m[key] = writtenSecret{resourceVersion: live.GetResourceVersion(), digest: secretDigest(s)}
}

// unchanged reports whether the Secret desired names is, by the metadata
// cache, still as recorded, and desired's content is what was recorded.
func (w *writtenSecrets) unchanged(ctx context.Context, c client.Reader, key string, desired *corev1.Secret) bool {
	w.mu.Lock()
	at, ok := w.m[key]
	w.mu.Unlock()
	if !ok || at.digest != secretDigest(desired) {
		return false
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := c.Get(ctx, client.ObjectKeyFromObject(desired), meta); err != nil {
		if apierrors.IsNotFound(err) {
			w.mu.Lock()
			delete(w.m, key) // gone: the map holds only Secrets that exist
			w.mu.Unlock()
		}
		return false
	}
	return meta.ResourceVersion == at.resourceVersion
}

// deleteOwned deletes obj (by its kind, namespace and name) when the cache
// holds it and it is owner's (by controller reference, or by owner labels
// outside owner's namespace); anything else is left alone.
func (r *writer) deleteOwned(ctx context.Context, owner *v1alpha1.RunnerSet, obj client.Object) error {
	live := obj.DeepCopyObject().(client.Object)
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		return client.IgnoreNotFound(err)
	}
	if inTheWay(owner, live, r.kindOf(obj), live.GetNamespace() != owner.Namespace) != nil || !live.GetDeletionTimestamp().IsZero() {
		return nil // not owner's, or on its way (a finalizer holds it)
	}
	if err := r.Client.Delete(ctx, live, client.Preconditions{UID: ptr.To(live.GetUID())}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s %s: %w", r.kindOf(obj), obj.GetName(), err)
	}
	log.FromContext(ctx).Info("Deleted object", "kind", r.kindOf(obj), "name", obj.GetName())
	return nil
}

// sameData reports whether a Secret's data is what was built: the spec hash
// of a Secret does not cover its data (the token), and an edit of the
// config the managers mount must not stand.
func sameData(live, desired client.Object) bool {
	l, ok1 := live.(*corev1.Secret)
	d, ok2 := desired.(*corev1.Secret)
	if !ok1 || !ok2 {
		return true
	}
	return equality.Semantic.DeepEqual(l.Data, d.Data)
}

// InTheWay is an object a RunnerSet needs whose name is taken by one
// runnerfleet did not create for it (internal/ownership, shared with the
// token lifecycle for the runner token's Secret).
type InTheWay = ownership.InTheWay

// inTheWay returns an *InTheWay when live is not owner's. byLabels says
// live is owned through its owner labels (cluster-scoped, or in the jobs
// namespace), not a controller reference.
func inTheWay(owner *v1alpha1.RunnerSet, live client.Object, kind string, byLabels bool) *InTheWay {
	itw := &InTheWay{Kind: kind, Namespace: live.GetNamespace(), Name: live.GetName(), RunnerSet: owner.Namespace + "/" + owner.Name}
	if byLabels {
		l := live.GetLabels()
		if l[capacity.LabelOwnerNamespace] == owner.Namespace && l[capacity.LabelOwnerName] == owner.Name {
			return nil
		}
		if l[capacity.LabelOwnerNamespace] != "" {
			itw.Owner = "RunnerSet " + l[capacity.LabelOwnerNamespace] + "/" + l[capacity.LabelOwnerName]
		}
		return itw
	}
	if metav1.IsControlledBy(live, owner) {
		return nil
	}
	if ref := metav1.GetControllerOf(live); ref != nil {
		itw.Owner = ref.Kind + " " + ref.Name
	}
	return itw
}

// sharedInTheWay returns an *InTheWay when live, an object the RunnerSets
// of a RunnerClass share, is not controlled by that class (ref, by UID).
func sharedInTheWay(owner *v1alpha1.RunnerSet, live client.Object, kind string, ref *metav1.OwnerReference) *InTheWay {
	have := metav1.GetControllerOf(live)
	if have != nil && have.UID == ref.UID {
		return nil
	}
	itw := &InTheWay{Kind: kind, Name: live.GetName(), RunnerSet: owner.Namespace + "/" + owner.Name}
	if have != nil {
		itw.Owner = have.Kind + " " + have.Name
	}
	return itw
}

// kindOf names obj's kind for messages.
func (r *writer) kindOf(obj client.Object) string {
	if gvk, err := apiutil.GVKForObject(obj, r.Client.Scheme()); err == nil {
		return gvk.Kind
	}
	return fmt.Sprintf("%T", obj)
}

// keepScale gives desired, a Deployment whose replicas KEDA's HPA sets
// (resources.ScaledExternally), live's replicas: an update for a new
// template must not reset the count the HPA set through the scale
// subresource. The update carries live's resourceVersion, so a count set
// since the read makes it conflict and retry, never overwrites it.
func keepScale(live, desired client.Object) {
	d, ok := desired.(*appsv1.Deployment)
	if !ok || !resources.ScaledExternally(d) {
		return
	}
	if l, ok := live.(*appsv1.Deployment); ok && l.Spec.Replicas != nil {
		d.Spec.Replicas = ptr.To(*l.Spec.Replicas)
	}
}
