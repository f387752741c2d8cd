package sharedfleet

import (
	"fmt"
	"maps"
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
	sdkappsv1 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/apps/v1"
	sdkcorev1 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/core/v1"
	helmv3 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/helm/v3"
	sdkmetav1 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/meta/v1"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// fleetPlan is a fleet rendered and checked, ready to declare.
type fleetPlan struct {
	spec      stackconfig.SharedFleet
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
	group   shared.ManagerGroup
	manager string
	// tokenSecret is the chart's runners.secret.
	tokenSecret string
	managers    []*managerPlan

	serviceAccount *corev1.ServiceAccount
	metrics        *corev1.Service
	pdb            *policyv1.PodDisruptionBudget
	networkPolicy  *networkingv1.NetworkPolicy
}

// managerPlan is one manager: one Helm release.
type managerPlan struct {
	name  string
	index int
	// host is the web terminal hostname; "" without one.
	host string
	// scaler is the manager's KEDA ScaledObject; nil below minManagers.
	scaler  *unstructured.Unstructured
	session *corev1.Service
}

// Namespace is fleet s's namespace, where its managers and its Prometheus
// run (the stack config's namespace, which stackconfig.Decode defaults to
// the fleet's name).
func Namespace(s stackconfig.SharedFleet) string { return s.Namespace }

// ManagerServiceAccount is the Kubernetes ServiceAccount, in Namespace(s),
// that every manager of group g runs as: the one annotated with the fleet's
// gcpServiceAccount for Workload Identity.
func ManagerServiceAccount(s stackconfig.SharedFleet, g shared.ManagerGroup) string {
	return s.ManagerName(g)
}

// monitoringSpec is fleet s as its Prometheus sees it; its VM quota
// defaults to the groups' maxVMs times their maxManagers.
func monitoringSpec(s stackconfig.SharedFleet) shared.Fleet {
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

func planFleet(f *stackconfig.Fleet, i int) (*fleetPlan, error) {
	s := f.SharedFleets[i]
	p := &fleetPlan{
		spec:       s,
		component:  "shared-" + s.Name,
		namespace:  Namespace(s),
		grace:      int64(s.JobTimeoutOrDefault().Seconds()) + DrainMarginSeconds,
		monitoring: monitoringSpec(s),
	}
	for j := range s.Groups {
		gp, err := planGroup(f, s, j)
		if err != nil {
			return nil, fmt.Errorf("%s.sharedFleets[%d].groups[%d]: %w", stackconfig.Root, i, j, err)
		}
		// Check that every manager's config.toml renders.
		for _, m := range gp.managers {
			if _, err := gp.config(m, placeholderBucket); err != nil {
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
	if p.gc, err = planGC(p); err != nil {
		return nil, fmt.Errorf("%s.sharedFleets[%d]: %w", stackconfig.Root, i, err)
	}
	return p, nil
}

func planGroup(f *stackconfig.Fleet, s stackconfig.SharedFleet, j int) (*groupPlan, error) {
	g := s.Groups[j]
	gp := &groupPlan{
		group:       g,
		manager:     s.ManagerName(g),
		tokenSecret: s.ManagerName(g) + "-token",
	}
	ns := Namespace(s)
	scaling := g.Scaling
	labels := map[string]string{shared.LabelManagerPod: gp.manager, resources.LabelManagedBy: resources.ManagedBy}

	gp.serviceAccount = &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: ManagerServiceAccount(s, g), Namespace: ns, Labels: labels},
		// gitlab-runner's docker+machine and docker-autoscaler executors
		// never call the Kubernetes API; Workload Identity needs no token.
		AutomountServiceAccountToken: ptr.To(false),
	}
	if s.GCPServiceAccount != "" {
		gp.serviceAccount.Annotations = map[string]string{"iam.gke.io/gcp-service-account": s.GCPServiceAccount}
	}
	gp.metrics = gp.group.MetricsService()
	gp.metrics.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	gp.pdb = gp.group.PodDisruptionBudget(scaling)
	gp.pdb.TypeMeta = metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}

	for n, name := range s.ManagerNames(g) {
		m := &managerPlan{name: name, index: n}
		if w := s.WebTerminal; w != nil {
			m.host = name + "." + w.Domain
			m.session = &corev1.Service{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
				ObjectMeta: metav1.ObjectMeta{Name: name + "-session", Namespace: ns, Labels: pulumix.Merge(labels, map[string]string{LabelRelease: name})},
				Spec: corev1.ServiceSpec{
					Selector: map[string]string{LabelRelease: name},
					Ports: []corev1.ServicePort{{
						Name: "session", Port: TerminalPort, TargetPort: intstr.FromInt32(SessionPort), Protocol: corev1.ProtocolTCP,
					}},
				},
			}
			passthrough(m.session, m.host, w)
		}
		if int32(n) >= scaling.MinManagers {
			so, err := scaler(gp.group, name, n, scaling)
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
func scaler(g shared.ManagerGroup, name string, n int, s shared.Scaling) (*unstructured.Unstructured, error) {
	so, err := g.ScaledObject(name, shared.Scaling{MinManagers: 1, MaxManagers: 1, TargetUtilization: s.TargetUtilization})
	if err != nil {
		return nil, err
	}
	so.SetName(name)
	so.SetLabels(pulumix.Merge(so.GetLabels(), map[string]string{LabelRelease: name}))
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
func networkPolicy(manager, ns string, labels map[string]string, w *stackconfig.WebTerminal) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: manager, Namespace: ns, Labels: labels},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{shared.LabelManagerPod: manager}},
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

// config is manager m's config.toml with the cache bucket given and the
// token placeholder, for the chart's registration step.
func (gp *groupPlan) config(m *managerPlan, bucket string) (string, error) {
	return gp.configWithToken(m, bucket, runnerconfig.TokenPlaceholder)
}

// configWithToken is the config.toml manager m runs: token goes in through
// the TOML encoder, never by text substitution, so no token can change
// another key.
func (gp *groupPlan) configWithToken(m *managerPlan, bucket, token string) (string, error) {
	g := gp.group
	if g.CacheBucket == "" {
		g.CacheBucket = bucket
	}
	c, err := g.ConfigFor(m.name)
	if err != nil {
		return "", err
	}
	if m.host != "" {
		c.SessionServer = &runnerconfig.SessionServer{
			ListenAddress:    fmt.Sprintf("0.0.0.0:%d", SessionPort),
			AdvertiseAddress: fmt.Sprintf("%s:%d", m.host, TerminalPort),
			SessionTimeout:   1800,
		}
	}
	b, err := runnerconfig.Render(runnerconfig.WithToken(c, token))
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// The config Secret of a manager: its whole config.toml, token included,
// written by the program (a Pulumi secret), which the chart mounts at
// /secrets/ConfigSecretFile through its secrets value.
const (
	ConfigSecretKey  = "config-toml"
	ConfigSecretFile = "runnerfleet-config.toml"
	chartSecretsDir  = "/secrets/"
)

// ConfigSecretName is the config Secret of the manager whose release is release.
func ConfigSecretName(release string) string { return release + "-config" }

// ConfigPathFallback is where the chart's image reads config.toml when the
// chart's entrypoint does not say (CONFIG_PATH_FOR_INIT).
const ConfigPathFallback = "/home/gitlab-runner/.gitlab-runner/"

// StartScript is the chart's preEntrypointScript: it runs after the chart
// registered the runner and before gitlab-runner starts, and puts in place
// the config.toml the program rendered, token included, from the config
// Secret the chart mounts. The token never passes through the shell: the
// file is copied as it is. docker-autoscaler managers then install the
// fleeting plugins their config names.
func StartScript(fleeting bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# runnerfleet: config.toml is the one runnerfleet rendered, global section
# and [session_server] included, which a chart template cannot carry.
set -euo pipefail
dir="${CONFIG_PATH_FOR_INIT:-%s}"
umask 077
# The VMs this pod creates carry its name (a pod's hostname, which bash
# sets from the kernel if the environment has none) as their manager's
# incarnation: docker+machine's state lives and dies with the pod, and
# fleet gc finds the VMs of a pod that is gone. Only the placeholder is
# replaced; every other byte, the token's included, is copied as it is.
incarnation="$(printf %%s "${HOSTNAME:?the pod has no hostname}" | tr 'A-Z' 'a-z')"
case "$incarnation" in
  *[!a-z0-9-]*) echo "runnerfleet: the pod name $incarnation is not a GCE label value" >&2; exit 1 ;;
esac
sed "s|%s|${incarnation}|g" %s%s > "${dir%%/}/config.toml.runnerfleet"
mv "${dir%%/}/config.toml.runnerfleet" "${dir%%/}/config.toml"
`, ConfigPathFallback, vmfleet.IncarnationPlaceholder, chartSecretsDir, ConfigSecretFile)
	if fleeting {
		b.WriteString(`gitlab-runner fleeting --config "${dir%/}/config.toml" install
`)
	}
	return b.String()
}

// imageValues splits an image reference into the chart's image values.
func imageValues(ref string) map[string]any {
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	repo, tag := ref[:colon], ref[colon+1:]
	if colon < slash {
		repo, tag = ref, "latest"
	}
	registry, image, _ := strings.Cut(repo, "/")
	if !strings.ContainsAny(registry, ".:") && registry != "localhost" {
		registry, image = "docker.io", repo
	}
	return map[string]any{"registry": registry, "image": image, "tag": tag}
}

// values are manager m's chart values; configTOML and script are known at
// deploy time.
func (p *fleetPlan) values(gp *groupPlan, m *managerPlan, configTOML, script pulumi.StringInput) pulumi.Map {
	replicas := 0
	if int32(m.index) < gp.group.Scaling.MinManagers {
		replicas = 1
	}
	v := map[string]any{
		"fullnameOverride": m.name,
		"replicas":         replicas,
		"gitlabUrl":        p.spec.GitLabURL,
		// The runner token comes from this Secret, never from values.
		"runners": map[string]any{
			"secret": gp.tokenSecret,
			// The name config.toml gives the runner.
			"name":     gp.manager,
			"executor": gp.group.Executor,
			"config":   configTOML,
		},
		"unregisterRunners":             false,
		"concurrent":                    gp.group.Concurrent,
		"checkInterval":                 3,
		"logFormat":                     "json",
		"shutdown_timeout":              runnerconfig.ForcedShutdownTimeout,
		"terminationGracePeriodSeconds": p.grace,
		"strategy": map[string]any{
			"type":          "RollingUpdate",
			"rollingUpdate": map[string]any{"maxUnavailable": 0, "maxSurge": 1},
		},
		"metrics":        map[string]any{"enabled": true, "portName": "metrics", "port": MetricsPort},
		"service":        map[string]any{"enabled": false},
		"sessionServer":  map[string]any{"enabled": false},
		"rbac":           map[string]any{"create": false},
		"serviceAccount": map[string]any{"create": false, "name": gp.serviceAccount.Name},
		// fleet gc finds the manager by this label (a release scaled to
		// zero has a Deployment and no pod).
		"deploymentLabels": map[string]any{vmfleet.PodLabelManager: m.name},
		// fleet gc refuses a grace shorter than this.
		"podAnnotations": map[string]any{vmfleet.AnnotationIdleTime: gp.group.LongestIdleTime().String()},
		"podLabels": map[string]any{
			shared.LabelManagerPod:   gp.manager,
			LabelRelease:             m.name,
			resources.LabelManagedBy: resources.ManagedBy,
		},
		"resources": map[string]any{
			"requests": map[string]any{"cpu": "250m", "memory": "512Mi"},
			"limits":   map[string]any{"memory": "2Gi"},
		},
		"preEntrypointScript": script,
		// The config Secret, at /secrets/<ConfigSecretFile>.
		"secrets": []any{map[string]any{
			"name":  ConfigSecretName(m.name),
			"items": []any{map[string]any{"key": ConfigSecretKey, "path": ConfigSecretFile}},
		}},
	}
	if p.spec.ManagerImage != "" {
		v["image"] = imageValues(p.spec.ManagerImage)
	}
	// On the managers' on-demand pool, never on spot.
	maps.Copy(v, kube.ManagerPlacement())
	return pulumix.ToInput(v).(pulumi.Map)
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
		"stringData." + SecretKeyRunnerToken: token,
		// The chart mounts both keys; registration tokens are gone.
		"stringData." + SecretKeyRegistrationToken: pulumi.String(""),
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
		m := m
		render := func(b string) (string, error) { return gp.config(m, b) }
		var configTOML pulumi.StringOutput
		if hasBucket {
			configTOML = bucket.ApplyT(render).(pulumi.StringOutput)
		} else {
			s, err := render("")
			if err != nil {
				return err
			}
			configTOML = pulumi.String(s).ToStringOutput()
		}
		fleeting := gp.group.Executor == shared.ExecutorDockerAutoscaler
		script := pulumi.String(StartScript(fleeting)).ToStringOutput()
		b := pulumi.String("").ToStringOutput()
		if hasBucket {
			b = bucket
		}
		full := pulumi.All(b, token).ApplyT(func(v []any) (string, error) {
			return gp.configWithToken(m, v[0].(string), v[1].(string))
		}).(pulumi.StringOutput)
		cfgSecret := &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: ConfigSecretName(m.name), Namespace: p.namespace, Labels: gp.serviceAccount.Labels},
			Type:       corev1.SecretTypeOpaque,
		}
		cfg, err := kube.Declare(ctx, p.component+"-"+m.name+"-config", cfgSecret, map[string]pulumi.Input{
			"stringData." + ConfigSecretKey: pulumi.ToSecret(full).(pulumi.StringOutput),
		}, on(ns)...)
		if err != nil {
			return err
		}
		rel, err := helmv3.NewRelease(ctx, p.component+"-"+m.name, &helmv3.ReleaseArgs{
			Name:           pulumi.String(m.name),
			Chart:          pulumi.String(ChartName),
			Version:        pulumi.String(ChartVersion),
			Namespace:      pulumi.String(p.namespace),
			RepositoryOpts: &helmv3.RepositoryOptsArgs{Repo: pulumi.String(ChartRepository)},
			Values:         p.values(gp, m, configTOML, script),
			// A rollout waits for the new manager, not for the old one's
			// drain; a failed one is not rolled back (that would be
			// another rollout).
			Timeout:    pulumi.Int(900),
			Atomic:     pulumi.Bool(false),
			MaxHistory: pulumi.Int(10),
		}, on(ns, tok, sa, cfg)...)
		if err != nil {
			return fmt.Errorf("creating the release of manager %s: %w", m.name, err)
		}
		fl.Releases[m.name] = rel
		fl.Managers[gp.group.Name] = append(fl.Managers[gp.group.Name], m.name)
		// The chart has no value for a preStop hook: add the drain to its
		// Deployment (its container is named after the release's full name).
		_, err = sdkappsv1.NewDeploymentPatch(ctx, p.component+"-"+m.name+"-drain", &sdkappsv1.DeploymentPatchArgs{
			Metadata: &sdkmetav1.ObjectMetaPatchArgs{Name: pulumi.String(m.name), Namespace: pulumi.String(p.namespace)},
			Spec: &sdkappsv1.DeploymentSpecPatchArgs{Template: &sdkcorev1.PodTemplateSpecPatchArgs{Spec: &sdkcorev1.PodSpecPatchArgs{
				Containers: []sdkcorev1.ContainerPatchArgs{{
					Name: pulumi.String(m.name),
					Lifecycle: &sdkcorev1.LifecyclePatchArgs{PreStop: &sdkcorev1.LifecycleHandlerPatchArgs{Exec: &sdkcorev1.ExecActionPatchArgs{
						Command: pulumi.ToStringArray(gitlabrunner.DrainCommand()),
					}}},
				}},
			}}},
		}, on(rel)...)
		if err != nil {
			return fmt.Errorf("adding the drain to manager %s: %w", m.name, err)
		}
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
