package sharedfleet

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// The gitlab-runner chart every manager runs.
const (
	ChartName       = "gitlab-runner"
	ChartRepository = "https://charts.gitlab.io"
	// ChartVersion is pinned to the chart whose templates and values.yaml
	// ChartValues was read from (0.86.0): every value the program passes is
	// one this version reads. The chart only templates the Deployment; the
	// gitlab-runner that runs is the group's manager image, set through the
	// chart's image values (v1alpha1.DefaultManagerImage by default, the release whose config
	// structs the oracle checks config.toml against), not the chart's
	// appVersion.
	ChartVersion = "0.86.0"
)

// Ports, labels and timings of the managers.
const (
	// SessionPort is where a manager's session server listens.
	SessionPort = fleetspec.SessionPort
	// TerminalPort is the port GitLab connects to: the Ingress's.
	TerminalPort = 443
	// MetricsPort is gitlab-runner's metrics listener.
	MetricsPort = gitlabrunner.MetricsPort
	// LabelRelease names a manager's release on its pod, which its
	// session Service selects.
	LabelRelease = vmfleet.PodLabelManager
	// DrainMarginSeconds is added to the job timeout for a manager's grace
	// period: the last job's report and its VM's removal.
	DrainMarginSeconds = gitlabrunner.DrainMarginSeconds
)

// Token Secret keys the chart's runners.secret must have.
const (
	SecretKeyRunnerToken       = "runner-token"
	SecretKeyRegistrationToken = "runner-registration-token"
)

// The config Secret of a manager: its whole config.toml, token included,
// written by the program (a Pulumi secret), which the chart mounts at
// /secrets/ConfigSecretFile through its secrets value.
const (
	ConfigSecretKey  = "config-toml"
	ConfigSecretFile = "runnerfleet-config.toml"
	chartSecretsDir  = "/secrets/"
)

// ConfigSecretName is the config Secret of the manager whose release is release.
func ConfigSecretName(release string) string { return release + "-config" }

// TokenSecretName is the token Secret of the group's releases (the chart's
// runners.secret).
func TokenSecretName(g fleetspec.ManagerGroup) string { return g.ManagerName() + "-token" }

// ConfigPathFallback is where the chart's image reads config.toml when the
// chart's entrypoint does not say (CONFIG_PATH_FOR_INIT).
const ConfigPathFallback = "/home/gitlab-runner/.gitlab-runner/"

// Manager state: docker+machine keeps a machine directory per VM (its
// address, TLS certificates, SSH key) under MACHINE_STORAGE_PATH, by
// default ~/.docker/machine. A docker+machine manager's is a
// PersistentVolume of its own, so a restarted or rolled manager knows the
// VMs its predecessor created.
const (
	// MachineStatePath is where the state volume is mounted: the chart's
	// image runs as gitlab-runner, whose home is /home/gitlab-runner.
	MachineStatePath = "/home/gitlab-runner/.docker/machine"
	// MachineStateSize is the state volume's size: a few KiB per VM.
	MachineStateSize   = "1Gi"
	machineStateVolume = "machine-state"
)

// StateClaimName is what the state PersistentVolumeClaim of release (a
// generation, Release.ReleaseName) is declared as; the Kubernetes provider
// names the claim after it with a random suffix of StateClaimSuffixLength
// characters (its autonaming, kept in the stack's state), new each time the
// claim is created. So a generation created again while the claim of its
// previous life still waits for its draining pod (the pvc-protection
// finalizer), as when a change is reverted within a drain, gets a claim of
// its own instead of the one being deleted.
func StateClaimName(release string) string { return release + "-state" }

// StateClaimSuffixLength is the length of the Kubernetes provider's
// autonaming suffix: "-" and 8 random characters.
const StateClaimSuffixLength = 9

// Release is one manager of a group: one Helm release of the chart per
// generation of it.
type Release struct {
	Group fleetspec.ManagerGroup
	// Name is the manager's, <fleet>-<group>-<n>: its slot, which its VMs
	// (vmfleet.LabelManager), its pods (LabelRelease), its session Service
	// and its ScaledObject carry through every generation.
	Name  string
	Index int
	// Host is the web terminal hostname; "" without one.
	Host string
	// Generation is the short hash of what makes the manager a new
	// process (GenerationOf); "" before it is computed. ReleaseName
	// carries it.
	Generation string
}

// ReleaseName is the Helm release of the manager's generation,
// <manager>-<generation>, and its Deployment (the chart's fullname), its
// config Secret and its state volume's claim derive from it. A change of
// what the manager runs is a release of another name beside the old one
// (a blue/green of releases): the old release's managers drain their jobs
// to the end while the new one takes new jobs, and no two docker+machine
// processes share a state volume. See GenerationOf.
func (r Release) ReleaseName() string {
	if r.Generation == "" {
		return r.Name
	}
	return r.Name + "-" + r.Generation
}

// LabelChartApp is the label the chart puts on its Deployment's pods and
// selects them by: its fullname, the generation's ReleaseName.
const LabelChartApp = "app"

// GenerationLength is the number of hex digits of a generation: with
// vmfleet.MaxManagerNameLength it keeps a release name within Helm's 53
// characters and a state claim within a GCE label value's 63.
const GenerationLength = 8

// GenerationOf is the manager's generation: the first GenerationLength hex
// digits of the SHA-256 of the chart (name, repository, version) and of
// every chart value known before deploy time, the config.toml rendered
// with the placeholder token and cache bucket among them (so the group's
// settings, the manager image, the grace period, the start script). What
// only deploy time knows does not count: a new runner token or a new
// platform cache bucket updates the generation in place (its Deployment
// rolls as its strategy says), and a token never goes into a name.
func (r Release) GenerationOf(s ReleaseSettings) (string, error) {
	r.Generation = ""
	cfg, err := r.ConfigTOML(placeholderBucket, runnerconfig.TokenPlaceholder)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]any{
		"chart": []string{ChartRepository, ChartName, ChartVersion},
		// Not the claim's name: the provider draws it.
		"values": r.Values(s, cfg, StartScript(!r.KeepsState()), "", ""),
	})
	if err != nil {
		return "", fmt.Errorf("manager %s: hashing its values: %w", r.Name, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:GenerationLength], nil
}

// Releases are the group's managers, their generations not yet computed;
// with a terminal domain each has the hostname <manager>.<domain>.
func Releases(g fleetspec.ManagerGroup, terminalDomain string) []Release {
	var out []Release
	for i, name := range g.ManagerNames() {
		r := Release{Group: g, Name: name, Index: i}
		if terminalDomain != "" {
			r.Host = name + "." + terminalDomain
		}
		out = append(out, r)
	}
	return out
}

// Scaled reports whether KEDA scales the manager (its ScaledObject runs it
// between 0 and 1 with the group's jobs): it is above the group's
// minManagers. Its release then sets no replicas, so that no Helm upgrade
// writes the Deployment's replicas over KEDA's.
func (r Release) Scaled() bool { return int32(r.Index) >= r.Group.Scaling.MinManagers }

// KeepsState reports whether the manager keeps docker+machine state on a
// volume of its own.
func (r Release) KeepsState() bool { return r.Group.Executor != fleetspec.ExecutorDockerAutoscaler }

// ConfigTOML is the config.toml the manager runs, with its [session_server]
// when it has a terminal host; token goes in through the TOML encoder,
// never by text substitution, so no token can change another key. bucket
// fills the cache bucket when the group names none.
func (r Release) ConfigTOML(bucket, token string) (string, error) {
	g := r.Group
	if g.CacheBucket == "" {
		g.CacheBucket = bucket
	}
	c, err := ConfigFor(g, r.Name)
	if err != nil {
		return "", err
	}
	if r.Host != "" {
		c.SessionServer = &runnerconfig.SessionServer{
			ListenAddress:    fmt.Sprintf("0.0.0.0:%d", SessionPort),
			AdvertiseAddress: fmt.Sprintf("%s:%d", r.Host, TerminalPort),
			SessionTimeout:   1800,
		}
	}
	b, err := runnerconfig.Render(runnerconfig.WithToken(c, token))
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// ConfigHash is the pod template annotation (resources.AnnotationConfigHash)
// of the manager: config.toml and the token, as the controller annotates a
// RunnerSet's managers, so a new token (or config) rolls and drains them.
// The chart's own checksum/secrets covers only its own, empty, Secret.
func (r Release) ConfigHash(configTOML, token string) string {
	return resources.ConfigHash([]byte(configTOML), token)
}

// StateClaim is the manager's state volume claim (KeepsState), without a
// name: see StateClaimName.
func (r Release) StateClaim(namespace string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		// No name: the provider names it (StateClaimName).
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Labels: map[string]string{
			LabelManagerPod: r.Group.ManagerName(), LabelRelease: r.Name, resources.LabelManagedBy: resources.ManagedBy,
		}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(MachineStateSize)}},
		},
	}
}

// SessionService routes the manager's terminal port to its session server.
func (r Release) SessionService(namespace string) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: r.Name + "-session", Namespace: namespace, Labels: map[string]string{
			LabelManagerPod: r.Group.ManagerName(), resources.LabelManagedBy: resources.ManagedBy, LabelRelease: r.Name,
		}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{LabelRelease: r.Name},
			Ports: []corev1.ServicePort{{
				Name: "session", Port: TerminalPort, TargetPort: intstr.FromInt32(SessionPort), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// ServiceAccount is the Kubernetes ServiceAccount every manager of the
// group runs as, annotated with gcpServiceAccount for Workload Identity.
func ServiceAccount(g fleetspec.ManagerGroup, gcpServiceAccount string) *corev1.ServiceAccount {
	sa := &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: g.ManagerName(), Namespace: g.Fleet, Labels: labels(g)},
		// gitlab-runner's docker+machine and docker-autoscaler executors
		// never call the Kubernetes API; Workload Identity needs no token.
		AutomountServiceAccountToken: ptr.To(false),
	}
	if gcpServiceAccount != "" {
		sa.Annotations = map[string]string{resources.AnnotationWorkloadIdentity: gcpServiceAccount}
	}
	return sa
}

// StartScript is the chart's preEntrypointScript: it runs after the chart
// registered the runner and before gitlab-runner starts, and puts in place
// the config.toml the program rendered, token included, from the config
// Secret the chart mounts. The token never passes through the shell: the
// file is copied as it is. docker-autoscaler managers then install the
// fleeting plugins their config names.
//
// The incarnation it writes into the VMs' labels is the pod's name, or,
// for a manager whose docker+machine state is on its own volume, the
// volume's claim (RUNNERFLEET_INCARNATION): the state, and so the
// knowledge of the VMs, outlives the pod.
func StartScript(fleeting bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# runnerfleet: config.toml is the one runnerfleet rendered, global section
# and [session_server] included, which a chart template cannot carry.
set -euo pipefail
dir="${CONFIG_PATH_FOR_INIT:-%s}"
umask 077
# The VMs this manager creates carry the incarnation of its docker+machine
# state: the state volume's claim when it has one, else the pod's name (a
# pod's hostname, which bash sets from the kernel if the environment has
# none). fleet gc finds the VMs of an incarnation that is gone. Only the
# placeholder is replaced; every other byte, the token's included, is
# copied as it is.
incarnation="$(printf %%s "${%s:-${HOSTNAME:?the pod has no hostname}}" | tr 'A-Z' 'a-z')"
case "$incarnation" in
  *[!a-z0-9-]*) echo "runnerfleet: the incarnation $incarnation is not a GCE label value" >&2; exit 1 ;;
esac
sed "s|%s|${incarnation}|g" %s%s > "${dir%%/}/config.toml.runnerfleet"
mv "${dir%%/}/config.toml.runnerfleet" "${dir%%/}/config.toml"
`, ConfigPathFallback, EnvIncarnation, vmfleet.IncarnationPlaceholder, chartSecretsDir, ConfigSecretFile)
	if fleeting {
		b.WriteString(`gitlab-runner fleeting --config "${dir%/}/config.toml" install
`)
	}
	return b.String()
}

// EnvIncarnation carries a stateful manager's incarnation into its start
// script; vmfleet.PodLabelIncarnation carries it to fleet gc.
const EnvIncarnation = "RUNNERFLEET_INCARNATION"

// imageValues splits an image reference into the chart's image values.
func imageValues(ref string) map[string]any {
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	repo, tag := ref[:colon], ref[colon+1:]
	if colon < slash {
		repo, tag = ref, "latest"
	}
	registry, image, _ := strings.Cut(repo, "/")
	if !strings.ContainsAny(registry, ".:") && registry != "localhost" {
		registry, image = "docker.io", repo
	}
	return map[string]any{"registry": registry, "image": image, "tag": tag}
}

// ReleaseSettings are what a release's values take from its fleet.
type ReleaseSettings struct {
	GitLabURL    string
	ManagerImage string
	// GraceSeconds is terminationGracePeriodSeconds: the fleet's job
	// timeout plus DrainMarginSeconds.
	GraceSeconds int64
}

// Values are the manager's chart values. configTOML, script, configHash
// and claim (the name of its state claim, for a manager that KeepsState)
// are known only at deploy time (Pulumi outputs in the program): they are
// placed as given. Every path is one the pinned chart reads (ChartValues).
func (r Release) Values(s ReleaseSettings, configTOML, script, configHash, claim any) map[string]any {
	g := r.Group
	strategy := map[string]any{
		// The new manager takes jobs before the old one stops.
		"type":          "RollingUpdate",
		"rollingUpdate": map[string]any{"maxUnavailable": 0, "maxSurge": 1},
	}
	if r.KeepsState() {
		// One manager at a time owns a state volume (ReadWriteOnce, and
		// two docker+machine processes on one machine directory would
		// hand the same idle VM to two jobs): within a generation (a new
		// token) the old pod drains, then the new one starts on its
		// state. A new generation has a volume of its own and starts at
		// once (GenerationOf).
		strategy = map[string]any{"type": "Recreate"}
	}
	v := map[string]any{
		"fullnameOverride": r.ReleaseName(),
		"gitlabUrl":        s.GitLabURL,
		// The runner token comes from this Secret, never from values.
		"runners": map[string]any{
			"secret": TokenSecretName(g),
			// The name config.toml gives the runner.
			"name":     g.ManagerName(),
			"executor": g.Executor,
			"config":   configTOML,
		},
		"unregisterRunners":             false,
		"concurrent":                    g.Concurrent,
		"checkInterval":                 3,
		"logFormat":                     "json",
		"shutdown_timeout":              runnerconfig.ForcedShutdownTimeout,
		"terminationGracePeriodSeconds": s.GraceSeconds,
		"strategy":                      strategy,
		// SIGQUIT, then wait: gitlab-runner takes no new job and exits
		// once its jobs are done (Kubernetes' SIGTERM would abort them).
		"deploymentLifecycle": map[string]any{"preStop": map[string]any{"exec": map[string]any{
			"command": toAny(gitlabrunner.DrainCommand()),
		}}},
		"metrics":        map[string]any{"enabled": true, "portName": "metrics", "port": MetricsPort},
		"service":        map[string]any{"enabled": false},
		"sessionServer":  map[string]any{"enabled": false},
		"rbac":           map[string]any{"create": false},
		"serviceAccount": map[string]any{"create": false, "name": g.ManagerName()},
		// fleet gc finds the manager by this label (a release scaled to
		// zero has a Deployment and no pod).
		"deploymentLabels": map[string]any{vmfleet.PodLabelManager: r.Name},
		"podAnnotations": map[string]any{
			// fleet gc refuses a grace shorter than this.
			vmfleet.AnnotationIdleTime: g.LongestIdleTime().String(),
			// A new token or config rolls (and drains) the manager.
			resources.AnnotationConfigHash: configHash,
			// No autoscaler scale-down under a draining manager (it would
			// get 10 minutes, not the job timeout).
			resources.AnnotationSafeToEvict: "false",
		},
		"podLabels": map[string]any{
			LabelManagerPod:          g.ManagerName(),
			LabelRelease:             r.Name,
			resources.LabelManagedBy: resources.ManagedBy,
		},
		"resources": map[string]any{
			"requests": map[string]any{"cpu": "250m", "memory": "512Mi"},
			"limits":   map[string]any{"memory": "2Gi"},
		},
		"preEntrypointScript": script,
		// The config Secret, at /secrets/<ConfigSecretFile>.
		"secrets": []any{map[string]any{
			"name":  ConfigSecretName(r.ReleaseName()),
			"items": []any{map[string]any{"key": ConfigSecretKey, "path": ConfigSecretFile}},
		}},
	}
	if r.KeepsState() {
		v["volumes"] = []any{map[string]any{"name": machineStateVolume, "persistentVolumeClaim": map[string]any{"claimName": claim}}}
		v["volumeMounts"] = []any{map[string]any{"name": machineStateVolume, "mountPath": MachineStatePath}}
		v["envVars"] = []any{map[string]any{"name": EnvIncarnation, "value": claim}}
		v["podLabels"].(map[string]any)[vmfleet.PodLabelIncarnation] = claim
	}
	// A fixed manager runs one pod. A scaled one's replicas are KEDA's:
	// the chart leaves spec.replicas out when the value is unset, so the
	// Deployment starts at Kubernetes' default of one (KEDA scales it to
	// zero while the group's jobs stay below its threshold) and a Helm
	// upgrade's three-way merge never resets what KEDA set.
	if !r.Scaled() {
		v["replicas"] = 1
	}
	// The runner is always named: the chart's own default is its
	// appVersion, older than the release the oracle checks against.
	image := string(v1alpha1.DefaultManagerImage)
	if s.ManagerImage != "" {
		image = s.ManagerImage
	}
	v["image"] = imageValues(image)
	// On the managers' on-demand pool, never on spot (runnerset/resources).
	v["nodeSelector"], v["tolerations"] = resources.ManagerPlacementValues()
	return v
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
