package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CapacityProvider names what creates the nodes that run a tag's jobs.
// +kubebuilder:validation:Enum=karpenter;computeclass;kwok
type CapacityProvider string

const (
	// CapacityProviderKarpenter: a Karpenter NodePool and EC2NodeClass per tag (EKS).
	CapacityProviderKarpenter CapacityProvider = "karpenter"
	// CapacityProviderComputeClass: a GKE ComputeClass per tag.
	CapacityProviderComputeClass CapacityProvider = "computeclass"
	// CapacityProviderKWOK: Karpenter's kwok provider, for local clusters and tests.
	CapacityProviderKWOK CapacityProvider = "kwok"
)

// CapacityType is how a node is bought.
// +kubebuilder:validation:Enum=spot;on-demand
type CapacityType string

const (
	CapacityTypeSpot     CapacityType = "spot"
	CapacityTypeOnDemand CapacityType = "on-demand"
)

// RunnerClassSpec is the platform's description of one kind of runner capacity.
// +kubebuilder:validation:XValidation:rule="self.provider != 'karpenter' || has(self.karpenter)",message="provider karpenter needs spec.karpenter with the cluster name and node role"
// +kubebuilder:validation:XValidation:rule="self.provider != 'computeclass' || has(self.computeClass)",message="provider computeclass needs spec.computeClass with the machine families to use"
// +kubebuilder:validation:XValidation:rule="self.provider != 'computeclass' || !has(self.nodePools) || !has(self.nodePools.mode) || self.nodePools.mode == 'perTag'",message="spec.nodePools.mode shared and auto share a Karpenter NodePool among a class's tags (providers karpenter and kwok); a computeclass class keeps a ComputeClass per tag: set spec.nodePools.mode to perTag or leave spec.nodePools out"
type RunnerClassSpec struct {
	// Provider is the capacity provider behind this class: karpenter (EKS),
	// computeclass (GKE) or kwok (local clusters).
	// +required
	Provider CapacityProvider `json:"provider"`

	// Karpenter configures the per-tag EC2NodeClass when provider is karpenter.
	// +optional
	Karpenter *KarpenterSettings `json:"karpenter,omitempty"`

	// ComputeClass configures the per-tag GKE ComputeClass when provider is computeclass.
	// +optional
	ComputeClass *ComputeClassSettings `json:"computeClass,omitempty"`

	// NodePools says whether the class's tags have a Karpenter NodePool
	// each (perTag, the default), share one (shared), or share one once
	// more than nodePools.sharedAbove RunnerSets use the class (auto).
	// +optional
	NodePools *NodePoolSettings `json:"nodePools,omitempty"`

	// GitLabURL is the GitLab instance runners of this class register with.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="gitlabURL must be an http(s) URL such as https://gitlab.com"
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getHostname() != ''",message="gitlabURL must be a URL with a host and no spaces or newlines, such as https://gitlab.example.com"
	// +kubebuilder:default="https://gitlab.com"
	// +optional
	GitLabURL string `json:"gitlabURL,omitempty"`

	// Prometheus is the Prometheus that scrapes this class's managers with
	// the labels runnerfleet's scrape config and PodMonitor give them
	// (namespace, pod, runnerset). KEDA reads the managers' running jobs
	// and queue times from it; a RunnerSet of the class with
	// spec.managers.autoscale needs it.
	// +optional
	Prometheus *PrometheusEndpoint `json:"prometheus,omitempty"`

	// Defaults fill in what a RunnerSet leaves out.
	// +kubebuilder:default={}
	// +optional
	Defaults RunnerClassDefaults `json:"defaults,omitempty"`

	// Policy bounds what a RunnerSet of this class may ask for.
	// +optional
	Policy RunnerClassPolicy `json:"policy,omitempty"`
}

// KarpenterSettings describe the EC2 nodes of a cluster's runner capacity.
type KarpenterSettings struct {
	// ClusterName is the EKS cluster; subnets and security groups are found by
	// their karpenter.sh/discovery tag with this value.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[0-9A-Za-z][-_0-9A-Za-z]*$')`,message="karpenter.clusterName must be an EKS cluster's name: letters, digits, '-' and '_', starting with a letter or digit, for example ci-prod"
	// +required
	ClusterName string `json:"clusterName"`

	// NodeRole is the IAM role of the nodes (its name, not its ARN).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[-+=,.@_0-9A-Za-z]+$')`,message="karpenter.nodeRole must be an IAM role's name, not its ARN: letters, digits and +=,.@_-, for example KarpenterNodeRole-ci-prod"
	// +required
	NodeRole string `json:"nodeRole"`

	// AMIAlias selects the node image, for example bottlerocket@latest or al2023@v20261101.
	// +kubebuilder:default="bottlerocket@latest"
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+@[a-z0-9.]+$`
	// +optional
	AMIAlias string `json:"amiAlias,omitempty"`

	// Tags are put on every EC2 resource of the runner capacity.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
}

// NodePoolMode says how a class's tags get their Karpenter NodePools.
// +kubebuilder:validation:Enum=perTag;shared;auto
type NodePoolMode string

const (
	// NodePoolModePerTag: a NodePool per tag (RunnerSet).
	NodePoolModePerTag NodePoolMode = "perTag"
	// NodePoolModeShared: the class's tags share one NodePool; Karpenter
	// stamps each node with the tag of the job pod it was made for. A tag
	// that asks for what only a NodePool of its own gives is refused.
	NodePoolModeShared NodePoolMode = "shared"
	// NodePoolModeAuto: perTag up to nodePools.sharedAbove RunnerSets of
	// the class, shared beyond; a tag that asks for what only a NodePool
	// of its own gives keeps one.
	NodePoolModeAuto NodePoolMode = "auto"
)

// DefaultSharedAbove is nodePools.sharedAbove when unset: BENCHMARKS.md
// measured Karpenter's idle cost of a NodePool per tag, worth paying up to
// about 100–200 tags.
const DefaultSharedAbove = 100

// NodePoolSettings say whether a class's tags share a Karpenter NodePool.
// +kubebuilder:validation:XValidation:rule="!has(self.sharedAbove) || (has(self.mode) && self.mode == 'auto')",message="spec.nodePools.sharedAbove applies only to mode auto: set spec.nodePools.mode to auto, or remove sharedAbove"
type NodePoolSettings struct {
	// Mode is perTag (a NodePool per tag), shared (one NodePool for the
	// class's tags) or auto (perTag up to sharedAbove RunnerSets, shared
	// beyond). Moving a tag between modes never touches a node that runs a
	// job: its former NodePool goes once it has no node.
	// +kubebuilder:default=perTag
	// +optional
	Mode NodePoolMode `json:"mode,omitempty"`

	// SharedAbove is, in mode auto, the number of RunnerSets of the class
	// above which its tags share a NodePool; default 100.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	SharedAbove *int32 `json:"sharedAbove,omitempty"`
}

// Shares reports whether the tags of a class with these settings share a
// NodePool when runnerSets RunnerSets use the class. A nil s is perTag.
func (s *NodePoolSettings) Shares(runnerSets int) bool {
	if s == nil {
		return false
	}
	switch s.Mode {
	case NodePoolModeShared:
		return true
	case NodePoolModeAuto:
		above := int32(DefaultSharedAbove)
		if s.SharedAbove != nil {
			above = *s.SharedAbove
		}
		return runnerSets > int(above)
	}
	return false
}

// ModeOrDefault is the mode, perTag when s is nil or its mode unset.
func (s *NodePoolSettings) ModeOrDefault() NodePoolMode {
	if s == nil || s.Mode == "" {
		return NodePoolModePerTag
	}
	return s.Mode
}

// ComputeClassSettings describe the GKE nodes of a cluster's runner capacity.
type ComputeClassSettings struct {
	// MachineFamilies tried in order when a RunnerSet names none, for example n2d.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^[a-z][a-z0-9]*$`
	// +kubebuilder:validation:items:MaxLength=10
	// +kubebuilder:validation:XValidation:rule="self.all(f, f != 'ek' && f != 'e4a')",message="computeClass.machineFamilies: GKE refuses the machine families ek and e4a in a ComputeClass"
	// +kubebuilder:default={"n2d"}
	// +optional
	MachineFamilies []string `json:"machineFamilies,omitempty"`
}

// RunnerClassDefaults fill in what a RunnerSet leaves out.
type RunnerClassDefaults struct {
	// ManagerImage is the gitlab-runner image the managers run.
	// +kubebuilder:default="registry.gitlab.com/gitlab-org/gitlab-runner:alpine-v19.4.0"
	// +optional
	ManagerImage ImageReference `json:"managerImage,omitempty"`

	// HelperImage is the gitlab-runner-helper image of job pods; empty lets
	// gitlab-runner choose the helper that matches its own version.
	// +optional
	HelperImage ImageReference `json:"helperImage,omitempty"`

	// JobImage is the image of a job that names none.
	// +kubebuilder:default="alpine:3.22"
	// +optional
	JobImage ImageReference `json:"jobImage,omitempty"`

	// Cache is the shared cache of runners of this class.
	// +optional
	Cache *CacheSpec `json:"cache,omitempty"`
}

// RunnerClassPolicy bounds what a RunnerSet may ask for.
// +kubebuilder:validation:XValidation:rule="!has(self.maxConcurrency) || self.maxConcurrency >= 1",message="policy.maxConcurrency must be at least 1; leave it out for no limit"
// +kubebuilder:validation:XValidation:rule="!has(self.spotFallback) || (has(self.allowedCapacityTypes) && self.allowedCapacityTypes.exists(t, t == 'on-demand'))",message="policy.spotFallback moves tags to on-demand capacity: add on-demand to policy.allowedCapacityTypes, or remove spotFallback"
type RunnerClassPolicy struct {
	// SpotFallback moves a tag to on-demand capacity for onDemandFor once
	// interruptions job pods of its RunnerSet were taken away within
	// window. Off when unset.
	// +optional
	SpotFallback *SpotFallback `json:"spotFallback,omitempty"`

	// MaxConcurrency caps managers.replicas × managers.concurrent of one RunnerSet.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxConcurrency *int32 `json:"maxConcurrency,omitempty"`

	// AllowedCapacityTypes are the capacity types a RunnerSet may ask for.
	// +kubebuilder:default={"spot"}
	// +kubebuilder:validation:MinItems=1
	// +listType=set
	// +optional
	AllowedCapacityTypes []CapacityType `json:"allowedCapacityTypes,omitempty"`

	// AllowPrivileged lets RunnerSets run privileged job containers.
	// +optional
	AllowPrivileged bool `json:"allowPrivileged,omitempty"`

	// Identity says which cloud identities job pods in a namespace may use.
	// +optional
	Identity IdentityPolicy `json:"identity,omitempty"`

	// JobNamespaces are the names a RunnerSet may give its jobs namespace
	// (spec.jobs.namespace), as patterns in which {namespace} stands for the
	// RunnerSet's namespace and ? for one lower-case letter or digit, for
	// example "ci-{namespace}" or "{namespace}-ci-??". Without a pattern a
	// RunnerSet's jobs run in the namespace derived from it, which is what
	// most classes want.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[-a-z0-9?]*[{]namespace[}][-a-z0-9?]*$')",message="a jobs namespace pattern holds {namespace} once and otherwise only lower-case letters, digits, '-' and '?' (no '*', which could reach another team's names), for example ci-{namespace}"
	// +listType=set
	// +optional
	JobNamespaces []string `json:"jobNamespaces,omitempty"`

	// Volumes says which volumes job pods may mount (spec.jobs.volumes).
	// +optional
	Volumes VolumePolicy `json:"volumes,omitempty"`

	// AllowHelperImage lets a RunnerSet choose its own helper image
	// (spec.jobs.helperImage); without it job pods use the class's
	// defaults.helperImage.
	// +optional
	AllowHelperImage bool `json:"allowHelperImage,omitempty"`

	// AllowConfigOverride lets RunnerSets merge a TOML fragment into their
	// [[runners]] table (spec.jobs.configOverride); keys runnerfleet owns
	// are refused either way. Default true; false refuses any override.
	// +optional
	AllowConfigOverride *bool `json:"allowConfigOverride,omitempty"`
}

// VolumePolicy bounds the volumes of job pods.
// +kubebuilder:validation:XValidation:rule="!has(self.hostPathPrefixes) || size(self.hostPathPrefixes) == 0 || (has(self.allowedKinds) && 'hostPath' in self.allowedKinds)",message="policy.volumes.hostPathPrefixes needs hostPath in policy.volumes.allowedKinds"
type VolumePolicy struct {
	// AllowedKinds are the volume kinds a RunnerSet may mount; default
	// configMap, secret, emptyDir and pvc. hostPath also needs
	// hostPathPrefixes.
	// +kubebuilder:validation:MaxItems=5
	// +listType=set
	// +optional
	AllowedKinds []VolumeKind `json:"allowedKinds,omitempty"`

	// HostPathPrefixes are the node directories under which hostPath
	// volumes may mount, for example /var/cache/ci/; a path is allowed when
	// it is a prefix or lies below one ("/var/cache/ci" allows
	// /var/cache/ci/go, not /var/cache/cigar).
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=2
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:XValidation:rule="self.startsWith('/') && self != '/' && !self.contains(':') && !self.split('/').exists(p, p == '..' || p == '.')",message="a hostPath prefix is an absolute directory other than /, without ':', '.' or '..' segments, for example /var/cache/ci"
	// +listType=set
	// +optional
	HostPathPrefixes []string `json:"hostPathPrefixes,omitempty"`
}

// DefaultVolumeKinds are the volume kinds a class allows when its policy
// names none: every kind but hostPath.
var DefaultVolumeKinds = []VolumeKind{VolumeKindConfigMap, VolumeKindSecret, VolumeKindEmptyDir, VolumeKindPVC}

// AllowedKindsOrDefault is policy.volumes.allowedKinds, DefaultVolumeKinds when unset.
func (p VolumePolicy) AllowedKindsOrDefault() []VolumeKind {
	if len(p.AllowedKinds) == 0 {
		return DefaultVolumeKinds
	}
	return p.AllowedKinds
}

// AllowConfigOverrideOrDefault is policy.allowConfigOverride, true when unset.
func (p RunnerClassPolicy) AllowConfigOverrideOrDefault() bool {
	return p.AllowConfigOverride == nil || *p.AllowConfigOverride
}

// IdentityPolicy lists the cloud identities job pods may assume, as patterns
// in which {namespace} stands for the RunnerSet's namespace, * for any run
// of characters other than ':', '/' and '@', and ? for one lower-case letter
// or digit. A pattern must pin the namespace down (see policy.ValidatePattern):
// "ci-{namespace}-*" would let namespace x use the roles of namespace x-b.
type IdentityPolicy struct {
	// AWSRoleARNPatterns allow IRSA roles, for example
	// "arn:aws:iam::123456789012:role/ci-{namespace}.*" or
	// "arn:aws:iam::123456789012:role/ci/{namespace}/*".
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:XValidation:rule="self.contains('{namespace}')",message="every identity pattern must contain {namespace}, so that a team can only use its own roles"
	// +kubebuilder:validation:items:XValidation:rule="self.indexOf('{namespace}') == self.lastIndexOf('{namespace}')",message="an identity pattern contains {namespace} once"
	// +kubebuilder:validation:items:XValidation:rule="!self.contains('{namespace}') || self.matches('^(.*[:/@])?[^*:/@]*[{]namespace[}][-a-z0-9?]*([^-a-z0-9?*{].*)?$') || self.matches('^(.*[^-a-z0-9?*}])?[-a-z0-9?]*[{]namespace[}][^*:/@]*([:/@].*)?$')",message="the pattern cannot tell namespace x from x-b: a '*' may run into or out of the namespace; end the namespace with a character a namespace cannot hold (ci-{namespace}.*, role/ci/{namespace}/*), or use '?' (one letter or digit) for a fixed-length suffix ({namespace}-??????@...)"
	// +kubebuilder:validation:items:XValidation:rule="self.startsWith('arn:')",message="AWS role patterns start with arn:, for example arn:aws:iam::123456789012:role/ci-{namespace}.*"
	// +listType=set
	// +optional
	AWSRoleARNPatterns []string `json:"awsRoleARNPatterns,omitempty"`

	// GCPServiceAccountPatterns allow Workload Identity service accounts, for
	// example "ci-{namespace}@my-project.iam.gserviceaccount.com".
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:XValidation:rule="self.contains('{namespace}')",message="every identity pattern must contain {namespace}, so that a team can only use its own service accounts"
	// +kubebuilder:validation:items:XValidation:rule="self.indexOf('{namespace}') == self.lastIndexOf('{namespace}')",message="an identity pattern contains {namespace} once"
	// +kubebuilder:validation:items:XValidation:rule="!self.contains('{namespace}') || self.matches('^(.*[:/@])?[^*:/@]*[{]namespace[}][-a-z0-9?]*([^-a-z0-9?*{].*)?$') || self.matches('^(.*[^-a-z0-9?*}])?[-a-z0-9?]*[{]namespace[}][^*:/@]*([:/@].*)?$')",message="the pattern cannot tell namespace x from x-b: a '*' may run into or out of the namespace; end the namespace with a character a namespace cannot hold (ci-{namespace}.*, role/ci/{namespace}/*), or use '?' (one letter or digit) for a fixed-length suffix ({namespace}-??????@...)"
	// +kubebuilder:validation:items:XValidation:rule="self.endsWith('.iam.gserviceaccount.com')",message="GCP service account patterns end in .iam.gserviceaccount.com"
	// +listType=set
	// +optional
	GCPServiceAccountPatterns []string `json:"gcpServiceAccountPatterns,omitempty"`
}

// RunnerClassStatus is the observed state of a RunnerClass.
type RunnerClassStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions of the class: Accepted says whether RunnerSets can use it.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// RunnerSets is the number of RunnerSets of this class.
	// +optional
	RunnerSets int32 `json:"runnerSets"`

	// ReadyRunnerSets is the number of RunnerSets of this class that are Ready.
	// +optional
	ReadyRunnerSets int32 `json:"readyRunnerSets"`
}

// Condition types and reasons of a RunnerClass.
const (
	// ClassConditionAccepted: the class's settings are usable; RunnerSets
	// of a class that is not accepted stop at ClassAccepted.
	ClassConditionAccepted = "Accepted"
	// ReasonAccepted: every setting of the class is usable.
	ReasonAccepted = "Accepted"
	// ReasonInvalidIdentityPattern: an identity pattern cannot tell namespaces apart.
	ReasonInvalidIdentityPattern = "InvalidIdentityPattern"
	// ReasonInUse: the class is being deleted while RunnerSets still use
	// it; it stays until they are gone.
	ReasonInUse = "InUse"
)

// ClassFinalizer keeps a RunnerClass that RunnerSets still use: its node
// class, shared by their NodePools, goes with it, and Karpenter drains and
// terminates every node of a node class that is deleted.
const ClassFinalizer = "runnerfleet.dev/in-use"

// SetCondition sets one condition of the class at its current generation.
func (c *RunnerClass) SetCondition(typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: c.Generation,
	})
}

// RunnerClass is the platform's kind of runner capacity, like a StorageClass:
// a capacity provider, defaults and the policy RunnerSets of this class obey.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=rclass,categories=runnerfleet
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="RunnerSets",type=integer,JSONPath=`.status.runnerSets`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyRunnerSets`
// +kubebuilder:printcolumn:name="GitLab",type=string,JSONPath=`.spec.gitlabURL`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RunnerClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RunnerClassSpec   `json:"spec,omitempty"`
	Status RunnerClassStatus `json:"status,omitempty"`
}

// RunnerClassList is a list of RunnerClasses.
//
// +kubebuilder:object:root=true
type RunnerClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RunnerClass `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RunnerClass{}, &RunnerClassList{})
}
