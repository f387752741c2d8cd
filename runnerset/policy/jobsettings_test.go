package policy

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

func TestHostPathAllowed(t *testing.T) {
	prefixes := []string{"/var/cache/ci", "/opt/tools/"}
	for p, want := range map[string]bool{
		"/var/cache/ci":              true,
		"/var/cache/ci/go":           true,
		"/var/cache/ci//go/":         true,
		"/opt/tools/bin":             true,
		"/var/cache/cigar":           false, // a sibling that shares the prefix's letters
		"/var/cache":                 false,
		"/var/cache/ci/../../etc":    false, // cleaned first: /etc
		"/var/cache/ci/../ci-other":  false,
		"var/cache/ci/go":            false,
		"/":                          false,
		"/var/lib/kubelet/pods":      false,
		"/var/run/containerd.sock":   false,
		"/opt/tools/../../root/.ssh": false,
	} {
		if got := HostPathAllowed(prefixes, p); got != want {
			t.Errorf("HostPathAllowed(%q) = %v, want %v", p, got, want)
		}
	}
	if HostPathAllowed([]string{"/"}, "/etc") {
		t.Error("the prefix / allowed the whole node")
	}
	if HostPathAllowed(nil, "/var/cache/ci") {
		t.Error("no prefixes allowed a host path")
	}
}

func TestJobSettingsTheClassForbidsAreRefusedNamingTheFieldAndTheFix(t *testing.T) {
	mount := v1alpha1.VolumeMount{MountPath: "/cache"}
	open := func() *v1alpha1.RunnerClass {
		return &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "open"}, Spec: v1alpha1.RunnerClassSpec{Policy: v1alpha1.RunnerClassPolicy{
			Volumes: v1alpha1.VolumePolicy{
				AllowedKinds:     []v1alpha1.VolumeKind{v1alpha1.VolumeKindEmptyDir, v1alpha1.VolumeKindHostPath},
				HostPathPrefixes: []string{"/var/cache/ci"},
			},
			AllowHelperImage: true,
		}}}
	}
	strict := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "strict"}, Spec: v1alpha1.RunnerClassSpec{Policy: v1alpha1.RunnerClassPolicy{
		AllowConfigOverride: ptr.To(false),
	}}}
	hostKindNoPrefix := open()
	hostKindNoPrefix.Spec.Policy.Volumes.HostPathPrefixes = nil
	cases := []struct {
		name   string
		class  *v1alpha1.RunnerClass
		jobs   v1alpha1.JobSpec
		reason string
		says   []string
	}{
		{"a host path under the default policy", strict, v1alpha1.JobSpec{Volumes: v1alpha1.JobVolumes{HostPaths: []v1alpha1.HostPathVolume{{Name: "c", HostPath: "/var/cache/ci", VolumeMount: mount}}}},
			v1alpha1.ReasonVolumeKindForbidden, []string{"spec.jobs.volumes.hostPaths", "does not allow hostPath", "configMap, secret, emptyDir, pvc"}},
		{"a kind the class leaves out", open(), v1alpha1.JobSpec{Volumes: v1alpha1.JobVolumes{PVCs: []v1alpha1.ObjectVolume{{Name: "c", VolumeMount: mount}}}},
			v1alpha1.ReasonVolumeKindForbidden, []string{"spec.jobs.volumes.pvcs", "policy.volumes.allowedKinds: emptyDir, hostPath", "ask the platform team"}},
		{"a host path outside the prefixes", open(), v1alpha1.JobSpec{Volumes: v1alpha1.JobVolumes{HostPaths: []v1alpha1.HostPathVolume{{Name: "sock", HostPath: "/var/cache/cigar", VolumeMount: mount}}}},
			v1alpha1.ReasonHostPathForbidden, []string{"spec.jobs.volumes.hostPaths[sock].hostPath", `"/var/cache/cigar"`, "/var/cache/ci"}},
		{"a host path climbing out", open(), v1alpha1.JobSpec{Volumes: v1alpha1.JobVolumes{HostPaths: []v1alpha1.HostPathVolume{{Name: "up", HostPath: "/var/cache/ci/../../../etc", VolumeMount: mount}}}},
			v1alpha1.ReasonHostPathForbidden, []string{"spec.jobs.volumes.hostPaths[up].hostPath"}},
		{"hostPath allowed but no prefix", hostKindNoPrefix, v1alpha1.JobSpec{Volumes: v1alpha1.JobVolumes{HostPaths: []v1alpha1.HostPathVolume{{Name: "c", HostPath: "/var/cache/ci", VolumeMount: mount}}}},
			v1alpha1.ReasonHostPathForbidden, []string{"hostPathPrefixes: none"}},
		{"a helper image the class does not let teams choose", strict, v1alpha1.JobSpec{HelperImage: "registry.example.com/helper:v1"},
			v1alpha1.ReasonHelperImageForbidden, []string{"spec.jobs.helperImage", "policy.allowHelperImage"}},
		{"an override the class forbids", strict, v1alpha1.JobSpec{ConfigOverride: "[kubernetes]\npoll_interval = 5\n"},
			v1alpha1.ReasonConfigOverrideForbidden, []string{"spec.jobs.configOverride", "policy.allowConfigOverride: false"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
			rs.Spec.Jobs = c.jobs
			f := Check(rs, c.class)
			if f == nil || f.Reason != c.reason {
				t.Fatalf("Check = %+v, want reason %s", f, c.reason)
			}
			for _, s := range c.says {
				if !strings.Contains(f.Message, s) {
					t.Errorf("message %q does not say %q", f.Message, s)
				}
			}
		})
	}

	// The negative controls: what the classes allow passes.
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
	rs.Spec.Jobs = v1alpha1.JobSpec{
		HelperImage:    "registry.example.com/helper:v1",
		ConfigOverride: "[kubernetes]\npoll_interval = 5\n",
		Volumes: v1alpha1.JobVolumes{
			HostPaths: []v1alpha1.HostPathVolume{{Name: "c", HostPath: "/var/cache/ci/go", VolumeMount: mount}},
			EmptyDirs: []v1alpha1.EmptyDirVolume{{Name: "scratch", VolumeMount: v1alpha1.VolumeMount{MountPath: "/scratch"}}},
		},
	}
	if f := Check(rs, open()); f != nil {
		t.Errorf("the open class refused what it allows: %v", f)
	}
	def := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
	def.Spec.Jobs.Volumes = v1alpha1.JobVolumes{
		ConfigMaps: []v1alpha1.ObjectVolume{{Name: "a", VolumeMount: mount}}, Secrets: []v1alpha1.ObjectVolume{{Name: "b", VolumeMount: mount}},
		PVCs: []v1alpha1.ObjectVolume{{Name: "c", VolumeMount: mount}}, EmptyDirs: []v1alpha1.EmptyDirVolume{{Name: "d", VolumeMount: mount}},
	}
	def.Spec.Jobs.ConfigOverride = "[kubernetes]\npoll_interval = 5\n"
	if f := Check(def, &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}); f != nil {
		t.Errorf("the default policy refused every kind but hostPath, or an override: %v", f)
	}
}
