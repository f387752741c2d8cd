// Package capacity builds the capacity of one runner tag as pure functions:
// a Karpenter NodePool on EKS (and locally, with kwok) whose node class
// (EC2NodeClass, KWOKNodeClass) is its RunnerClass's, one for all of the
// class's tags, or a ComputeClass on GKE. Each tag's nodes carry a
// label and a taint of their own, and the job pods of config.toml get the
// matching node selector and toleration from the same builder, so a tag's jobs
// land only on its nodes and nobody else's do.
package capacity

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// Labels and taints of tag capacity.
const (
	// LabelCapacity is on every node of a tag and is the key of its taint.
	LabelCapacity = naming.LabelCapacity
	// LabelOwnerNamespace and LabelOwnerName tie cluster-scoped capacity to
	// its namespaced RunnerSet, which cannot own it through an ownerReference.
	LabelOwnerNamespace = resources.LabelOwnerNamespace
	LabelOwnerName      = resources.LabelOwnerName

	// AnnotationSafeToEvict keeps GKE's cluster autoscaler from removing a
	// node while a job pod runs on it.
	AnnotationSafeToEvict = resources.AnnotationSafeToEvict
	// LabelComputeClass selects a GKE ComputeClass; GKE taints its nodes with it.
	LabelComputeClass = naming.LabelComputeClass
)

// ComputeClassGVK is the GKE kind; no Go module ships its types.
var ComputeClassGVK = schema.GroupVersionKind{Group: "cloud.google.com", Version: "v1", Kind: "ComputeClass"}

// Disruption settings of a tag's Karpenter job nodes
// (docs/operations/disruptions.md).
const (
	DefaultConsolidateAfter = 30 * time.Second
	// MaxJobNodeLifetime is the longest a job node lives, the drain of
	// its last job included: expireAfter plus terminationGracePeriod. A
	// node is renewed (AMI, kernel) at least this often.
	MaxJobNodeLifetime = 7 * 24 * time.Hour
	// MinJobNodeExpireAfter is the shortest expireAfter: a node serves
	// at least this long before it expires, so that a long job timeout
	// does not make job nodes churn.
	MinJobNodeExpireAfter = 24 * time.Hour
	// JobNodeDrainMargin is added to the job timeout for a job node's
	// terminationGracePeriod: the job pod's own grace period (Karpenter
	// deletes a pod that long before the node's deadline), its
	// after_script and its cache and artifact uploads.
	JobNodeDrainMargin = 15 * time.Minute
	// MaxKarpenterJobTimeout is the longest job timeout a Karpenter job
	// node keeps a running job for: its lifetime less the shortest
	// expireAfter and the margin.
	MaxKarpenterJobTimeout = MaxJobNodeLifetime - MinJobNodeExpireAfter - JobNodeDrainMargin
)

// JobNodeDisruption is the terminationGracePeriod and expireAfter of a
// Karpenter job node for jobs of at most jobTimeout: a node that expires
// or drifts while a job runs keeps it until the job's timeout (Karpenter
// honours the job pod's do-not-disrupt until the grace period is up), and
// no node outlives MaxJobNodeLifetime.
func JobNodeDisruption(jobTimeout time.Duration) (grace, expireAfter time.Duration) {
	grace = jobTimeout + JobNodeDrainMargin
	return grace, MaxJobNodeLifetime - grace
}

// Capacity is what one RunnerSet's tag gets.
type Capacity struct {
	// Name of the tag's own cluster-scoped objects (the NodePool, the
	// ComputeClass) and the value of its capacity label; the node class is
	// named by naming.ClassCapacity.
	Name string
	// Pool is the NodePool (or ComputeClass) the tag's jobs land on: Name,
	// or the class's shared NodePool (Shared).
	Pool string
	// Objects in the order they must be created (node class before NodePool).
	Objects []client.Object
	// Placement is what job pods must carry to land on these nodes.
	Placement runnerconfig.JobPlacement
}

// For builds the capacity of rs under class, whose settings resolved for rs
// (v1alpha1.Effective, once per pass) are eff.
func For(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass, eff v1alpha1.Settings) (*Capacity, error) {
	jobs, err := JobsPerManager(rs)
	if err != nil {
		return nil, err
	}
	name := naming.For(rs.Namespace, rs.Name).Capacity()
	c := &Capacity{Name: name, Pool: name, Placement: placement(rs)}
	c.Placement.JobsPerManager = jobs
	label := LabelCapacity
	switch class.Spec.Provider {
	case v1alpha1.CapacityProviderKarpenter, v1alpha1.CapacityProviderKWOK:
		nc, ref, err := timedNodeClass(class, eff)
		if err != nil {
			return nil, err
		}
		c.Objects = []client.Object{resources.WithHash(nc), resources.WithHash(NodePool(rs, class, ref, eff))}
	case v1alpha1.CapacityProviderComputeClass:
		if err := GKEQuotaReady(rs); err != nil {
			return nil, err
		}
		cc, err := ComputeClass(rs, class, eff)
		if err != nil {
			return nil, err
		}
		c.Objects = []client.Object{resources.WithHash(cc)}
		// GKE labels and taints a ComputeClass's nodes with its name.
		label = LabelComputeClass
	default:
		return nil, v1alpha1.Failf(v1alpha1.ReasonCapacityRejected, "RunnerClass %s has unknown provider %q", class.Name, class.Spec.Provider)
	}
	c.Placement.NodeSelector = map[string]string{label: name}
	c.Placement.NodeTolerations = map[string]string{label + "=" + name: string(corev1.TaintEffectNoSchedule)}
	if class.Spec.Provider == v1alpha1.CapacityProviderComputeClass && slices.Contains(architectures(rs), string(v1alpha1.ArchitectureARM64)) {
		// GKE taints every Arm node so that x86-only pods stay off it.
		c.Placement.NodeTolerations[corev1.LabelArchStable+"="+string(v1alpha1.ArchitectureARM64)] = string(corev1.TaintEffectNoSchedule)
	}
	return c, nil
}

// nodeClass is the Karpenter node class of class's tags, its kind set so
// that their NodePools can refer to it. Nothing in it is a tag's: the tags
// share it (one object for a thousand of them, and one set of subnet,
// security group and AMI lookups for Karpenter), and each tag's nodes are
// still its NodePool's alone.
// timedNodeClass is the class's node class and a NodePool's reference to
// it, once the job timeout eff asks for fits the class (CheckJobTimeout).
func timedNodeClass(class *v1alpha1.RunnerClass, eff v1alpha1.Settings) (client.Object, karpv1.NodeClassReference, error) {
	if err := CheckJobTimeout(class, eff); err != nil {
		return nil, karpv1.NodeClassReference{}, err
	}
	nc, err := nodeClass(class, eff)
	if err != nil {
		return nil, karpv1.NodeClassReference{}, err
	}
	gvk := nc.GetObjectKind().GroupVersionKind()
	return nc, karpv1.NodeClassReference{Group: gvk.Group, Kind: gvk.Kind, Name: nc.GetName()}, nil
}

func nodeClass(class *v1alpha1.RunnerClass, eff v1alpha1.Settings) (client.Object, error) {
	var nc client.Object
	var gvk schema.GroupVersionKind
	switch class.Spec.Provider {
	case v1alpha1.CapacityProviderKarpenter:
		if class.Spec.Karpenter == nil {
			return nil, v1alpha1.Failf(v1alpha1.ReasonCapacityRejected, "RunnerClass %s has provider karpenter but no spec.karpenter settings", class.Name)
		}
		nc, gvk = EC2NodeClass(class, eff), AWSGroupVersion.WithKind("EC2NodeClass")
	default:
		nc, gvk = KWOKNodeClass(class), KWOKGroupVersion.WithKind("KWOKNodeClass")
	}
	nc.GetObjectKind().SetGroupVersionKind(gvk)
	return nc, nil
}

// classObjectMeta names a class's node class and makes the RunnerClass its
// controller: the garbage collector deletes it with the class. (No
// blockOwnerDeletion: nothing waits for it.)
func classObjectMeta(class *v1alpha1.RunnerClass) metav1.ObjectMeta {
	gvk := v1alpha1.GroupVersion.WithKind("RunnerClass")
	return metav1.ObjectMeta{
		Name:   naming.ClassCapacity(class.Name),
		Labels: withManagedBy(map[string]string{}),
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: class.Name, UID: class.UID, Controller: ptr.To(true),
		}},
	}
}

// placement is what every job pod carries whatever the provider: nothing
// consolidates or evicts its node while it runs, and it is labelled with its
// RunnerSet so deletion can wait for it.
func placement(rs *v1alpha1.RunnerSet) runnerconfig.JobPlacement {
	return runnerconfig.JobPlacement{
		PodAnnotations: map[string]string{
			karpv1.DoNotDisruptAnnotationKey: "true",
			AnnotationSafeToEvict:            "false",
		},
		PodLabels: withManagedBy(resources.SelectorLabels(rs, resources.ComponentJob)),
	}
}

// withManagedBy adds runnerfleet's managed-by label to l.
func withManagedBy(l map[string]string) map[string]string {
	l[resources.LabelManagedBy] = resources.ManagedBy
	return l
}

// OneJob is what one job pod asks for: build, helper and service containers.
func OneJob(rs *v1alpha1.RunnerSet) (cpu, memory resource.Quantity) {
	r := rs.Spec.Jobs.Resources
	for _, c := range []v1alpha1.ContainerResources{r.Build, r.Helper, r.Service} {
		if c.CPURequest != nil {
			cpu.Add(*c.CPURequest)
		}
		if c.MemoryRequest != nil {
			memory.Add(*c.MemoryRequest)
		}
	}
	return cpu, memory
}

// JobsPerManager is the [[runners]] limit each of rs's managers renders:
// how many jobs one manager runs at once. gitlab-runner's manager at its
// limit asks GitLab for no job (acquireBuild before any request), so a
// job over the tag's spec.capacity.limits waits in GitLab's queue, with
// no pod that Karpenter would buy a node for or a quota would refuse, and
// runs when one ends. Without limits it is spec.managers.concurrent. With
// limits it is the jobs that fit them (each limited resource divided by
// what one job asks of it, OneJob; a resource no job container asks for
// counts no job against it) shared among spec.managers.replicas (an
// autoscaled RunnerSet's autoscale.maxReplicas), at most
// concurrent: replicas × JobsPerManager never exceeds the jobs that fit.
// It is never 0, which gitlab-runner reads as no limit: limits below one
// job, or fitting fewer jobs than there are managers, are a Failure
// naming the field and the fix.
func JobsPerManager(rs *v1alpha1.RunnerSet) (int, error) {
	concurrent := int(rs.Spec.Managers.ConcurrentOrDefault())
	fit, counted, err := jobsThatFit(rs)
	if err != nil || !counted {
		return concurrent, err
	}
	// An autoscaled RunnerSet's limits are shared among its most
	// managers (maxReplicas): however many run, they never exceed them
	// (fewer leave some of the limits unused).
	replicas := max(1, int64(rs.Spec.Managers.MaxManagers()))
	if fit < replicas {
		field := rs.Spec.Managers.MaxManagersField()
		return 0, v1alpha1.Failf(v1alpha1.ReasonLimitsBelowManagers,
			"spec.capacity.limits fit %d job(s) at once but %s is %d: each manager runs at least one job (a [[runners]] limit of 0 is no limit to gitlab-runner), so %d managers could run %d jobs; nothing was changed: raise spec.capacity.limits to fit at least %d jobs, or lower %s to %d",
			fit, field, replicas, replicas, replicas, replicas, field, fit)
	}
	return int(min(fit/replicas, int64(concurrent))), nil
}

// jobsThatFit is how many of rs's jobs spec.capacity.limits hold at once,
// and whether any limited resource counts them (one that no job
// container asks for cannot). Limits that could never fit a single job
// are a Failure: such a tag would queue every job forever.
func jobsThatFit(rs *v1alpha1.RunnerSet) (fit int64, counted bool, err error) {
	cpu, mem := OneJob(rs)
	for _, r := range []struct {
		name corev1.ResourceName
		job  resource.Quantity
		what string
	}{{corev1.ResourceCPU, cpu, "cpuRequest"}, {corev1.ResourceMemory, mem, "memoryRequest"}} {
		l, ok := rs.Spec.Capacity.Limits[r.name]
		if !ok || r.job.IsZero() {
			continue
		}
		if l.Cmp(r.job) < 0 {
			return 0, false, v1alpha1.Failf(v1alpha1.ReasonLimitsBelowOneJob,
				"spec.capacity.limits.%s is %s but one job asks for %s (build + helper + service %s): raise the limit or lower the requests",
				r.name, l.String(), r.job.String(), r.what)
		}
		n := l.MilliValue() / r.job.MilliValue()
		if !counted || n < fit {
			fit = n
		}
		counted = true
	}
	return fit, counted, nil
}

// CheckJobTimeout refuses, under a Karpenter (or kwok) class, a job
// timeout longer than a job node keeps a running job for: its node would
// be taken from under the job once expired or drifted
// (terminationGracePeriod overrides do-not-disrupt). The controller asks
// before anything of the spec is written or sent to GitLab.
func CheckJobTimeout(class *v1alpha1.RunnerClass, eff v1alpha1.Settings) error {
	switch class.Spec.Provider {
	case v1alpha1.CapacityProviderKarpenter, v1alpha1.CapacityProviderKWOK:
	default:
		return nil
	}
	if eff.JobTimeout <= MaxKarpenterJobTimeout {
		return nil
	}
	return v1alpha1.Failf(v1alpha1.ReasonJobTimeoutTooLong,
		"%s is %s but a Karpenter job node keeps a running job for at most %s (it lives at most %s, drain included, serves at least %s before it expires, and drains %s beyond the job timeout): lower %s to %s or less",
		eff.JobTimeoutField, eff.JobTimeout, MaxKarpenterJobTimeout, MaxJobNodeLifetime, MinJobNodeExpireAfter, JobNodeDrainMargin, eff.JobTimeoutField, MaxKarpenterJobTimeout)
}

// Labels tie a cluster-scoped object to rs.
func Labels(rs *v1alpha1.RunnerSet) map[string]string {
	return withManagedBy(map[string]string{
		LabelOwnerNamespace: rs.Namespace,
		LabelOwnerName:      rs.Name,
	})
}

func objectMeta(rs *v1alpha1.RunnerSet) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: naming.For(rs.Namespace, rs.Name).Capacity(), Labels: Labels(rs)}
}

// capacityTypes lists spot first: Karpenter prefers spot when both are allowed.
func capacityTypes(rs *v1alpha1.RunnerSet) []string {
	var out []string
	for _, want := range []v1alpha1.CapacityType{v1alpha1.CapacityTypeSpot, v1alpha1.CapacityTypeOnDemand} {
		if slices.Contains(rs.Spec.Capacity.CapacityTypesOrDefault(), want) {
			out = append(out, string(want))
		}
	}
	return out
}

func architectures(rs *v1alpha1.RunnerSet) []string {
	if len(rs.Spec.Capacity.Architectures) == 0 {
		return []string{"amd64"}
	}
	out := make([]string, len(rs.Spec.Capacity.Architectures))
	for i, a := range rs.Spec.Capacity.Architectures {
		out[i] = string(a)
	}
	slices.Sort(out)
	return out
}

// NodePool is the Karpenter NodePool of rs's tag, whose settings under
// class are eff.
func NodePool(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass, ref karpv1.NodeClassReference, eff v1alpha1.Settings) *karpv1.NodePool {
	name := naming.For(rs.Namespace, rs.Name).Capacity()
	in := func(key string, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
		return karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
	}
	reqs := []karpv1.NodeSelectorRequirementWithMinValues{
		in(karpv1.CapacityTypeLabelKey, capacityTypes(rs)...),
		in(corev1.LabelArchStable, architectures(rs)...),
		in(corev1.LabelOSStable, string(corev1.Linux)),
	}
	if f := rs.Spec.Capacity.InstanceFamilies; len(f) > 0 {
		reqs = append(reqs, in(familyKey(class), slices.Sorted(slices.Values(f))...))
	}
	if t := rs.Spec.Capacity.InstanceTypes; len(t) > 0 {
		reqs = append(reqs, in(corev1.LabelInstanceTypeStable, slices.Sorted(slices.Values(t))...))
	}
	// A node that expires or drifts drains for as long as a job may run,
	// and no less; none lives beyond MaxJobNodeLifetime.
	grace, expire := JobNodeDisruption(eff.JobTimeout)
	np := &karpv1.NodePool{
		ObjectMeta: objectMeta(rs),
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{
				ObjectMeta: karpv1.ObjectMeta{Labels: map[string]string{LabelCapacity: name}},
				Spec: karpv1.NodeClaimTemplateSpec{
					Taints:                 []corev1.Taint{{Key: LabelCapacity, Value: name, Effect: corev1.TaintEffectNoSchedule}},
					Requirements:           reqs,
					NodeClassRef:           &ref,
					TerminationGracePeriod: &metav1.Duration{Duration: grace},
					ExpireAfter:            karpv1.MustParseNillableDuration(expire.String()),
				},
			},
			Disruption: karpv1.Disruption{
				// Job nodes go only when empty: a node running a job is never
				// consolidated, and job pods carry do-not-disrupt besides.
				ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmpty,
				ConsolidateAfter:    karpv1.MustParseNillableDuration(DefaultConsolidateAfter.String()),
				Budgets:             []karpv1.Budget{{Nodes: "10%"}},
			},
		},
	}
	// The tag's jobs beyond its limits wait in GitLab's queue
	// (JobsPerManager); the NodePool's limit is the backstop for the
	// moment a manager roll runs more (docs/concepts/limits.md).
	if len(rs.Spec.Capacity.Limits) > 0 {
		np.Spec.Limits = karpv1.Limits(maps.Clone(rs.Spec.Capacity.Limits))
	}
	return np
}

// EC2NodeClass is the node class of class's tags on EKS: the cluster's
// subnets and security groups by discovery tag, Bottlerocket by default,
// IMDSv2 with a hop limit of 1 so job pods cannot reach the node's
// credentials. Its instances carry the class's tags and the class's name;
// Karpenter adds karpenter.sh/nodepool, the tag's NodePool (naming.Capacity
// of the RunnerSet), to every instance it launches: costs are told apart
// by tag through that.
func EC2NodeClass(class *v1alpha1.RunnerClass, eff v1alpha1.Settings) *awsv1.EC2NodeClass {
	k := class.Spec.Karpenter
	discovery := map[string]string{naming.TagKarpenterDiscovery: k.ClusterName}
	tags := maps.Clone(k.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[TagRunnerClass] = class.Name
	return &awsv1.EC2NodeClass{
		ObjectMeta: classObjectMeta(class),
		Spec: awsv1.EC2NodeClassSpec{
			SubnetSelectorTerms:        []awsv1.SubnetSelectorTerm{{Tags: discovery}},
			SecurityGroupSelectorTerms: []awsv1.SecurityGroupSelectorTerm{{Tags: discovery}},
			AMISelectorTerms:           []awsv1.AMISelectorTerm{{Alias: eff.AMIAlias}},
			Role:                       k.NodeRole,
			Tags:                       tags,
			AssociatePublicIPAddress:   ptr.To(false),
			MetadataOptions: &awsv1.MetadataOptions{
				HTTPEndpoint:            ptr.To("enabled"),
				HTTPProtocolIPv6:        ptr.To("disabled"),
				HTTPPutResponseHopLimit: ptr.To[int64](1),
				HTTPTokens:              ptr.To("required"),
			},
		},
	}
}

// TagRunnerClass is the EC2 tag that names a node's RunnerClass.
const TagRunnerClass = naming.TagRunnerClass

// KWOKNodeClass is the node class of class's tags on a local cluster.
func KWOKNodeClass(class *v1alpha1.RunnerClass) *kwokv1alpha1.KWOKNodeClass {
	return &kwokv1alpha1.KWOKNodeClass{ObjectMeta: classObjectMeta(class)}
}

// ComputeClass is the GKE ComputeClass of rs's tag: spot first, on-demand
// only where allowed, node pools created on demand, and active migration off
// because it would move running job pods. Every capacity wish takes effect
// or is refused with a message: instanceTypes become priorities by
// machineType, instanceFamilies (or the class's) by machineFamily,
// architectures choose Arm or x86 families; limits have no ComputeClass
// field and are enforced by a ResourceQuota (see Quota).
func ComputeClass(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass, eff v1alpha1.Settings) (*unstructured.Unstructured, error) {
	key, machines, err := gkeMachines(rs, class, eff)
	if err != nil {
		return nil, err
	}
	var priorities []any
	for _, ct := range capacityTypes(rs) {
		for _, m := range machines {
			priorities = append(priorities, map[string]any{key: m, "spot": ct == string(v1alpha1.CapacityTypeSpot)})
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"priorities":           priorities,
			"nodePoolAutoCreation": map[string]any{"enabled": true},
			"activeMigration":      map[string]any{"optimizeRulePriority": false},
			"whenUnsatisfiable":    "DoNotScaleUp",
		},
	}}
	u.SetGroupVersionKind(ComputeClassGVK)
	m := objectMeta(rs)
	u.SetName(m.Name)
	u.SetLabels(m.Labels)
	return u, nil
}

// Quota is the ResourceQuota that backs rs's spec.capacity.limits on GKE,
// where a ComputeClass has no limits (the managers' [[runners]] limit,
// JobsPerManager, keeps the jobs beyond them in GitLab's queue; the quota
// refuses a pod only when a manager roll runs more): the requests of the tag's job pods in
// namespace (its jobs namespace) may not add up to more. Karpenter's limits
// cap the nodes a tag may have; this caps what its jobs may ask for, which
// is what a node pool sized to the limit could hold. Nil when rs has no
// limits. Every job container must then ask for cpu and memory, or the
// quota would refuse its pod: GKEQuotaReady says whether rs does.
func Quota(rs *v1alpha1.RunnerSet, namespace string) *corev1.ResourceQuota {
	lim := rs.Spec.Capacity.Limits
	if len(lim) == 0 {
		return nil
	}
	hard := corev1.ResourceList{}
	if v, ok := lim[corev1.ResourceCPU]; ok {
		hard[corev1.ResourceRequestsCPU] = v
	}
	if v, ok := lim[corev1.ResourceMemory]; ok {
		hard[corev1.ResourceRequestsMemory] = v
	}
	return resources.WithHash(&corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: naming.For(rs.Namespace, rs.Name).Capacity(), Namespace: namespace, Labels: Labels(rs)},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
	})
}

// GKEQuotaReady refuses limits the quota of Quota could not enforce
// without refusing job pods: every job container (build, helper, service)
// must ask for each limited resource.
func GKEQuotaReady(rs *v1alpha1.RunnerSet) error {
	r := rs.Spec.Jobs.Resources
	for _, res := range slices.Sorted(maps.Keys(rs.Spec.Capacity.Limits)) {
		for _, c := range []struct {
			name string
			cr   v1alpha1.ContainerResources
		}{{"build", r.Build}, {"helper", r.Helper}, {"service", r.Service}} {
			req, field := c.cr.CPURequest, "cpuRequest"
			if res == corev1.ResourceMemory {
				req, field = c.cr.MemoryRequest, "memoryRequest"
			}
			if req == nil {
				return v1alpha1.Failf(v1alpha1.ReasonCapacityRejected,
					"spec.capacity.limits.%s is enforced on GKE by a ResourceQuota on the job pods' requests, which refuses a pod that asks for no %s: set spec.jobs.resources.%s.%s (and the same for build, helper and service)",
					res, res, c.name, field)
			}
		}
	}
	return nil
}

// GKE machine families whose CPUs are Arm; every other family is x86.
var gkeArmFamilies = []string{"a4x", "c4a", "n4a", "t2a"}

// DefaultGKEArmFamilies are tried, in order, for arm64 nodes when neither
// the RunnerSet nor its class names an Arm family.
var DefaultGKEArmFamilies = []string{"c4a", "t2a"}

// gkeMachineType is a GCE machine type name: family, series and shape
// separated by dashes (n2d-standard-8, e2-micro, n2-custom-4-8192).
var gkeMachineType = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)+$`)

// gkeArch is the architecture of a GKE machine family or machine type.
func gkeArch(familyOrType string) string {
	f, _, _ := strings.Cut(familyOrType, "-")
	if slices.Contains(gkeArmFamilies, f) {
		return string(v1alpha1.ArchitectureARM64)
	}
	return string(v1alpha1.ArchitectureAMD64)
}

// gkeRefuses says why GKE's ComputeClass refuses machine family f, or "".
func gkeRefuses(f string) string {
	switch {
	case len(f) > 10:
		return "is longer than the 10 characters GKE allows for a machine family"
	case f == "ek" || f == "e4a":
		return "is a family GKE does not allow in a ComputeClass"
	}
	return ""
}

// gkeMachines returns the ComputeClass priority key (machineType or
// machineFamily) and its values for rs, or a Failure naming the field.
func gkeMachines(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass, eff v1alpha1.Settings) (string, []string, error) {
	archs := architectures(rs)
	c := rs.Spec.Capacity
	refuse := func(format string, args ...any) (string, []string, error) {
		return "", nil, v1alpha1.Failf(v1alpha1.ReasonCapacityRejected, format, args...)
	}
	for _, f := range c.InstanceFamilies {
		if why := gkeRefuses(f); why != "" {
			return refuse("spec.capacity.instanceFamilies %q %s (RunnerClass %s is GKE): name a family such as n2d or c4a", f, why, class.Name)
		}
		if a := gkeArch(f); !slices.Contains(archs, a) {
			return refuse("spec.capacity.instanceFamilies %q is an %s family but spec.capacity.architectures is %v: add %s there or name a family of that architecture", f, a, archs, a)
		}
	}
	if len(c.InstanceTypes) > 0 {
		types := slices.Sorted(slices.Values(c.InstanceTypes))
		for _, t := range types {
			fam, _, _ := strings.Cut(t, "-")
			switch {
			case !gkeMachineType.MatchString(t) || len(t) > 100:
				return refuse("spec.capacity.instanceTypes %q is not a GCE machine type (RunnerClass %s is GKE): use names such as n2d-standard-8 or c4a-highcpu-4", t, class.Name)
			case strings.HasPrefix(t, "ek") || strings.HasPrefix(t, "e4a"):
				return refuse("spec.capacity.instanceTypes %q is a machine type GKE does not allow in a ComputeClass", t)
			case len(c.InstanceFamilies) > 0 && !slices.Contains(c.InstanceFamilies, fam):
				return refuse("spec.capacity.instanceTypes %q is not of a family in spec.capacity.instanceFamilies %v: add %s there or drop the type", t, c.InstanceFamilies, fam)
			case !slices.Contains(archs, gkeArch(t)):
				return refuse("spec.capacity.instanceTypes %q is an %s machine type but spec.capacity.architectures is %v", t, gkeArch(t), archs)
			}
		}
		return "machineType", types, nil
	}
	if len(c.InstanceFamilies) > 0 {
		return "machineFamily", c.InstanceFamilies, nil
	}
	// The class's families, those of an allowed architecture; an allowed
	// architecture the class has no family for gets runnerfleet's defaults.
	var out []string
	for _, f := range eff.MachineFamilies {
		if slices.Contains(archs, gkeArch(f)) {
			out = append(out, f)
		}
	}
	for _, a := range archs {
		if slices.ContainsFunc(out, func(f string) bool { return gkeArch(f) == a }) {
			continue
		}
		if a == string(v1alpha1.ArchitectureARM64) {
			out = append(out, DefaultGKEArmFamilies...)
		} else {
			out = append(out, v1alpha1.DefaultMachineFamily)
		}
	}
	return "machineFamily", out, nil
}
