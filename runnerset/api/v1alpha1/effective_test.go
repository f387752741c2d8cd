package v1alpha1

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEffectiveTakesTheRunnerSetThenTheClassThenTheBuiltInDefault(t *testing.T) {
	rs := &RunnerSet{}
	class := &RunnerClass{}
	class.Name = "shared"

	// Nothing set anywhere: built-in defaults.
	got := Effective(rs, nil)
	if got.GitLabURL != DefaultGitLabURL || got.ManagerImage != DefaultManagerImage || got.JobImage != DefaultJobImage ||
		got.Cache != nil || got.AMIAlias != "" || !slices.Equal(got.MachineFamilies, []string{DefaultMachineFamily}) {
		t.Errorf("built-in defaults: %+v", got)
	}

	// The class fills in what the RunnerSet leaves out.
	classCache := &CacheSpec{Type: CacheTypeS3, Bucket: "class"}
	class.Spec = RunnerClassSpec{
		GitLabURL:    "https://gitlab.class.example",
		Karpenter:    &KarpenterSettings{},
		ComputeClass: &ComputeClassSettings{MachineFamilies: []string{"c3"}},
		Defaults: RunnerClassDefaults{
			ManagerImage: "class/manager:1", JobImage: "class/job:1", HelperImage: "class/helper:1", Cache: classCache,
		},
	}
	got = Effective(rs, class)
	if got.GitLabURL != "https://gitlab.class.example" || got.ManagerImage != "class/manager:1" || got.JobImage != "class/job:1" ||
		got.HelperImage != "class/helper:1" || got.Cache != classCache || got.AMIAlias != DefaultAMIAlias ||
		!slices.Equal(got.MachineFamilies, []string{"c3"}) {
		t.Errorf("class defaults: %+v", got)
	}
	if !strings.Contains(got.ManagerImageField, "spec.defaults.managerImage of RunnerClass shared") {
		t.Errorf("manager image field %q does not name the class", got.ManagerImageField)
	}

	// The RunnerSet's own values win.
	own := &CacheSpec{Type: CacheTypeGCS, Bucket: "own"}
	rs.Spec.GitLab.URL = "https://gitlab.own.example"
	rs.Spec.Managers.Image = "own/manager:1"
	rs.Spec.Jobs.Image = "own/job:1"
	rs.Spec.Cache = own
	rs.Spec.Capacity.InstanceFamilies = []string{"n4"}
	class.Spec.Karpenter.AMIAlias = "al2023@latest"
	got = Effective(rs, class)
	if got.GitLabURL != "https://gitlab.own.example" || got.ManagerImage != "own/manager:1" || got.JobImage != "own/job:1" ||
		got.Cache != own || got.AMIAlias != "al2023@latest" || !slices.Equal(got.MachineFamilies, []string{"n4"}) ||
		got.ManagerImageField != "spec.managers.image" {
		t.Errorf("own values: %+v", got)
	}
}

// A job node must be kept for as long as a job may run: GitLab's cap on the
// runner's jobs when there is one, else the shutdown timeout (no longer job
// survives a drain), else its default.
func TestEffectiveJobTimeoutIsTheRunnersCapElseTheShutdownTimeout(t *testing.T) {
	rs := &RunnerSet{}
	if got := Effective(rs, nil); got.JobTimeout != DefaultShutdownTimeout || got.JobTimeoutField != "spec.managers.shutdownTimeout" {
		t.Errorf("default: %s from %s", got.JobTimeout, got.JobTimeoutField)
	}
	rs.Spec.Managers.ShutdownTimeout = &metav1.Duration{Duration: 5 * time.Hour}
	if got := Effective(rs, nil); got.JobTimeout != 5*time.Hour || got.JobTimeoutField != "spec.managers.shutdownTimeout" {
		t.Errorf("shutdown timeout: %s from %s", got.JobTimeout, got.JobTimeoutField)
	}
	rs.Spec.GitLab.Runner = &RunnerRegistration{MaximumTimeout: &metav1.Duration{Duration: 90 * time.Minute}}
	if got := Effective(rs, nil); got.JobTimeout != 90*time.Minute || got.JobTimeoutField != "spec.gitlab.runner.maximumTimeout" {
		t.Errorf("runner cap: %s from %s", got.JobTimeout, got.JobTimeoutField)
	}
}
