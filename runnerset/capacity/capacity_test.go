package capacity

import (
	"errors"
	"strings"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	gkecrd "github.com/runnerfleet/runnerfleet/runnerset/crds/gke"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

func eks() *v1alpha1.RunnerClass {
	return &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "eks"},
		Spec: v1alpha1.RunnerClassSpec{
			Provider:  v1alpha1.CapacityProviderKarpenter,
			Karpenter: &v1alpha1.KarpenterSettings{ClusterName: "prod", NodeRole: "prod-nodes", Tags: map[string]string{"team": "platform"}},
		},
	}
}

func rs() *v1alpha1.RunnerSet {
	return &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
}

func requirement(np *karpv1.NodePool, key string) []string {
	for _, r := range np.Spec.Template.Spec.Requirements {
		if r.Key == key {
			return r.Values
		}
	}
	return nil
}

func TestNodePoolIsSpotOnlyByDefaultAndSpotFirstWhenBothAllowed(t *testing.T) {
	r := rs()
	np := NodePool(r, eks(), karpv1.NodeClassReference{}, v1alpha1.Effective(r, eks()))
	if got := requirement(np, karpv1.CapacityTypeLabelKey); len(got) != 1 || got[0] != "spot" {
		t.Errorf("default capacity types %v, want [spot]", got)
	}
	r.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeOnDemand, v1alpha1.CapacityTypeSpot}
	np = NodePool(r, eks(), karpv1.NodeClassReference{}, v1alpha1.Effective(r, eks()))
	if got := requirement(np, karpv1.CapacityTypeLabelKey); len(got) != 2 || got[0] != "spot" {
		t.Errorf("capacity types %v, want spot first", got)
	}
}

func TestNodePoolNeverDisruptsARunningJob(t *testing.T) {
	r := rs()
	r.Spec.Managers.ShutdownTimeout = &metav1.Duration{Duration: 5 * time.Hour}
	np := NodePool(r, eks(), karpv1.NodeClassReference{}, v1alpha1.Effective(r, eks()))
	d := np.Spec.Disruption
	if d.ConsolidationPolicy != karpv1.ConsolidationPolicyWhenEmpty {
		t.Errorf("consolidation policy %s: a node running a job could be consolidated", d.ConsolidationPolicy)
	}
	if *d.ConsolidateAfter.Duration != DefaultConsolidateAfter {
		t.Errorf("consolidateAfter %v", d.ConsolidateAfter)
	}
	if tgp := np.Spec.Template.Spec.TerminationGracePeriod.Duration; tgp < 5*time.Hour {
		t.Errorf("terminationGracePeriod %v is shorter than the runner's job timeout", tgp)
	}
	if c, _ := build(r, eks()); c.Placement.PodAnnotations[karpv1.DoNotDisruptAnnotationKey] != "true" || c.Placement.PodAnnotations[AnnotationSafeToEvict] != "false" {
		t.Errorf("job pods' annotations %v: Karpenter or the cluster autoscaler may take a running job's node", c.Placement.PodAnnotations)
	}
	if len(d.Budgets) == 0 {
		t.Error("no disruption budget")
	}
}

func TestTagsJobPodsLandOnlyOnTheirOwnNodes(t *testing.T) {
	for _, class := range []*v1alpha1.RunnerClass{eks(), {ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}} {
		t.Run(string(class.Spec.Provider), func(t *testing.T) {
			c, err := build(rs(), class)
			if err != nil {
				t.Fatal(err)
			}
			np := c.Objects[1].(*karpv1.NodePool)
			// Every node label the jobs select is on the template.
			for k, v := range c.Placement.NodeSelector {
				if np.Spec.Template.Labels[k] != v {
					t.Errorf("jobs select %s=%s, nodes are labelled %v", k, v, np.Spec.Template.Labels)
				}
			}
			// Every taint of the nodes is tolerated by the jobs, in gitlab-runner's "key=value": effect form.
			for _, taint := range np.Spec.Template.Spec.Taints {
				if c.Placement.NodeTolerations[taint.Key+"="+taint.Value] != string(taint.Effect) {
					t.Errorf("taint %v is not tolerated by %v", taint, c.Placement.NodeTolerations)
				}
			}
			if len(np.Spec.Template.Spec.Taints) == 0 {
				t.Error("nodes have no taint: other pods could land on them")
			}
			if c.Placement.PodAnnotations[karpv1.DoNotDisruptAnnotationKey] != "true" {
				t.Error("job pods are not do-not-disrupt")
			}
			other, _ := build(&v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "build"}}, class)
			if other.Name == c.Name || other.Placement.NodeSelector[LabelCapacity] == c.Placement.NodeSelector[LabelCapacity] {
				t.Error("two teams' runners share capacity")
			}
		})
	}
}

func TestEC2NodeClassKeepsJobsAwayFromNodeCredentials(t *testing.T) {
	nc := EC2NodeClass(eks(), v1alpha1.Effective(rs(), eks()))
	m := nc.Spec.MetadataOptions
	if *m.HTTPTokens != "required" || *m.HTTPPutResponseHopLimit != 1 {
		t.Errorf("metadata options %+v: pods could reach the node's credentials", m)
	}
	if nc.Spec.AMISelectorTerms[0].Alias != "bottlerocket@latest" {
		t.Errorf("AMI %v, want Bottlerocket by default", nc.Spec.AMISelectorTerms)
	}
	if nc.Spec.SubnetSelectorTerms[0].Tags["karpenter.sh/discovery"] != "prod" || nc.Spec.SecurityGroupSelectorTerms[0].Tags["karpenter.sh/discovery"] != "prod" {
		t.Error("subnets or security groups are not found by the cluster's discovery tag")
	}
	if nc.Spec.Role != "prod-nodes" || *nc.Spec.AssociatePublicIPAddress {
		t.Errorf("role %q, public IP %v", nc.Spec.Role, *nc.Spec.AssociatePublicIPAddress)
	}
	// The class's node class, shared by its tags: nothing of one tag in
	// it (Karpenter tags each instance with its NodePool, the tag's).
	if nc.Spec.Tags["team"] != "platform" || nc.Spec.Tags[TagRunnerClass] != eks().Name || len(nc.Spec.Tags) != 2 {
		t.Errorf("tags %v", nc.Spec.Tags)
	}
	if nc.Name != naming.ClassCapacity(eks().Name) {
		t.Errorf("name %q, want the class's %q", nc.Name, naming.ClassCapacity(eks().Name))
	}
	if ref := metav1.GetControllerOf(nc); ref == nil || ref.Kind != "RunnerClass" || ref.Name != eks().Name || ref.BlockOwnerDeletion != nil {
		t.Errorf("controller %+v, want RunnerClass %s without blockOwnerDeletion", ref, eks().Name)
	}
}

func TestInstanceChoicesBecomeRequirements(t *testing.T) {
	r := rs()
	r.Spec.Capacity.InstanceFamilies = []string{"m7i", "c7i"}
	r.Spec.Capacity.InstanceTypes = []string{"c7i.2xlarge"}
	r.Spec.Capacity.Architectures = []v1alpha1.Architecture{"arm64", "amd64"}
	r.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
	np := NodePool(r, eks(), karpv1.NodeClassReference{}, v1alpha1.Effective(r, eks()))
	if got := requirement(np, awsv1.LabelInstanceFamily); strings.Join(got, ",") != "c7i,m7i" {
		t.Errorf("families %v", got)
	}
	if got := requirement(np, corev1.LabelInstanceTypeStable); len(got) != 1 {
		t.Errorf("types %v", got)
	}
	if got := requirement(np, corev1.LabelArchStable); strings.Join(got, ",") != "amd64,arm64" {
		t.Errorf("architectures %v", got)
	}
	if q := np.Spec.Limits[corev1.ResourceCPU]; q.String() != "64" {
		t.Errorf("cpu limit %v", q)
	}
}

func TestLimitsBelowOneJobAreRefused(t *testing.T) {
	r := rs()
	r.Spec.Jobs.Resources.Build.CPURequest = ptr.To(resource.MustParse("3"))
	r.Spec.Jobs.Resources.Helper.CPURequest = ptr.To(resource.MustParse("500m"))
	r.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	_, err := build(r, eks())
	inv, ok := err.(*v1alpha1.Failure)
	if !ok || inv.Reason != v1alpha1.ReasonLimitsBelowOneJob || !strings.Contains(inv.Message, "spec.capacity.limits.cpu is 2 but one job asks for 3500m") {
		t.Fatalf("got %v", err)
	}
	r.Spec.Capacity.Limits[corev1.ResourceCPU] = resource.MustParse("3500m")
	if _, err := build(r, eks()); err != nil {
		t.Fatalf("a limit that fits exactly one job: %v", err)
	}
}

func TestComputeClassIsSpotFirstWithoutActiveMigration(t *testing.T) {
	class := &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gke"},
		Spec: v1alpha1.RunnerClassSpec{
			Provider:     v1alpha1.CapacityProviderComputeClass,
			ComputeClass: &v1alpha1.ComputeClassSettings{MachineFamilies: []string{"n2d", "c3"}},
		},
	}
	r := rs()
	r.Spec.Capacity.CapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeSpot, v1alpha1.CapacityTypeOnDemand}
	c, err := build(r, class)
	if err != nil {
		t.Fatal(err)
	}
	u := c.Objects[0].(*unstructured.Unstructured)
	prios, _, _ := unstructured.NestedSlice(u.Object, "spec", "priorities")
	var got []string
	for _, p := range prios {
		m := p.(map[string]any)
		got = append(got, m["machineFamily"].(string)+map[bool]string{true: "/spot", false: "/on-demand"}[m["spot"].(bool)])
	}
	if strings.Join(got, ",") != "n2d/spot,c3/spot,n2d/on-demand,c3/on-demand" {
		t.Errorf("priorities %v", got)
	}
	if opt, _, _ := unstructured.NestedBool(u.Object, "spec", "activeMigration", "optimizeRulePriority"); opt {
		t.Error("active migration would move running jobs")
	}
	if on, _, _ := unstructured.NestedBool(u.Object, "spec", "nodePoolAutoCreation", "enabled"); !on {
		t.Error("node pools are not auto-created")
	}
	if c.Placement.NodeSelector[LabelComputeClass] != c.Name || c.Placement.PodAnnotations[AnnotationSafeToEvict] != "false" {
		t.Errorf("placement %+v", c.Placement)
	}
}

func gke(families ...string) *v1alpha1.RunnerClass {
	return &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gke"},
		Spec: v1alpha1.RunnerClassSpec{
			Provider:     v1alpha1.CapacityProviderComputeClass,
			ComputeClass: &v1alpha1.ComputeClassSettings{MachineFamilies: families},
		},
	}
}

func priorities(t *testing.T, c *Capacity) []string {
	t.Helper()
	u := c.Objects[0].(*unstructured.Unstructured)
	prios, _, _ := unstructured.NestedSlice(u.Object, "spec", "priorities")
	var got []string
	for _, p := range prios {
		m := p.(map[string]any)
		for _, k := range []string{"machineFamily", "machineType"} {
			if v, ok := m[k]; ok {
				got = append(got, k+"="+v.(string))
			}
		}
	}
	return got
}

// TestEveryGKECapacityWishTakesEffectAndGKEAcceptsTheClass: instance
// types, families and architectures each change the ComputeClass, and
// every class built is judged by GKE's ComputeClass schema.
func TestEveryGKECapacityWishTakesEffectAndGKEAcceptsTheClass(t *testing.T) {
	v, err := gkecrd.ComputeClassValidator()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		class  *v1alpha1.RunnerClass
		mutate func(*v1alpha1.CapacitySpec)
		want   string
		arm    bool
	}{
		{"class families", gke("n2d", "c3"), nil, "machineFamily=n2d,machineFamily=c3", false},
		{"families of the RunnerSet", gke("n2d"), func(c *v1alpha1.CapacitySpec) { c.InstanceFamilies = []string{"c3d"} }, "machineFamily=c3d", false},
		{"instance types", gke("n2d"), func(c *v1alpha1.CapacitySpec) { c.InstanceTypes = []string{"n2d-standard-8", "n2d-highcpu-16"} },
			"machineType=n2d-highcpu-16,machineType=n2d-standard-8", false},
		{"arm64 only: Arm families, not the class's x86 ones", gke("n2d"), func(c *v1alpha1.CapacitySpec) { c.Architectures = []v1alpha1.Architecture{"arm64"} },
			"machineFamily=c4a,machineFamily=t2a", true},
		{"arm64 with a class Arm family", gke("n2d", "t2a"), func(c *v1alpha1.CapacitySpec) { c.Architectures = []v1alpha1.Architecture{"arm64"} },
			"machineFamily=t2a", true},
		{"both architectures", gke("n2d"), func(c *v1alpha1.CapacitySpec) { c.Architectures = []v1alpha1.Architecture{"amd64", "arm64"} },
			"machineFamily=n2d,machineFamily=c4a,machineFamily=t2a", true},
		{"arm64 machine types", gke("n2d"), func(c *v1alpha1.CapacitySpec) {
			c.Architectures = []v1alpha1.Architecture{"arm64"}
			c.InstanceTypes = []string{"c4a-standard-4"}
		}, "machineType=c4a-standard-4", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rs()
			if tc.mutate != nil {
				tc.mutate(&r.Spec.Capacity)
			}
			c, err := build(r, tc.class)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(priorities(t, c), ","); got != tc.want {
				t.Errorf("priorities %s, want %s", got, tc.want)
			}
			if errs := v.Validate(c.Objects[0]); len(errs) > 0 {
				t.Errorf("GKE would refuse the ComputeClass: %v", errs)
			}
			if _, ok := c.Placement.NodeTolerations["kubernetes.io/arch=arm64"]; ok != tc.arm {
				t.Errorf("toleration of GKE's Arm taint: %v, want %v", ok, tc.arm)
			}
		})
	}
}

func TestGKECapacityWishesGKECannotHonourAreRefusedNamingTheField(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*v1alpha1.CapacitySpec)
		says   string
	}{
		{"an EC2 type", func(c *v1alpha1.CapacitySpec) { c.InstanceTypes = []string{"c7i.2xlarge"} }, `spec.capacity.instanceTypes "c7i.2xlarge" is not a GCE machine type`},
		{"an x86 family for arm64", func(c *v1alpha1.CapacitySpec) {
			c.Architectures = []v1alpha1.Architecture{"arm64"}
			c.InstanceFamilies = []string{"n2d"}
		}, `spec.capacity.instanceFamilies "n2d" is an amd64 family but spec.capacity.architectures is [arm64]`},
		{"a type outside the families", func(c *v1alpha1.CapacitySpec) {
			c.InstanceFamilies = []string{"c3"}
			c.InstanceTypes = []string{"n2d-standard-8"}
		}, "not of a family in spec.capacity.instanceFamilies"},
		{"a family GKE refuses (admitted before the rule)", func(c *v1alpha1.CapacitySpec) { c.InstanceFamilies = []string{"n2d-highmem"} }, "longer than the 10 characters"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rs()
			tc.mutate(&r.Spec.Capacity)
			_, err := build(r, gke("n2d"))
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v, want it to say %q", err, tc.says)
			}
		})
	}
}

func TestGKELimitsBecomeAQuotaOnTheJobsRequestsAndNeedRequestsEverywhere(t *testing.T) {
	r := rs()
	r.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("512Gi")}
	q := Quota(r, "team-a-build-jobs")
	if q.Namespace != "team-a-build-jobs" || !q.Spec.Hard[corev1.ResourceRequestsCPU].Equal(resource.MustParse("128")) ||
		!q.Spec.Hard[corev1.ResourceRequestsMemory].Equal(resource.MustParse("512Gi")) || len(q.Spec.Hard) != 2 {
		t.Errorf("quota %+v", q)
	}
	if Quota(rs(), "ns") != nil {
		t.Error("a quota without limits")
	}
	// Without requests on every job container the quota would refuse pods.
	_, err := build(r, gke("n2d"))
	if err == nil || !strings.Contains(err.Error(), "spec.jobs.resources.build.cpuRequest") {
		t.Fatalf("limits without requests on GKE: %v", err)
	}
	one := resource.MustParse("1")
	gi := resource.MustParse("1Gi")
	for _, c := range []*v1alpha1.ContainerResources{&r.Spec.Jobs.Resources.Build, &r.Spec.Jobs.Resources.Helper, &r.Spec.Jobs.Resources.Service} {
		c.CPURequest, c.MemoryRequest = &one, &gi
	}
	if _, err := build(r, gke("n2d")); err != nil {
		t.Errorf("limits with requests everywhere: %v", err)
	}
}

// build is For with the settings the controller resolves once per pass.
func build(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass) (*Capacity, error) {
	return For(rs, class, v1alpha1.Effective(rs, class))
}

// A job node that expires or drifts keeps its running job until the job's
// timeout (terminationGracePeriod overrides do-not-disrupt once it is up),
// and no job node lives longer than MaxJobNodeLifetime, drain included:
// both follow the RunnerSet's job timeout, not fixed values. The NodePool
// is one Karpenter's own CRD admits.
func TestJobNodesExpireAndDrainByTheJobTimeout(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what       string
		shutdown   time.Duration
		maxTimeout time.Duration
		grace      time.Duration
	}{
		{"the default shutdown timeout", 0, 0, 3*time.Hour + JobNodeDrainMargin},
		{"a shutdown timeout of 48h", 48 * time.Hour, 0, 48*time.Hour + JobNodeDrainMargin},
		{"GitLab's cap on the runner's jobs", 3 * time.Hour, 10 * time.Hour, 10*time.Hour + JobNodeDrainMargin},
		{"the longest job timeout allowed", 0, MaxKarpenterJobTimeout, MaxJobNodeLifetime - MinJobNodeExpireAfter},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := rs()
			if tc.shutdown > 0 {
				r.Spec.Managers.ShutdownTimeout = &metav1.Duration{Duration: tc.shutdown}
			}
			if tc.maxTimeout > 0 {
				r.Spec.GitLab.Runner = &v1alpha1.RunnerRegistration{MaximumTimeout: &metav1.Duration{Duration: tc.maxTimeout}}
			}
			c, err := build(r, eks())
			if err != nil {
				t.Fatal(err)
			}
			np := c.Objects[1].(*karpv1.NodePool)
			spec := np.Spec.Template.Spec
			if got := spec.TerminationGracePeriod.Duration; got != tc.grace {
				t.Errorf("terminationGracePeriod %s, want %s", got, tc.grace)
			}
			expire := *spec.ExpireAfter.Duration
			if got := expire + spec.TerminationGracePeriod.Duration; got != MaxJobNodeLifetime {
				t.Errorf("expireAfter %s + terminationGracePeriod %s = %s, want a lifetime of %s", expire, spec.TerminationGracePeriod.Duration, got, MaxJobNodeLifetime)
			}
			if expire < MinJobNodeExpireAfter {
				t.Errorf("expireAfter %s is below %s", expire, MinJobNodeExpireAfter)
			}
			if errs, err := Validate(np, scheme); err != nil || len(errs) > 0 {
				t.Errorf("Karpenter's CRD refuses the NodePool: %v %v", errs, err)
			}
		})
	}
}

// A job timeout no Karpenter job node can keep a job for is refused before
// anything is built, naming the field it came from and the limit; one
// within the limit is not.
func TestAJobTimeoutBeyondWhatAJobNodeKeepsIsRefused(t *testing.T) {
	for _, class := range []*v1alpha1.RunnerClass{eks(), {ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}} {
		t.Run(string(class.Spec.Provider), func(t *testing.T) {
			r := rs()
			r.Spec.GitLab.Runner = &v1alpha1.RunnerRegistration{MaximumTimeout: &metav1.Duration{Duration: MaxKarpenterJobTimeout + time.Minute}}
			c, err := build(r, class)
			var inv *v1alpha1.Failure
			if !errors.As(err, &inv) || inv.Reason != v1alpha1.ReasonJobTimeoutTooLong {
				t.Fatalf("built %v, error %v: want %s", c, err, v1alpha1.ReasonJobTimeoutTooLong)
			}
			for _, want := range []string{"spec.gitlab.runner.maximumTimeout is 143h46m0s", "at most 143h45m0s", "lower spec.gitlab.runner.maximumTimeout"} {
				if !strings.Contains(inv.Message, want) {
					t.Errorf("message %q does not say %q", inv.Message, want)
				}
			}
			r.Spec.GitLab.Runner.MaximumTimeout.Duration = MaxKarpenterJobTimeout
			if _, err := build(r, class); err != nil {
				t.Errorf("the longest job timeout allowed is refused: %v", err)
			}
		})
	}
}
