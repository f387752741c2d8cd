package v1alpha1

import (
	"fmt"
	"time"

	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Settings are what a RunnerSet runs with once its RunnerClass's defaults
// and the built-in ones have filled in what it leaves out. Effective is the
// one place that order (RunnerSet, then RunnerClass, then built-in) is
// applied; every builder reads its defaults from here.
//
// +kubebuilder:object:generate=false
type Settings struct {
	// GitLabURL is the GitLab instance of the runner.
	GitLabURL string
	// ManagerImage is the managers' image; ManagerImageField names where it
	// came from, for messages about it.
	ManagerImage      ImageReference
	ManagerImageField string
	// JobImage is the image of a job that names none.
	JobImage ImageReference
	// HelperImage is the job pods' helper image: spec.jobs.helperImage (the
	// class's policy must allow it), else the class's; empty lets
	// gitlab-runner choose the one that matches its version.
	HelperImage ImageReference
	// Cache is the distributed cache, nil for none.
	Cache *CacheSpec
	// AMIAlias is the node image on Karpenter with EC2 ("" for other providers).
	AMIAlias string
	// MachineFamilies are the GKE machine families of a ComputeClass, in order.
	MachineFamilies []string
	// JobsNamespace is where the job pods run: spec.jobs.namespace, or the
	// namespace derived from the RunnerSet (naming.DerivedJobsNamespace).
	JobsNamespace string
	// JobServiceAccount is the ServiceAccount the job pods run as in
	// JobsNamespace: the RunnerSet's own (naming.Runner.JobServiceAccount)
	// when spec.jobs.identity asks for a cloud identity, which IRSA and
	// Workload Identity bind to a ServiceAccount by its name; else "", the
	// jobs namespace's default ServiceAccount, which Kubernetes creates
	// with the namespace (the namespace is the RunnerSet's alone), so a new
	// RunnerSet costs one write less. Job pods get no API token either way
	// (config.toml's automount_service_account_token = false).
	JobServiceAccount string
	// JobTimeout is the longest a job of the RunnerSet may run, and so how
	// long a job node must be kept for a job it has started:
	// spec.gitlab.runner.maximumTimeout when set (GitLab ends a job there),
	// else spec.managers.shutdownTimeout (no job runs longer, or a
	// draining manager would cut it short). JobTimeoutField names it, for
	// messages about it.
	JobTimeout      time.Duration
	JobTimeoutField string
}

// Names are the derived names of rs's objects, its jobs namespace included.
func (rs *RunnerSet) Names() naming.Runner {
	return naming.For(rs.Namespace, rs.Name).WithJobs(rs.Spec.Jobs.Namespace)
}

// Effective resolves the settings of rs under class. class may be nil (a
// RunnerSet whose class is gone, being deleted): then only built-in
// defaults fill in.
func Effective(rs *RunnerSet, class *RunnerClass) Settings {
	var spec RunnerClassSpec
	className := ""
	if class != nil {
		spec, className = class.Spec, class.Name
	}
	d := spec.Defaults
	s := Settings{
		GitLabURL:         first(rs.Spec.GitLab.URL, spec.GitLabURL, DefaultGitLabURL),
		ManagerImage:      first(rs.Spec.Managers.Image, d.ManagerImage, DefaultManagerImage),
		ManagerImageField: "spec.managers.image",
		JobImage:          first(rs.Spec.Jobs.Image, d.JobImage, DefaultJobImage),
		HelperImage:       first(rs.Spec.Jobs.HelperImage, d.HelperImage),
		Cache:             rs.Spec.Cache,
		MachineFamilies:   rs.Spec.Capacity.InstanceFamilies,
		JobsNamespace:     rs.Names().JobsNamespace(),
		JobTimeout:        rs.Spec.Managers.ShutdownTimeoutOrDefault(),
		JobTimeoutField:   "spec.managers.shutdownTimeout",
	}
	if rs.Spec.Jobs.Identity != nil {
		s.JobServiceAccount = rs.Names().JobServiceAccount()
	}
	if r := rs.Spec.GitLab.Runner; r != nil && r.MaximumTimeout != nil && r.MaximumTimeout.Duration > 0 {
		s.JobTimeout, s.JobTimeoutField = r.MaximumTimeout.Duration, "spec.gitlab.runner.maximumTimeout"
	}
	if rs.Spec.Managers.Image == "" && d.ManagerImage != "" {
		s.ManagerImageField = fmt.Sprintf("spec.defaults.managerImage of RunnerClass %s", className)
	}
	if s.Cache == nil {
		s.Cache = d.Cache
	}
	if k := spec.Karpenter; k != nil {
		s.AMIAlias = first(k.AMIAlias, DefaultAMIAlias)
	}
	if len(s.MachineFamilies) == 0 && spec.ComputeClass != nil {
		s.MachineFamilies = spec.ComputeClass.MachineFamilies
	}
	if len(s.MachineFamilies) == 0 {
		s.MachineFamilies = []string{DefaultMachineFamily}
	}
	return s
}

// first is the first of values that is set.
func first[T ~string](values ...T) T {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
