package sharedfleet

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	helmv3 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/helm/v3"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// fleetPlan is a fleet rendered and checked, ready to declare.
type fleetPlan struct {
	spec      fleetspec.SharedFleet
	component string
	namespace string
	groups    []*groupPlan
	// grace is every manager's terminationGracePeriodSeconds.
	grace int64
	// monitoring is the fleet as its Prometheus sees it.
	monitoring shared.Fleet
	prometheus *prometheusPlan
	gc         *gcPlan
}

// groupPlan is one manager group.
type groupPlan struct {
	group   fleetspec.ManagerGroup
	manager string
	// tokenSecret is the chart's runners.secret.
	tokenSecret string
	managers    []*managerPlan
	settings    shared.ReleaseSettings

	serviceAccount *corev1.ServiceAccount
	metrics        *corev1.Service
	pdb            *policyv1.PodDisruptionBudget
	networkPolicy  *networkingv1.NetworkPolicy
}

// managerPlan is one manager: one Helm release.
type managerPlan struct {
	shared.Release
	name string
	// host is the web terminal hostname; "" without one.
	host string
	// scaler is the manager's KEDA ScaledObject; nil below minManagers.
	scaler  *unstructured.Unstructured
	session *corev1.Service
	// state is the docker+machine state volume's claim; nil for
	// docker-autoscaler managers.
	state *corev1.PersistentVolumeClaim
}

// Namespace is fleet s's namespace, where its managers and its Prometheus
// run (the stack config's namespace, which stackconfig.Decode defaults to
// the fleet's name).
func Namespace(s fleetspec.SharedFleet) string { return s.Namespace }

// ManagerServiceAccount is the Kubernetes ServiceAccount, in Namespace(s),
// that every manager of group g runs as: the one annotated with the fleet's
// gcpServiceAccount for Workload Identity.
func ManagerServiceAccount(g fleetspec.ManagerGroup) string { return g.ManagerName() }

// monitoringSpec is fleet s as its Prometheus sees it; its VM quota
// defaults to the groups' maxVMs times their maxManagers.
func monitoringSpec(s fleetspec.SharedFleet) shared.Fleet {
	m := shared.Fleet{Name: s.Namespace, VMQuota: s.Monitoring.VMQuota, Groups: s.Groups}
	if m.VMQuota == 0 {
		for _, g := range s.Groups {
			m.VMQuota += g.MaxVMs * int(g.Scaling.MaxManagers)
		}
	}
	return m
}

// placeholderBucket stands for a cache bucket known only at deploy time
// while a plan is checked.
const placeholderBucket = "runnerfleet-cache-bucket"

// planFleet plans fleet i; gcAccount is the Google service account its gc
// acts as.
func planFleet(fleets []fleetspec.SharedFleet, i int, gcAccount string) (*fleetPlan, error) {
	s := fleets[i]
	p := &fleetPlan{
		spec:       s,
		component:  "shared-" + s.Name,
		namespace:  Namespace(s),
		grace:      int64(s.JobTimeoutOrDefault().Seconds()) + shared.DrainMarginSeconds,
		monitoring: monitoringSpec(s),
	}
	for j := range s.Groups {
		gp, err := planGroup(s, j, p.grace)
		if err != nil {
			return nil, fmt.Errorf("%s.sharedFleets[%d].groups[%d]: %w", stackconfig.Root, i, j, err)
		}
		// Check that every manager's config.toml renders.
		for _, m := range gp.managers {
			if _, err := m.ConfigTOML(placeholderBucket, runnerconfig.TokenPlaceholder); err != nil {
				return nil, fmt.Errorf("%s.sharedFleets[%d].groups[%d]: %w", stackconfig.Root, i, j, err)
			}
		}
		p.groups = append(p.groups, gp)
	}
	prom, err := planFleetPrometheus(p)
	if err != nil {
		return nil, fmt.Errorf("%s.sharedFleets[%d]: %w", stackconfig.Root, i, err)
	}
	p.prometheus = prom
	if p.gc, err = planGC(p, gcAccount); err != nil {
		return nil, fmt.Errorf("%s.sharedFleets[%d]: %w", stackconfig.Root, i, err)
	}
	return p, nil
}

func planGroup(s fleetspec.SharedFleet, j int, grace int64) (*groupPlan, error) {
	g := s.Groups[j]
	gp := &groupPlan{
		group:       g,
		manager:     g.ManagerName(),
		tokenSecret: shared.TokenSecretName(g),
		settings:    shared.ReleaseSettings{GitLabURL: s.GitLabURL, ManagerImage: s.ManagerImage, GraceSeconds: grace},
	}
	ns := Namespace(s)
	scaling := g.Scaling
	labels := map[string]string{shared.LabelManagerPod: gp.manager, resources.LabelManagedBy: resources.ManagedBy}

	gp.serviceAccount = shared.ServiceAccount(g, s.GCPServiceAccount)
	gp.metrics = shared.MetricsService(gp.group)
	gp.metrics.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	gp.pdb = shared.PodDisruptionBudget(gp.group, scaling)
	gp.pdb.TypeMeta = metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}

	domain := ""
	if s.WebTerminal != nil {
		domain = s.WebTerminal.Domain
	}
	for _, r := range shared.Releases(g, domain) {
		m := &managerPlan{Release: r, name: r.Name, host: r.Host}
		if r.Host != "" {
			m.session = r.SessionService(ns)
			passthrough(m.session, m.host, s.WebTerminal)
		}
		if r.KeepsState() {
			m.state = r.StateClaim(ns)
		}
		if int32(r.Index) >= scaling.MinManagers {
			so, err := scaler(gp.group, r.Name, r.Index, scaling)
			if err != nil {
				return nil, err
			}
			m.scaler = so
		}
		gp.managers = append(gp.managers, m)
	}
	gp.networkPolicy = networkPolicy(gp.manager, ns, labels, s.WebTerminal)
	return gp, nil
}

// scaler is manager n's ScaledObject: it runs while the group's jobs are
// above n × the per-manager threshold of the group's KEDA trigger.
func scaler(g fleetspec.ManagerGroup, name string, n int, s fleetspec.Scaling) (*unstructured.Unstructured, error) {
	so, err := shared.ScaledObject(g, name, fleetspec.Scaling{MinManagers: 1, MaxManagers: 1, TargetUtilization: s.TargetUtilization})
	if err != nil {
		return nil, err
	}
	so.SetName(name)
	so.SetLabels(pulumix.Merge(so.GetLabels(), map[string]string{shared.LabelRelease: name}))
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
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{shared.LabelManagerPod: manager}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(shared.MetricsPort))}},
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: prometheusSelector}}},
			}},
		},
	}
	if w != nil {
		rule := networkingv1.NetworkPolicyIngressRule{
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(shared.SessionPort))}},
		}
		for _, c := range w.AllowedCIDRs {
			rule.From = append(rule.From, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
		}
		np.Spec.Ingress = append(np.Spec.Ingress, rule)
	}
	return np
}

// declareGroup declares one group's objects and its managers' releases.
func (p *fleetPlan) declareGroup(ctx *pulumi.Context, fl *SharedFleet, gp *groupPlan, bucket pulumi.StringOutput, hasBucket bool,
	token pulumi.StringOutput, ns pulumi.Resource, on func(deps ...pulumi.Resource) []pulumi.ResourceOption) error {
	prefix := p.component + "-" + gp.manager
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: gp.tokenSecret, Namespace: p.namespace, Labels: gp.serviceAccount.Labels},
		Type:       corev1.SecretTypeOpaque,
	}
	tok, err := kube.Declare(ctx, prefix+"-token", secret, map[string]pulumi.Input{
		"stringData." + shared.SecretKeyRunnerToken: token,
		// The chart mounts both keys; registration tokens are gone.
		"stringData." + shared.SecretKeyRegistrationToken: pulumi.String(""),
	}, on(ns)...)
	if err != nil {
		return err
	}
	sa, err := kube.Declare(ctx, prefix+"-sa", gp.serviceAccount, nil, on(ns)...)
	if err != nil {
		return err
	}
	if _, err := kube.Declare(ctx, prefix+"-metrics", gp.metrics, nil, on(ns)...); err != nil {
		return err
	}
	if _, err := kube.Declare(ctx, prefix+"-pdb", gp.pdb, nil, on(ns)...); err != nil {
		return err
	}
	if _, err := kube.Declare(ctx, prefix+"-netpol", gp.networkPolicy, nil, on(ns)...); err != nil {
		return err
	}
	for _, m := range gp.managers {
		b := pulumi.String("").ToStringOutput()
		if hasBucket {
			b = bucket
		}
		// The config with the placeholder token, for the chart's
		// registration step, and the one the manager runs.
		configTOML := b.ApplyT(func(b string) (string, error) {
			return m.ConfigTOML(b, runnerconfig.TokenPlaceholder)
		}).(pulumi.StringOutput)
		full := pulumi.All(b, token).ApplyT(func(v []any) (string, error) {
			return m.ConfigTOML(v[0].(string), v[1].(string))
		}).(pulumi.StringOutput)
		// A new token or config rolls the manager: the hash of what it runs.
		hash := pulumi.All(full, token).ApplyT(func(v []any) string {
			return m.ConfigHash(v[0].(string), v[1].(string))
		}).(pulumi.StringOutput)
		fleeting := gp.group.Executor == fleetspec.ExecutorDockerAutoscaler
		script := pulumi.String(shared.StartScript(fleeting)).ToStringOutput()
		cfgSecret := &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: shared.ConfigSecretName(m.name), Namespace: p.namespace, Labels: gp.serviceAccount.Labels},
			Type:       corev1.SecretTypeOpaque,
		}
		cfg, err := kube.Declare(ctx, p.component+"-"+m.name+"-config", cfgSecret, map[string]pulumi.Input{
			"stringData." + shared.ConfigSecretKey: pulumi.ToSecret(full).(pulumi.StringOutput),
		}, on(ns)...)
		if err != nil {
			return err
		}
		deps := []pulumi.Resource{ns, tok, sa, cfg}
		if m.state != nil {
			// The docker+machine state: the release mounts it; Kubernetes
			// keeps it (pvc-protection) until its last pod is gone.
			st, err := kube.Declare(ctx, p.component+"-"+m.name+"-state", m.state, nil, on(ns)...)
			if err != nil {
				return err
			}
			deps = append(deps, st)
		}
		values := m.Values(gp.settings, configTOML, script, hash)
		if bad := shared.CheckChartValues(values); len(bad) > 0 {
			return fmt.Errorf("the values of manager %s: %s", m.name, strings.Join(bad, "; "))
		}
		rel, err := helmv3.NewRelease(ctx, p.component+"-"+m.name, &helmv3.ReleaseArgs{
			Name:           pulumi.String(m.name),
			Chart:          pulumi.String(shared.ChartName),
			Version:        pulumi.String(shared.ChartVersion),
			Namespace:      pulumi.String(p.namespace),
			RepositoryOpts: &helmv3.RepositoryOptsArgs{Repo: pulumi.String(shared.ChartRepository)},
			Values:         pulumix.ToInput(values).(pulumi.Map),
			// A rollout waits for the new manager, not for the old one's
			// drain; a failed one is not rolled back (that would be
			// another rollout).
			Timeout:    pulumi.Int(900),
			Atomic:     pulumi.Bool(false),
			MaxHistory: pulumi.Int(10),
		}, on(deps...)...)
		if err != nil {
			return fmt.Errorf("creating the release of manager %s: %w", m.name, err)
		}
		fl.Releases[m.name] = rel
		fl.Managers[gp.group.Name] = append(fl.Managers[gp.group.Name], m.name)
		if m.session != nil {
			if _, err := kube.Declare(ctx, p.component+"-"+m.name+"-session", m.session, nil, on(ns)...); err != nil {
				return err
			}
			fl.TerminalHosts = append(fl.TerminalHosts, m.host)
		}
		if m.scaler != nil {
			if _, err := kube.Declare(ctx, p.component+"-"+m.name+"-scaler", m.scaler, nil, on(rel)...); err != nil {
				return err
			}
		}
	}
	return nil
}
