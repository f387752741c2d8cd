package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RunnerSetSpec is what a team asks for: one GitLab runner, its tags, its
// managers, its job pods and the capacity its jobs run on.
// +kubebuilder:validation:XValidation:rule="!has(self.overflow) || (has(self.managers) && has(self.managers.autoscale) && self.managers.autoscale.minReplicas == 0)",message="spec.overflow needs spec.managers.autoscale with minReplicas 0: an overflow runs no manager while the primary's jobs do not wait; add managers.autoscale {minReplicas: 0, maxReplicas: N, targetRunningJobs: T}",fieldPath=".overflow"
type RunnerSetSpec struct {
	// ClassName names the RunnerClass this runner belongs to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message="className must be the name of a RunnerClass (kubectl get runnerclasses): lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, for example eks-spot"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="className is immutable: moving a runner to another class would move its running jobs; create a new RunnerSet instead"
	// +required
	ClassName string `json:"className"`

	// Tags are the GitLab runner tags this runner picks jobs for.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=255
	// +kubebuilder:validation:items:XValidation:rule="!self.contains(',')",message="a tag cannot contain a comma: list each tag as its own item"
	// +kubebuilder:validation:items:XValidation:rule="self.trim() == self",message="a tag cannot start or end with a space"
	// +kubebuilder:validation:items:XValidation:rule=`!self.matches(r'[\p{Cc}\p{Zl}\p{Zp}]')`,message="a tag cannot hold a newline, tab, NUL or other control character: no job could ask for it; write the tag on one line, for example team-a (spaces inside a tag are fine)"
	// +listType=set
	// +required
	Tags []string `json:"tags"`

	// RunUntagged lets this runner pick jobs that have no tags.
	// +optional
	RunUntagged bool `json:"runUntagged,omitempty"`

	// GitLab says how the runner authenticates with GitLab.
	// +required
	GitLab GitLabSpec `json:"gitlab"`

	// Managers are the gitlab-runner processes that poll GitLab and create job pods.
	// +optional
	Managers ManagerSpec `json:"managers,omitempty"`

	// Jobs shape the pods that run CI jobs.
	// +kubebuilder:default={}
	// +optional
	Jobs JobSpec `json:"jobs,omitempty"`

	// Capacity is what the nodes that run this runner's jobs may be.
	// +optional
	Capacity CapacitySpec `json:"capacity,omitempty"`

	// Cache overrides the RunnerClass's default cache.
	// +optional
	Cache *CacheSpec `json:"cache,omitempty"`

	// Overflow makes this RunnerSet the overflow of another of its
	// namespace with the same tags: its managers (managers.autoscale with
	// minReplicas 0) start when the primary's jobs wait in GitLab's queue
	// longer than a threshold, and drain back to none when they no longer
	// do. See docs/concepts/autoscaling.md.
	// +optional
	Overflow *OverflowSpec `json:"overflow,omitempty"`
}

// GitLabSpec says how the runner authenticates with GitLab.
// +kubebuilder:validation:XValidation:rule="has(self.tokenSecretRef) != has(self.runner)",message="gitlab takes exactly one of tokenSecretRef (an existing glrt- token) or runner (runnerfleet creates the runner through the GitLab API)"
// +kubebuilder:validation:XValidation:rule="has(self.runner) == has(oldSelf.runner)",message="switching between tokenSecretRef and runner would orphan a runner in GitLab: create a new RunnerSet instead"
// +kubebuilder:validation:XValidation:rule="!has(self.readTokenSecretRef) || has(self.tokenSecretRef)",message="gitlab.readTokenSecretRef is for a runner whose glrt- token you bring (tokenSecretRef); with gitlab.runner, runnerfleet reads GitLab with runner.apiTokenSecretRef: remove readTokenSecretRef"
type GitLabSpec struct {
	// URL of the GitLab instance; defaults to the RunnerClass's gitlabURL.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="gitlab.url must be an http(s) URL such as https://gitlab.example.com"
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getHostname() != ''",message="gitlab.url must be a URL with a host and no spaces or newlines, such as https://gitlab.example.com"
	// +optional
	URL string `json:"url,omitempty"`

	// TokenSecretRef names a Secret in the RunnerSet's namespace that holds an
	// existing runner authentication token (glrt-…).
	// +optional
	TokenSecretRef *SecretKeyRef `json:"tokenSecretRef,omitempty"`

	// ReadTokenSecretRef names a Secret holding a GitLab access token with
	// the read_api scope (or manage_runner) that can see the runner of
	// tokenSecretRef. runnerfleet reads GitLab's record of that runner with
	// it every few minutes: its managers' last contact (the RunnerOnline
	// condition) and its tags, compared with spec.tags (TagsMatch). A glrt-
	// token alone cannot read them. A runner of gitlab.runner is read with
	// its apiTokenSecretRef.
	// +optional
	ReadTokenSecretRef *SecretKeyRef `json:"readTokenSecretRef,omitempty"`

	// Runner has the controller create the runner through the GitLab API,
	// rotate its token before it expires and delete it with the RunnerSet.
	// +optional
	Runner *RunnerRegistration `json:"runner,omitempty"`
}

// RunnerType is the scope of a GitLab runner.
// +kubebuilder:validation:Enum=instance;group;project
type RunnerType string

const (
	RunnerTypeInstance RunnerType = "instance"
	RunnerTypeGroup    RunnerType = "group"
	RunnerTypeProject  RunnerType = "project"
)

// RunnerRegistration describes a runner the controller creates in GitLab
// (POST /user/runners). Its tags are spec.tags; runUntagged is spec.runUntagged.
// +kubebuilder:validation:XValidation:rule="self.type != 'group' || has(self.groupID)",message="runner.type group needs runner.groupID"
// +kubebuilder:validation:XValidation:rule="self.type != 'project' || has(self.projectID)",message="runner.type project needs runner.projectID"
// +kubebuilder:validation:XValidation:rule="self.type != 'instance' || (!has(self.groupID) && !has(self.projectID))",message="an instance runner takes neither groupID nor projectID"
// +kubebuilder:validation:XValidation:rule="self.type == oldSelf.type && has(self.groupID) == has(oldSelf.groupID) && (!has(self.groupID) || self.groupID == oldSelf.groupID) && has(self.projectID) == has(oldSelf.projectID) && (!has(self.projectID) || self.projectID == oldSelf.projectID)",message="runner.type, groupID and projectID are immutable: a runner cannot move between scopes; create a new RunnerSet instead"
type RunnerRegistration struct {
	// Type is instance (needs an administrator's token), group or project.
	// +required
	Type RunnerType `json:"type"`

	// GroupID of a group runner.
	// +kubebuilder:validation:Minimum=1
	// +optional
	GroupID *int64 `json:"groupID,omitempty"`

	// ProjectID of a project runner.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ProjectID *int64 `json:"projectID,omitempty"`

	// APITokenSecretRef names a Secret holding a GitLab access token with the
	// create_runner scope, and manage_runner to rotate and delete the runner.
	// +required
	APITokenSecretRef SecretKeyRef `json:"apiTokenSecretRef"`

	// Description shown in GitLab; runnerfleet appends its marker to it.
	// +kubebuilder:validation:MaxLength=200
	// +optional
	Description string `json:"description,omitempty"`

	// MaintenanceNote shown in GitLab.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	MaintenanceNote string `json:"maintenanceNote,omitempty"`

	// Locked keeps a project runner from being used by other projects.
	// +optional
	Locked bool `json:"locked,omitempty"`

	// Paused creates the runner paused: it takes no jobs.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Protected runs only jobs of protected branches and tags (ref_protected).
	// +optional
	Protected bool `json:"protected,omitempty"`

	// MaximumTimeout caps the timeout of jobs this runner runs; GitLab needs
	// at least 10m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10m')",message="runner.maximumTimeout must be at least 10m (GitLab's minimum)"
	// +optional
	MaximumTimeout *metav1.Duration `json:"maximumTimeout,omitempty"`
}

// SecretKeyRef names one key of a Secret in the RunnerSet's namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message="name must be a Secret's name (kubectl get secrets): lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, for example team-a-gitlab-token"
	// +required
	Name string `json:"name"`

	// Key in the Secret's data.
	// +kubebuilder:default=token
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[-._a-zA-Z0-9]+$') && !self.startsWith('..') && self != '.'`,message="key must be a key of the Secret's data: letters, digits, '-', '_' and '.', not . and not starting with .., for example token"
	// +optional
	Key string `json:"key,omitempty"`
}

// ManagerSpec shapes the gitlab-runner manager Deployment.
// +kubebuilder:validation:XValidation:rule="!has(self.autoscale) || self.autoscale.targetRunningJobs < (has(self.concurrent) ? self.concurrent : 10)",message="spec.managers.autoscale.targetRunningJobs must be below managers.concurrent: a manager never runs more than concurrent jobs, so the average could never pass the target and no manager would be added; lower targetRunningJobs or raise concurrent",fieldPath=".autoscale.targetRunningJobs"
type ManagerSpec struct {
	// Replicas is the number of manager pods; each polls GitLab for jobs.
	// Not used while autoscale is set: KEDA sets the count then.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=50
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Concurrent is the number of jobs one manager runs at once.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Concurrent int32 `json:"concurrent,omitempty"`

	// CheckInterval is how often a manager asks GitLab for new jobs.
	// +kubebuilder:default="3s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="managers.checkInterval must be between 1s and 1h, for example 3s"
	// +kubebuilder:validation:Type=string
	// +optional
	CheckInterval *metav1.Duration `json:"checkInterval,omitempty"`

	// ShutdownTimeout is how long a stopping manager may wait for its running
	// jobs to finish. It becomes the pod's terminationGracePeriodSeconds: set
	// it no shorter than your longest job.
	// +kubebuilder:default="3h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('48h')",message="managers.shutdownTimeout must be between 1m and 48h and no shorter than your longest job, for example 3h"
	// +kubebuilder:validation:Type=string
	// +optional
	ShutdownTimeout *metav1.Duration `json:"shutdownTimeout,omitempty"`

	// OrphanedJobGracePeriod is how long a job pod may outlive the last
	// manager pod of a RunnerSet being deleted before the controller deletes
	// it. gitlab-runner deletes its job pods itself; one it left (a manager
	// killed, or one that lost its API rights, before its clean-up) has no
	// process left that owns it and would hold the deletion forever. It
	// counts from when the controller first saw no manager pod left
	// (status.orphanedJobPodsSince); a job pod is never deleted while any
	// manager pod of the RunnerSet exists. Default 5m; 0s deletes such pods
	// at once.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('48h')",message="managers.orphanedJobGracePeriod must be between 0s and 48h, for example 5m"
	// +kubebuilder:validation:Type=string
	// +optional
	OrphanedJobGracePeriod *metav1.Duration `json:"orphanedJobGracePeriod,omitempty"`

	// Image overrides the RunnerClass's manager image.
	// +optional
	Image ImageReference `json:"image,omitempty"`

	// Resources of the manager container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Autoscale has KEDA scale the managers with their running jobs,
	// between minReplicas and maxReplicas; replicas is then not used. The
	// RunnerClass needs spec.prometheus.address. See
	// docs/concepts/autoscaling.md.
	// +optional
	Autoscale *ManagerAutoscale `json:"autoscale,omitempty"`
}

// JobSpec shapes the pods that run CI jobs.
// +kubebuilder:validation:XValidation:rule="has(self.namespace) == has(oldSelf.namespace)",message="jobs.namespace is immutable: moving jobs to another namespace would strand the running ones; create a new RunnerSet instead"
type JobSpec struct {
	// Namespace is the namespace job pods run in. Leave it empty for the
	// default: a namespace of the RunnerSet's own, "<namespace>-<name>-j<n>"
	// (n is the length of the RunnerSet's namespace), which runnerfleet
	// creates, owns and deletes after the managers drained. A name of your
	// own must match one of the RunnerClass's policy.jobNamespaces, must not
	// be the RunnerSet's own namespace, and must not exist yet: runnerfleet
	// creates it and never takes over a namespace it did not create.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="jobs.namespace must be a namespace name: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters, for example ci-team-a"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="jobs.namespace is immutable: moving jobs to another namespace would strand the running ones; create a new RunnerSet instead"
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Image is the image of a job that names none; defaults to the RunnerClass's jobImage.
	// +optional
	Image ImageReference `json:"image,omitempty"`

	// Privileged runs job containers privileged (docker-in-docker). The
	// RunnerClass must allow it.
	// +optional
	Privileged bool `json:"privileged,omitempty"`

	// Resources of the build, helper and service containers of a job pod.
	// +optional
	Resources JobResources `json:"resources,omitempty"`

	// Identity is the cloud identity job pods assume. The RunnerClass must
	// allow it for this namespace.
	// +optional
	Identity *JobIdentity `json:"identity,omitempty"`

	// PodAnnotations are put on every job pod ([runners.kubernetes]
	// pod_annotations). Keys runnerfleet sets itself are refused.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('runnerfleet.dev/') && !k.startsWith('karpenter.sh/') && k != 'cluster-autoscaler.kubernetes.io/safe-to-evict')",message="jobs.podAnnotations: runnerfleet.dev/, karpenter.sh/ and cluster-autoscaler.kubernetes.io/safe-to-evict are runnerfleet's own (a running job's node is never consolidated); use another key"
	// +optional
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`

	// PodLabels are put on every job pod ([runners.kubernetes] pod_labels).
	// Keys runnerfleet sets itself are refused.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('runnerfleet.dev/') && !k.startsWith('karpenter.sh/') && k != 'app.kubernetes.io/component' && k != 'app.kubernetes.io/managed-by')",message="jobs.podLabels: runnerfleet.dev/ and karpenter.sh/ keys, app.kubernetes.io/component and app.kubernetes.io/managed-by are runnerfleet's own (they find a RunnerSet's job pods); use another key"
	// +optional
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// ImagePullSecrets name Secrets of type kubernetes.io/dockerconfigjson
	// in the jobs namespace (status.jobsNamespace) that job pods pull their
	// images with ([runners.kubernetes] image_pull_secrets). runnerfleet
	// does not create them.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message="an image pull secret is a Secret's name in the jobs namespace: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, for example registry-credentials"
	// +listType=set
	// +optional
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`

	// Environment variables of every job ([[runners]] environment); a
	// job's own variables of the same name win.
	// +kubebuilder:validation:MaxItems=128
	// +listType=map
	// +listMapKey=name
	// +optional
	Environment []EnvVar `json:"environment,omitempty"`

	// FeatureFlags turn gitlab-runner feature flags on or off for every job
	// ([runners.feature_flags]), for example FF_PRINT_POD_EVENTS: true. A
	// flag gitlab-runner does not have is refused.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^FF_[A-Z0-9_]+$'))",message="jobs.featureFlags: a feature flag is named FF_ and upper-case letters, digits and '_', for example FF_PRINT_POD_EVENTS"
	// +optional
	FeatureFlags map[string]bool `json:"featureFlags,omitempty"`

	// HelperImage is the gitlab-runner-helper image of job pods; the
	// RunnerClass must allow it (policy.allowHelperImage). Empty: the
	// class's defaults.helperImage, else the helper matching the manager's
	// gitlab-runner version.
	// +optional
	HelperImage ImageReference `json:"helperImage,omitempty"`

	// PollTimeout is how long a manager waits for a job pod to start
	// (pulling images, waiting for a node) before it fails the job
	// ([runners.kubernetes] poll_timeout). Default: gitlab-runner's, 3m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('2h')",message="jobs.pollTimeout must be between 10s and 2h; scale-from-zero capacity needs a few minutes, for example 10m"
	// +optional
	PollTimeout *metav1.Duration `json:"pollTimeout,omitempty"`

	// Services run beside every job ([[runners.kubernetes.services]]), as
	// if each job listed them under services:, for example docker:dind or
	// postgres:17.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Services []JobService `json:"services,omitempty"`

	// Volumes mounted into every job's containers ([runners.kubernetes.volumes]).
	// The RunnerClass says which kinds are allowed (policy.volumes).
	// +optional
	Volumes JobVolumes `json:"volumes,omitempty"`

	// ConfigOverride is a TOML fragment merged into this runner's rendered
	// [[runners]] table, for gitlab-runner settings runnerfleet has no
	// field for, for example:
	//
	//   [kubernetes]
	//   poll_interval = 5
	//   cleanup_grace_period_seconds = 30
	//
	// Tables merge key by key; other values replace. Keys gitlab-runner does
	// not know, values of the wrong type, keys runnerfleet owns (token,
	// url, executor, namespace, service account, privileged, placement,
	// volumes, pod_spec, …) and keys with a field of their own here are
	// refused, with the RunnerSet's ClassAccepted condition naming the key;
	// the managers keep running on their last good config. The RunnerClass
	// may forbid it (policy.allowConfigOverride).
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	ConfigOverride string `json:"configOverride,omitempty"`

	// RetryOnInterruption, when set, retries through GitLab's API a job
	// whose pod was taken away with its node (a spot reclaim) once GitLab
	// reports it failed with runner_system_failure, up to maxRetries times
	// per job. Off when unset. A job that failed on its own is never
	// retried.
	// +optional
	RetryOnInterruption *RetryOnInterruption `json:"retryOnInterruption,omitempty"`
}

// EnvVar is one environment variable of every job.
type EnvVar struct {
	// Name of the variable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +required
	Name string `json:"name"`

	// Value of the variable.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Value string `json:"value"`
}

// JobService is one service container of every job.
type JobService struct {
	// Name is the service's image, for example postgres:17 or docker:27-dind.
	// +required
	Name ImageReference `json:"name"`

	// Alias is the host name the job reaches the service at; default: from the image name.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Alias string `json:"alias,omitempty"`

	// Command replaces the image's CMD.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Command []string `json:"command,omitempty"`

	// Entrypoint replaces the image's ENTRYPOINT.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Entrypoint []string `json:"entrypoint,omitempty"`
}

// VolumeKind is a kind of volume of the kubernetes executor.
// +kubebuilder:validation:Enum=configMap;secret;emptyDir;pvc;hostPath
type VolumeKind string

// Volume kinds, named as JobVolumes' fields are (singular).
const (
	VolumeKindConfigMap VolumeKind = "configMap"
	VolumeKindSecret    VolumeKind = "secret"
	VolumeKindEmptyDir  VolumeKind = "emptyDir"
	VolumeKindPVC       VolumeKind = "pvc"
	VolumeKindHostPath  VolumeKind = "hostPath"
)

// JobVolumes are the volumes of every job pod, by kind, as the kubernetes
// executor's [runners.kubernetes.volumes] has them. ConfigMaps, Secrets and
// PersistentVolumeClaims are looked up in the jobs namespace
// (status.jobsNamespace); runnerfleet does not create them.
type JobVolumes struct {
	// ConfigMaps mount ConfigMaps of the jobs namespace.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	ConfigMaps []ObjectVolume `json:"configMaps,omitempty"`

	// Secrets mount Secrets of the jobs namespace.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	Secrets []ObjectVolume `json:"secrets,omitempty"`

	// EmptyDirs are scratch directories that live as long as the job pod.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	EmptyDirs []EmptyDirVolume `json:"emptyDirs,omitempty"`

	// PVCs mount PersistentVolumeClaims of the jobs namespace.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	PVCs []ObjectVolume `json:"pvcs,omitempty"`

	// HostPaths mount directories of the node. The RunnerClass must allow
	// the kind and the path (policy.volumes.hostPathPrefixes).
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	HostPaths []HostPathVolume `json:"hostPaths,omitempty"`
}

// VolumeMount is where a volume is mounted in a job's containers.
type VolumeMount struct {
	// MountPath is the absolute path the volume is mounted at.
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && !self.contains(':') && !self.split('/').exists(p, p == '..')",message="mountPath must be an absolute path without ':' or '..', for example /cache"
	// +required
	MountPath string `json:"mountPath"`

	// SubPath mounts only this path inside the volume.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(p, p == '..')",message="subPath must be a relative path without '..'"
	// +optional
	SubPath string `json:"subPath,omitempty"`

	// ReadOnly mounts the volume read-only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// ObjectVolume mounts a ConfigMap, Secret or PersistentVolumeClaim of the
// jobs namespace; the volume is named after it.
type ObjectVolume struct {
	// Name of the ConfigMap, Secret or PersistentVolumeClaim (and of the volume).
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="name must be the name of a ConfigMap, Secret or PersistentVolumeClaim of the jobs namespace that is also a volume name: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters, for example build-cache"
	// +required
	Name string `json:"name"`

	VolumeMount `json:",inline"`
}

// EmptyDirVolume is a scratch directory of a job pod.
type EmptyDirVolume struct {
	// Name of the volume.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// Medium is "" (the node's disk) or Memory (a tmpfs counted as the pod's memory).
	// +kubebuilder:validation:Enum="";Memory
	// +optional
	Medium string `json:"medium,omitempty"`

	// SizeLimit caps the directory, for example 10Gi.
	// +optional
	SizeLimit *resource.Quantity `json:"sizeLimit,omitempty"`

	VolumeMount `json:",inline"`
}

// HostPathVolume mounts a directory of the node.
type HostPathVolume struct {
	// Name of the volume.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// HostPath is the node's directory, an absolute path under one of the
	// RunnerClass's policy.volumes.hostPathPrefixes.
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && !self.contains(':') && !self.split('/').exists(p, p == '..' || p == '.')",message="hostPath must be an absolute path without ':', '.' or '..' segments, for example /var/cache/ci"
	// +required
	HostPath string `json:"hostPath"`

	VolumeMount `json:",inline"`
}

// JobResources are the resources of each container of a job pod.
type JobResources struct {
	// Build is the container that runs the job's script.
	// +optional
	Build ContainerResources `json:"build,omitempty"`
	// Helper is gitlab-runner's helper container (clone, artifacts, cache).
	// +optional
	Helper ContainerResources `json:"helper,omitempty"`
	// Service is each container of the job's services (databases, docker:dind).
	// +optional
	Service ContainerResources `json:"service,omitempty"`
}

// ContainerResources are the requests and limits of one container of a job pod.
// +kubebuilder:validation:XValidation:rule="!has(self.cpuRequest) || !has(self.cpuLimit) || quantity(string(self.cpuRequest)).compareTo(quantity(string(self.cpuLimit))) <= 0",message="cpuRequest must not exceed cpuLimit"
// +kubebuilder:validation:XValidation:rule="!has(self.memoryRequest) || !has(self.memoryLimit) || quantity(string(self.memoryRequest)).compareTo(quantity(string(self.memoryLimit))) <= 0",message="memoryRequest must not exceed memoryLimit"
type ContainerResources struct {
	// CPURequest is the CPU the container is scheduled with, for example 500m.
	// +optional
	CPURequest *resource.Quantity `json:"cpuRequest,omitempty"`
	// CPULimit caps the container's CPU, for example 2; at least cpuRequest.
	// +optional
	CPULimit *resource.Quantity `json:"cpuLimit,omitempty"`
	// MemoryRequest is the memory the container is scheduled with, for example 1Gi.
	// +optional
	MemoryRequest *resource.Quantity `json:"memoryRequest,omitempty"`
	// MemoryLimit caps the container's memory, for example 4Gi; at least
	// memoryRequest. A container above it is killed (OOMKilled).
	// +optional
	MemoryLimit *resource.Quantity `json:"memoryLimit,omitempty"`
}

// JobIdentity is the cloud identity of job pods: an IRSA role on EKS or a
// Workload Identity service account on GKE.
// +kubebuilder:validation:XValidation:rule="has(self.awsRoleARN) != has(self.gcpServiceAccount)",message="jobs.identity takes exactly one of awsRoleARN or gcpServiceAccount"
type JobIdentity struct {
	// AWSRoleARN is the IAM role job pods assume through IRSA.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$`
	// +optional
	AWSRoleARN string `json:"awsRoleARN,omitempty"`

	// GCPServiceAccount is the Google service account job pods act as through
	// Workload Identity.
	// +kubebuilder:validation:MaxLength=254
	// +kubebuilder:validation:XValidation:rule="self.endsWith('.iam.gserviceaccount.com') && self.contains('@')",message="jobs.identity.gcpServiceAccount must be a service account email such as ci@my-project.iam.gserviceaccount.com"
	// +optional
	GCPServiceAccount string `json:"gcpServiceAccount,omitempty"`
}

// Architecture is a CPU architecture of job nodes.
// +kubebuilder:validation:Enum=amd64;arm64
type Architecture string

// Architectures.
const (
	ArchitectureAMD64 Architecture = "amd64"
	ArchitectureARM64 Architecture = "arm64"
)

// CapacitySpec is what the nodes that run this runner's jobs may be.
type CapacitySpec struct {
	// CapacityTypes the runner's nodes may use; spot is tried first.
	// +kubebuilder:default={"spot"}
	// +kubebuilder:validation:MinItems=1
	// +listType=set
	// +optional
	CapacityTypes []CapacityType `json:"capacityTypes,omitempty"`

	// InstanceFamilies the runner's nodes may come from, for example c7i or
	// n2d. At most 10 characters, and not ek or e4a, which GKE's
	// ComputeClass refuses (no EC2 family is longer or named so).
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^[a-z][a-z0-9-]*$`
	// +kubebuilder:validation:items:MaxLength=10
	// +kubebuilder:validation:XValidation:rule="self.all(f, f != 'ek' && f != 'e4a')",message="capacity.instanceFamilies: GKE refuses the machine families ek and e4a in a ComputeClass"
	// +listType=set
	// +optional
	InstanceFamilies []string `json:"instanceFamilies,omitempty"`

	// InstanceTypes the runner's nodes may be, for example c7i.2xlarge.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9][a-z0-9.-]*$`
	// +kubebuilder:validation:items:MaxLength=100
	// +kubebuilder:validation:XValidation:rule="self.all(t, !t.startsWith('ek') && !t.startsWith('e4a'))",message="capacity.instanceTypes: GKE refuses machine types starting with ek or e4a in a ComputeClass"
	// +listType=set
	// +optional
	InstanceTypes []string `json:"instanceTypes,omitempty"`

	// Architectures of the runner's nodes.
	// +kubebuilder:default={"amd64"}
	// +kubebuilder:validation:MinItems=1
	// +listType=set
	// +optional
	Architectures []Architecture `json:"architectures,omitempty"`

	// Limits cap the cpu and memory the runner's jobs ask for at once:
	// each manager takes only the jobs that fit them (its [[runners]]
	// limit), so jobs beyond them wait in GitLab's queue and run when one
	// ends. The tag's own NodePool (on GKE a ResourceQuota on its job
	// pods' requests) is capped at them too, as a backstop.
	// +kubebuilder:validation:XValidation:rule="self.all(k, k == 'cpu' || k == 'memory')",message="capacity.limits takes only cpu and memory"
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`
}

// CacheType is where the distributed cache lives.
// +kubebuilder:validation:Enum=s3;gcs
type CacheType string

const (
	CacheTypeS3  CacheType = "s3"
	CacheTypeGCS CacheType = "gcs"
)

// CacheSpec is a distributed cache in a bucket. Credentials come from the
// job identity (IRSA or Workload Identity), never from static keys.
type CacheSpec struct {
	// Type of bucket.
	// +required
	Type CacheType `json:"type"`

	// Bucket name.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=222
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9][-a-z0-9._]*[a-z0-9]$')`,message="cache.bucket must be a bucket's name: lower-case letters, digits, '-', '_' and '.', starting and ending with a letter or digit, for example ci-runner-cache"
	// +required
	Bucket string `json:"bucket"`

	// Region of an S3 bucket.
	// +optional
	Region string `json:"region,omitempty"`

	// Path prefix inside the bucket; defaults to the RunnerSet's namespace.
	// +optional
	Path string `json:"path,omitempty"`

	// Shared lets every runner of the class share cache entries.
	// +optional
	Shared bool `json:"shared,omitempty"`
}

// RunnerSetStatus is the observed state of a RunnerSet.
type RunnerSetStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions roll up to Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// RunnerID is the runner's ID in GitLab, once known (spec.gitlab.runner).
	// +optional
	RunnerID int64 `json:"runnerID,omitempty"`

	// DesiredManagers is the number of manager pods asked for.
	// +optional
	DesiredManagers int32 `json:"desiredManagers,omitempty"`

	// ReadyManagers is the number of manager pods ready on the current config.
	// +optional
	ReadyManagers int32 `json:"readyManagers,omitempty"`

	// Managers is ReadyManagers/DesiredManagers, for display.
	// +optional
	Managers string `json:"managers,omitempty"`

	// Capacity names the cluster-scoped capacity objects of this runner
	// (NodePool, node class or ComputeClass).
	// +optional
	Capacity string `json:"capacity,omitempty"`

	// JobsNamespace is the namespace this runner's job pods run in
	// (kubectl get pods -n <jobsNamespace>).
	// +optional
	JobsNamespace string `json:"jobsNamespace,omitempty"`

	// ConfigHash identifies the config.toml (and token) the managers run.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`

	// OrphanedJobPodsSince is when the controller first saw job pods of this
	// RunnerSet, being deleted, with no manager pod left to delete them;
	// spec.managers.orphanedJobGracePeriod after it they are deleted. Empty
	// while a manager pod exists.
	// +optional
	OrphanedJobPodsSince *metav1.Time `json:"orphanedJobPodsSince,omitempty"`

	// JobRetries are the interrupted jobs of a RunnerSet that retries them
	// (spec.jobs.retryOnInterruption), newest last: at most 100, a
	// finished record kept for a day.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	JobRetries []JobRetry `json:"jobRetries,omitempty"`

	// SpotFallback is where the RunnerSet stands against its class's
	// policy.spotFallback: its recent interruptions, and until when its
	// tag asks for on-demand capacity.
	// +optional
	SpotFallback *SpotFallbackStatus `json:"spotFallback,omitempty"`
}

// RunnerSet is one team's GitLab runner: its tags, managers, job pods and capacity.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rset,categories=runnerfleet
// +kubebuilder:printcolumn:name="Tags",type=string,JSONPath=`.spec.tags`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.className`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Managers",type=string,JSONPath=`.status.managers`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name: a RunnerSet's name is at most 63 characters (it labels its pods and capacity); choose a shorter name"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.overflow) || self.spec.overflow.primary != self.metadata.name",message="spec.overflow.primary names this RunnerSet itself: name the RunnerSet whose jobs this one takes when they wait"
type RunnerSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RunnerSetSpec   `json:"spec,omitempty"`
	Status RunnerSetStatus `json:"status,omitempty"`
}

// RunnerSetList is a list of RunnerSets.
//
// +kubebuilder:object:root=true
type RunnerSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RunnerSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RunnerSet{}, &RunnerSetList{})
}
