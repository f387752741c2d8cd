package sharedfleet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	helmv3 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/helm/v3"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// PrometheusImage is the fleets' and the central Prometheus (3.5, the LTS
// release).
const PrometheusImage = "quay.io/prometheus/prometheus:v3.5.0"

// Prometheus file names in its ConfigMap; rule files are named relative to
// prometheus.yml, as promtool and Prometheus resolve them.
const (
	PrometheusConfigFile = "prometheus.yml"
	RecordingRulesFile   = "recording.yml"
	AlertRulesFile       = "alerts.yml"
	prometheusName       = "prometheus"
	prometheusConfigDir  = "/etc/prometheus"
)

// PrometheusServiceAccount is the Kubernetes ServiceAccount a fleet's
// Prometheus runs as, in Namespace(fleet): the one annotated with the fleet's
// monitoring.gcpServiceAccount for Workload Identity.
const PrometheusServiceAccount = prometheusName

// prometheusSelector selects the Prometheus pods; the managers'
// NetworkPolicy admits them to the metrics port.
var prometheusSelector = map[string]string{"app.kubernetes.io/name": prometheusName}

// prometheusPlan is one Prometheus: its objects, and its files by name.
type prometheusPlan struct {
	files          map[string]string
	serviceAccount *corev1.ServiceAccount
	// role and binding let a fleet's Prometheus discover the pods of its
	// namespace; nil for the central one.
	role       *rbacv1.Role
	binding    *rbacv1.RoleBinding
	configMap  *corev1.ConfigMap
	data       *corev1.PersistentVolumeClaim
	deployment *appsv1.Deployment
	service    *corev1.Service
	// kubeStateMetrics are a fleet's kube-state-metrics objects.
	kubeStateMetrics []runtime.Object
}

// Persistent storage of the Prometheus servers: a fleet's keeps two days
// for KEDA and its alerts, the central one a month of aggregates.
const (
	FleetPrometheusStorage   = "20Gi"
	CentralPrometheusStorage = "50Gi"
	prometheusDataClaim      = prometheusName + "-data"
)

// CentralMonitoring is the central Prometheus: the
// runnerfleet:gke:SharedFleetMonitoring component.
type CentralMonitoring struct {
	pulumi.ResourceState

	Namespace string
	// Prometheus is its address in the cluster.
	Prometheus string
}

func planFleetPrometheus(p *fleetPlan) (*prometheusPlan, error) {
	m := p.monitoring
	// RunnerDrainStuck waits for as long as the fleet's jobs may run, and
	// every alert goes to the Alertmanager of the monitoring namespace.
	m.JobTimeout = p.spec.JobTimeoutOrDefault()
	m.Alertmanager = AlertmanagerAddress()
	files := map[string]any{
		PrometheusConfigFile: m.PrometheusConfig(RecordingRulesFile, AlertRulesFile),
		RecordingRulesFile:   m.RecordingRules(),
		AlertRulesFile:       m.AlertRules(),
	}
	// The fleet's Prometheus is a short-term tier: KEDA reads its current
	// values, the central one keeps the aggregates.
	pp, err := planPrometheus(p.namespace, files, p.spec.Monitoring.GCPServiceAccount, "2d", FleetPrometheusStorage, true)
	if err != nil {
		return nil, err
	}
	pp.kubeStateMetrics = planKubeStateMetrics(p.namespace)
	return pp, nil
}

func planCentral(fleets []*fleetPlan) (*prometheusPlan, error) {
	var ms []shared.Fleet
	for _, p := range fleets {
		ms = append(ms, p.monitoring)
	}
	return planPrometheus(fleetspec.MonitoringNamespace, map[string]any{PrometheusConfigFile: shared.CentralConfig(ms...)}, "", "30d", CentralPrometheusStorage, false)
}

func planPrometheus(ns string, files map[string]any, gsa, retention, storage string, discover bool) (*prometheusPlan, error) {
	pp := &prometheusPlan{files: map[string]string{}}
	h := sha256.New()
	for _, name := range sortedKeys(files) {
		b, err := prometheus.Render(files[name])
		if err != nil {
			return nil, fmt.Errorf("rendering %s of %s's Prometheus: %w", name, ns, err)
		}
		pp.files[name] = string(b)
		fmt.Fprintf(h, "%s\x00%s\x00", name, b)
	}
	labels := pulumix.Merge(prometheusSelector, map[string]string{resources.LabelManagedBy: resources.ManagedBy})
	meta := metav1.ObjectMeta{Name: prometheusName, Namespace: ns, Labels: labels}
	saMeta := meta
	saMeta.Name = PrometheusServiceAccount
	pp.serviceAccount = &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: saMeta,
		// Only pod discovery needs the Kubernetes API.
		AutomountServiceAccountToken: ptr.To(discover),
	}
	if discover {
		pp.role, pp.binding = podReader(meta, PrometheusServiceAccount)
	}
	pp.data = &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: prometheusDataClaim, Namespace: ns, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(storage)}},
		},
	}
	if gsa != "" {
		pp.serviceAccount.Annotations = map[string]string{"iam.gke.io/gcp-service-account": gsa}
	}
	pp.configMap = &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: meta,
		Data:       pp.files,
	}
	pp.deployment = &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: prometheusSelector},
			// The data volume attaches to one node at a time (and the
			// TSDB takes one writer): the old pod goes before the new one.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: labels,
					// A new configuration rolls Prometheus.
					Annotations: map[string]string{"runnerfleet.dev/config-hash": hex.EncodeToString(h.Sum(nil))[:16]},
				},
				Spec: corev1.PodSpec{
					ServiceAccountName: PrometheusServiceAccount,
					// Beside the managers, on the on-demand pool.
					NodeSelector: resources.ManagerNodeSelector(),
					Tolerations:  resources.ManagerTolerations(),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](65534),
						FSGroup:        ptr.To[int64](65534),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:  prometheusName,
						Image: PrometheusImage,
						Args: []string{
							"--config.file=" + prometheusConfigDir + "/" + PrometheusConfigFile,
							"--storage.tsdb.path=/prometheus",
							"--storage.tsdb.retention.time=" + retention,
							fmt.Sprintf("--web.listen-address=:%d", shared.PrometheusPort),
						},
						Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: shared.PrometheusPort, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/-/ready", Port: intstr.FromString("web")}}, PeriodSeconds: 10},
						LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/-/healthy", Port: intstr.FromString("web")}}, InitialDelaySeconds: 30, PeriodSeconds: 30},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "config", MountPath: prometheusConfigDir, ReadOnly: true},
							{Name: "data", MountPath: "/prometheus"},
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: prometheusName},
						}}},
						{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: prometheusDataClaim}}},
					},
				},
			},
		},
	}
	pp.service = &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Selector: prometheusSelector,
			Ports:    []corev1.ServicePort{{Name: "web", Port: shared.PrometheusPort, TargetPort: intstr.FromString("web"), Protocol: corev1.ProtocolTCP}},
		},
	}
	return pp, nil
}

// declare declares the Prometheus objects.
func (pp *prometheusPlan) declare(ctx *pulumi.Context, prefix string, on func(deps ...pulumi.Resource) []pulumi.ResourceOption, ns pulumi.Resource) error {
	var deps []pulumi.Resource
	for _, o := range []struct {
		suffix string
		obj    runtime.Object
	}{{"sa", pp.serviceAccount}, {"config", pp.configMap}, {"data", pp.data}, {"role", pp.role}, {"binding", pp.binding}} {
		if reflect.ValueOf(o.obj).IsNil() {
			continue
		}
		r, err := kube.Declare(ctx, prefix+"-prometheus-"+o.suffix, o.obj, nil, on(ns)...)
		if err != nil {
			return err
		}
		deps = append(deps, r)
	}
	if _, err := kube.Declare(ctx, prefix+"-prometheus", pp.deployment, nil, on(append(deps, ns)...)...); err != nil {
		return err
	}
	if _, err := kube.Declare(ctx, prefix+"-prometheus-svc", pp.service, nil, on(ns)...); err != nil {
		return err
	}
	for _, o := range pp.kubeStateMetrics {
		kind := strings.ToLower(o.GetObjectKind().GroupVersionKind().Kind)
		if _, err := kube.Declare(ctx, prefix+"-kube-state-metrics-"+kind, o, nil, on(ns)...); err != nil {
			return err
		}
	}
	return nil
}

func address(ns string) string {
	return fmt.Sprintf("http://%s.%s.svc:%d", prometheusName, ns, shared.PrometheusPort)
}

// declareFleet declares one fleet under its component.
func declareFleet(ctx *pulumi.Context, p *fleetPlan, c *kube.Cluster, tokens map[string]pulumi.StringOutput, opts ...pulumi.ResourceOption) (*SharedFleet, error) {
	fl := &SharedFleet{
		Name: p.spec.Name, Namespace: p.namespace,
		Managers: map[string][]string{}, Releases: map[string]*helmv3.Release{},
		Prometheus: address(p.namespace),
	}
	if err := ctx.RegisterComponentResource("runnerfleet:gke:SharedFleet", p.component, fl, opts...); err != nil {
		return nil, err
	}
	on := children(fl, c)
	ns, err := kube.Declare(ctx, p.component+"-ns", kube.Namespace(p.namespace, ctx.Stack()), nil, on(c.DependsOn...)...)
	if err != nil {
		return nil, err
	}
	var bucket pulumi.StringOutput
	hasBucket := p.spec.CacheBucket == "" && c.Cache != nil
	if hasBucket {
		bucket = c.Cache.Bucket
	}
	for _, gp := range p.groups {
		token, ok := tokens[gp.group.TokenConfigKey]
		if !ok {
			return nil, fmt.Errorf("sharedfleet: the token of %s was not read", gp.manager)
		}
		if err := p.declareGroup(ctx, fl, gp, bucket, hasBucket, token, ns, on); err != nil {
			return nil, err
		}
	}
	if err := p.prometheus.declare(ctx, p.component, on, ns); err != nil {
		return nil, err
	}
	for _, o := range []struct {
		suffix string
		obj    runtime.Object
	}{{"gc-sa", p.gc.serviceAccount}, {"gc-role", p.gc.role}, {"gc-binding", p.gc.binding}, {"gc", p.gc.cronJob}} {
		if _, err := kube.Declare(ctx, p.component+"-"+o.suffix, o.obj, nil, on(ns)...); err != nil {
			return nil, err
		}
	}
	var managers []string
	for _, g := range sortedKeys(fl.Managers) {
		managers = append(managers, fl.Managers[g]...)
	}
	if err := ctx.RegisterResourceOutputs(fl, pulumi.Map{
		"namespace":     pulumi.String(fl.Namespace),
		"managers":      pulumi.ToStringArray(managers),
		"terminalHosts": pulumi.ToStringArray(fl.TerminalHosts),
		"prometheus":    pulumi.String(fl.Prometheus),
	}); err != nil {
		return nil, err
	}
	return fl, nil
}

// declareCentral declares the central Prometheus and its namespace.
func declareCentral(ctx *pulumi.Context, pp *prometheusPlan, am *alertmanagerPlan, alertSecret pulumi.StringOutput, c *kube.Cluster, fleets []*SharedFleet, opts ...pulumi.ResourceOption) (*CentralMonitoring, error) {
	cm := &CentralMonitoring{Namespace: fleetspec.MonitoringNamespace, Prometheus: address(fleetspec.MonitoringNamespace)}
	const name = "shared-monitoring"
	if err := ctx.RegisterComponentResource("runnerfleet:gke:SharedFleetMonitoring", name, cm, opts...); err != nil {
		return nil, err
	}
	on := children(cm, c)
	ns, err := kube.Declare(ctx, name+"-ns", kube.Namespace(fleetspec.MonitoringNamespace, ctx.Stack()), nil, on(c.DependsOn...)...)
	if err != nil {
		return nil, err
	}
	if err := pp.declare(ctx, name, on, ns); err != nil {
		return nil, err
	}
	if err := am.declare(ctx, name, alertSecret, on, ns); err != nil {
		return nil, err
	}
	var federated []string
	for _, f := range fleets {
		federated = append(federated, f.Prometheus)
	}
	if err := ctx.RegisterResourceOutputs(cm, pulumi.Map{
		"prometheus":   pulumi.String(cm.Prometheus),
		"alertmanager": pulumi.String(AlertmanagerAddress()),
		"federates":    pulumi.ToStringArray(federated),
	}); err != nil {
		return nil, err
	}
	return cm, nil
}

// children are the options of a component's children: parented to it, on
// the cluster's provider, after deps.
func children(parent pulumi.Resource, c *kube.Cluster) func(deps ...pulumi.Resource) []pulumi.ResourceOption {
	return func(deps ...pulumi.Resource) []pulumi.ResourceOption {
		opts := []pulumi.ResourceOption{pulumi.Parent(parent), pulumi.Provider(c.Provider)}
		if len(deps) > 0 {
			opts = append(opts, pulumi.DependsOn(deps))
		}
		return opts
	}
}

// podReader is a Role that may only read the pods of meta's namespace, and
// its binding to the ServiceAccount sa there: what Prometheus's pod
// discovery and kube-state-metrics need.
func podReader(meta metav1.ObjectMeta, sa string) (*rbacv1.Role, *rbacv1.RoleBinding) {
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: meta,
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: meta,
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: meta.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: meta.Namespace}},
	}
	return role, binding
}
