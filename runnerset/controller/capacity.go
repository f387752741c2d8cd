package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// capacityStep writes the tag's own NodePool and its class's node class
// (shared by the class's tags), or its ComputeClass. All of them are judged before any is written, so a
// rejected tag is never half created: by the schema and CEL rules of the
// CRDs their owners ship (capacity.Validate, no request), and, for an
// object that exists and is about to change, by a server-side dry run of
// the update (the API server's own view, webhooks included). A new tag
// costs one create per object; one that is as built, nothing.
type capacityStep struct{ *writer }

func (r capacityStep) run(ctx context.Context, s *state) (bool, time.Duration, error) {
	// After repeated interruptions, on-demand capacity for a while
	// (spotfallback.go).
	built, fallback := onDemandFallback(s.rs, s.class, r.now())
	c, err := buildCapacity(built, s.class, s.settings)
	var invalid *v1alpha1.Failure
	if errors.As(err, &invalid) {
		s.rs.SetCondition(v1alpha1.ConditionCapacityReady, metav1.ConditionFalse, invalid.Reason, invalid.Message)
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	keepEarlier, err := r.keepEarlierNodeClass(ctx, c)
	if err != nil {
		return false, 0, err
	}
	// A tag moved onto its class's shared NodePool keeps its own until
	// Karpenter counts no node in it; its node class stays as long.
	keepOwn, err := r.keepOwnNodePool(ctx, s.rs, c)
	if err != nil {
		return false, 0, err
	}
	keepEarlier = keepEarlier || keepOwn
	for _, obj := range c.Objects {
		errs, err := capacity.Validate(obj, r.Client.Scheme())
		if err != nil {
			return false, 0, err
		}
		if len(errs) > 0 {
			var fields []string
			for _, e := range errs {
				fields = append(fields, e.Field)
			}
			s.rs.SetCondition(v1alpha1.ConditionCapacityReady, metav1.ConditionFalse, v1alpha1.ReasonCapacityRejected,
				fmt.Sprintf("%s %s was rejected: %s; %s", r.kindOf(obj), obj.GetName(), errs.ToAggregate(), blame(r.kindOf(obj), s.class.Name, fields)))
			return false, 0, nil
		}
	}
	// Every object is dry run before any is written, so that a rejected
	// update leaves the tag's capacity as it was.
	for _, write := range []func(context.Context, *v1alpha1.RunnerSet, client.Object) error{r.dryRun, r.apply} {
		for _, obj := range c.Objects {
			err := write(ctx, s.rs, obj)
			if msg, rejected := rejection(err, r.kindOf(obj), obj.GetName(), s.class.Name); rejected {
				s.rs.SetCondition(v1alpha1.ConditionCapacityReady, metav1.ConditionFalse, v1alpha1.ReasonCapacityRejected, msg)
				return false, 0, nil
			}
			if err != nil {
				return false, 0, err
			}
		}
	}
	// The node class earlier versions wrote for each tag (under the tag's
	// capacity name) goes once its NodePool refers to the class's: a read
	// of the cache when there is none.
	if s.class.Spec.Provider != v1alpha1.CapacityProviderComputeClass && !keepEarlier {
		earlier := c.Objects[0].DeepCopyObject().(client.Object)
		earlier.SetName(c.Name)
		if err := r.deleteOwned(ctx, s.rs, earlier); err != nil {
			return false, 0, err
		}
	}
	// On GKE, capacity.limits is a ResourceQuota in the jobs namespace.
	if s.class.Spec.Provider == v1alpha1.CapacityProviderComputeClass {
		q := capacity.Quota(s.rs, s.settings.JobsNamespace)
		if q != nil {
			if err := r.apply(ctx, s.rs, q); err != nil {
				return false, 0, err
			}
		} else if err := r.deleteOwned(ctx, s.rs, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{
			Namespace: s.settings.JobsNamespace, Name: c.Name}}); err != nil {
			return false, 0, err
		}
	}
	s.placement = c.Placement
	s.rs.Status.Capacity = c.Name
	switch {
	case keepOwn:
		s.rs.SetCondition(v1alpha1.ConditionCapacityReady, metav1.ConditionTrue, v1alpha1.ReasonMovingNodePool, fmt.Sprintf(
			"RunnerClass %s's spec.nodePools.mode (%s) puts this tag on the class's shared NodePool %s: new jobs go there; the tag's own NodePool %s stays, its nodes untouched, while Karpenter counts a node in it (jobs running there finish), and is deleted once it has none",
			s.class.Name, s.class.Spec.NodePools.ModeOrDefault(), c.Pool, c.Name))
	case c.Pool != c.Name:
		s.rs.SetCondition(v1alpha1.ConditionCapacityReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled, fmt.Sprintf(
			"%s capacity %s is in place on RunnerClass %s's shared NodePool %s (spec.nodePools.mode %s); it scales to zero when no job runs",
			s.class.Spec.Provider, c.Name, s.class.Name, c.Pool, s.class.Spec.NodePools.ModeOrDefault()))
	default:
		s.rs.SetCondition(v1alpha1.ConditionCapacityReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled,
			fmt.Sprintf("%s capacity %s is in place; it scales to zero when no job runs", s.class.Spec.Provider, c.Name))
	}
	if keepEarlier && (fallback == 0 || earlierNodeClassRecheck < fallback) {
		return true, earlierNodeClassRecheck, nil
	}
	return true, fallback, nil
}

// buildCapacity builds rs's capacity under class: on the class's shared
// NodePool when the class's spec.nodePools says its tags share one
// (counting its RunnerSets by the class's status) and, in mode auto, rs
// asks for nothing only a NodePool of its own gives; on a NodePool of its
// own otherwise. In mode shared a tag that needs its own is refused
// (capacity.Shared).
func buildCapacity(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass, eff v1alpha1.Settings) (*capacity.Capacity, error) {
	np := class.Spec.NodePools
	if !np.Shares(int(class.Status.RunnerSets)) {
		return capacity.For(rs, class, eff)
	}
	if np.ModeOrDefault() == v1alpha1.NodePoolModeAuto {
		if field, _ := capacity.NeedsOwnPool(rs, eff); field != "" {
			return capacity.For(rs, class, eff)
		}
	}
	return capacity.Shared(rs, class, eff)
}

// keepOwnNodePool deletes the tag's own NodePool once its jobs land on
// its class's shared one (c.Pool) and Karpenter counts no node in it, and
// reports whether it is kept: deleting a NodePool makes Karpenter drain
// and terminate its nodes, running jobs and all, so while a node is
// counted (or the count is not there yet) it stays as it is. The job pods
// select the shared NodePool, so the tag's own gets no new job and
// empties (consolidation takes empty nodes).
func (r capacityStep) keepOwnNodePool(ctx context.Context, rs *v1alpha1.RunnerSet, c *capacity.Capacity) (bool, error) {
	if c.Pool == c.Name {
		return false, nil
	}
	own := &karpv1.NodePool{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: c.Name}, own); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if inTheWay(rs, own, "NodePool", true) != nil || !own.DeletionTimestamp.IsZero() {
		return false, nil // not the tag's, or on its way
	}
	if own.Status.Nodes == nil || *own.Status.Nodes != 0 {
		return true, nil
	}
	return false, r.deleteOwned(ctx, rs, own)
}

// earlierNodeClassRecheck is how often a NodePool still on the tag's own
// node class of earlier versions looks whether it has no node left (its
// status, which Karpenter writes, brings no pass).
const earlierNodeClassRecheck = 5 * time.Minute

// keepEarlierNodeClass keeps a NodePool that earlier versions put on the
// tag's own node class (named as the NodePool) on it while the pool has
// nodes or Karpenter has not counted them: a changed nodeClassRef drifts
// every node of the pool, and Karpenter replaces drifted nodes under running
// jobs once the pool's termination grace period is up. The NodePool moves to
// its class's node class when Karpenter counts no node (capacity scales to
// zero between jobs); until then the earlier node class stays as it is.
func (r capacityStep) keepEarlierNodeClass(ctx context.Context, c *capacity.Capacity) (bool, error) {
	np, ok := c.Objects[len(c.Objects)-1].(*karpv1.NodePool)
	if !ok {
		return false, nil
	}
	live := &karpv1.NodePool{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(np), live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	ref := live.Spec.Template.Spec.NodeClassRef
	if ref == nil || ref.Name != c.Name || ref.Name == np.Spec.Template.Spec.NodeClassRef.Name {
		return false, nil
	}
	if live.Status.Nodes != nil && *live.Status.Nodes == 0 {
		return false, nil
	}
	np.Spec.Template.Spec.NodeClassRef.Name = ref.Name
	delete(np.Annotations, resources.AnnotationSpecHash)
	resources.WithHash(np)
	return true, nil
}

// rejection turns an API error that only a spec change can fix into a
// message that names the field to change: the RunnerSet's or, for what
// the node class takes from the RunnerClass, the class's.
func rejection(err error, kind, name, class string) (string, bool) {
	switch {
	case err == nil:
		return "", false
	case meta.IsNoMatchError(err):
		return fmt.Sprintf("this cluster has no %s kind: install its CRDs, or use a RunnerClass whose provider this cluster runs", kind), true
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		msg := err.Error()
		var fields []string
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			msg = status.Status().Message
			if d := status.Status().Details; d != nil {
				for _, c := range d.Causes {
					fields = append(fields, c.Field)
				}
			}
		}
		return fmt.Sprintf("%s %s was rejected: %s; %s", kind, name, msg, blame(kind, class, fields)), true
	}
	return "", false
}

// blame says which field to fix for a rejected capacity object whose
// invalid fields are fields. The node class (EC2NodeClass, KWOKNodeClass,
// ComputeClass) is built from the RunnerClass; the NodePool from the
// RunnerSet's spec.capacity and its managers' shutdownTimeout.
func blame(kind, class string, fields []string) string {
	classField := func(f string) string {
		return fmt.Sprintf("fix %s of RunnerClass %s (the platform team's), not this RunnerSet", f, class)
	}
	has := func(prefix string) bool {
		for _, f := range fields {
			if strings.HasPrefix(f, prefix) {
				return true
			}
		}
		return false
	}
	switch kind {
	case "EC2NodeClass":
		switch {
		case has("spec.tags"):
			return classField("spec.karpenter.tags")
		case has("spec.amiSelectorTerms"), has("spec.amiFamily"):
			return classField("spec.karpenter.amiAlias")
		case has("spec.role"):
			return classField("spec.karpenter.nodeRole")
		case has("spec.subnetSelectorTerms"), has("spec.securityGroupSelectorTerms"):
			return classField("spec.karpenter.clusterName")
		}
		return classField("spec.karpenter")
	case "KWOKNodeClass", "ComputeClass":
		return classField("spec")
	}
	switch {
	case has("spec.limits"):
		return "fix spec.capacity.limits"
	case has("spec.template.spec.terminationGracePeriod"):
		return "fix spec.managers.shutdownTimeout"
	}
	return "fix spec.capacity"
}

// CapacityKinds are the cluster-scoped kinds a RunnerSet's capacity may
// have, for the metrics that count them. Callers get a copy.
func CapacityKinds() []schema.GroupVersionKind {
	return append([]schema.GroupVersionKind{}, capacityKinds...)
}

// capacityKinds are the cluster-scoped kinds a RunnerSet's capacity may
// have, NodePools first so that nodes go before their node class.
var capacityKinds = []schema.GroupVersionKind{
	capacity.KarpenterGroupVersion.WithKind("NodePool"),
	capacity.AWSGroupVersion.WithKind("EC2NodeClass"),
	capacity.KWOKGroupVersion.WithKind("KWOKNodeClass"),
	capacity.ComputeClassGVK,
}

// deleteCapacity deletes the RunnerSet's capacity objects of every kind the
// cluster has and reports whether all of them are gone.
func (r *Reconciler) deleteCapacity(ctx context.Context, rs *v1alpha1.RunnerSet) (bool, error) {
	name := naming.For(rs.Namespace, rs.Name).Capacity()
	gone := true
	for _, gvk := range capacityKinds {
		if _, err := r.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			continue // the cluster does not have this kind
		}
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("getting %s %s: %w", gvk.Kind, name, err)
		}
		l := obj.GetLabels()
		if l[capacity.LabelOwnerNamespace] != rs.Namespace || l[capacity.LabelOwnerName] != rs.Name {
			continue // not ours
		}
		gone = false
		if obj.GetDeletionTimestamp() == nil {
			if err := r.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return false, fmt.Errorf("deleting %s %s: %w", gvk.Kind, name, err)
			}
			log.FromContext(ctx).Info("Deleting capacity", "kind", gvk.Kind, "name", name)
		}
	}
	return gone, nil
}
