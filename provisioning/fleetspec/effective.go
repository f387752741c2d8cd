package fleetspec

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Platform is what a shared fleet takes from its stack rather than from
// keys of its own: the stack's GitLab instance, and the gke platform's
// project, region, cluster and VPC (its resource path,
// projects/<project>/global/networks/<name>). Empty fields leave what they
// would fill as they are.
type Platform struct {
	GitLabURL string
	Project   string
	Region    string
	Cluster   string
	Network   string
	// CacheBucket is the platform's cache bucket, when its name is known
	// (a fleet that names it uses the platform's bucket).
	CacheBucket string
	// Zones are the gcp section's zones: a VM group that names none runs
	// in the first.
	Zones []string
}

// Effective is fleet s with every default resolved: the one resolution of
// a fleet's defaults, which the stack config applies once it is decoded
// (infra/stackconfig) and every builder reads (provisioning/sharedfleet's
// PlanFleet takes an Effective fleet and applies it again, which changes
// nothing: Effective is idempotent). What it fills:
//
//   - the fleet's namespace (its name), GitLab instance (the stack's),
//     images (DefaultFleetImages), job timeout (MinSharedJobTimeout),
//     node_exporter port (DefaultNodeExporterPort) and VM quota (the
//     groups' maxVMs times their maxManagers);
//   - each group's executor (docker+machine), project (the platform's),
//     concurrent jobs (ConcurrentOrDefault), scaling (one manager,
//     DefaultTargetUtilization), and what it takes from its fleet and the
//     platform: the fleet's namespace, GitLab instance, cache bucket, VM
//     service account and VM agents, the region, the VPC and the VMs'
//     subnetwork;
//   - each VM group's count (DefaultVMGroupCount), zones (the platform's
//     first), drain timeout (the fleet's job timeout plus gitlab-runner's
//     drain margin), notification format (DefaultNotifyFormat), and the
//     fleet's namespace, the project, the VPC and the VMs' subnetwork.
func (s SharedFleet) Effective(p Platform) SharedFleet {
	if s.Namespace == "" {
		s.Namespace = s.Name
	}
	if s.GitLabURL == "" {
		s.GitLabURL = p.GitLabURL
	}
	s.Images = s.Images.OrDefault()
	if s.JobTimeout == nil {
		s.JobTimeout = &metav1.Duration{Duration: MinSharedJobTimeout}
	}
	s.Monitoring.NodeExporterPort = s.NodeExporterPort()
	s.Groups = slices.Clone(s.Groups)
	for j := range s.Groups {
		g := &s.Groups[j]
		if g.Executor == "" {
			g.Executor = ExecutorDockerMachine
		}
		if g.Project == "" {
			g.Project = p.Project
		}
		g.Concurrent = g.ConcurrentOrDefault()
		if g.Scaling.MinManagers == 0 {
			g.Scaling.MinManagers = 1
		}
		if g.Scaling.MaxManagers == 0 {
			g.Scaling.MaxManagers = g.Scaling.MinManagers
		}
		if g.Scaling.TargetUtilization == 0 {
			g.Scaling.TargetUtilization = DefaultTargetUtilization
		}
		g.Fleet, g.GitLabURL, g.CacheBucket, g.VMServiceAccount = s.Namespace, s.GitLabURL, s.CacheBucket, s.VMServiceAccount
		g.VMAgents = s.VMAgents()
		if p.Region != "" {
			g.Region = p.Region
		}
		if p.Network != "" {
			g.Network = p.Network
		}
		if p.Project != "" && p.Region != "" {
			g.Subnetwork = s.VMSubnetwork(p.Project, p.Region, p.Cluster)
		}
	}
	s.VMGroups = slices.Clone(s.VMGroups)
	first := ""
	if len(p.Zones) > 0 {
		first = p.Zones[0]
	}
	for j := range s.VMGroups {
		s.VMGroups[j] = s.VMGroups[j].effective(s, p, first)
	}
	if s.Monitoring.VMQuota == 0 {
		for _, g := range s.Groups {
			s.Monitoring.VMQuota += g.MaxVMs * int(g.Scaling.MaxManagers)
		}
	}
	return s
}
