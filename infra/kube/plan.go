package kube

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// PlanArgs say where a stack's Kubernetes objects go and who installs them.
type PlanArgs struct {
	Fleet *stackconfig.Fleet
	// Cluster is the platform's part: the RunnerClass's capacity provider
	// and identity patterns, the cache, and whether the controller runs in
	// the cluster (InCluster) or as a process beside it. Only its plain
	// fields are read.
	Cluster *Cluster
	// Labels are the installer's, on every object (Labels for the
	// program; fleet up --kubeconfig has its own).
	Labels map[string]string
	// ManagerPool puts the controller on the managers' on-demand pool
	// (runnerset/resources), which the platforms the program creates have
	// and a cluster fleet up --kubeconfig is pointed at may not.
	ManagerPool bool
	// Image replaces the controller's image (fleet up --image).
	Image string
	// AdmissionPolicies adds install.AdmissionPolicies (the drain
	// finalizer set at a RunnerSet's creation): for an API server that
	// serves MutatingAdmissionPolicy, which fleet up --kubeconfig asks its
	// discovery. The program leaves them out: its pinned Kubernetes
	// provider has no admissionregistration.k8s.io/v1 MutatingAdmissionPolicy,
	// and the controller adds the finalizer itself, a write more per new
	// RunnerSet.
	AdmissionPolicies bool
}

// Plan is a stack's Kubernetes objects: what the program declares
// (NewFleet) and what fleet up --kubeconfig applies (cmd/fleet), built
// once here. All lists them in the order they are applied.
type Plan struct {
	// CRDs are runnerfleet's API: nothing of it exists before them.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// ControllerNamespace is the controller's namespace.
	ControllerNamespace *corev1.Namespace
	// Controller are the controller's own objects (runnerset/install) when
	// it runs in the cluster; when it runs as a process beside the cluster
	// (the local stack), only the executor's ClusterRole, which it binds in
	// each jobs namespace.
	Controller []client.Object
	// AdmissionPolicies are install.AdmissionPolicies when PlanArgs asked
	// for them, applied before any RunnerSet.
	AdmissionPolicies []client.Object
	// Class is the stack's one RunnerClass.
	Class *v1alpha1.RunnerClass
	// Namespaces are the teams' namespaces other than the controller's,
	// each once, in the teams' order.
	Namespaces []*corev1.Namespace
	// Teams are each team's Secrets and RunnerSet, in the stack config's
	// order.
	Teams []TeamPlan
}

// TeamPlan is one team's objects.
type TeamPlan struct {
	Team stackconfig.Team
	// Secrets are the Secrets the team's tokens are written to, without
	// their value: the installer sets stringData.token from the stack
	// config key (Key) of the team's field (Field).
	Secrets []TeamSecret
	// RunnerSet is the team's RunnerSet, without what is known only at
	// deploy time (the job identity, which the program sets).
	RunnerSet *v1alpha1.RunnerSet
}

// TeamSecret is a Secret a team's token from the stack config goes to.
type TeamSecret struct {
	// Field is the team's key naming the config key: tokenConfigKey or
	// apiTokenConfigKey.
	Field string
	// Key is the stack config key the token is read from.
	Key string
	// Suffix ends the program's resource name of the Secret.
	Suffix string
	Secret *corev1.Secret
}

// PlanStack is the one plan of a stack's Kubernetes objects. It is pure:
// the program declares what it returns through the Kubernetes provider,
// fleet up --kubeconfig checks, applies and waits for it.
func PlanStack(a PlanArgs) (*Plan, error) {
	if a.Fleet == nil || a.Cluster == nil {
		return nil, fmt.Errorf("kube: a plan needs the stack config (Fleet) and the Cluster")
	}
	f, c := a.Fleet, a.Cluster
	p := &Plan{}
	defs, err := crds.CRDs()
	if err != nil {
		return nil, err
	}
	for _, crd := range defs {
		crd.SetGroupVersionKind(crdGVK)
		crd.Labels = pulumix.Merge(crd.Labels, a.Labels)
		p.CRDs = append(p.CRDs, crd)
	}
	p.ControllerNamespace = namespace(f.Controller.Namespace, a.Labels)

	o := install.Defaults()
	o.Labels = maps.Clone(a.Labels)
	if c.InCluster {
		o.Namespace, o.Replicas = f.Controller.Namespace, f.Controller.Replicas
		if a.ManagerPool {
			o.NodeSelector, o.Tolerations = resources.ManagerNodeSelector(), resources.ManagerTolerations()
		}
		if f.Controller.Image != "" {
			o.Image = f.Controller.Image
		}
		if a.Image != "" {
			o.Image = a.Image
		}
		m := f.Controller.Monitoring
		o.ServiceMonitor, o.PrometheusRule, o.Dashboards = m.ServiceMonitors, m.PrometheusRule, m.Dashboards
		o.ServiceMonitorLabels, o.PrometheusRuleLabels, o.DashboardLabels = m.Labels, m.Labels, m.Labels
		o.Prices = f.Cost
		if p.Controller, err = install.Objects(o); err != nil {
			return nil, fmt.Errorf("kube: the controller: %w", err)
		}
	} else {
		p.Controller = []client.Object{install.ExecutorClusterRole(o)}
	}

	if a.AdmissionPolicies {
		p.AdmissionPolicies = install.AdmissionPolicies(o)
	}

	p.Class = RunnerClass(f, c)
	p.Class.Labels = maps.Clone(a.Labels)

	seen := map[string]bool{f.Controller.Namespace: true}
	for _, t := range f.Teams {
		if !seen[t.Namespace] {
			seen[t.Namespace] = true
			p.Namespaces = append(p.Namespaces, namespace(t.Namespace, a.Labels))
		}
		tp := TeamPlan{Team: t}
		for _, s := range []struct{ field, key, suffix, name string }{
			{"tokenConfigKey", t.TokenConfigKey, "token", TokenSecretName(t)},
			{"apiTokenConfigKey", t.APITokenConfigKey, "api-token", APITokenSecretName(t)},
		} {
			if s.key == "" {
				continue
			}
			tp.Secrets = append(tp.Secrets, TeamSecret{Field: s.field, Key: s.key, Suffix: s.suffix, Secret: &corev1.Secret{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: s.name, Labels: maps.Clone(a.Labels)},
				Type:       corev1.SecretTypeOpaque,
			}})
		}
		tp.RunnerSet = RunnerSet(t, f.ClusterName)
		tp.RunnerSet.Labels = pulumix.Merge(tp.RunnerSet.Labels, a.Labels)
		p.Teams = append(p.Teams, tp)
	}
	return p, nil
}

// All are the plan's objects in the order they are applied: the CRDs, the
// controller's namespace and objects, the admission policies, the RunnerClass, the teams'
// namespaces, then each team's Secrets and RunnerSet.
func (p *Plan) All() []client.Object {
	var out []client.Object
	for _, crd := range p.CRDs {
		out = append(out, crd)
	}
	out = append(out, p.ControllerNamespace)
	out = append(out, p.Controller...)
	out = append(out, p.AdmissionPolicies...)
	out = append(out, p.Class)
	for _, ns := range p.Namespaces {
		out = append(out, ns)
	}
	for _, t := range p.Teams {
		for _, s := range t.Secrets {
			out = append(out, s.Secret)
		}
		out = append(out, t.RunnerSet)
	}
	return out
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: maps.Clone(labels)},
	}
}
