package runnerconfig

import (
	"maps"
	"path"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
)

// ForcedShutdownTimeout is config.toml's shutdown_timeout: how long
// gitlab-runner takes to stop once a graceful stop has ended or been forced.
// The graceful wait for running jobs is the pod's terminationGracePeriodSeconds.
const ForcedShutdownTimeout = 30

// JobPlacement is what the capacity of a tag asks of its job pods, so that they
// land only on that tag's nodes and are never disrupted while running.
type JobPlacement struct {
	NodeSelector    map[string]string
	NodeTolerations map[string]string
	PodAnnotations  map[string]string
	PodLabels       map[string]string
	// NodeRequirements are the job pods' required node affinity, all of
	// them in one term.
	NodeRequirements []NodeRequirement
	// JobsPerManager is the [[runners]] limit: the most jobs one manager
	// runs at once, so that the tag's jobs beyond its capacity limits
	// wait in GitLab's queue (capacity.JobsPerManager). 0 leaves it at
	// spec.managers.concurrent; it is never rendered as 0, which
	// gitlab-runner reads as no limit.
	JobsPerManager int
}

// ForRunnerSet is the kubernetes-executor config.toml of a RunnerSet. The
// token is TokenPlaceholder; class may be nil only in tests of this package.
// It resolves rs's settings under class; a reconcile pass, which resolved
// them once already, calls ForSettings.
func ForRunnerSet(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass, place JobPlacement) Config {
	return ForSettings(rs, v1alpha1.Effective(rs, class), place)
}

// ForSettings is ForRunnerSet with rs's settings already resolved
// (v1alpha1.Effective).
func ForSettings(rs *v1alpha1.RunnerSet, eff v1alpha1.Settings, place JobPlacement) Config {
	k := &Kubernetes{
		// Jobs run in a namespace of their own, never the team's: the
		// managers' rights to create pods and Secrets exist only there.
		Namespace:   eff.JobsNamespace,
		Image:       string(eff.JobImage),
		HelperImage: string(eff.HelperImage),
		// No job pod gets a Kubernetes API token: jobs have no business
		// with the API, and IRSA and Workload Identity project their own.
		AutomountServiceAccountToken: new(false),
		// The job ServiceAccount with a cloud identity; without one ("")
		// the jobs namespace's default.
		ServiceAccount: eff.JobServiceAccount,
	}
	if rs.Spec.Jobs.Privileged {
		t := true
		k.Privileged = &t
	}
	r := rs.Spec.Jobs.Resources
	k.CPURequest, k.CPULimit, k.MemoryRequest, k.MemoryLimit = quantities(r.Build)
	k.HelperCPURequest, k.HelperCPULimit, k.HelperMemoryRequest, k.HelperMemoryLimit = quantities(r.Helper)
	k.ServiceCPURequest, k.ServiceCPULimit, k.ServiceMemoryRequest, k.ServiceMemoryLimit = quantities(r.Service)
	k.NodeSelector = place.NodeSelector
	k.NodeTolerations = place.NodeTolerations
	if len(place.NodeRequirements) > 0 {
		k.Affinity = &KubernetesAffinity{NodeAffinity: &KubernetesNodeAffinity{Required: &NodeSelector{
			Terms: []NodeSelectorTerm{{MatchExpressions: place.NodeRequirements}},
		}}}
	}
	// The placement's keys win: they keep running jobs' nodes from being
	// consolidated and find a RunnerSet's job pods (the CRD refuses them
	// in the spec too).
	k.PodAnnotations = union(rs.Spec.Jobs.PodAnnotations, place.PodAnnotations)
	k.PodLabels = union(rs.Spec.Jobs.PodLabels, place.PodLabels)
	jobSettings(k, rs.Spec.Jobs)

	concurrent := int(rs.Spec.Managers.ConcurrentOrDefault())
	limit := concurrent
	if place.JobsPerManager > 0 {
		limit = min(place.JobsPerManager, concurrent)
	}
	return Config{
		Concurrent:      concurrent,
		CheckInterval:   max(1, int(rs.Spec.Managers.CheckIntervalOrDefault().Seconds())),
		LogFormat:       "json",
		ListenAddress:   gitlabrunner.ListenAddress,
		ShutdownTimeout: ForcedShutdownTimeout,
		Runners: []Runner{{
			Name:     rs.Namespace + "/" + rs.Name,
			URL:      eff.GitLabURL,
			Token:    TokenPlaceholder,
			Executor: "kubernetes",
			Limit:    limit,
			// One request per free slot keeps job pick-up fast under load
			// (gitlab-runner takes a slot of limit before each request).
			RequestConcurrency: min(limit, 10),
			Environment:        environment(rs.Spec.Jobs.Environment),
			FeatureFlags:       rs.Spec.Jobs.FeatureFlags,
			Kubernetes:         k,
			Cache:              cacheFor(eff.Cache, rs.Namespace),
			Override:           rs.Spec.Jobs.ConfigOverride,
		}},
	}
}

func quantities(c v1alpha1.ContainerResources) (cpuReq, cpuLim, memReq, memLim string) {
	return str(c.CPURequest), str(c.CPULimit), str(c.MemoryRequest), str(c.MemoryLimit)
}

func str(q *resource.Quantity) string {
	if q == nil {
		return ""
	}
	return q.String()
}

func cacheFor(c *v1alpha1.CacheSpec, namespace string) *Cache {
	if c == nil {
		return nil
	}
	path := c.Path
	if path == "" {
		path = namespace
	}
	out := &Cache{Type: string(c.Type), Path: path, Shared: c.Shared}
	switch c.Type {
	case v1alpha1.CacheTypeS3:
		out.S3 = &CacheS3{BucketName: c.Bucket, BucketLocation: c.Region, AuthenticationType: "iam"}
	case v1alpha1.CacheTypeGCS:
		out.GCS = &CacheGCS{BucketName: c.Bucket}
	}
	return out
}

// jobSettings renders spec.jobs' pull secrets, poll timeout, services and
// volumes into k.
func jobSettings(k *Kubernetes, j v1alpha1.JobSpec) {
	k.ImagePullSecrets = j.ImagePullSecrets
	if j.PollTimeout != nil {
		k.PollTimeout = int(j.PollTimeout.Seconds())
	}
	for _, s := range j.Services {
		k.Services = append(k.Services, KubernetesService{Name: string(s.Name), Alias: s.Alias, Command: s.Command, Entrypoint: s.Entrypoint})
	}
	v := j.Volumes
	out := &KubernetesVolumes{}
	objects := func(in []v1alpha1.ObjectVolume) []KubernetesVolume {
		var o []KubernetesVolume
		for _, x := range in {
			o = append(o, KubernetesVolume{Name: x.Name, MountPath: x.MountPath, SubPath: x.SubPath, ReadOnly: x.ReadOnly})
		}
		return o
	}
	out.ConfigMaps, out.Secrets, out.PVCs = objects(v.ConfigMaps), objects(v.Secrets), objects(v.PVCs)
	for _, x := range v.EmptyDirs {
		out.EmptyDirs = append(out.EmptyDirs, KubernetesEmptyDir{Name: x.Name, MountPath: x.MountPath, SubPath: x.SubPath, Medium: x.Medium, SizeLimit: str(x.SizeLimit)})
	}
	for _, x := range v.HostPaths {
		out.HostPaths = append(out.HostPaths, KubernetesHostPath{Name: x.Name, MountPath: x.MountPath, SubPath: x.SubPath, ReadOnly: x.ReadOnly, HostPath: path.Clean(x.HostPath)})
	}
	if len(out.ConfigMaps)+len(out.Secrets)+len(out.PVCs)+len(out.EmptyDirs)+len(out.HostPaths) > 0 {
		k.Volumes = out
	}
}

// environment is [[runners]] environment: NAME=value, in the spec's order.
func environment(env []v1alpha1.EnvVar) []string {
	var out []string
	for _, e := range env {
		out = append(out, e.Name+"="+e.Value)
	}
	return out
}

// union is a's keys and b's, b's winning; nil when both are empty.
func union(a, b map[string]string) map[string]string {
	if len(a) == 0 {
		return b
	}
	out := make(map[string]string, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}
