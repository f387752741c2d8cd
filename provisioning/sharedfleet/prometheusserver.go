package sharedfleet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/providers/gcp/gcenames"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
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
	// PrometheusService is the fleet's Prometheus's Service in its
	// namespace, on PrometheusPort.
	PrometheusService = prometheusName
)

// PrometheusServiceAccount is the Kubernetes ServiceAccount a fleet's
// Prometheus runs as, in Namespace(fleet): the one annotated with the fleet's
// monitoring.gcpServiceAccount for Workload Identity.
const PrometheusServiceAccount = prometheusName

// prometheusSelector selects the Prometheus pods; the managers'
// NetworkPolicy admits them to the metrics port.
var prometheusSelector = map[string]string{naming.LabelName: prometheusName}

// PrometheusPlan is one Prometheus: its objects, and its files by name.
type PrometheusPlan struct {
	Files          map[string]string
	ServiceAccount *corev1.ServiceAccount
	// Role and Binding let a fleet's Prometheus discover the pods of its
	// namespace; nil for the central one.
	Role       *rbacv1.Role
	Binding    *rbacv1.RoleBinding
	ConfigMap  *corev1.ConfigMap
	Data       *corev1.PersistentVolumeClaim
	Deployment *appsv1.Deployment
	Service    *corev1.Service
	// KubeStateMetrics are a fleet's kube-state-metrics objects.
	KubeStateMetrics []runtime.Object
	// Dashboard is a fleet's Grafana dashboard (Fleet.DashboardConfigMap)
	// in its namespace, for a Grafana sidecar that searches it; nil for
	// the central one.
	Dashboard *corev1.ConfigMap
}

// Persistent storage of the Prometheus servers: a fleet's keeps two days
// for KEDA and its alerts, the central one a month of aggregates.
const (
	FleetPrometheusStorage   = "20Gi"
	CentralPrometheusStorage = "50Gi"
	PrometheusDataClaim      = prometheusName + "-data"
)

func planFleetPrometheus(p *FleetPlan) (*PrometheusPlan, error) {
	m := p.Monitoring
	// RunnerDrainStuck waits for as long as the fleet's jobs may run, and
	// every alert goes to the Alertmanager of the monitoring namespace.
	m.JobTimeout = p.Spec.JobTimeoutOrDefault()
	m.Alertmanager = AlertmanagerAddress()
	quota, err := quotaExporterContainer(p.Spec)
	if err != nil {
		return nil, err
	}
	files := map[string]any{
		PrometheusConfigFile: m.PrometheusConfig(RecordingRulesFile, AlertRulesFile),
		RecordingRulesFile:   m.RecordingRules(),
		AlertRulesFile:       m.AlertRules(),
	}
	// The fleet's Prometheus is a short-term tier: KEDA reads its current
	// values, the central one keeps the aggregates.
	pp, err := planPrometheus(p.Namespace, files, p.Spec.Monitoring.GCPServiceAccount, "2d", FleetPrometheusStorage, true)
	if err != nil {
		return nil, err
	}
	pp.KubeStateMetrics = planKubeStateMetrics(p.Namespace)
	if pp.Dashboard, err = m.DashboardConfigMap(p.Namespace); err != nil {
		return nil, err
	}
	// The quota exporter runs beside Prometheus, as its ServiceAccount:
	// the fleet's monitoring.gcpServiceAccount, which the platform grants
	// roles/compute.viewer (compute.regions.get among its permissions) in
	// the fleet's project for GCE discovery already.
	spec := &pp.Deployment.Spec.Template.Spec
	spec.Containers = append(spec.Containers, quota)
	return pp, nil
}

// QuotaExporterName names the quota exporter's container in the fleet's
// Prometheus pod.
const QuotaExporterName = "quota-exporter"

// quotaExporterContainer is fleet quota-exporter for fleet s: the fleet
// image (its gc's), the project of its groups (one, as for gc) and their
// regions, each once.
func quotaExporterContainer(s fleetspec.SharedFleet) (corev1.Container, error) {
	project, _, err := GCScope(s)
	if err != nil {
		return corev1.Container{}, err
	}
	args := []string{"quota-exporter", "--project", project, "--listen", fmt.Sprintf(":%d", gcenames.QuotaExporterPort)}
	var regions []string
	for _, g := range s.Groups {
		if !slices.Contains(regions, g.Region) {
			regions = append(regions, g.Region)
			args = append(args, "--region", g.Region)
		}
	}
	return monitoringContainer(corev1.Container{
		Name: QuotaExporterName, Image: s.Images.OrDefault().GC, Args: args,
	}, "quota", gcenames.QuotaExporterPort, "/healthz", "10m", "32Mi", "128Mi"), nil
}

// PlanCentral plans the central Prometheus of the monitoring namespace,
// which federates the fleets'.
func PlanCentral(fleets []*FleetPlan) (*PrometheusPlan, error) {
	var ms []Fleet
	for _, p := range fleets {
		ms = append(ms, p.Monitoring)
	}
	return planPrometheus(fleetspec.MonitoringNamespace, map[string]any{PrometheusConfigFile: CentralConfig(ms...)}, "", "30d", CentralPrometheusStorage, false)
}

func planPrometheus(ns string, files map[string]any, gsa, retention, storage string, discover bool) (*PrometheusPlan, error) {
	pp := &PrometheusPlan{Files: map[string]string{}}
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		b, err := prometheus.Render(files[name])
		if err != nil {
			return nil, fmt.Errorf("rendering %s of %s's Prometheus: %w", name, ns, err)
		}
		pp.Files[name] = string(b)
		fmt.Fprintf(h, "%s\x00%s\x00", name, b)
	}
	labels := merged(prometheusSelector, map[string]string{resources.LabelManagedBy: resources.ManagedBy})
	meta := metav1.ObjectMeta{Name: prometheusName, Namespace: ns, Labels: labels}
	saMeta := meta
	saMeta.Name = PrometheusServiceAccount
	pp.ServiceAccount = &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: saMeta,
		// Only pod discovery needs the Kubernetes API.
		AutomountServiceAccountToken: ptr.To(discover),
	}
	if discover {
		pp.Role, pp.Binding = podReader(meta, PrometheusServiceAccount)
	}
	pp.Data = &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: PrometheusDataClaim, Namespace: ns, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(storage)}},
		},
	}
	if gsa != "" {
		pp.ServiceAccount.Annotations = map[string]string{naming.AnnotationWorkloadIdentity: gsa}
	}
	pp.ConfigMap = &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: meta,
		Data:       pp.Files,
	}
	// A new configuration rolls Prometheus.
	pp.Deployment = monitoringDeployment(meta, prometheusSelector, map[string]string{
		naming.AnnotationConfigHash: hex.EncodeToString(h.Sum(nil))[:16],
	}, true, corev1.PodSpec{
		ServiceAccountName: PrometheusServiceAccount,
		Containers: []corev1.Container{monitoringContainer(corev1.Container{
			Name:  prometheusName,
			Image: PrometheusImage,
			Args: []string{
				"--config.file=" + prometheusConfigDir + "/" + PrometheusConfigFile,
				"--storage.tsdb.path=/prometheus",
				"--storage.tsdb.retention.time=" + retention,
				fmt.Sprintf("--web.listen-address=:%d", PrometheusPort),
			},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/-/healthy", Port: intstr.FromString("web")}}, InitialDelaySeconds: 30, PeriodSeconds: 30},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "config", MountPath: prometheusConfigDir, ReadOnly: true},
				{Name: "data", MountPath: "/prometheus"},
			},
		}, "web", PrometheusPort, "/-/ready", "250m", "1Gi", "4Gi")},
		Volumes: []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: prometheusName},
			}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: PrometheusDataClaim}}},
		},
	})
	// The data volume attaches to one node at a time (and the TSDB takes
	// one writer): the old pod goes before the new one.
	pp.Deployment.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	pp.Service = &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Selector: prometheusSelector,
			Ports:    []corev1.ServicePort{{Name: "web", Port: PrometheusPort, TargetPort: intstr.FromString("web"), Protocol: corev1.ProtocolTCP}},
		},
	}
	return pp, nil
}

// Address is the address of the Prometheus of namespace ns in the
// cluster, as KEDA and the central Prometheus reach it.
func Address(ns string) string {
	return fmt.Sprintf("http://%s.%s.svc:%d", prometheusName, ns, PrometheusPort)
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

// monitoringDeployment is the one-replica Deployment meta of a part of the
// fleets' monitoring (Prometheus, kube-state-metrics, Alertmanager),
// selecting sel, whose pod runs pod beside the managers (on the on-demand
// pool) as nobody under the runtime's seccomp profile, with fsGroup nobody
// when it writes a volume; its template carries meta's labels and
// annotations.
func monitoringDeployment(meta metav1.ObjectMeta, sel, annotations map[string]string, fsGroup bool, pod corev1.PodSpec) *appsv1.Deployment {
	pod.NodeSelector, pod.Tolerations = resources.ManagerNodeSelector(), resources.ManagerTolerations()
	pod.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](65534),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if fsGroup {
		pod.SecurityContext.FSGroup = ptr.To[int64](65534)
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: meta.Labels, Annotations: annotations},
				Spec:       pod,
			},
		},
	}
}

// monitoringContainer is c, a container of the fleets' monitoring
// (Prometheus, kube-state-metrics, Alertmanager), with what they share:
// one TCP port named port, a readiness probe on readyPath, CPU and memory
// requests with a memory limit, and a read-only root filesystem, no
// privilege escalation and no capability.
func monitoringContainer(c corev1.Container, port string, number int32, readyPath, cpu, memory, memoryLimit string) corev1.Container {
	c.Ports = []corev1.ContainerPort{{Name: port, ContainerPort: number, Protocol: corev1.ProtocolTCP}}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: readyPath, Port: intstr.FromString(port)}}, PeriodSeconds: 10}
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memoryLimit)},
	}
	c.SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return c
}
