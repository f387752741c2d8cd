package runnerconfig

import (
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
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
}

// ForRunnerSet is the kubernetes-executor config.toml of a RunnerSet. The
// token is TokenPlaceholder; class may be nil only in tests of this package.
func ForRunnerSet(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass, place JobPlacement) Config {
	names := naming.For(rs.Namespace, rs.Name)
	eff := v1alpha1.Effective(rs, class)
	k := &Kubernetes{
		// Jobs run in a namespace of their own, never the team's: the
		// managers' rights to create pods and Secrets exist only there.
		Namespace:      eff.JobsNamespace,
		Image:          string(eff.JobImage),
		HelperImage:    string(eff.HelperImage),
		ServiceAccount: names.JobServiceAccount(),
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
	k.PodAnnotations = place.PodAnnotations
	k.PodLabels = place.PodLabels

	concurrent := int(rs.Spec.Managers.ConcurrentOrDefault())
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
			Limit:    concurrent,
			// One request per free slot keeps job pick-up fast under load.
			RequestConcurrency: min(concurrent, 10),
			Kubernetes:         k,
			Cache:              cacheFor(eff.Cache, rs.Namespace),
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
