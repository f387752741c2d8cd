package sharedfleet

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/providers/gcp/gcenames"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// FleetPlan is a shared fleet rendered and checked, ready to declare:
// every object of it that holds neither a secret nor a value known only at
// deploy time (infra/sharedfleet adds those: the runner tokens, the cache
// bucket, the config Secrets and the Helm releases' values).
type FleetPlan struct {
	Spec      fleetspec.SharedFleet
	Namespace string
	Groups    []*GroupPlan
	// Grace is every manager's terminationGracePeriodSeconds.
	Grace int64
	// Monitoring is the fleet as its Prometheus sees it.
	Monitoring Fleet
	Prometheus *PrometheusPlan
	GC         *GCPlan
	// Cloud is the fleet's cloud side.
	Cloud CloudPlan
}

// GroupPlan is one manager group.
type GroupPlan struct {
	Group   fleetspec.ManagerGroup
	Manager string
	// TokenSecret is the chart's runners.secret.
	TokenSecret string
	Managers    []*ManagerPlan
	Settings    ReleaseSettings

	ServiceAccount *corev1.ServiceAccount
	Metrics        *corev1.Service
	PDB            *policyv1.PodDisruptionBudget
	NetworkPolicy  *networkingv1.NetworkPolicy
}

// ManagerPlan is one manager: the Helm release of its generation
// (Release.ReleaseName), with its web terminal hostname Release.Host (""
// without one).
type ManagerPlan struct {
	Release
	// Scaler is the manager's KEDA ScaledObject; nil below minManagers.
	Scaler  *unstructured.Unstructured
	Session *corev1.Service
	// State is the docker+machine state volume's claim; nil for
	// docker-autoscaler managers.
	State *corev1.PersistentVolumeClaim
}

// Namespace is fleet s's namespace, where its managers and its Prometheus
// run (the stack config's namespace, which infra/stackconfig defaults to
// the fleet's name).
func Namespace(s fleetspec.SharedFleet) string { return s.Namespace }

// ManagerServiceAccount is the Kubernetes ServiceAccount, in Namespace(s),
// that every manager of group g runs as: the one annotated with the fleet's
// gcpServiceAccount for Workload Identity.
func ManagerServiceAccount(g fleetspec.ManagerGroup) string { return g.ManagerName() }

// monitoringSpec is the Effective fleet s as its Prometheus sees it. Its
// quota exporter runs in the Prometheus pod (quotaExporterContainer).
func monitoringSpec(s fleetspec.SharedFleet) Fleet {
	return Fleet{Name: s.Namespace, VMQuota: s.Monitoring.VMQuota, Groups: s.Groups, NodeExporterPort: s.NodeExporterPort(),
		QuotaExporter: fmt.Sprintf("localhost:%d", gcenames.QuotaExporterPort), VMGroups: s.VMGroups}
}

// placeholderBucket stands for a cache bucket known only at deploy time
// while a plan is checked.
const placeholderBucket = "runnerfleet-cache-bucket"

// PlanFleet plans fleet s, whose stack config key is key (errors name
// it), on the gke platform on: its Kubernetes objects, its monitoring and
// its cloud side. s is the stack's Effective fleet (its defaults resolved
// by fleetspec.SharedFleet.Effective, which PlanFleet applies again: that
// changes nothing of an Effective fleet and fills the defaults of one
// built by hand). opts price its VMs (WithPrices).
func PlanFleet(s fleetspec.SharedFleet, key string, on fleetspec.Platform, opts ...PlanOption) (*FleetPlan, error) {
	if on.Project == "" || on.Cluster == "" {
		return nil, fmt.Errorf("%s: shared fleet %s is planned on the gke platform, and no project and cluster were given", key, s.Name)
	}
	s = s.Effective(on)
	p := &FleetPlan{
		Spec:       s,
		Namespace:  Namespace(s),
		Grace:      int64(s.JobTimeoutOrDefault().Seconds()) + DrainMarginSeconds,
		Monitoring: monitoringSpec(s),
	}
	for _, o := range opts {
		o(p)
	}
	for j := range s.Groups {
		gp, err := planGroup(s, j, p.Grace)
		if err != nil {
			return nil, fmt.Errorf("%s.groups[%d]: %w", key, j, err)
		}
		// Check that every manager's config.toml renders.
		for _, m := range gp.Managers {
			if _, err := m.ConfigTOML(placeholderBucket, runnerconfig.TokenPlaceholder); err != nil {
				return nil, fmt.Errorf("%s.groups[%d]: %w", key, j, err)
			}
		}
		p.Groups = append(p.Groups, gp)
	}
	prom, err := planFleetPrometheus(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	p.Prometheus = prom
	if p.Cloud, err = planCloud(s, on); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if p.GC, err = planGC(p, p.Cloud.GC.Email); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return p, nil
}

func planGroup(s fleetspec.SharedFleet, j int, grace int64) (*GroupPlan, error) {
	g := s.Groups[j]
	gp := &GroupPlan{
		Group:       g,
		Manager:     g.ManagerName(),
		TokenSecret: TokenSecretName(g),
		Settings:    ReleaseSettings{GitLabURL: s.GitLabURL, ManagerImage: s.ManagerImage, GraceSeconds: grace},
	}
	ns := Namespace(s)
	scaling := g.Scaling
	labels := map[string]string{LabelManagerPod: gp.Manager, resources.LabelManagedBy: resources.ManagedBy}

	gp.ServiceAccount = ServiceAccount(g, s.GCPServiceAccount)
	gp.Metrics = MetricsService(gp.Group)
	gp.Metrics.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	gp.PDB = PodDisruptionBudget(gp.Group, scaling)
	gp.PDB.TypeMeta = metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}

	domain := ""
	if s.WebTerminal != nil {
		domain = s.WebTerminal.Domain
	}
	for _, r := range Releases(g, domain) {
		gen, err := r.GenerationOf(gp.Settings)
		if err != nil {
			return nil, err
		}
		r.Generation = gen
		m := &ManagerPlan{Release: r}
		if r.Host != "" {
			m.Session = r.SessionService(ns)
			passthrough(m.Session, m.Host, s.WebTerminal)
		}
		if r.KeepsState() {
			m.State = r.StateClaim(ns)
		}
		if r.Scaled() {
			so, err := scaler(gp.Group, r.Name, r.ReleaseName(), r.Index, scaling)
			if err != nil {
				return nil, err
			}
			m.Scaler = so
		}
		gp.Managers = append(gp.Managers, m)
	}
	gp.NetworkPolicy = networkPolicy(gp.Manager, ns, labels, s.WebTerminal)
	return gp, nil
}

// scaler is manager n's ScaledObject, named name (the manager's, through
// its generations), which scales deployment (its current generation's): it
// runs while the group's jobs are above n × the per-manager threshold of
// the group's KEDA trigger.
func scaler(g fleetspec.ManagerGroup, name, deployment string, n int, s fleetspec.Scaling) (*unstructured.Unstructured, error) {
	so, err := ScaledObject(g, deployment, fleetspec.Scaling{MinManagers: 1, MaxManagers: 1, TargetUtilization: s.TargetUtilization})
	if err != nil {
		return nil, err
	}
	so.SetName(name)
	so.SetLabels(merged(so.GetLabels(), map[string]string{LabelRelease: name}))
	spec := so.Object["spec"].(map[string]any)
	spec["minReplicaCount"] = int64(0)
	spec["maxReplicaCount"] = int64(1)
	// A manager stops (and drains for hours) only after the jobs stayed
	// below its threshold for half an hour.
	spec["cooldownPeriod"] = int64(1800)
	md := spec["triggers"].([]any)[0].(map[string]any)["metadata"].(map[string]any)
	threshold, err := strconv.Atoi(md["threshold"].(string))
	if err != nil {
		return nil, err
	}
	md["activationThreshold"] = strconv.Itoa(n * threshold)
	return so, nil
}

// networkPolicy lets only the fleet's Prometheus reach the managers'
// metrics, and only the GitLab ranges their session servers (through
// each manager's passthrough load balancer, which keeps the client's
// address).
func networkPolicy(manager, ns string, labels map[string]string, w *fleetspec.WebTerminal) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: manager, Namespace: ns, Labels: labels},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManagerPod: manager}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(MetricsPort))}},
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: prometheusSelector}}},
			}},
		},
	}
	if w != nil {
		rule := networkingv1.NetworkPolicyIngressRule{
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(SessionPort))}},
		}
		for _, c := range w.AllowedCIDRs {
			rule.From = append(rule.From, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
		}
		np.Spec.Ingress = append(np.Spec.Ingress, rule)
	}
	return np
}

// AnnotationExternalDNSHostname has external-dns point a manager's
// terminal hostname at its load balancer.
const AnnotationExternalDNSHostname = naming.AnnotationExternalDNSHostname

// passthrough makes a manager's session Service its dedicated TCP
// passthrough load balancer, the only way in to its session server: the
// load balancer admits only webTerminal.allowedCIDRs (loadBalancerSourceRanges,
// which GKE turns into the load balancer's firewall rule), and passes the
// client's address through to the pod (externalTrafficPolicy Local), so
// that the managers' NetworkPolicy can admit those ranges and nothing
// else. TLS is never terminated in between: the session server pins its
// own certificate. No ingress controller is involved (ingress-nginx, which
// this replaced, applies no source range to a passthrough host).
func passthrough(svc *corev1.Service, host string, w *fleetspec.WebTerminal) {
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.LoadBalancerSourceRanges = slices.Clone(w.AllowedCIDRs)
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[AnnotationExternalDNSHostname] = host
}

// merged is the union of label maps, later ones winning.
func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}
