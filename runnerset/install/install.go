// Package install builds the runnerset-controller's own objects: its
// ServiceAccount, the ClusterRole generated from the +kubebuilder:rbac
// markers (runnerset/rbac) and its binding, the kubernetes executor's
// ClusterRole that the controller binds in each jobs namespace, the
// Deployment with leader election, the PodDisruptionBudget and the metrics
// Service. It is pure: the
// Helm chart (charts/runnerfleet, generated from it), the plain manifests
// (manifests/install.yaml) and the Pulumi program (infra/kube) all install
// what Objects returns, so the three install paths cannot drift apart.
package install

import (
	"fmt"
	"maps"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/rbac"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Name is the controller's ServiceAccount, ClusterRole, ClusterRoleBinding,
// Deployment, PodDisruptionBudget and Service.
const Name = rbac.Name

// Ports of the controller's container; the flags of cmd/runnerset-controller
// are set from them. Metrics are served over TLS to callers the API server
// authenticates and authorizes (runnerset/metrics.Serving).
const (
	MetricsPort = 8443
	ProbePort   = 8081
)

// MetricsReader is the ClusterRole that lets a scraper get /metrics from the
// controller: bind it to your Prometheus' ServiceAccount (kube-prometheus-stack:
// its prometheus ServiceAccount) with a ClusterRoleBinding.
const MetricsReader = Name + "-metrics-reader"

// MetricsPath is where the controller serves metrics.
const MetricsPath = "/metrics"

// NameLabel selects the controller's pods.
const NameLabel = naming.LabelName

// Options are what an install may change; Defaults gives the release's.
type Options struct {
	// Namespace the controller runs in.
	Namespace string
	// Image of the controller, repository:tag or repository@digest.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// Replicas of the controller; one leader reconciles, the others stand by.
	Replicas  int32
	Resources corev1.ResourceRequirements
	// PriorityClassName of the controller's pods; "" for none.
	PriorityClassName string
	NodeSelector      map[string]string
	Tolerations       []corev1.Toleration
	Affinity          *corev1.Affinity
	PodAnnotations    map[string]string
	// LogLevel is zap's level: debug, info or error.
	LogLevel string
	// PodDisruptionBudget keeps one replica up through voluntary evictions.
	PodDisruptionBudget bool
	// Labels are added to every object (the installer's: managed-by,
	// instance, stack).
	Labels map[string]string
	// ServiceMonitor has the Prometheus operator scrape the metrics Service
	// every ServiceMonitorInterval, and the team managers' pods through a
	// PodMonitor; ServiceMonitorLabels are what its Prometheus selects
	// both by (release: kube-prometheus-stack).
	ServiceMonitor         bool
	ServiceMonitorInterval string
	ServiceMonitorLabels   map[string]string
	// PrometheusRule ships the team runners' alert rules
	// (runnerset/monitoring.RuleGroups) to the Prometheus operator, with
	// PrometheusRuleLabels (what its Prometheus selects rules by).
	PrometheusRule       bool
	PrometheusRuleLabels map[string]string
	// Prices turn the cost rules' node-seconds into money: added to the
	// default price table (runnerset/cost); nil is the defaults.
	Prices *cost.Table
	// Dashboards ships the Grafana dashboards as ConfigMaps Grafana's
	// sidecar loads (label grafana_dashboard), with DashboardLabels.
	Dashboards      bool
	DashboardLabels map[string]string
}

// Defaults are the options of a release: the release's image, two replicas
// with leader election, a PodDisruptionBudget.
func Defaults() Options {
	return Options{
		Namespace:       "runnerfleet-system",
		Image:           version.Image(Name),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Replicas:        2,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		PriorityClassName: "system-cluster-critical",
		// The managers' pool is tainted CriticalAddonsOnly (as Karpenter's
		// chart, the controller tolerates it by default): a cluster whose
		// only untainted-for-jobs nodes are that pool still runs it.
		Tolerations:            resources.ManagerTolerations(),
		LogLevel:               "info",
		PodDisruptionBudget:    true,
		ServiceMonitorInterval: "30s",
	}
}

// LogLevels are the levels --zap-log-level takes by name.
var LogLevels = []string{"debug", "info", "error"}

// Validate names the first option that cannot be installed.
func (o Options) Validate() error {
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", o.Namespace, errs[0])
	}
	if o.Image == "" {
		return fmt.Errorf("image is empty: give the controller image, for example %s", version.Image(Name))
	}
	if o.Replicas < 1 {
		return fmt.Errorf("replicas %d: at least 1", o.Replicas)
	}
	ok := false
	for _, l := range LogLevels {
		ok = ok || l == o.LogLevel
	}
	if !ok {
		return fmt.Errorf("logLevel %q: one of %v", o.LogLevel, LogLevels)
	}
	return nil
}

// Selector selects the controller's pods.
func Selector() map[string]string { return map[string]string{NameLabel: Name} }

func (o Options) labels() map[string]string {
	l := maps.Clone(o.Labels)
	if l == nil {
		l = map[string]string{}
	}
	maps.Copy(l, Selector())
	l[naming.LabelComponent] = "controller"
	l[naming.LabelPartOf] = "runnerfleet"
	return l
}

func (o Options) meta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: o.Namespace, Name: Name, Labels: o.labels()}
}

// Args are the controller's command line.
func (o Options) Args() []string {
	return []string{
		"--leader-elect=true",
		fmt.Sprintf("--metrics-bind-address=:%d", MetricsPort),
		"--metrics-secure=true",
		fmt.Sprintf("--health-probe-bind-address=:%d", ProbePort),
		"--zap-log-level=" + o.LogLevel,
	}
}

// Objects are the controller's objects in the order they are applied: its
// identity and permissions, then the Deployment, then what serves it. Each
// has its TypeMeta set. The namespace itself is the installer's (Helm's
// --create-namespace, the manifests' Namespace, the program's).
func Objects(o Options) ([]client.Object, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	role, err := rbac.ClusterRole()
	if err != nil {
		return nil, err
	}
	return Build(o, role), nil
}

// Build is Objects without validating o: the chart's generator builds the
// objects with placeholders for what Helm's values fill in.
func Build(o Options, role *rbacv1.ClusterRole) []client.Object {
	out := []client.Object{ServiceAccount(o), ClusterRole(o, role), ClusterRoleBinding(o), MetricsReaderRole(o), ExecutorClusterRole(o), Deployment(o), Service(o)}
	if o.PodDisruptionBudget {
		out = append(out, PodDisruptionBudget(o))
	}
	if o.ServiceMonitor {
		l := o.labels()
		maps.Copy(l, o.ServiceMonitorLabels)
		out = append(out, ServiceMonitor(o), monitoring.ManagersPodMonitor(o.Namespace, l, o.ServiceMonitorInterval))
	}
	if o.PrometheusRule {
		l := o.labels()
		maps.Copy(l, o.PrometheusRuleLabels)
		out = append(out, monitoring.PrometheusRule(o.Namespace, l, cost.Effective(o.Prices)))
	}
	if o.Dashboards {
		l := o.labels()
		maps.Copy(l, o.DashboardLabels)
		cms, err := monitoring.ConfigMaps(o.Namespace, l)
		if err != nil {
			panic(fmt.Sprintf("building the dashboards: %v", err)) // the dashboards are fixed code; the tests build them
		}
		for _, cm := range cms {
			out = append(out, cm)
		}
	}
	return out
}

// FinalizerPolicyName names the MutatingAdmissionPolicy that gives every
// new RunnerSet the controller's drain finalizer, and its binding.
const FinalizerPolicyName = "runnerfleet-drain-finalizer"

// AdmissionPolicyKind is the API AdmissionPolicies need: served (GA, on by
// default) by Kubernetes 1.36 and later. An installer adds
// AdmissionPolicies only where the API server serves it: the chart asks
// Helm's Capabilities, fleet up --kubeconfig the server's discovery, the
// Pulumi program the platform's Kubernetes version, and the plain
// manifests keep them in a file of their own.
var AdmissionPolicyKind = admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicy")

// AdmissionPolicyResource is AdmissionPolicyKind's resource, as discovery
// lists it.
var AdmissionPolicyResource = schema.GroupVersionResource{Group: admissionregistrationv1.GroupName, Version: "v1", Resource: "mutatingadmissionpolicies"}

// MinAdmissionPolicyMinor is the first Kubernetes 1.x minor version that
// serves AdmissionPolicyKind by default.
const MinAdmissionPolicyMinor = 36

// AdmissionPolicies are what an API server that serves AdmissionPolicyKind
// runs for runnerfleet: FinalizerPolicy and its binding. Nothing depends
// on them: without them the controller adds the finalizer on a RunnerSet's
// first pass, a write more per new RunnerSet.
func AdmissionPolicies(o Options) []client.Object {
	return []client.Object{FinalizerPolicy(o), FinalizerPolicyBinding(o)}
}

// Settling reports whether err is the API server still settling after the
// CRDs and AdmissionPolicies were applied, which passes within seconds: it
// may not serve a new kind yet, or its MutatingAdmissionPolicy dispatcher
// may not resolve the kind yet (503 "Resource kind ... not found. There can
// be a delay ...", returned even under failurePolicy Ignore). An installer
// that applies RunnerSets right after the install tries again on these for
// up to SettleTimeout.
func Settling(err error) bool {
	return meta.IsNoMatchError(err) || apierrors.IsServiceUnavailable(err)
}

// SettleTimeout is how long an installer tries again while Settling.
const SettleTimeout = 30 * time.Second

// FinalizerPolicy adds the controller's drain finalizer (naming.FinalizerDrain)
// to every RunnerSet as it is created, so the controller need not patch it
// on: one write less per new RunnerSet. It matches CREATE only: the
// controller removes the finalizer (an update) once the RunnerSet has
// drained, and a policy that added it back would hold every RunnerSet
// forever. An apply configuration merges into the finalizers a creator set
// (metadata.finalizers is a set), keeping theirs. If the policy cannot be
// evaluated the RunnerSet is admitted as it is (failurePolicy Ignore), and
// the controller adds the finalizer before it writes anything for it.
func FinalizerPolicy(o Options) *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: AdmissionPolicyKind.GroupVersion().String(), Kind: AdmissionPolicyKind.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: FinalizerPolicyName, Labels: o.labels()},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{
							APIGroups:   []string{v1alpha1.GroupVersion.Group},
							APIVersions: []string{v1alpha1.GroupVersion.Version},
							Resources:   []string{"runnersets"},
						},
					},
				}},
			},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
					Expression: fmt.Sprintf("Object{metadata: Object.metadata{finalizers: [%q]}}", naming.FinalizerDrain),
				},
			}},
			FailurePolicy:      ptr.To(admissionregistrationv1.Ignore),
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
}

// FinalizerPolicyBinding puts FinalizerPolicy in force for every RunnerSet.
func FinalizerPolicyBinding(o Options) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: AdmissionPolicyKind.GroupVersion().String(), Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: FinalizerPolicyName, Labels: o.labels()},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: FinalizerPolicyName},
	}
}

// Namespace is the controller's namespace, for installers that create it.
func Namespace(o Options) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Namespace, Labels: maps.Clone(o.Labels)},
	}
}

// ServiceAccount is the controller's identity.
func ServiceAccount(o Options) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:                     metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta:                   o.meta(),
		AutomountServiceAccountToken: ptr.To(true),
	}
}

// ClusterRole is role (rbac.ClusterRole(), generated from the markers) with
// the install's labels.
func ClusterRole(o Options, role *rbacv1.ClusterRole) *rbacv1.ClusterRole {
	cr := role.DeepCopy()
	cr.TypeMeta = metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"}
	cr.ObjectMeta = metav1.ObjectMeta{Name: Name, Labels: o.labels()}
	return cr
}

// ClusterRoleBinding grants the ClusterRole to the ServiceAccount.
func ClusterRoleBinding(o Options) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: o.labels()},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: o.Namespace, Name: Name}},
	}
}

// MetricsReaderRole grants GET /metrics, the one thing the controller's
// metrics endpoint asks a scraper for (a SubjectAccessReview of the
// non-resource URL).
func MetricsReaderRole(o Options) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: MetricsReader, Labels: o.labels()},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{MetricsPath}, Verbs: []string{"get"}}},
	}
}

// ExecutorClusterRole holds what gitlab-runner's kubernetes executor needs
// (resources.ExecutorRules). It grants nothing by itself: the controller
// binds it to each RunnerSet's managers in that RunnerSet's jobs namespace
// only (a RoleBinding there), which its own ClusterRole allows by the bind
// verb on this name alone. One object for every RunnerSet, where each had
// a Role of its own.
func ExecutorClusterRole(o Options) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: resources.ExecutorClusterRole, Labels: o.labels()},
		Rules:      resources.ExecutorRules(),
	}
}

// Deployment runs the controller: non-root, read-only root filesystem, no
// capabilities, spread over nodes, rolled with a surge so a leader is
// always there to take over.
func Deployment(o Options) *appsv1.Deployment {
	podLabels := o.labels()
	var annotations map[string]string
	if len(o.PodAnnotations) > 0 {
		annotations = maps.Clone(o.PodAnnotations)
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: o.meta(),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(o.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: Selector()},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: annotations},
				Spec: corev1.PodSpec{
					ServiceAccountName: Name,
					PriorityClassName:  o.PriorityClassName,
					NodeSelector:       maps.Clone(o.NodeSelector),
					Tolerations:        append([]corev1.Toleration(nil), o.Tolerations...),
					Affinity:           o.Affinity.DeepCopy(),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector: &metav1.LabelSelector{MatchLabels: Selector()},
					}},
					Containers: []corev1.Container{{
						Name:            "controller",
						Image:           o.Image,
						ImagePullPolicy: o.ImagePullPolicy,
						Args:            o.Args(),
						Ports: []corev1.ContainerPort{
							{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
							{Name: "probes", ContainerPort: ProbePort, Protocol: corev1.ProtocolTCP},
						},
						LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz", Port: intstr.FromString("probes")}}, InitialDelaySeconds: 15, PeriodSeconds: 20},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/readyz", Port: intstr.FromString("probes")}}, PeriodSeconds: 10},
						Resources: *o.Resources.DeepCopy(),
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
}

// PodDisruptionBudget lets a node drain take one replica at a time.
func PodDisruptionBudget(o Options) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: o.meta(),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: Selector()},
		},
	}
}

// Service exposes the controller's metrics to Prometheus.
func Service(o Options) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: o.meta(),
		Spec: corev1.ServiceSpec{
			Selector: Selector(),
			Ports:    []corev1.ServicePort{{Name: "metrics", Port: MetricsPort, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// ServiceMonitor has the Prometheus operator scrape the metrics Service over
// TLS with its own ServiceAccount token, which MetricsReader must be bound
// to. The certificate is the controller's self-signed one, so it is not
// verified; the token is what keeps strangers out.
func ServiceMonitor(o Options) *monitoringv1.ServiceMonitor {
	l := o.labels()
	maps.Copy(l, o.ServiceMonitorLabels)
	return &monitoringv1.ServiceMonitor{
		TypeMeta:   metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.ServiceMonitorsKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: Name, Labels: l},
		Spec: monitoringv1.ServiceMonitorSpec{
			Selector: metav1.LabelSelector{MatchLabels: Selector()},
			Endpoints: []monitoringv1.Endpoint{{
				Port:            "metrics",
				Path:            MetricsPath,
				Scheme:          ptr.To(monitoringv1.Scheme("https")),
				Interval:        monitoringv1.Duration(o.ServiceMonitorInterval),
				BearerTokenFile: ServiceAccountTokenFile,
				HTTPConfigWithProxyAndTLSFiles: monitoringv1.HTTPConfigWithProxyAndTLSFiles{HTTPConfigWithTLSFiles: monitoringv1.HTTPConfigWithTLSFiles{
					TLSConfig: &monitoringv1.TLSConfig{SafeTLSConfig: monitoringv1.SafeTLSConfig{InsecureSkipVerify: ptr.To(true)}},
				}},
			}},
		},
	}
}

// ServiceAccountTokenFile is where a pod finds its ServiceAccount token.
const ServiceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
