package kube

import (
	"fmt"
	"sort"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// ControllerName is the controller's ServiceAccount, ClusterRole and
// Deployment.
const ControllerName = "runnerset-controller"

// Labels every object of the program carries.
func Labels(stack string) map[string]string {
	return map[string]string{
		resources.LabelManagedBy: "runnerfleet-pulumi",
		"runnerfleet.dev/stack":  stack,
	}
}

// FleetArgs is what the Kubernetes part of the program needs.
type FleetArgs struct {
	Fleet   *stackconfig.Fleet
	Cluster *Cluster
	// Secrets are the stack config secrets teams name (tokenConfigKey,
	// apiTokenConfigKey), by key.
	Secrets map[string]pulumi.StringOutput
	// ClusterRole is the controller's ClusterRole (runnerset/rbac); only
	// used when the controller runs in the cluster.
	ClusterRole *rbacv1.ClusterRole
}

// Fleet is the runnerset-controller, the RunnerClass and the teams'
// RunnerSets on one cluster.
type Fleet struct {
	pulumi.ResourceState

	// ClassName is the RunnerClass every team's RunnerSet uses.
	ClassName string
	// RunnerSets are the teams' RunnerSets by "<namespace>/<name>".
	RunnerSets map[string]*Object
}

// NewFleet declares the fleet on a.Cluster.
func NewFleet(ctx *pulumi.Context, name string, a FleetArgs, opts ...pulumi.ResourceOption) (*Fleet, error) {
	fl := &Fleet{ClassName: a.Fleet.ClusterName, RunnerSets: map[string]*Object{}}
	if err := ctx.RegisterComponentResource("runnerfleet:kube:Fleet", name, fl, opts...); err != nil {
		return nil, err
	}
	f, c := a.Fleet, a.Cluster
	stack := ctx.Stack()
	on := []pulumi.ResourceOption{pulumi.Parent(fl), pulumi.Provider(c.Provider)}
	with := func(deps ...pulumi.Resource) []pulumi.ResourceOption {
		return append(append([]pulumi.ResourceOption{}, on...), pulumi.DependsOn(deps))
	}

	// The API first: nothing of ours can be created before its CRDs.
	defs, err := crds.CRDs()
	if err != nil {
		return nil, err
	}
	var apiDeps []pulumi.Resource
	apiDeps = append(apiDeps, c.DependsOn...)
	for _, crd := range defs {
		crd.SetGroupVersionKind(crdGVK)
		crd.Labels = pulumix.Merge(crd.Labels, Labels(stack))
		o, err := Declare(ctx, name+"-crd-"+crd.Spec.Names.Plural, crd, nil, with(c.DependsOn...)...)
		if err != nil {
			return nil, err
		}
		apiDeps = append(apiDeps, o)
	}

	ctrlNS, err := Declare(ctx, name+"-ns-"+f.Controller.Namespace, Namespace(f.Controller.Namespace, stack), nil, on...)
	if err != nil {
		return nil, err
	}
	// The RunnerClass and RunnerSets depend on the controller, so that a
	// destroy deletes them while the controller still runs to drain their
	// managers and release their runners and capacity.
	ready := append([]pulumi.Resource{ctrlNS}, apiDeps...)
	if c.InCluster {
		if a.ClusterRole == nil {
			return nil, fmt.Errorf("kube: %s: the controller runs in the cluster but no ClusterRole was given", name)
		}
		deployed, err := controller(ctx, name, f, a.ClusterRole, stack, with(ready...))
		if err != nil {
			return nil, err
		}
		ready = append(ready, deployed...)
	}

	class := RunnerClass(f, c)
	class.Labels = Labels(stack)
	classSet := map[string]pulumi.Input{}
	if c.Cache != nil {
		classSet["spec.defaults.cache.bucket"] = c.Cache.Bucket
	}
	classObj, err := Declare(ctx, name+"-class", class, classSet, with(ready...)...)
	if err != nil {
		return nil, err
	}

	namespaces := map[string]*Object{}
	for _, t := range f.Teams {
		if _, ok := namespaces[t.Namespace]; ok || t.Namespace == f.Controller.Namespace {
			continue
		}
		ns, err := Declare(ctx, name+"-ns-"+t.Namespace, Namespace(t.Namespace, stack), nil, on...)
		if err != nil {
			return nil, err
		}
		namespaces[t.Namespace] = ns
	}
	namespaces[f.Controller.Namespace] = ctrlNS

	for _, t := range f.Teams {
		rs, err := team(ctx, name, t, f, c, a.Secrets, stack, classObj, namespaces[t.Namespace], with)
		if err != nil {
			return nil, err
		}
		fl.RunnerSets[t.Namespace+"/"+t.Name] = rs
	}

	names := make([]string, 0, len(fl.RunnerSets))
	for k := range fl.RunnerSets {
		names = append(names, k)
	}
	sort.Strings(names)
	if err := ctx.RegisterResourceOutputs(fl, pulumi.Map{
		"className":  pulumi.String(fl.ClassName),
		"runnerSets": pulumix.Strings(names),
	}); err != nil {
		return nil, err
	}
	return fl, nil
}

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// Namespace is a namespace of the program, labelled as its.
func Namespace(name, stack string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: Labels(stack)},
	}
}

// RunnerClass is the fleet's one RunnerClass: the platform's capacity
// provider and identity patterns, the stack's defaults and policy.
func RunnerClass(f *stackconfig.Fleet, c *Cluster) *v1alpha1.RunnerClass {
	spec := *c.Class.DeepCopy()
	spec.GitLabURL = f.GitLabURL
	spec.Defaults.ManagerImage = f.Defaults.ManagerImage
	spec.Defaults.HelperImage = f.Defaults.HelperImage
	spec.Defaults.JobImage = f.Defaults.JobImage
	if c.Cache != nil {
		// The bucket's name is known at deploy time; Declare sets it.
		spec.Defaults.Cache = &v1alpha1.CacheSpec{Type: c.Cache.Type, Region: c.Cache.Region, Shared: true}
	}
	spec.Policy.MaxConcurrency = f.Capacity.MaxConcurrency
	spec.Policy.AllowedCapacityTypes = []v1alpha1.CapacityType{v1alpha1.CapacityTypeSpot}
	if f.Capacity.AllowOnDemand {
		spec.Policy.AllowedCapacityTypes = append(spec.Policy.AllowedCapacityTypes, v1alpha1.CapacityTypeOnDemand)
	}
	spec.Policy.AllowPrivileged = f.Capacity.AllowPrivileged
	spec.Policy.Identity.AWSRoleARNPatterns = append(spec.Policy.Identity.AWSRoleARNPatterns, f.Identity.AWSRoleARNPatterns...)
	spec.Policy.Identity.GCPServiceAccountPatterns = append(spec.Policy.Identity.GCPServiceAccountPatterns, f.Identity.GCPServiceAccountPatterns...)
	return &v1alpha1.RunnerClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RunnerClass"},
		ObjectMeta: metav1.ObjectMeta{Name: f.ClusterName},
		Spec:       spec,
	}
}

// TokenSecretName is the Secret a team's runner token from the stack
// config is written to.
func TokenSecretName(t stackconfig.Team) string { return t.TokenSecretName() }

// APITokenSecretName is the Secret a team's GitLab API token is written to.
func APITokenSecretName(t stackconfig.Team) string { return t.APITokenSecretName() }

// RunnerSet is a team's RunnerSet, without what is known only at deploy
// time (the job identity, set by the program): the stack config validated
// this very object against the RunnerSet CRD.
func RunnerSet(t stackconfig.Team, className string) *v1alpha1.RunnerSet {
	return t.RunnerSet(className, TokenSecretName(t), APITokenSecretName(t))
}

func team(ctx *pulumi.Context, name string, t stackconfig.Team, f *stackconfig.Fleet, c *Cluster, secrets map[string]pulumi.StringOutput,
	stack string, class, ns *Object, with func(...pulumi.Resource) []pulumi.ResourceOption) (*Object, error) {
	// '/' and ':' cannot occur in a namespace or a name, so no two teams'
	// resources share a name (team a-b/c and a/b-c would, joined by '-').
	prefix := fmt.Sprintf("%s/%s/%s", name, t.Namespace, t.Name)
	deps := []pulumi.Resource{class, ns}
	secret := func(suffix, secretName, key string) error {
		v, ok := secrets[key]
		if !ok {
			return fmt.Errorf("kube: team %s/%s: config secret %q was not read", t.Namespace, t.Name, key)
		}
		s := &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: secretName, Labels: Labels(stack)},
			Type:       corev1.SecretTypeOpaque,
		}
		o, err := Declare(ctx, prefix+":"+suffix, s, map[string]pulumi.Input{"stringData.token": pulumi.ToSecret(v).(pulumi.StringOutput)}, with(ns)...)
		if err != nil {
			return err
		}
		deps = append(deps, o)
		return nil
	}
	if t.TokenConfigKey != "" {
		if err := secret("token", TokenSecretName(t), t.TokenConfigKey); err != nil {
			return nil, err
		}
	}
	if t.APITokenConfigKey != "" {
		if err := secret("api-token", APITokenSecretName(t), t.APITokenConfigKey); err != nil {
			return nil, err
		}
	}
	rs := RunnerSet(t, f.ClusterName)
	rs.Labels = Labels(stack)
	set := map[string]pulumi.Input{}
	if id, ok := c.Identities[IdentityKey(t.Namespace, t.Name)]; ok && t.WantsIdentity(f.Platform) {
		switch c.Class.Provider {
		case v1alpha1.CapacityProviderKarpenter:
			set["spec.jobs.identity.awsRoleARN"] = id
		case v1alpha1.CapacityProviderComputeClass:
			set["spec.jobs.identity.gcpServiceAccount"] = id
		}
	} else if t.WantsIdentity(f.Platform) {
		return nil, fmt.Errorf("kube: team %s/%s wants an identity but the platform created none", t.Namespace, t.Name)
	}
	// Deleting a RunnerSet waits for its managers to drain, for as long as
	// its shutdownTimeout; the provider would give up after 10 minutes.
	// Changing what the API makes immutable (the class, the runner's
	// scope) replaces the RunnerSet: the old one drains and releases its
	// runner before the new one registers.
	drain := rs.Spec.Managers.ShutdownTimeoutOrDefault() + 10*time.Minute
	opts := append(with(deps...),
		pulumi.Timeouts(&pulumi.CustomTimeouts{Delete: drain.String(), Update: "10m"}),
		pulumi.ReplaceOnChanges([]string{"spec.className", "spec.gitlab.runner.type", "spec.gitlab.runner.groupID", "spec.gitlab.runner.projectID"}),
		pulumi.DeleteBeforeReplace(true))
	return Declare(ctx, prefix, rs, set, opts...)
}

// controller declares the in-cluster runnerset-controller: its
// ServiceAccount, ClusterRole and binding, Deployment and
// PodDisruptionBudget.
func controller(ctx *pulumi.Context, name string, f *stackconfig.Fleet, role *rbacv1.ClusterRole, stack string, opts []pulumi.ResourceOption) ([]pulumi.Resource, error) {
	ns := f.Controller.Namespace
	labels := pulumix.Merge(Labels(stack), map[string]string{"app.kubernetes.io/name": ControllerName})
	selector := map[string]string{"app.kubernetes.io/name": ControllerName}
	meta := metav1.ObjectMeta{Namespace: ns, Name: ControllerName, Labels: labels}

	sa := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta, AutomountServiceAccountToken: ptr.To(true)}
	cr := role.DeepCopy()
	cr.TypeMeta = metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}
	cr.ObjectMeta = metav1.ObjectMeta{Name: ControllerName, Labels: labels}
	crb := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: ControllerName, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: ControllerName},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: ControllerName}},
	}
	dep := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(f.Controller.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: ControllerName,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector: &metav1.LabelSelector{MatchLabels: selector},
					}},
					Containers: []corev1.Container{{
						Name:  "controller",
						Image: f.Controller.Image,
						Args:  []string{"--leader-elect=true", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"},
						Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080}, {Name: "probes", ContainerPort: 8081}},
						LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz", Port: intstr.FromString("probes")}}, InitialDelaySeconds: 15, PeriodSeconds: 20},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/readyz", Port: intstr.FromString("probes")}}, PeriodSeconds: 10},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
	pdb := &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: meta,
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: selector},
		},
	}
	var out []pulumi.Resource
	for _, o := range []struct {
		suffix string
		obj    runtime.Object
	}{{"sa", sa}, {"clusterrole", cr}, {"clusterrolebinding", crb}} {
		r, err := Declare(ctx, name+"-controller-"+o.suffix, o.obj, nil, opts...)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	d, err := Declare(ctx, name+"-controller", dep, nil, append(opts, pulumi.DependsOn(out))...)
	if err != nil {
		return nil, err
	}
	p, err := Declare(ctx, name+"-controller-pdb", pdb, nil, opts...)
	if err != nil {
		return nil, err
	}
	return append(out, d, p), nil
}
