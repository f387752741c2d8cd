package fleetspec

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A fleet with no defaults set gets every one from Effective, its groups
// what they take from the fleet and the platform; a second resolution
// changes nothing, and what the stack config sets is kept.
func TestEffectiveResolvesEveryDefaultOnce(t *testing.T) {
	p := Platform{GitLabURL: "https://gitlab.example.com", Project: "ci-prod", Region: "europe-west1", Cluster: "ci", Network: "projects/ci-prod/global/networks/ci"}
	s := SharedFleet{
		Name: "production", CacheBucket: "cache", VMServiceAccount: "vms@ci-prod.iam.gserviceaccount.com",
		VMNetwork: VMNetwork{CIDR: "10.30.0.0/20"},
		Groups: []ManagerGroup{
			{Name: "linux", MaxVMs: 10},
			{Name: "windows", Windows: true, Executor: ExecutorDockerAutoscaler, Project: "ci-win", MaxVMs: 5, Scaling: Scaling{MinManagers: 2, MaxManagers: 3, TargetUtilization: 0.5}},
		},
	}
	e := s.Effective(p)
	if e.Namespace != "production" || e.GitLabURL != p.GitLabURL || e.Images != DefaultFleetImages || e.JobTimeout.Duration != MinSharedJobTimeout ||
		e.Monitoring.NodeExporterPort != DefaultNodeExporterPort || e.Monitoring.VMQuota != 10*1+5*3 {
		t.Errorf("fleet defaults: %+v", e)
	}
	linux, windows := e.Groups[0], e.Groups[1]
	want := ManagerGroup{
		Name: "linux", MaxVMs: 10, Executor: ExecutorDockerMachine, Project: "ci-prod", Concurrent: DefaultConcurrent,
		Scaling: Scaling{MinManagers: 1, MaxManagers: 1, TargetUtilization: DefaultTargetUtilization},
		Fleet:   "production", GitLabURL: p.GitLabURL, CacheBucket: "cache", VMServiceAccount: "vms@ci-prod.iam.gserviceaccount.com",
		VMAgents: s.VMAgents(), Region: "europe-west1", Network: p.Network,
		Subnetwork: "projects/ci-prod/regions/europe-west1/subnetworks/ci-production-vms",
	}
	if !reflect.DeepEqual(linux, want) {
		t.Errorf("group linux:\n got %+v\nwant %+v", linux, want)
	}
	if windows.Project != "ci-win" || windows.Concurrent != WindowsConcurrent || windows.Scaling != s.Groups[1].Scaling || windows.Executor != ExecutorDockerAutoscaler {
		t.Errorf("group windows lost what the stack config set: %+v", windows)
	}
	if again := e.Effective(p); !reflect.DeepEqual(again, e) {
		t.Errorf("a second resolution changed the fleet:\n got %+v\nwant %+v", again, e)
	}
	if s.Groups[0].Executor != "" {
		t.Error("Effective changed the groups of the fleet it was given")
	}
	kept := SharedFleet{Name: "staging", Namespace: "ci-staging", GitLabURL: "https://other.example.com", JobTimeout: &metav1.Duration{Duration: 5 * time.Hour},
		Monitoring: SharedFleetMonitoring{VMQuota: 7, NodeExporterPort: 9300}}.Effective(p)
	if kept.Namespace != "ci-staging" || kept.GitLabURL != "https://other.example.com" || kept.JobTimeout.Duration != 5*time.Hour ||
		kept.Monitoring.VMQuota != 7 || kept.Monitoring.NodeExporterPort != 9300 {
		t.Errorf("what the stack config set was not kept: %+v", kept)
	}
}
