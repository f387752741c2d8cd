// Package runnerconfig renders gitlab-runner's config.toml from typed structs.
// One rendering serves the runnerset controller (kubernetes executor) and the
// Pulumi program (the shared docker+machine fleet). Field names and TOML keys
// follow gitlab-runner's own common.Config; the oracle subpackage checks every
// rendered file against gitlab-runner's source.
package runnerconfig

import (
	"bytes"
	"fmt"
	"time"

	"github.com/BurntSushi/toml"
)

// TokenPlaceholder stands where the runner token goes until the one who
// knows the token fills it in with WithToken, through the TOML encoder: the
// controller into the Secret its managers mount, the Pulumi program into the
// shared fleet's. A token is never put into config.toml by text
// substitution, so no token can change another key.
const TokenPlaceholder = "__RUNNERFLEET_RUNNER_TOKEN__"

// Config is the top level of config.toml.
type Config struct {
	Concurrent      int            `toml:"concurrent"`
	CheckInterval   int            `toml:"check_interval"`
	LogLevel        string         `toml:"log_level,omitempty"`
	LogFormat       string         `toml:"log_format,omitempty"`
	ListenAddress   string         `toml:"listen_address,omitempty"`
	ShutdownTimeout int            `toml:"shutdown_timeout,omitempty"`
	SessionServer   *SessionServer `toml:"session_server,omitempty"`
	Machine         *MachineConfig `toml:"machine,omitempty"`
	Runners         []Runner       `toml:"runners"`
}

// SessionServer is the interactive web terminal server of a manager.
type SessionServer struct {
	ListenAddress    string `toml:"listen_address,omitempty"`
	AdvertiseAddress string `toml:"advertise_address,omitempty"`
	SessionTimeout   int    `toml:"session_timeout,omitempty"`
}

// Runner is one [[runners]] entry.
type Runner struct {
	Name               string          `toml:"name"`
	URL                string          `toml:"url"`
	Token              string          `toml:"token"`
	Executor           string          `toml:"executor"`
	Shell              string          `toml:"shell,omitempty"`
	Limit              int             `toml:"limit,omitempty"`
	RequestConcurrency int             `toml:"request_concurrency,omitempty"`
	OutputLimit        int             `toml:"output_limit,omitempty"`
	Environment        []string        `toml:"environment,omitempty"`
	FeatureFlags       map[string]bool `toml:"feature_flags,omitempty"`
	Kubernetes         *Kubernetes     `toml:"kubernetes,omitempty"`
	Docker             *Docker         `toml:"docker,omitempty"`
	Machine            *Machine        `toml:"machine,omitempty"`
	Autoscaler         *Autoscaler     `toml:"autoscaler,omitempty"`
	Cache              *Cache          `toml:"cache,omitempty"`
	Monitoring         *Monitoring     `toml:"monitoring,omitempty"`

	// Override is a TOML fragment merged into this [[runners]] entry when
	// it is rendered (a RunnerSet's spec.jobs.configOverride, judged by
	// CheckJobSettings first): its tables merge key by key into the
	// rendered ones, its other values replace theirs.
	Override string `toml:"-"`
}

// Monitoring is [runners.monitoring]: what gitlab-runner counts about the
// runner's jobs beyond its default metrics.
type Monitoring struct {
	JobQueuingDurations []JobQueuingDuration `toml:"job_queuing_durations,omitempty"`
}

// JobQueuingDuration is one [[runners.monitoring.job_queuing_durations]]
// entry: while one of its Periods (7-field cron with seconds, as
// [[runners.machine.autoscaling]]) matches, gitlab-runner counts every job
// that waited longer than Threshold in
// gitlab_runner_acceptable_job_queuing_duration_exceeded_total, if
// JobsRunningForProject (a regular expression; empty: every job) matches
// the job's project_jobs_running_on_instance_runners_count. The last entry
// in period decides.
type JobQueuingDuration struct {
	Periods               []string `toml:"periods"`
	Timezone              string   `toml:"timezone,omitempty"`
	Threshold             Duration `toml:"threshold"`
	JobsRunningForProject string   `toml:"jobs_running_for_project,omitempty"`
}

// Docker is [runners.docker]: the containers of jobs on autoscaled VMs.
type Docker struct {
	Image      string   `toml:"image"`
	Privileged bool     `toml:"privileged"`
	Volumes    []string `toml:"volumes,omitempty"`
	ShmSize    int64    `toml:"shm_size,omitempty"`
	PullPolicy []string `toml:"pull_policy,omitempty"`
}

// Machine is [runners.machine], the docker+machine autoscaler. gitlab-runner
// reads these keys by their Go field names.
type Machine struct {
	IdleCount      int                  `toml:"IdleCount"`
	IdleTime       int                  `toml:"IdleTime"` // seconds
	MaxBuilds      int                  `toml:"MaxBuilds,omitempty"`
	MaxGrowthRate  int                  `toml:"MaxGrowthRate,omitempty"`
	MachineDriver  string               `toml:"MachineDriver"`
	MachineName    string               `toml:"MachineName"`
	MachineOptions []string             `toml:"MachineOptions"`
	Autoscaling    []MachineAutoscaling `toml:"autoscaling,omitempty"`
}

// MachineAutoscaling is one [[runners.machine.autoscaling]] period.
type MachineAutoscaling struct {
	Periods   []string `toml:"Periods"`
	Timezone  string   `toml:"Timezone,omitempty"`
	IdleCount int      `toml:"IdleCount"`
	IdleTime  int      `toml:"IdleTime"`
}

// Autoscaler is [runners.autoscaler], the docker-autoscaler executor with a
// fleeting plugin.
type Autoscaler struct {
	Plugin              string             `toml:"plugin"`
	CapacityPerInstance int                `toml:"capacity_per_instance"`
	MaxUseCount         int                `toml:"max_use_count,omitempty"`
	MaxInstances        int                `toml:"max_instances"`
	PluginConfig        map[string]string  `toml:"plugin_config,omitempty"`
	ConnectorConfig     *ConnectorConfig   `toml:"connector_config,omitempty"`
	Policy              []AutoscalerPolicy `toml:"policy,omitempty"`
}

// ConnectorConfig is how the manager reaches the instances.
type ConnectorConfig struct {
	OS                   string `toml:"os,omitempty"`       // linux or windows
	Protocol             string `toml:"protocol,omitempty"` // ssh or winrm
	Username             string `toml:"username,omitempty"`
	UseExternalAddr      bool   `toml:"use_external_addr"`
	UseStaticCredentials bool   `toml:"use_static_credentials,omitempty"`
}

// AutoscalerPolicy is one [[runners.autoscaler.policy]] period.
type AutoscalerPolicy struct {
	Periods   []string `toml:"periods"`
	Timezone  string   `toml:"timezone,omitempty"`
	IdleCount int      `toml:"idle_count"`
	IdleTime  Duration `toml:"idle_time"`
}

// MachineConfig is the global [machine] section of docker+machine.
type MachineConfig struct {
	ShutdownDrain *MachineShutdownDrain `toml:"shutdown_drain,omitempty"`
}

// MachineShutdownDrain removes a manager's idle VMs when it shuts down.
type MachineShutdownDrain struct {
	Enabled      bool     `toml:"enabled"`
	Concurrency  int      `toml:"concurrency,omitempty"`
	MaxRetries   int      `toml:"max_retries,omitempty"`
	RetryBackoff Duration `toml:"retry_backoff,omitempty"`
}

// Duration is written the way gitlab-runner reads durations: "20m0s".
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// Kubernetes is [runners.kubernetes], the kubernetes executor.
type Kubernetes struct {
	Namespace      string `toml:"namespace"`
	Image          string `toml:"image,omitempty"`
	HelperImage    string `toml:"helper_image,omitempty"`
	Privileged     *bool  `toml:"privileged,omitempty"`
	ServiceAccount string `toml:"service_account,omitempty"`
	// AutomountServiceAccountToken is the job pods' own
	// automountServiceAccountToken: false, so that no job pod gets a
	// Kubernetes API token, whichever ServiceAccount it runs as.
	AutomountServiceAccountToken *bool `toml:"automount_service_account_token,omitempty"`

	CPURequest    string `toml:"cpu_request,omitempty"`
	CPULimit      string `toml:"cpu_limit,omitempty"`
	MemoryRequest string `toml:"memory_request,omitempty"`
	MemoryLimit   string `toml:"memory_limit,omitempty"`

	HelperCPURequest    string `toml:"helper_cpu_request,omitempty"`
	HelperCPULimit      string `toml:"helper_cpu_limit,omitempty"`
	HelperMemoryRequest string `toml:"helper_memory_request,omitempty"`
	HelperMemoryLimit   string `toml:"helper_memory_limit,omitempty"`

	ServiceCPURequest    string `toml:"service_cpu_request,omitempty"`
	ServiceCPULimit      string `toml:"service_cpu_limit,omitempty"`
	ServiceMemoryRequest string `toml:"service_memory_request,omitempty"`
	ServiceMemoryLimit   string `toml:"service_memory_limit,omitempty"`

	// NodeSelector, NodeTolerations ("key=value" or "key" → effect),
	// PodAnnotations and PodLabels shape every job pod.
	NodeSelector    map[string]string `toml:"node_selector,omitempty"`
	NodeTolerations map[string]string `toml:"node_tolerations,omitempty"`
	PodAnnotations  map[string]string `toml:"pod_annotations,omitempty"`
	PodLabels       map[string]string `toml:"pod_labels,omitempty"`
	// Affinity is the job pods' node affinity.
	Affinity *KubernetesAffinity `toml:"affinity,omitempty"`

	ImagePullSecrets []string `toml:"image_pull_secrets,omitempty"`
	// PollTimeout is seconds a manager waits for a job pod to run.
	PollTimeout int                 `toml:"poll_timeout,omitzero"`
	Services    []KubernetesService `toml:"services,omitempty"`
	Volumes     *KubernetesVolumes  `toml:"volumes,omitempty"`
}

// KubernetesAffinity is [runners.kubernetes.affinity].
type KubernetesAffinity struct {
	NodeAffinity *KubernetesNodeAffinity `toml:"node_affinity,omitempty"`
}

// KubernetesNodeAffinity is [runners.kubernetes.affinity.node_affinity].
type KubernetesNodeAffinity struct {
	Required *NodeSelector `toml:"required_during_scheduling_ignored_during_execution,omitempty"`
}

// NodeSelector is a pod's required node affinity: a node must match one
// of its terms.
type NodeSelector struct {
	Terms []NodeSelectorTerm `toml:"node_selector_terms"`
}

// NodeSelectorTerm matches a node that meets all of its expressions.
type NodeSelectorTerm struct {
	MatchExpressions []NodeRequirement `toml:"match_expressions"`
}

// NodeRequirement is one expression on a node label: Key, Operator (In,
// NotIn, Exists, ...) and Values.
type NodeRequirement struct {
	Key      string   `toml:"key"`
	Operator string   `toml:"operator"`
	Values   []string `toml:"values,omitempty"`
}

// KubernetesService is one [[runners.kubernetes.services]] entry.
type KubernetesService struct {
	Name       string   `toml:"name"`
	Alias      string   `toml:"alias,omitempty"`
	Command    []string `toml:"command,omitempty"`
	Entrypoint []string `toml:"entrypoint,omitempty"`
}

// KubernetesVolumes is [runners.kubernetes.volumes], by kind.
type KubernetesVolumes struct {
	HostPaths  []KubernetesHostPath `toml:"host_path,omitempty"`
	PVCs       []KubernetesVolume   `toml:"pvc,omitempty"`
	ConfigMaps []KubernetesVolume   `toml:"config_map,omitempty"`
	Secrets    []KubernetesVolume   `toml:"secret,omitempty"`
	EmptyDirs  []KubernetesEmptyDir `toml:"empty_dir,omitempty"`
}

// KubernetesVolume is a config_map, secret or pvc volume: Name is the
// object's and the volume's.
type KubernetesVolume struct {
	Name      string `toml:"name"`
	MountPath string `toml:"mount_path"`
	SubPath   string `toml:"sub_path,omitempty"`
	ReadOnly  bool   `toml:"read_only,omitempty"`
}

// KubernetesHostPath is a host_path volume.
type KubernetesHostPath struct {
	Name      string `toml:"name"`
	MountPath string `toml:"mount_path"`
	SubPath   string `toml:"sub_path,omitempty"`
	ReadOnly  bool   `toml:"read_only,omitempty"`
	HostPath  string `toml:"host_path"`
}

// KubernetesEmptyDir is an empty_dir volume.
type KubernetesEmptyDir struct {
	Name      string `toml:"name"`
	MountPath string `toml:"mount_path"`
	SubPath   string `toml:"sub_path,omitempty"`
	Medium    string `toml:"medium,omitempty"`
	SizeLimit string `toml:"size_limit,omitempty"`
}

// Cache is [runners.cache].
type Cache struct {
	Type   string    `toml:"Type"`
	Path   string    `toml:"Path,omitempty"`
	Shared bool      `toml:"Shared"`
	S3     *CacheS3  `toml:"s3,omitempty"`
	GCS    *CacheGCS `toml:"gcs,omitempty"`
}

// CacheS3 is [runners.cache.s3]; with AuthenticationType "iam" credentials
// come from the pod's IRSA role.
type CacheS3 struct {
	ServerAddress      string `toml:"ServerAddress,omitempty"`
	BucketName         string `toml:"BucketName"`
	BucketLocation     string `toml:"BucketLocation,omitempty"`
	AuthenticationType string `toml:"AuthenticationType,omitempty"`
}

// CacheGCS is [runners.cache.gcs]; with no credentials given, gitlab-runner
// uses the pod's Workload Identity.
type CacheGCS struct {
	BucketName string `toml:"BucketName"`
}

// WithToken returns c with token in every [[runners]] entry. Render then
// encodes it as one TOML string, whatever characters it holds.
func WithToken(c Config, token string) Config {
	c.Runners = append([]Runner(nil), c.Runners...)
	for i := range c.Runners {
		c.Runners[i].Token = token
	}
	return c
}

// Render encodes c as config.toml. The output is deterministic: map keys are
// sorted, so the same Config always hashes the same.
func Render(c Config) ([]byte, error) {
	if c.Concurrent < 1 {
		return nil, fmt.Errorf("rendering config.toml: concurrent must be at least 1, got %d", c.Concurrent)
	}
	if len(c.Runners) == 0 {
		return nil, fmt.Errorf("rendering config.toml: at least one [[runners]] entry is needed")
	}
	var buf bytes.Buffer
	buf.WriteString("# Generated by runnerfleet; edits are overwritten.\n")
	enc := toml.NewEncoder(&buf)
	enc.Indent = "  "
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("rendering config.toml: %w", err)
	}
	if !hasOverride(c) {
		return buf.Bytes(), nil
	}
	// An override is merged into the encoded file, as a table: decoded,
	// merged and encoded again (map keys sorted, so still deterministic).
	var doc map[string]any
	if _, err := toml.Decode(buf.String(), &doc); err != nil {
		return nil, fmt.Errorf("rendering config.toml: %w", err)
	}
	runners, _ := doc["runners"].([]map[string]any)
	for i, r := range c.Runners {
		if r.Override == "" || i >= len(runners) {
			continue
		}
		override, err := ParseOverride(r.Override)
		if err != nil {
			return nil, fmt.Errorf("rendering config.toml: %w", err)
		}
		merge(runners[i], override)
	}
	buf.Reset()
	buf.WriteString("# Generated by runnerfleet; edits are overwritten.\n")
	enc = toml.NewEncoder(&buf)
	enc.Indent = "  "
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("rendering config.toml with its override: %w", err)
	}
	return buf.Bytes(), nil
}

func hasOverride(c Config) bool {
	for _, r := range c.Runners {
		if r.Override != "" {
			return true
		}
	}
	return false
}

// ParseOverride decodes a [[runners]] override fragment as gitlab-runner
// would decode it (BurntSushi/toml).
func ParseOverride(fragment string) (map[string]any, error) {
	var m map[string]any
	if _, err := toml.Decode(fragment, &m); err != nil {
		return nil, fmt.Errorf("the override is not valid TOML: %w", err)
	}
	return m, nil
}

// merge merges src into dst: a table into a table key by key, any other
// value replacing dst's.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				merge(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}
