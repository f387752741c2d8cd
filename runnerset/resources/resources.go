// Package resources builds the desired Kubernetes objects of a RunnerSet as
// pure functions: no client, no clock. The controller applies what they
// return; tests check them field by field.
package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Labels and annotations runnerfleet puts on what it creates.
const (
	LabelRunnerSet = naming.LabelRunnerSet
	LabelManagedBy = naming.LabelManagedBy
	ManagedBy      = "runnerfleet"

	// LabelOwnerNamespace and LabelOwnerName tie an object to a RunnerSet
	// that cannot own it through an ownerReference: cluster-scoped capacity,
	// the jobs namespace and what lives in it (an ownerReference never
	// crosses namespaces).
	LabelOwnerNamespace = naming.LabelOwnerNamespace
	LabelOwnerName      = naming.LabelOwnerName

	// AnnotationJobsNamespace on the manager pod template names the
	// namespace the managers create job pods in. A manager pod without it
	// (or with another) runs an older layout and keeps its rights in the
	// team's namespace until it has drained.
	AnnotationJobsNamespace = naming.AnnotationJobsNamespace

	// AnnotationConfigHash on the manager pod template rolls the managers when
	// config.toml or the token changes.
	AnnotationConfigHash = naming.AnnotationConfigHash
	// AnnotationIdentityHash on the manager pod template rolls the managers
	// when spec.jobs.identity changes: IRSA binds a pod to its
	// ServiceAccount's role only when the pod is created, so managers started
	// before their ServiceAccount got the role would never sign cache URLs.
	AnnotationIdentityHash = naming.AnnotationIdentityHash
	// AnnotationSpecHash on every object records the hash of the desired state
	// it was written from; the controller rewrites an object only when it differs.
	AnnotationSpecHash = naming.AnnotationSpecHash
	// AnnotationScaledBy on the managers' Deployment says KEDA sets its
	// replicas (spec.managers.autoscale): the spec hash leaves them out,
	// and the controller's writes keep the live count (ScaledExternally).
	AnnotationScaledBy = naming.AnnotationScaledBy

	// AnnotationIRSA and AnnotationWorkloadIdentity bind a ServiceAccount to a
	// cloud identity on EKS and GKE.
	AnnotationIRSA             = naming.AnnotationIRSA
	AnnotationWorkloadIdentity = naming.AnnotationWorkloadIdentity

	// AnnotationSafeToEvict "false" keeps the cluster autoscaler (GKE's,
	// or an upstream one) from removing the node a pod runs on to scale
	// down: it would evict the pod with at most 10 minutes of grace. Every
	// manager pod (a RunnerSet's and a shared fleet's, which drain for
	// hours) and every job pod carries it (docs/operations/disruptions.md).
	AnnotationSafeToEvict = naming.AnnotationSafeToEvict

	ConfigKey = "config.toml"
)

// Mount paths of the manager pod.
const (
	configSecretDir = "/config-secret"
	configDir       = "/etc/gitlab-runner"
	homeDir         = "/home/gitlab-runner"
)

// Labels are the labels of every object of rs; selector labels are a subset.
func Labels(rs *v1alpha1.RunnerSet, component string) map[string]string {
	l := SelectorLabels(rs, component)
	l[LabelManagedBy] = ManagedBy
	l[naming.LabelName] = "gitlab-runner"
	return l
}

// SelectorLabels select the pods of one component of rs.
func SelectorLabels(rs *v1alpha1.RunnerSet, component string) map[string]string {
	return map[string]string{
		LabelRunnerSet: rs.Name,
		LabelComponent: component,
	}
}

// JobServiceAccount is the ServiceAccount of job pods when they have a cloud
// identity (v1alpha1.Settings.JobServiceAccount), bound to it. Its token is not
// mounted: jobs have no business with the Kubernetes API, and IRSA and
// Workload Identity project their own.
//
// It lives in the jobs namespace, which is where the IRSA and Workload
// Identity trusts written by the Pulumi program point
// (naming.Runner.ServiceAccountSubject).
func JobServiceAccount(rs *v1alpha1.RunnerSet, jobsNamespace string) *corev1.ServiceAccount {
	sa := &corev1.ServiceAccount{
		ObjectMeta:                   jobsMeta(rs, jobsNamespace, naming.For(rs.Namespace, rs.Name).JobServiceAccount(), ComponentJob),
		AutomountServiceAccountToken: ptr.To(false),
	}
	if id := rs.Spec.Jobs.Identity; id != nil {
		sa.Annotations = map[string]string{}
		if id.AWSRoleARN != "" {
			sa.Annotations[AnnotationIRSA] = id.AWSRoleARN
		}
		if id.GCPServiceAccount != "" {
			sa.Annotations[AnnotationWorkloadIdentity] = id.GCPServiceAccount
		}
	}
	return WithHash(sa)
}

// ManagerServiceAccountFor is the ServiceAccount of the manager pods of rs,
// whose settings resolved under its RunnerClass (v1alpha1.Effective) are eff.
//
// gitlab-runner's manager process, not the job pod, signs the URLs of an S3
// or GCS cache with its own credentials (the job's helper only uses them).
// So when config.toml has such a cache, the managers carry the job identity
// the cache needs: the IRSA role for S3, the Workload Identity account for
// GCS. It is the RunnerSet's own spec.jobs.identity, which the class's
// policy allowed before any ServiceAccount is written, and the cloud side
// trusts both ServiceAccounts of the RunnerSet by their exact names.
func ManagerServiceAccountFor(rs *v1alpha1.RunnerSet, eff v1alpha1.Settings) *corev1.ServiceAccount {
	sa := &corev1.ServiceAccount{
		ObjectMeta: meta(rs, naming.For(rs.Namespace, rs.Name).ManagerServiceAccount(), ComponentManager),
	}
	if k, v := managerIdentity(rs, eff.Cache); k != "" {
		sa.Annotations = map[string]string{k: v}
	}
	return WithHash(sa)
}

// managerIdentity is the identity annotation the managers need to sign the
// URLs of c, the cache config.toml gets, or "" when it needs none or rs has
// no identity.
func managerIdentity(rs *v1alpha1.RunnerSet, c *v1alpha1.CacheSpec) (key, value string) {
	id := rs.Spec.Jobs.Identity
	if id == nil {
		return "", ""
	}
	switch {
	case c == nil:
		return "", ""
	case c.Type == v1alpha1.CacheTypeS3 && id.AWSRoleARN != "":
		return AnnotationIRSA, id.AWSRoleARN
	case c.Type == v1alpha1.CacheTypeGCS && id.GCPServiceAccount != "":
		return AnnotationWorkloadIdentity, id.GCPServiceAccount
	}
	return "", ""
}

// ExecutorRules are what gitlab-runner's kubernetes executor needs in the
// namespace it runs jobs in, and nothing more.
func ExecutorRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		// Job pods: created, watched while they run, deleted after.
		coreRule([]string{"pods"}, "get", "list", "watch", "create", "delete"),
		// Scripts run through attach (default) or exec; both are POSTs,
		// websocket clients need get.
		coreRule([]string{"pods/attach", "pods/exec"}, "get", "create"),
		coreRule([]string{"pods/log"}, "get"),
		// Per-job registry credentials and scripts.
		coreRule([]string{"secrets", "configmaps"}, "get", "create", "update", "delete"),
		// Services for job services with aliases and the session proxy.
		coreRule([]string{"services"}, "get", "create", "delete"),
		// The job ServiceAccount (when jobs have a cloud identity) is
		// checked before a pod uses it.
		coreRule([]string{"serviceaccounts"}, "get"),
		// Pod events are printed in the job log when a pod cannot start.
		coreRule([]string{"events"}, "list", "watch"),
	}
}

func coreRule(resources []string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: resources, Verbs: verbs}
}

// LegacyManagerRole is the managers' Role in the team's namespace while
// managers or jobs of the layout before jobs namespaces still run there:
// ExecutorRules, so that they finish their jobs (exec the next script,
// delete the job's pod and Secrets) while the new managers take jobs in
// the jobs namespace. The controller deletes it once they are gone; from
// then on the managers hold no rights in the team's namespace, which holds
// the GitLab API token and every other Secret of the team (their config
// Secret reaches them as a volume, read by the kubelet). It keeps the rule
// on that Secret it always had, so a Role written before is not rewritten.
func LegacyManagerRole(rs *v1alpha1.RunnerSet) *rbacv1.Role {
	n := naming.For(rs.Namespace, rs.Name)
	rules := append([]rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{n.Config()}, Verbs: []string{"get"},
	}}, ExecutorRules()...)
	return WithHash(&rbacv1.Role{ObjectMeta: meta(rs, n.ManagerRole(), ComponentManager), Rules: rules})
}

// LegacyManagerRoleBinding binds LegacyManagerRole to the manager ServiceAccount.
func LegacyManagerRoleBinding(rs *v1alpha1.RunnerSet) *rbacv1.RoleBinding {
	return managerRoleBinding(rs, meta(rs, naming.For(rs.Namespace, rs.Name).ManagerRole(), ComponentManager))
}

// ExecutorClusterRole is the ClusterRole holding ExecutorRules, installed
// once with the controller (runnerset/install): each RunnerSet's managers
// get it in their jobs namespace only, through ManagerExecutorRoleBinding.
// The controller may bind exactly this ClusterRole (the bind verb, by
// name) and holds none of its rules itself.
const ExecutorClusterRole = "runnerfleet-executor"

// ManagerExecutorRoleBinding grants the manager ServiceAccount, which
// lives in the team's namespace, ExecutorClusterRole in the jobs namespace
// only: a RoleBinding confines a ClusterRole's rules to its namespace.
func ManagerExecutorRoleBinding(rs *v1alpha1.RunnerSet, jobsNamespace string) *rbacv1.RoleBinding {
	n := naming.For(rs.Namespace, rs.Name)
	return WithHash(&rbacv1.RoleBinding{
		ObjectMeta: jobsMeta(rs, jobsNamespace, n.ManagerExecutorBinding(), ComponentManager),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ExecutorClusterRole},
		Subjects: []rbacv1.Subject{{
			Kind: rbacv1.ServiceAccountKind, Name: n.ManagerServiceAccount(), Namespace: rs.Namespace,
		}},
	})
}

// managerRoleBinding binds the managers' Role of the same name and
// namespace as m to their ServiceAccount.
func managerRoleBinding(rs *v1alpha1.RunnerSet, m metav1.ObjectMeta) *rbacv1.RoleBinding {
	n := naming.For(rs.Namespace, rs.Name)
	return WithHash(&rbacv1.RoleBinding{
		ObjectMeta: m,
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: m.Name},
		Subjects: []rbacv1.Subject{{
			Kind: rbacv1.ServiceAccountKind, Name: n.ManagerServiceAccount(), Namespace: rs.Namespace,
		}},
	})
}

// Pod Security admission labels of the jobs namespace.
const (
	LabelPodSecurityEnforce = naming.LabelPodSecurityEnforce
	LabelPodSecurityWarn    = naming.LabelPodSecurityWarn
)

// JobsNamespace is the namespace rs's jobs run in, created and owned by
// runnerfleet: labelled with its RunnerSet (an ownerReference cannot point
// from a cluster-scoped object to a namespaced one), so the controller
// tells its own from a namespace someone else made. Pod Security admission
// holds its pods to the baseline profile, unless the RunnerSet runs
// privileged jobs (which its RunnerClass allowed).
func JobsNamespace(rs *v1alpha1.RunnerSet, name string) *corev1.Namespace {
	level := "baseline"
	if rs.Spec.Jobs.Privileged {
		level = "privileged"
	}
	l := ownerLabels(rs, ComponentJobsNamespace)
	l[LabelPodSecurityEnforce] = level
	l[LabelPodSecurityWarn] = level
	return WithHash(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}})
}

// JobsNetworkPolicy admits traffic to the job pods only from pods of the
// jobs namespace (a job's services reach each other): no other team's pod,
// and no pod of the team's own namespace, can connect to a running job.
// Egress stays open: jobs fetch sources, images and dependencies.
func JobsNetworkPolicy(rs *v1alpha1.RunnerSet, jobsNamespace string) *networkingv1.NetworkPolicy {
	return WithHash(&networkingv1.NetworkPolicy{
		ObjectMeta: jobsMeta(rs, jobsNamespace, naming.For(rs.Namespace, rs.Name).JobsNetworkPolicy(), ComponentJob),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
			}},
		},
	})
}

// ManagersNetworkPolicy keeps every job pod away from rs's managers: it
// admits traffic to them only from pods of namespaces that are not jobs
// namespaces (every jobs namespace carries LabelComponent
// ComponentJobsNamespace), so no team's job, its own team's included,
// reaches a manager's metrics port or anything else a manager listens on,
// while the monitoring scrapes the metrics port from whatever namespace it
// runs in, and the node (kubelet probes, a Prometheus on the host) reaches
// the managers as network plugins admit node traffic. Egress stays open:
// managers talk to GitLab and the API server.
func ManagersNetworkPolicy(rs *v1alpha1.RunnerSet) *networkingv1.NetworkPolicy {
	return WithHash(&networkingv1.NetworkPolicy{
		ObjectMeta: meta(rs, naming.For(rs.Namespace, rs.Name).Managers(), ComponentManager),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: SelectorLabels(rs, ComponentManager)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
					MatchExpressions: []metav1.LabelSelectorRequirement{{
						Key: LabelComponent, Operator: metav1.LabelSelectorOpNotIn, Values: []string{ComponentJobsNamespace},
					}},
				}}},
			}},
		},
	})
}

// ConfigSecret holds the managers' complete config.toml, token included:
// the controller renders it from typed structs with a TOML encoder, so the
// token is one quoted string whatever it holds, and writes it only once it
// has validated the token. The managers mount this Secret, never the
// team's: a token the controller refused, or one written to the team's
// Secret later, cannot reach a manager, not even one that restarts.
//
// Its spec hash is taken over ConfigHash (config.toml and the token's own
// hash), so the annotation says nothing about the token.
func ConfigSecret(rs *v1alpha1.RunnerSet, configTOML []byte, configHash string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: meta(rs, naming.For(rs.Namespace, rs.Name).Config(), ComponentManager),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{ConfigKey: []byte(configHash)},
	}
	WithHash(s)
	s.Data = map[string][]byte{ConfigKey: configTOML}
	return s
}

// ConfigHash identifies what the managers run: config.toml and the token.
// The token enters only through its own hash, so the result reveals nothing.
func ConfigHash(configTOML []byte, token string) string {
	tokenSum := sha256.Sum256([]byte(token))
	h := sha256.New()
	h.Write(configTOML)
	h.Write(tokenSum[:])
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// identityHash identifies a job identity on the manager pod template.
func identityHash(id *v1alpha1.JobIdentity) string {
	sum := sha256.Sum256([]byte(id.AWSRoleARN + "\n" + id.GCPServiceAccount))
	return hex.EncodeToString(sum[:])[:16]
}

// Deployment runs the managers. They drain, never die mid-job: a preStop hook
// sends gitlab-runner SIGQUIT (stop taking jobs, finish the running ones, then
// exit) and waits for it to exit, whatever the image's STOPSIGNAL says, and the
// grace period is the RunnerSet's shutdown timeout. A new manager starts and
// becomes ready before an old one is asked to drain.
func Deployment(rs *v1alpha1.RunnerSet, image, configHash, jobsNamespace string) *appsv1.Deployment {
	n := naming.For(rs.Namespace, rs.Name)
	grace := int64(rs.Spec.Managers.ShutdownTimeoutOrDefault().Seconds())
	selector := SelectorLabels(rs, ComponentManager)
	podLabels := Labels(rs, ComponentManager)
	podAnnotations := map[string]string{
		AnnotationConfigHash:    configHash,
		AnnotationJobsNamespace: jobsNamespace,
		// No scale-down of the managers' pool under a manager: the cluster
		// autoscaler would give it 10 minutes, not the shutdown timeout.
		AnnotationSafeToEvict:             "false",
		naming.AnnotationPrometheusScrape: "true",
		naming.AnnotationPrometheusPort:   fmt.Sprint(gitlabrunner.MetricsPort),
	}
	if id := rs.Spec.Jobs.Identity; id != nil {
		podAnnotations[AnnotationIdentityHash] = identityHash(id)
	}

	mounts := []corev1.VolumeMount{
		{Name: "config", MountPath: configDir},
		{Name: "home", MountPath: homeDir},
		{Name: "tmp", MountPath: "/tmp"},
	}
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	d := &appsv1.Deployment{
		ObjectMeta: meta(rs, n.Managers(), ComponentManager),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(rs.Spec.Managers.ReplicasOrDefault()),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr.To(intstr.FromInt32(0)),
					MaxSurge:       ptr.To(intstr.FromInt32(1)),
				},
			},
			RevisionHistoryLimit: ptr.To[int32](3),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      podLabels,
					Annotations: podAnnotations,
				},
				Spec: corev1.PodSpec{
					ServiceAccountName:            n.ManagerServiceAccount(),
					TerminationGracePeriodSeconds: ptr.To(grace),
					// On the on-demand managers' pool, never on spot.
					NodeSelector: ManagerNodeSelector(),
					Tolerations:  ManagerTolerations(),
					OS:           &corev1.PodOS{Name: corev1.Linux},
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](100),
						FSGroup:        ptr.To[int64](65533),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					// gitlab-runner writes beside its config.toml (its system
					// ID), so the file is copied from the read-only Secret
					// into a writable memory volume: a plain copy, no shell.
					InitContainers: []corev1.Container{{
						Name:    "config",
						Image:   image,
						Command: []string{"cp", configSecretDir + "/" + ConfigKey, configDir + "/" + ConfigKey},
						VolumeMounts: append([]corev1.VolumeMount{
							{Name: "config-secret", MountPath: configSecretDir, ReadOnly: true},
						}, mounts...),
						SecurityContext: restricted,
					}},
					Containers: []corev1.Container{{
						Name:  "manager",
						Image: image,
						Command: []string{"gitlab-runner", "run",
							"--config", configDir + "/" + ConfigKey,
							"--working-directory", homeDir},
						Ports: []corev1.ContainerPort{{
							Name: MetricsPortName, ContainerPort: gitlabrunner.MetricsPort, Protocol: corev1.ProtocolTCP,
						}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: "/metrics", Port: intstr.FromString(MetricsPortName),
							}},
							PeriodSeconds: 10,
						},
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
							Exec: &corev1.ExecAction{Command: gitlabrunner.DrainCommand()},
						}},
						Resources:       rs.Spec.Managers.Resources,
						VolumeMounts:    mounts,
						SecurityContext: restricted,
					}},
					Volumes: []corev1.Volume{
						{Name: "config-secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
							SecretName:  n.Config(),
							DefaultMode: ptr.To[int32](0o440),
						}}},
						{Name: "config", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
						{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
				},
			},
		},
	}
	if a := rs.Spec.Managers.Autoscale; a != nil {
		// KEDA's HPA sets the count: the hash leaves it out, so that no
		// count KEDA sets makes the Deployment look out of date, and a
		// new Deployment starts with minReplicas.
		d.Annotations = map[string]string{AnnotationScaledBy: ScaledByKEDA}
		d.Spec.Replicas = nil
		d = WithHash(d)
		d.Spec.Replicas = ptr.To(a.MinReplicas)
		return d
	}
	return WithHash(d)
}

// ScaledByKEDA is AnnotationScaledBy's value on an autoscaled RunnerSet's
// managers' Deployment.
const ScaledByKEDA = "keda"

// ScaledExternally reports whether the controller must keep the live
// replicas of d when it updates it: KEDA's HPA sets them.
func ScaledExternally(d *appsv1.Deployment) bool {
	return d.Annotations[AnnotationScaledBy] == ScaledByKEDA
}

// PodDisruptionBudget lets voluntary disruptions (node drains, consolidation
// of system nodes) take at most one manager at a time; the one taken drains
// its jobs first through the preStop hook.
func PodDisruptionBudget(rs *v1alpha1.RunnerSet) *policyv1.PodDisruptionBudget {
	return WithHash(&policyv1.PodDisruptionBudget{
		ObjectMeta: meta(rs, naming.For(rs.Namespace, rs.Name).Managers(), ComponentManager),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(rs, ComponentManager)},
		},
	})
}

func meta(rs *v1alpha1.RunnerSet, name, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: rs.Namespace, Labels: Labels(rs, component)}
}

// jobsMeta is the metadata of an object of rs in its jobs namespace, tied
// to rs by ownerLabels.
func jobsMeta(rs *v1alpha1.RunnerSet, jobsNamespace, name, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: jobsNamespace, Labels: ownerLabels(rs, component)}
}

// ownerLabels are Labels plus the owner labels that tie an object to rs
// where no ownerReference can.
func ownerLabels(rs *v1alpha1.RunnerSet, component string) map[string]string {
	l := Labels(rs, component)
	l[LabelOwnerNamespace] = rs.Namespace
	l[LabelOwnerName] = rs.Name
	return l
}

// Hashable is every object the builders return.
type Hashable interface {
	GetAnnotations() map[string]string
	SetAnnotations(map[string]string)
}

// WithHash records in AnnotationSpecHash a hash of everything the builder
// set, so that the controller can tell whether a live object is out of date
// without comparing fields the API server defaults.
func WithHash[T Hashable](obj T) T {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(fmt.Sprintf("hashing a built object: %v", err)) // builders only return JSON-encodable objects
	}
	sum := sha256.Sum256(b)
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[AnnotationSpecHash] = hex.EncodeToString(sum[:])[:16]
	obj.SetAnnotations(a)
	return obj
}

// SpecHash is the hash withHash recorded on obj, "" when there is none.
func SpecHash(obj interface{ GetAnnotations() map[string]string }) string {
	return obj.GetAnnotations()[AnnotationSpecHash]
}
