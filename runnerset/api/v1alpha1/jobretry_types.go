package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// RetryOnInterruption has the controller retry, through GitLab's API
// (POST /projects/:id/jobs/:job_id/retry), a job whose pod a disruption
// took away while it ran (a spot reclaim, a node deleted under it), once
// GitLab reports it failed with runner_system_failure. A job that failed
// on its own is never retried.
// +kubebuilder:validation:XValidation:rule="has(self.apiTokenSecretRef)",message="jobs.retryOnInterruption needs apiTokenSecretRef: a Secret in the RunnerSet's namespace holding a GitLab access token with the api scope whose user has at least the Developer role on the projects whose jobs this runner runs (a project or group access token is best: a retried job runs as the token's user)"
type RetryOnInterruption struct {
	// MaxRetries is how many times one job (counted along the chain of its
	// retries) is retried after interruptions, 1 to 10.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 10",message="jobs.retryOnInterruption.maxRetries must be between 1 and 10, for example 1; remove retryOnInterruption to retry nothing"
	// +optional
	MaxRetries int32 `json:"maxRetries,omitempty"`

	// APITokenSecretRef names a Secret in the RunnerSet's namespace holding
	// a GitLab access token with the api scope whose user has at least the
	// Developer role on the projects whose jobs this runner runs: a project
	// or group access token (its bot user owns the retried jobs) or a
	// personal access token of a service user. The team that owns the
	// RunnerSet owns this token.
	// +optional
	APITokenSecretRef *SecretKeyRef `json:"apiTokenSecretRef,omitempty"`
}

// Job retry states, in status.jobRetries.
const (
	// JobRetryWaiting: the job's pod was interrupted; the controller waits
	// for GitLab to report the job failed.
	JobRetryWaiting = "Waiting"
	// JobRetryRetrying: the controller is asking GitLab to retry the job.
	JobRetryRetrying = "Retrying"
	// JobRetryRetried: GitLab retried the job as retriedAs.
	JobRetryRetried = "Retried"
	// JobRetryNotRetried: the job was not retried; message says why.
	JobRetryNotRetried = "NotRetried"
)

// JobRetry is the controller's record of one interrupted job of a
// RunnerSet that retries them: what GitLab reported and whether it was
// retried. It is written when the interruption is seen, before the retry
// and after it, so that a controller restart neither retries a job twice
// nor forgets one it waits for.
type JobRetry struct {
	// ProjectID is the GitLab project of the interrupted job.
	ProjectID int64 `json:"projectID"`
	// JobID is the interrupted job's ID in GitLab.
	JobID int64 `json:"jobID"`

	// Retries is how many times the job's chain was retried before this
	// job: 0 for a job nobody retried, 1 for the first retry's job, …
	Retries int32 `json:"retries"`

	// Pod is the job pod taken away.
	// +optional
	Pod string `json:"pod,omitempty"`
	// Node is the node the pod ran on.
	// +optional
	Node string `json:"node,omitempty"`

	// InterruptedAt is when the controller saw the pod taken away.
	InterruptedAt metav1.Time `json:"interruptedAt"`

	// State is Waiting, Retrying, Retried or NotRetried.
	// +kubebuilder:validation:Enum=Waiting;Retrying;Retried;NotRetried
	State string `json:"state"`

	// RetriedAs is the ID of the job GitLab's retry created.
	// +optional
	RetriedAs int64 `json:"retriedAs,omitempty"`

	// Message says why a job was not retried.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`

	// UpdatedAt is when the record last changed.
	UpdatedAt metav1.Time `json:"updatedAt"`
}

// Events of job retries on a RunnerSet.
const (
	// ReasonJobRetried is the Normal Event of an interrupted job GitLab
	// retried, naming the old and the new job.
	ReasonJobRetried = "JobRetried"
	// ReasonJobNotRetried is the Event of an interrupted job not retried,
	// saying why: Normal when the job ended on its own, Warning when the
	// limit, the token or GitLab kept it from being retried.
	ReasonJobNotRetried = "JobNotRetried"
)

// MaxRetriesOrDefault is spec.jobs.retryOnInterruption.maxRetries, 1 when
// unset (the API server's default).
func (r *RetryOnInterruption) MaxRetriesOrDefault() int32 {
	if r.MaxRetries == 0 {
		return 1
	}
	return r.MaxRetries
}
