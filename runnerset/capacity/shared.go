package capacity

import (
	"fmt"
	"slices"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// SharedJobTimeout is the job timeout a shared NodePool's nodes drain for
// (JobNodeDisruption): the default spec.managers.shutdownTimeout. A tag
// whose jobs may run longer keeps a NodePool of its own (NeedsOwnPool).
const SharedJobTimeout = v1alpha1.DefaultShutdownTimeout

// NeedsOwnPool names the field of rs (under class, settings eff) that asks
// for what only a NodePool of its own gives, and why, or returns "": a job
// timeout longer than the shared NodePool's nodes drain for. A limit does
// not: spec.capacity.limits hold the tag's jobs in GitLab's queue
// (JobsPerManager), on whatever NodePool they run.
func NeedsOwnPool(rs *v1alpha1.RunnerSet, eff v1alpha1.Settings) (field, why string) {
	if eff.JobTimeout > SharedJobTimeout {
		return eff.JobTimeoutField, fmt.Sprintf("is %s but a shared NodePool's nodes keep a running job for %s when they expire or drift, so a longer drain needs a NodePool of its own", eff.JobTimeout, SharedJobTimeout)
	}
	return "", ""
}

// Shared builds the capacity of rs's tag on the NodePool its class's tags
// share (spec.nodePools of the RunnerClass): the class's node class and
// SharedNodePool, and a placement that makes Karpenter stamp rs's
// capacity label on the nodes it creates for rs's jobs. The tag's capacity
// wishes that node affinity can say (capacity types, architectures,
// instance families and types) move into the job pods. It refuses a tag
// that NeedsOwnPool, and GKE, whose ComputeClass is per tag.
func Shared(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass, eff v1alpha1.Settings) (*Capacity, error) {
	jobs, err := JobsPerManager(rs)
	if err != nil {
		return nil, err
	}
	switch class.Spec.Provider {
	case v1alpha1.CapacityProviderKarpenter, v1alpha1.CapacityProviderKWOK:
	default:
		return nil, v1alpha1.Failf(v1alpha1.ReasonCapacityRejected,
			"RunnerClass %s has provider %s, whose tags cannot share a NodePool: its spec.nodePools.mode must be perTag", class.Name, class.Spec.Provider)
	}
	if field, why := NeedsOwnPool(rs, eff); field != "" {
		return nil, v1alpha1.Failf(v1alpha1.ReasonNeedsOwnNodePool,
			"%s: %s, but RunnerClass %s has spec.nodePools.mode shared; nothing was changed and no running job's node is touched: remove %s, or ask the platform team for a class with spec.nodePools.mode perTag or auto",
			field, why, class.Name, field)
	}
	nc, ref, err := timedNodeClass(class, eff)
	if err != nil {
		return nil, err
	}
	np := SharedNodePool(class, ref)
	name := naming.For(rs.Namespace, rs.Name).Capacity()
	c := &Capacity{Name: name, Pool: np.Name, Objects: []client.Object{resources.WithHash(nc), resources.WithHash(np)}, Placement: placement(rs)}
	c.Placement.JobsPerManager = jobs
	c.Placement.NodeSelector = map[string]string{LabelCapacity: name}
	// The key alone tolerates the shared NodePool's taint (no value) and
	// nothing else runnerfleet taints: a tag's own NodePool taints with
	// its name as value, and the node selector keeps the pod on its tag's.
	c.Placement.NodeTolerations = map[string]string{LabelCapacity: string(corev1.TaintEffectNoSchedule)}
	in := func(key string, values ...string) runnerconfig.NodeRequirement {
		return runnerconfig.NodeRequirement{Key: key, Operator: string(corev1.NodeSelectorOpIn), Values: values}
	}
	// The NodePool label keeps the tag's jobs off its own NodePool of
	// before a move (its nodes carry the tag's label too): that one
	// empties and goes.
	c.Placement.NodeRequirements = []runnerconfig.NodeRequirement{
		in(karpv1.NodePoolLabelKey, np.Name),
		in(karpv1.CapacityTypeLabelKey, capacityTypes(rs)...),
		in(corev1.LabelArchStable, architectures(rs)...),
	}
	if f := rs.Spec.Capacity.InstanceFamilies; len(f) > 0 {
		c.Placement.NodeRequirements = append(c.Placement.NodeRequirements, in(familyKey(class), slices.Sorted(slices.Values(f))...))
	}
	if t := rs.Spec.Capacity.InstanceTypes; len(t) > 0 {
		c.Placement.NodeRequirements = append(c.Placement.NodeRequirements, in(corev1.LabelInstanceTypeStable, slices.Sorted(slices.Values(t))...))
	}
	return c, nil
}

// familyKey is the node label of an instance family under class's provider.
func familyKey(class *v1alpha1.RunnerClass) string {
	if class.Spec.Provider == v1alpha1.CapacityProviderKWOK {
		return kwokv1alpha1.InstanceFamilyLabelKey
	}
	return awsv1.LabelInstanceFamily
}

// SharedNodePool is the NodePool the tags of class share, named
// naming.ClassCapacity (as its node class, another kind) and controlled by
// the class. Every node it makes carries a tag's capacity label, the value
// of the job pod's node selector it was made for (Karpenter stamps a label
// the NodePool requires to exist from the pod's requirement), so the tags'
// jobs never share a node; its taint has the key alone, which only job
// pods of the class's shared tags tolerate. It allows every capacity type
// the class allows and both architectures; each job pod narrows that down
// by node affinity. It has no limits (a NodePool's limit would be every
// tag's; a tag's limit holds its jobs in GitLab's queue, JobsPerManager)
// and drains an expiring node for SharedJobTimeout.
func SharedNodePool(class *v1alpha1.RunnerClass, ref karpv1.NodeClassReference) *karpv1.NodePool {
	var types []string
	allowed := class.Spec.Policy.AllowedCapacityTypes
	if len(allowed) == 0 {
		allowed = []v1alpha1.CapacityType{v1alpha1.CapacityTypeSpot}
	}
	for _, want := range []v1alpha1.CapacityType{v1alpha1.CapacityTypeSpot, v1alpha1.CapacityTypeOnDemand} {
		if slices.Contains(allowed, want) {
			types = append(types, string(want))
		}
	}
	in := func(key string, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
		return karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
	}
	grace, expire := JobNodeDisruption(SharedJobTimeout)
	return &karpv1.NodePool{
		ObjectMeta: classObjectMeta(class),
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{
				Spec: karpv1.NodeClaimTemplateSpec{
					Taints: []corev1.Taint{{Key: LabelCapacity, Effect: corev1.TaintEffectNoSchedule}},
					Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
						in(karpv1.CapacityTypeLabelKey, types...),
						in(corev1.LabelArchStable, string(v1alpha1.ArchitectureAMD64), string(v1alpha1.ArchitectureARM64)),
						in(corev1.LabelOSStable, string(corev1.Linux)),
						{Key: LabelCapacity, Operator: corev1.NodeSelectorOpExists},
					},
					NodeClassRef:           &ref,
					TerminationGracePeriod: &metav1.Duration{Duration: grace},
					ExpireAfter:            karpv1.MustParseNillableDuration(expire.String()),
				},
			},
			Disruption: karpv1.Disruption{
				ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmpty,
				ConsolidateAfter:    karpv1.MustParseNillableDuration(DefaultConsolidateAfter.String()),
				Budgets:             []karpv1.Budget{{Nodes: "10%"}},
			},
		},
	}
}
