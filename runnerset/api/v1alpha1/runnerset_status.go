package v1alpha1

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of a RunnerSet. Each is owned by one sub-reconciler; Ready
// is True only when all of them are.
const (
	ConditionReady = "Ready"
	// ConditionClassAccepted: the RunnerClass exists, its policy allows the
	// spec, and the job settings are ones gitlab-runner understands: what
	// the first step judges before anything of a spec is written.
	ConditionClassAccepted = "ClassAccepted"
	// ConditionJobsNamespaceReady: the namespace the jobs run in exists and
	// is this RunnerSet's.
	ConditionJobsNamespaceReady = "JobsNamespaceReady"
	// ConditionRunnerRegistered: the runner exists in GitLab and its
	// authentication token is present and well formed.
	ConditionRunnerRegistered = "RunnerRegistered"
	// ConditionCapacityReady: the tag's own NodePool, node class or ComputeClass exists.
	ConditionCapacityReady = "CapacityReady"
	// ConditionIdentityReady: the job and manager ServiceAccounts and RBAC exist.
	ConditionIdentityReady = "IdentityReady"
	// ConditionConfigReady: config.toml is rendered into its ConfigMap.
	ConditionConfigReady = "ConfigReady"
	// ConditionManagersAvailable: every manager pod runs the current config.
	ConditionManagersAvailable = "ManagersAvailable"
)

// Conditions of GitLab's own view of the runner, read every few minutes
// (runnerset/controller's gitlabview.go). They do not roll up to Ready: a
// RunnerSet is Ready when its own objects are, and these say what GitLab
// sees of it.
const (
	// ConditionRunnerOnline: GitLab reports a manager of the runner online
	// (one contacted GitLab within its online window, 2 hours); the
	// controller's own token checks do not count.
	ConditionRunnerOnline = "RunnerOnline"
	// ConditionTagsMatch: the runner's tags in GitLab are spec.tags. Set
	// for a runner whose token the team brings (spec.gitlab.tokenSecretRef),
	// whose tags runnerfleet does not write.
	ConditionTagsMatch = "TagsMatch"
)

// ConditionAutoscaling: the managers' ScaledObject (spec.managers.autoscale)
// is written and KEDA reports it ready; for an overflow, its primary
// exists with the same tags. Set only on an autoscaled RunnerSet. It is
// not a step of its own: the managers' step writes it after their
// Deployment. When False it rolls up to Ready as a dependent condition
// does.
const ConditionAutoscaling = "Autoscaling"

// Reasons of ConditionAutoscaling.
const (
	ReasonScaledObjectReady        = "ScaledObjectReady"
	ReasonScaledObjectNotReady     = "ScaledObjectNotReady"
	ReasonKEDANotInstalled         = "KEDANotInstalled"
	ReasonPrometheusAddressMissing = "PrometheusAddressMissing"
	ReasonPrimaryNotFound          = "PrimaryNotFound"
	ReasonPrimaryTagsDiffer        = "PrimaryTagsDiffer"
)

// DependentConditions are the conditions that roll up to Ready, in the order
// they are reconciled.
var DependentConditions = []string{
	ConditionClassAccepted,
	ConditionJobsNamespaceReady,
	ConditionRunnerRegistered,
	ConditionCapacityReady,
	ConditionIdentityReady,
	ConditionConfigReady,
	ConditionManagersAvailable,
}

// Reasons, CamelCase as Kubernetes conditions want them.
const (
	ReasonReconciled            = "Reconciled"
	ReasonRunnerClassNotFound   = "RunnerClassNotFound"
	ReasonCapacityTypeForbidden = "CapacityTypeForbidden"
	ReasonPrivilegedForbidden   = "PrivilegedForbidden"
	ReasonIdentityForbidden     = "IdentityForbidden"
	// ReasonJobsNamespaceForbidden: spec.jobs.namespace is a name the
	// RunnerClass does not allow.
	ReasonJobsNamespaceForbidden = "JobsNamespaceForbidden"
	// ReasonJobsNamespaceTaken: the jobs namespace exists and is not this
	// RunnerSet's (another team's, or one runnerfleet did not create).
	ReasonJobsNamespaceTaken  = "JobsNamespaceTaken"
	ReasonConcurrencyTooHigh  = "ConcurrencyAboveClassLimit"
	ReasonTokenSecretNotFound = "TokenSecretNotFound"
	ReasonTokenKeyMissing     = "TokenKeyMissing"
	ReasonTokenMalformed      = "TokenMalformed"
	// ReasonTokenExpired: the stored runner token's expiry (the Secret's
	// runnerfleet.dev/token-expires-at) has passed; GitLab refuses it.
	ReasonTokenExpired       = "TokenExpired"
	ReasonRegistrationToken  = "RegistrationTokenRefused"
	ReasonAPITokenMissing    = "APITokenMissing"
	ReasonGitLabUnauthorized = "GitLabUnauthorized"
	ReasonGitLabForbidden    = "GitLabForbidden"
	ReasonGitLabNotFound     = "GitLabNotFound"
	ReasonGitLabRejected     = "GitLabRejected"
	ReasonGitLabUnavailable  = "GitLabUnavailable"
	ReasonRenderFailed       = "RenderFailed"
	ReasonCapacityRejected   = "CapacityRejected"
	ReasonLimitsBelowOneJob  = "LimitsBelowOneJob"
	// ReasonLimitsBelowManagers: spec.capacity.limits fit fewer jobs than
	// there are manager replicas, each of which runs at least one.
	ReasonLimitsBelowManagers = "LimitsBelowManagers"
	ReasonRollingOut          = "RollingOut"
	ReasonScaledToZero        = "ScaledToZero"
	ReasonManagersAvailable   = "ManagersAvailable"
	ReasonNotReconciled       = "NotReconciled"
	ReasonBlocked             = "Blocked"
	ReasonDeleting            = "Deleting"
	// ReasonJobTimeoutTooLong: the job timeout is longer than the
	// platform keeps a job node for a running job.
	ReasonJobTimeoutTooLong = "JobTimeoutTooLong"
	// ReasonNeedsOwnNodePool: the tag asks for what only a NodePool of its
	// own gives (a longer drain) but its class's tags share one.
	ReasonNeedsOwnNodePool = "NeedsOwnNodePool"
	// ReasonMovingNodePool: the tag's capacity moved to another NodePool;
	// its former one stays until its nodes are gone.
	ReasonMovingNodePool = "MovingNodePool"
	// ReasonOrphanedJobPodDeleted is the Warning Event of a job pod the
	// controller deleted because no manager pod was left to delete it for
	// spec.managers.orphanedJobGracePeriod.
	ReasonOrphanedJobPodDeleted = "OrphanedJobPodDeleted"
	// ReasonJobInterrupted is the Warning Event of a job pod a disruption
	// took away while its job ran (its node deleted, an eviction, a
	// preemption, a node shutdown), naming the pod and its node.
	ReasonJobInterrupted = "JobInterrupted"
	// ReasonObjectInTheWay: an object the RunnerSet needs exists and was
	// not created by runnerfleet for it; the controller never takes it over.
	ReasonObjectInTheWay = "ObjectInTheWay"
	// ReasonWriteFailed: the API server refused a write; retried with backoff.
	ReasonWriteFailed = "WriteFailed"
	// ReasonInvalidImage: an image reference the container runtime would refuse.
	ReasonInvalidImage = "InvalidImage"

	// GitLab's view of the runner (RunnerOnline, TagsMatch).
	ReasonOnline         = "Online"
	ReasonOffline        = "Offline"
	ReasonStale          = "Stale"
	ReasonNeverContacted = "NeverContacted"
	// ReasonTokenRefused: GitLab refuses the runner token the team brought
	// (POST /runners/verify answers 403).
	ReasonTokenRefused = "TokenRefused"
	ReasonTagsMatch    = "TagsMatch"
	ReasonTagsDiffer   = "TagsDiffer"
	// ReasonStaleManagersDeleted is the Normal Event naming the manager
	// records of gone manager pods the controller deleted from GitLab.
	ReasonStaleManagersDeleted = "StaleManagersDeleted"

	// Job settings (spec.jobs) the class forbids or gitlab-runner would
	// not understand; all are judged before anything of the spec is
	// written, so the managers keep their last good config.
	ReasonVolumeKindForbidden      = "VolumeKindForbidden"
	ReasonHostPathForbidden        = "HostPathForbidden"
	ReasonHelperImageForbidden     = "HelperImageForbidden"
	ReasonConfigOverrideForbidden  = "ConfigOverrideForbidden"
	ReasonUnknownFeatureFlag       = "UnknownFeatureFlag"
	ReasonConfigOverrideInvalid    = "ConfigOverrideInvalid"
	ReasonConfigOverrideOwnedKey   = "ConfigOverrideOwnedKey"
	ReasonConfigOverrideUnknownKey = "ConfigOverrideUnknownKey"
	ReasonConfigOverrideWrongType  = "ConfigOverrideWrongType"
	ReasonJobSettingInvalid        = "JobSettingInvalid"
)

// SetCondition sets one condition at the current generation.
func (rs *RunnerSet) SetCondition(typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&rs.Status.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: rs.Generation,
	})
}

// RollUpReady sets Ready from the dependent conditions: True when all are
// True, otherwise False with the reason and message of the first that is not.
func (rs *RunnerSet) RollUpReady() {
	for _, t := range DependentConditions {
		c := meta.FindStatusCondition(rs.Status.Conditions, t)
		if c == nil {
			rs.SetCondition(ConditionReady, metav1.ConditionFalse, ReasonNotReconciled, fmt.Sprintf("%s has not been reconciled yet", t))
			return
		}
		if c.Status != metav1.ConditionTrue {
			rs.SetCondition(ConditionReady, metav1.ConditionFalse, c.Reason, fmt.Sprintf("%s: %s", t, c.Message))
			return
		}
	}
	if c := meta.FindStatusCondition(rs.Status.Conditions, ConditionAutoscaling); c != nil && c.Status == metav1.ConditionFalse {
		rs.SetCondition(ConditionReady, metav1.ConditionFalse, c.Reason, fmt.Sprintf("%s: %s", ConditionAutoscaling, c.Message))
		return
	}
	rs.SetCondition(ConditionReady, metav1.ConditionTrue, ReasonReconciled, "the runner's managers are available and polling GitLab")
}

// IsReady reports whether Ready is True for the current generation.
func (rs *RunnerSet) IsReady() bool {
	c := meta.FindStatusCondition(rs.Status.Conditions, ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == rs.Generation
}

// Defaults applied by the controller when the API server's defaulting did not
// run (objects built in Go, for example by the Pulumi program).
const (
	DefaultConcurrent      = 10
	DefaultCheckInterval   = 3 * time.Second
	DefaultShutdownTimeout = 3 * time.Hour
	// MaxShutdownTimeout is the longest spec.managers.shutdownTimeout the
	// CRD admits (its CEL rule): the longest a RunnerSet's manager may
	// drain, which the GKE managers' pool's upgrades outlast.
	MaxShutdownTimeout                  = 48 * time.Hour
	DefaultTokenKey                     = "token"
	DefaultManagerImage  ImageReference = "registry.gitlab.com/gitlab-org/gitlab-runner:alpine-v19.4.0"
	DefaultJobImage      ImageReference = "alpine:3.22"
	DefaultGitLabURL                    = "https://gitlab.com"
	DefaultAMIAlias                     = "bottlerocket@latest"
	DefaultMachineFamily                = "n2d"
)

// DefaultOrphanedJobGracePeriod is spec.managers.orphanedJobGracePeriod
// when unset. The CRD gives the field no default: this is its one place.
const DefaultOrphanedJobGracePeriod = 5 * time.Minute

// ReplicasOrDefault is spec.managers.replicas, 1 when unset.
func (m ManagerSpec) ReplicasOrDefault() int32 {
	if m.Replicas == nil {
		return 1
	}
	return *m.Replicas
}

// ConcurrentOrDefault is spec.managers.concurrent, DefaultConcurrent when unset.
func (m ManagerSpec) ConcurrentOrDefault() int32 {
	if m.Concurrent == 0 {
		return DefaultConcurrent
	}
	return m.Concurrent
}

// CheckIntervalOrDefault is spec.managers.checkInterval, DefaultCheckInterval when unset.
func (m ManagerSpec) CheckIntervalOrDefault() time.Duration {
	if m.CheckInterval == nil || m.CheckInterval.Duration <= 0 {
		return DefaultCheckInterval
	}
	return m.CheckInterval.Duration
}

// ShutdownTimeoutOrDefault is spec.managers.shutdownTimeout, DefaultShutdownTimeout when unset.
func (m ManagerSpec) ShutdownTimeoutOrDefault() time.Duration {
	if m.ShutdownTimeout == nil || m.ShutdownTimeout.Duration <= 0 {
		return DefaultShutdownTimeout
	}
	return m.ShutdownTimeout.Duration
}

// OrphanedJobGracePeriodOrDefault is spec.managers.orphanedJobGracePeriod,
// DefaultOrphanedJobGracePeriod when unset. 0s is kept: delete at once.
func (m ManagerSpec) OrphanedJobGracePeriodOrDefault() time.Duration {
	if m.OrphanedJobGracePeriod == nil || m.OrphanedJobGracePeriod.Duration < 0 {
		return DefaultOrphanedJobGracePeriod
	}
	return m.OrphanedJobGracePeriod.Duration
}

// KeyOrDefault is the Secret key, DefaultTokenKey when unset.
func (r SecretKeyRef) KeyOrDefault() string {
	if r.Key == "" {
		return DefaultTokenKey
	}
	return r.Key
}

// CapacityTypesOrDefault is spec.capacity.capacityTypes, spot when unset.
func (c CapacitySpec) CapacityTypesOrDefault() []CapacityType {
	if len(c.CapacityTypes) == 0 {
		return []CapacityType{CapacityTypeSpot}
	}
	return c.CapacityTypes
}

// AllowedCapacityTypesOrDefault is the policy's allowed capacity types, spot when unset.
func (p RunnerClassPolicy) AllowedCapacityTypesOrDefault() []CapacityType {
	if len(p.AllowedCapacityTypes) == 0 {
		return []CapacityType{CapacityTypeSpot}
	}
	return p.AllowedCapacityTypes
}
