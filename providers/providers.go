// Package providers is what runnerfleet's VM fleet operations (fleet rotate,
// fleet gc, the drain agent) need of a cloud, behind narrow interfaces. Each
// cloud has a subpackage (gcp: cloud.google.com/go/compute, aws:
// aws-sdk-go-v2) and, beside it, a loopback test server that speaks the
// cloud's wire protocol, so the real SDK clients are what the tests drive.
package providers

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is wrapped by errors about instances or images that do not exist.
var ErrNotFound = errors.New("not found")

// State is an instance's lifecycle state, the same words for every cloud.
type State string

const (
	StateProvisioning State = "provisioning" // GCE PROVISIONING/STAGING, EC2 pending
	StateRunning      State = "running"
	StateStopping     State = "stopping" // GCE STOPPING/SUSPENDING, EC2 stopping/shutting-down
	StateStopped      State = "stopped"  // GCE TERMINATED/SUSPENDED, EC2 stopped
	StateTerminated   State = "terminated"
)

// Instance is a VM as fleet operations see it.
type Instance struct {
	// Name is unique within the project (GCE) or account and region (EC2,
	// its Name tag).
	Name string
	// ID is the cloud's own ID (GCE's numeric id, EC2's i-…).
	ID   string
	Zone string
	// Image the instance booted from (GCE source image of its boot disk, EC2 AMI ID).
	Image string
	// Labels are GCE labels or EC2 tags.
	Labels    map[string]string
	State     State
	CreatedAt time.Time
	// Address is the instance's internal (private) IP address.
	Address string
	// ManagedBy names the group that owns the instance and re-creates it
	// when it is deleted: a GCE managed instance group (metadata
	// created-by) or an EC2 Auto Scaling group (tag
	// aws:autoscaling:groupName); "" for a standalone instance.
	ManagedBy string
	// Notes are what fleet operations wrote on the instance with
	// Compute.Note: GCE instance metadata and EC2 tags under the
	// runnerfleet prefix (NoteKey), keyed without it.
	Notes map[string]string
}

// InstanceSpec describes an instance to create.
type InstanceSpec struct {
	Name        string
	Zone        string
	MachineType string // GCE machine type (n2d-standard-4) or EC2 instance type (c7i.xlarge)
	Image       string // GCE image self link or name, EC2 AMI ID
	Labels      map[string]string
	// Metadata is GCE instance metadata (startup-script, …); on EC2 the
	// "user-data" key becomes the instance's user data.
	Metadata map[string]string
	Spot     bool
	// Network and Subnetwork place the VM's one network interface (GCE
	// resource paths, projects/<p>/global/networks/<n> and
	// projects/<p>/regions/<r>/subnetworks/<s>); "" is the project's
	// default network and its subnetwork of the zone's region. EC2 takes
	// neither.
	Network, Subnetwork string
	// ServiceAccount is the email of the Google service account the VM
	// runs as, with the cloud-platform scope (its roles decide what it
	// may do); "" runs it as none. EC2 ignores it.
	ServiceAccount string
}

// Image is a machine image.
type Image struct {
	ID        string
	Name      string
	Family    string // GCE image family; EC2: the "family" tag
	Labels    map[string]string
	CreatedAt time.Time
}

// DrainPhase is where a manager VM's drain agent is.
type DrainPhase string

const (
	DrainNone     DrainPhase = ""         // no drain requested, or the agent has not seen it yet
	DrainDraining DrainPhase = "draining" // the runner got its graceful stop and finishes its jobs
	DrainDone     DrainPhase = "done"     // the runner exited: the VM may go
)

// JobReport is what a job reporter (fleet-agent --report-jobs) on an
// autoscaled VM last said: how many GitLab jobs have a running container
// on the VM, and when it looked.
type JobReport struct {
	// Found is false when the VM carries no report at all.
	Found     bool
	Jobs      int
	UpdatedAt time.Time
}

// DrainState is what the drain agent reports.
type DrainState struct {
	Phase     DrainPhase
	JobsLeft  int
	UpdatedAt time.Time
}

// Compute is what fleet operations need of a cloud: instances, the drain
// handshake with their agents, and images.
type Compute interface {
	// ListInstances lists the instances, in every zone the provider covers,
	// that carry all of labels.
	ListInstances(ctx context.Context, labels map[string]string) ([]Instance, error)
	// CreateInstance creates an instance and waits until the cloud reports
	// the operation done.
	CreateInstance(ctx context.Context, spec InstanceSpec) (Instance, error)
	// DeleteInstance deletes an instance and waits for it; one that does not
	// exist counts as deleted.
	DeleteInstance(ctx context.Context, zone, name string) error
	// RequestDrain asks the instance's drain agent to stop its runner
	// gracefully: GCE instance metadata runnerfleet-drain=true, EC2 tag
	// runnerfleet:drain=true.
	RequestDrain(ctx context.Context, zone, name string) error
	// DrainState reads what the instance's drain agent reported: GCE guest
	// attributes under runnerfleet/, EC2 tags runnerfleet:drain-*.
	DrainState(ctx context.Context, zone, name string) (DrainState, error)
	// ListImages lists the images of a family, newest first.
	ListImages(ctx context.Context, family string) ([]Image, error)
	// DeleteImage deletes an image; one that does not exist counts as deleted.
	DeleteImage(ctx context.Context, name string) error
	// ImageExists checks that an image as CreateInstance takes it (GCE:
	// name, family/F or URL; EC2: AMI ID) exists; ErrNotFound if not.
	ImageExists(ctx context.Context, image string) error
	// Note writes a note on the instance, which Instance.Notes then
	// carries (GCE metadata runnerfleet-<key>, EC2 tag runnerfleet:<key>);
	// an empty value removes it.
	Note(ctx context.Context, zone, name, key, value string) error
	// JobReport reads the job count a job reporter on the instance wrote
	// (GCE guest attributes runnerfleet/jobs*, EC2 tags runnerfleet:jobs*).
	JobReport(ctx context.Context, zone, name string) (JobReport, error)
}

// SpotRequests is EC2's extra: spot requests can outlive their instances.
type SpotRequests interface {
	// ListOrphanSpotRequests lists open or active spot instance requests that
	// have no running instance.
	ListOrphanSpotRequests(ctx context.Context) ([]string, error)
	// CancelSpotRequests cancels spot instance requests.
	CancelSpotRequests(ctx context.Context, ids []string) error
}

// Self is the drain agent's view of the instance it runs on.
type Self interface {
	// WaitDrainRequest blocks until a drain is requested for this instance
	// (GCE: metadata wait-for-change; EC2: instance tags through IMDSv2,
	// polled) or ctx ends.
	WaitDrainRequest(ctx context.Context) error
	// Report publishes the agent's state where Compute.DrainState reads it.
	Report(ctx context.Context, s DrainState) error
	// ReportJobs publishes the instance's running job count where
	// Compute.JobReport reads it.
	ReportJobs(ctx context.Context, r JobReport) error
}

// Metadata keys, label and tag names of the drain handshake.
const (
	GCEDrainKey          = "runnerfleet-drain"       // instance metadata, "true" to drain
	GCEGuestNamespace    = "runnerfleet"             // guest attributes namespace
	GCEGuestPhaseKey     = "drain-phase"             // guest attribute runnerfleet/drain-phase
	GCEGuestJobsLeftKey  = "drain-jobs-left"         // guest attribute runnerfleet/drain-jobs-left
	GCEGuestUpdatedAtKey = "drain-updated-at"        // RFC 3339
	EC2DrainTag          = "runnerfleet:drain"       // "true" to drain
	EC2PhaseTag          = "runnerfleet:drain-phase" // written by the agent
	EC2JobsLeftTag       = "runnerfleet:drain-jobs-left"
	EC2UpdatedAtTag      = "runnerfleet:drain-updated-at"

	GCEGuestJobsKey          = "jobs"            // guest attribute runnerfleet/jobs
	GCEGuestJobsUpdatedAtKey = "jobs-updated-at" // RFC 3339
	EC2JobsTag               = "runnerfleet:jobs"
	EC2JobsUpdatedAtTag      = "runnerfleet:jobs-updated-at"

	// GCENotePrefix and EC2NotePrefix prefix the keys of Compute.Note.
	GCENotePrefix = "runnerfleet-note-"
	EC2NotePrefix = "runnerfleet:note-"
)
