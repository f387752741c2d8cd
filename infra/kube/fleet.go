package kube

import (
	"fmt"
	"sort"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// ControllerName is the controller's ServiceAccount, ClusterRole and
// Deployment.
const ControllerName = install.Name

// Labels every object of the program carries.
func Labels(stack string) map[string]string {
	return map[string]string{
		resources.LabelManagedBy: "runnerfleet-pulumi",
		naming.LabelStack:        stack,
	}
}

// FleetArgs is what the Kubernetes part of the program needs.
type FleetArgs struct {
	Fleet   *stackconfig.Fleet
	Cluster *Cluster
	// Secrets are the stack's config secrets by key (ReadSecrets); the
	// teams' are those their tokenConfigKey and apiTokenConfigKey name.
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
func NewFleet(ctx *pulumi.Context, name string, a *FleetArgs, opts ...pulumi.ResourceOption) (*Fleet, error) {
	if a == nil || a.Fleet == nil || a.Cluster == nil {
		return nil, fmt.Errorf("kube: fleet %s: FleetArgs needs the stack config (Fleet) and the Cluster", name)
	}
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

	// The objects come from the one plan fleet up --kubeconfig applies too;
	// the program adds the resources' names, their order and what is known
	// only at deploy time (the tokens, the cache bucket, the identities).
	plan, err := PlanStack(PlanArgs{Fleet: f, Cluster: c, Labels: Labels(stack), ManagerPool: true})
	if err != nil {
		return nil, fmt.Errorf("kube: %s: %w", name, err)
	}

	// The API first: nothing of ours can be created before its CRDs.
	var apiDeps []pulumi.Resource
	apiDeps = append(apiDeps, c.DependsOn...)
	for _, crd := range plan.CRDs {
		o, err := Declare(ctx, name+"-crd-"+crd.Spec.Names.Plural, crd, nil, with(c.DependsOn...)...)
		if err != nil {
			return nil, err
		}
		apiDeps = append(apiDeps, o)
	}

	ctrlNS, err := Declare(ctx, name+"-ns-"+f.Controller.Namespace, plan.ControllerNamespace, nil, on...)
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
		deployed, err := controller(ctx, name, plan.Controller, with(ready...))
		if err != nil {
			return nil, err
		}
		ready = append(ready, deployed...)
	} else {
		// A controller outside the cluster (the local stack's process)
		// binds the same executor ClusterRole in each jobs namespace.
		executor, err := Declare(ctx, name+executorSuffix, plan.Controller[0], nil, on...)
		if err != nil {
			return nil, err
		}
		ready = append(ready, executor)
	}

	classSet := map[string]pulumi.Input{}
	if c.Cache != nil {
		classSet["spec.defaults.cache.bucket"] = c.Cache.Bucket
	}
	classObj, err := Declare(ctx, name+"-class", plan.Class, classSet, with(ready...)...)
	if err != nil {
		return nil, err
	}

	namespaces := map[string]*Object{f.Controller.Namespace: ctrlNS}
	for _, n := range plan.Namespaces {
		ns, err := Declare(ctx, name+"-ns-"+n.Name, n, nil, on...)
		if err != nil {
			return nil, err
		}
		namespaces[n.Name] = ns
	}

	for _, tp := range plan.Teams {
		t := tp.Team
		rs, err := team(ctx, name, tp, f, c, a.Secrets, classObj, namespaces[t.Namespace], with)
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
	if f.Prometheus != nil {
		// The platform's own (the local stack's) comes with c.Class.
		spec.Prometheus = &v1alpha1.PrometheusEndpoint{Address: f.Prometheus.Address}
	}
	spec.NodePools = f.Capacity.NodePools.DeepCopy()
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

func team(ctx *pulumi.Context, name string, tp TeamPlan, f *stackconfig.Fleet, c *Cluster, secrets map[string]pulumi.StringOutput,
	class, ns *Object, with func(...pulumi.Resource) []pulumi.ResourceOption) (*Object, error) {
	t := tp.Team
	// '/' and ':' cannot occur in a namespace or a name, so no two teams'
	// resources share a name (team a-b/c and a/b-c would, joined by '-').
	prefix := fmt.Sprintf("%s/%s/%s", name, t.Namespace, t.Name)
	deps := []pulumi.Resource{class, ns}
	for _, s := range tp.Secrets {
		v, ok := secrets[s.Key]
		if !ok {
			return nil, fmt.Errorf("kube: team %s/%s: config secret %q was not read", t.Namespace, t.Name, s.Key)
		}
		o, err := Declare(ctx, prefix+":"+s.Suffix, s.Secret, map[string]pulumi.Input{"stringData.token": pulumi.ToSecret(v).(pulumi.StringOutput)}, with(ns)...)
		if err != nil {
			return nil, err
		}
		deps = append(deps, o)
	}
	rs := tp.RunnerSet
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
	drain := rs.Spec.Managers.ShutdownTimeoutOrDefault() + gitlabrunner.DrainMargin
	opts := append(with(deps...),
		pulumi.Timeouts(&pulumi.CustomTimeouts{Delete: drain.String(), Update: "10m"}),
		pulumi.ReplaceOnChanges([]string{"spec.className", "spec.gitlab.runner.type", "spec.gitlab.runner.groupID", "spec.gitlab.runner.projectID"}),
		pulumi.DeleteBeforeReplace(true))
	return Declare(ctx, prefix, rs, set, opts...)
}

// executorSuffix names the executor's ClusterRole resource, wherever the
// controller runs.
const executorSuffix = "-executor-clusterrole"

// controller declares the in-cluster runnerset-controller: the objects
// runnerset/install builds for the chart and the manifests too.
func controller(ctx *pulumi.Context, name string, objs []client.Object, opts []pulumi.ResourceOption) ([]pulumi.Resource, error) {
	suffix := map[string]string{
		"ServiceAccount": "-controller-sa", "ClusterRole": "-controller-clusterrole", "ClusterRoleBinding": "-controller-clusterrolebinding",
		"Deployment": "-controller", "PodDisruptionBudget": "-controller-pdb", "Service": "-controller-metrics",
	}
	var identity, out []pulumi.Resource
	for _, obj := range objs {
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		s, ok := suffix[kind]
		switch obj.GetName() {
		case install.MetricsReader:
			s = "-controller-metrics-reader" // the second ClusterRole: who may scrape the controller
		case resources.ExecutorClusterRole:
			s = executorSuffix // the third: what the controller binds to managers in their jobs namespaces
		}
		switch kind {
		case "ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap": // monitoring, one or more each
			s, ok = "-monitoring-"+obj.GetName(), true
		}
		if !ok {
			return nil, fmt.Errorf("kube: %s: the controller has a %s the program does not name", name, kind)
		}
		ro := opts
		if kind == "Deployment" {
			ro = append(append([]pulumi.ResourceOption{}, opts...), pulumi.DependsOn(identity))
		}
		r, err := Declare(ctx, name+s, obj, nil, ro...)
		if err != nil {
			return nil, err
		}
		switch kind {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding":
			identity = append(identity, r)
		}
		out = append(out, r)
	}
	return out, nil
}
