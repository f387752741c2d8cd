package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

// jobSettingsClass allows emptyDir, configMap and hostPath volumes under
// /var/cache/ci, and a RunnerSet's own helper image.
func jobSettingsClass(t *testing.T) *v1alpha1.RunnerClass {
	return newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Policy.Volumes = v1alpha1.VolumePolicy{
			AllowedKinds:     []v1alpha1.VolumeKind{v1alpha1.VolumeKindEmptyDir, v1alpha1.VolumeKindConfigMap, v1alpha1.VolumeKindHostPath},
			HostPathPrefixes: []string{"/var/cache/ci"},
		}
		c.Spec.Policy.AllowHelperImage = true
	})
}

// withEveryJobSetting sets every job setting the class allows.
func withEveryJobSetting(rs *v1alpha1.RunnerSet) {
	rs.Spec.Jobs.PodAnnotations = map[string]string{"team.example.com/cost-center": "42"}
	rs.Spec.Jobs.PodLabels = map[string]string{"team": "a"}
	rs.Spec.Jobs.ImagePullSecrets = []string{"regcred"}
	rs.Spec.Jobs.Environment = []v1alpha1.EnvVar{{Name: "GOFLAGS", Value: "-mod=mod"}}
	rs.Spec.Jobs.FeatureFlags = map[string]bool{"FF_PRINT_POD_EVENTS": true}
	rs.Spec.Jobs.HelperImage = "registry.example.com/gitlab-runner-helper:team"
	rs.Spec.Jobs.PollTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	rs.Spec.Jobs.Services = []v1alpha1.JobService{{Name: "docker:27-dind", Alias: "docker", Command: []string{"--tls=false"}, Entrypoint: []string{"dockerd-entrypoint.sh"}}}
	rs.Spec.Jobs.Volumes = v1alpha1.JobVolumes{
		EmptyDirs:  []v1alpha1.EmptyDirVolume{{Name: "scratch", Medium: "Memory", SizeLimit: ptr.To(resource.MustParse("1Gi")), VolumeMount: v1alpha1.VolumeMount{MountPath: "/scratch"}}},
		ConfigMaps: []v1alpha1.ObjectVolume{{Name: "ca", VolumeMount: v1alpha1.VolumeMount{MountPath: "/etc/ca", ReadOnly: true}}},
		HostPaths:  []v1alpha1.HostPathVolume{{Name: "ccache", HostPath: "/var/cache/ci/ccache", VolumeMount: v1alpha1.VolumeMount{MountPath: "/ccache"}}},
	}
	rs.Spec.Jobs.ConfigOverride = "[kubernetes]\npoll_interval = 5\n"
}

func TestEveryJobSettingReachesTheManagersConfig(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Policy.Volumes = v1alpha1.VolumePolicy{
			AllowedKinds:     []v1alpha1.VolumeKind{v1alpha1.VolumeKindConfigMap, v1alpha1.VolumeKindSecret, v1alpha1.VolumeKindEmptyDir, v1alpha1.VolumeKindPVC, v1alpha1.VolumeKindHostPath},
			HostPathPrefixes: []string{"/var/cache/ci"},
		}
		c.Spec.Policy.AllowHelperImage = true
	})
	newSecret(t, ns, "jobs-token", token)
	rs := runnerSet(ns, "jobs", class.Name)
	withEveryJobSetting(rs)
	rs.Spec.Jobs.Volumes.Secrets = []v1alpha1.ObjectVolume{{Name: "npmrc", VolumeMount: v1alpha1.VolumeMount{MountPath: "/root/.npm", SubPath: "npmrc"}}}
	rs.Spec.Jobs.Volumes.PVCs = []v1alpha1.ObjectVolume{{Name: "go-cache", VolumeMount: v1alpha1.VolumeMount{MountPath: "/go/pkg/mod"}}}
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)

	cfg := string(get(t, ns, naming.For(ns, "jobs").Config(), &corev1.Secret{}).Data[resources.ConfigKey])
	schema, err := oracle.Load(ctx)
	must(t, err)
	if err := schema.Check([]byte(cfg)); err != nil {
		t.Fatalf("gitlab-runner would not accept the config: %v\n%s", err, cfg)
	}
	var doc map[string]any
	if _, err := toml.Decode(cfg, &doc); err != nil {
		t.Fatal(err)
	}
	r := doc["runners"].([]map[string]any)[0]
	k := r["kubernetes"].(map[string]any)
	vols := k["volumes"].(map[string]any)
	got := map[string]any{
		"environment":     fmt.Sprint(r["environment"]),
		"feature flag":    r["feature_flags"].(map[string]any)["FF_PRINT_POD_EVENTS"],
		"token":           r["token"],
		"namespace":       k["namespace"],
		"poll_interval":   k["poll_interval"],
		"poll_timeout":    k["poll_timeout"],
		"helper_image":    k["helper_image"],
		"pull secrets":    fmt.Sprint(k["image_pull_secrets"]),
		"team annotation": k["pod_annotations"].(map[string]any)["team.example.com/cost-center"],
		"do-not-disrupt":  k["pod_annotations"].(map[string]any)["karpenter.sh/do-not-disrupt"],
		"team label":      k["pod_labels"].(map[string]any)["team"],
		"service":         fmt.Sprint(k["services"]),
		"empty dir":       fmt.Sprint(vols["empty_dir"]),
		"config map":      fmt.Sprint(vols["config_map"]),
		"host path":       fmt.Sprint(vols["host_path"]),
		"secret":          fmt.Sprint(vols["secret"]),
		"pvc":             fmt.Sprint(vols["pvc"]),
	}
	want := map[string]any{
		"environment":     "[GOFLAGS=-mod=mod]",
		"feature flag":    true,
		"token":           token,
		"namespace":       naming.For(ns, "jobs").JobsNamespace(),
		"poll_interval":   int64(5),
		"poll_timeout":    int64(600),
		"helper_image":    "registry.example.com/gitlab-runner-helper:team",
		"pull secrets":    "[regcred]",
		"team annotation": "42",
		"do-not-disrupt":  "true",
		"team label":      "a",
		"service":         "[map[alias:docker command:[--tls=false] entrypoint:[dockerd-entrypoint.sh] name:docker:27-dind]]",
		"empty dir":       "[map[medium:Memory mount_path:/scratch name:scratch size_limit:1Gi]]",
		"config map":      "[map[mount_path:/etc/ca name:ca read_only:true]]",
		"host path":       "[map[host_path:/var/cache/ci/ccache mount_path:/ccache name:ccache]]",
		"secret":          "[map[mount_path:/root/.npm name:npmrc sub_path:npmrc]]",
		"pvc":             "[map[mount_path:/go/pkg/mod name:go-cache]]",
	}
	for key, w := range want {
		if got[key] != w {
			t.Errorf("%s = %v, want %v", key, got[key], w)
		}
	}
}

// The bad input, each on a running RunnerSet: refused with the
// field and the fix, and the managers keep their config: neither the
// config Secret nor the Deployment is written. Then the good spec again
// is Ready again.
func TestBadJobSettingsAreRefusedAndRunningManagersKeepTheirConfig(t *testing.T) {
	ns := newNamespace(t)
	class := jobSettingsClass(t)
	newSecret(t, ns, "keep-token", token)
	rs := runnerSet(ns, "keep", class.Name)
	withEveryJobSetting(rs)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	n := naming.For(ns, "keep")
	secretBefore := get(t, ns, n.Config(), &corev1.Secret{})
	deployBefore := get(t, ns, n.Managers(), &appsv1.Deployment{})

	cases := []struct {
		name   string
		change func(*v1alpha1.JobSpec)
		reason string
		says   []string
	}{
		{"a volume kind the class forbids", func(j *v1alpha1.JobSpec) {
			j.Volumes.PVCs = []v1alpha1.ObjectVolume{{Name: "go-cache", VolumeMount: v1alpha1.VolumeMount{MountPath: "/go"}}}
		}, v1alpha1.ReasonVolumeKindForbidden, []string{"spec.jobs.volumes.pvcs", "emptyDir, configMap, hostPath", "ask the platform team"}},
		{"a host path without permission", func(j *v1alpha1.JobSpec) {
			j.Volumes.HostPaths = []v1alpha1.HostPathVolume{{Name: "kubelet", HostPath: "/var/lib/kubelet", VolumeMount: v1alpha1.VolumeMount{MountPath: "/k"}}}
		}, v1alpha1.ReasonHostPathForbidden, []string{"spec.jobs.volumes.hostPaths[kubelet].hostPath", "/var/cache/ci", "use a path under"}},
		{"an unknown feature flag", func(j *v1alpha1.JobSpec) {
			j.FeatureFlags = map[string]bool{"FF_PRINT_POD_EVENT": true}
		}, v1alpha1.ReasonUnknownFeatureFlag, []string{"spec.jobs.featureFlags", `did you mean "FF_PRINT_POD_EVENTS"?`}},
		{"configOverride with an unknown key", func(j *v1alpha1.JobSpec) {
			j.ConfigOverride = "[kubernetes]\npoll_intervall = 5\n"
		}, v1alpha1.ReasonConfigOverrideUnknownKey, []string{"spec.jobs.configOverride: kubernetes.poll_intervall", `did you mean "poll_interval"?`}},
		{"configOverride with a wrong value type", func(j *v1alpha1.JobSpec) {
			j.ConfigOverride = "[kubernetes]\npoll_interval = \"5s\"\n"
		}, v1alpha1.ReasonConfigOverrideWrongType, []string{"spec.jobs.configOverride: kubernetes.poll_interval", "want integer"}},
		{"configOverride rewriting the jobs namespace", func(j *v1alpha1.JobSpec) {
			j.ConfigOverride = "[kubernetes]\nnamespace = \"kube-system\"\n"
		}, v1alpha1.ReasonConfigOverrideOwnedKey, []string{"spec.jobs.configOverride: kubernetes.namespace is runnerfleet's to set", "remove it"}},
		{"configOverride rewriting the token", func(j *v1alpha1.JobSpec) {
			j.ConfigOverride = "Token = \"glrt-someone-elses\"\n"
		}, v1alpha1.ReasonConfigOverrideOwnedKey, []string{"spec.jobs.configOverride: Token is runnerfleet's to set"}},
		{"configOverride making a container privileged", func(j *v1alpha1.JobSpec) {
			j.ConfigOverride = "[kubernetes.build_container_security_context]\nprivileged = true\n"
		}, v1alpha1.ReasonConfigOverrideOwnedKey, []string{"build_container_security_context.privileged", "spec.jobs.privileged"}},
	}
	good := rs.DeepCopy().Spec.Jobs
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			update(t, rs, func(rs *v1alpha1.RunnerSet) {
				rs.Spec.Jobs = *good.DeepCopy()
				c.change(&rs.Spec.Jobs)
			})
			cur := waitCondition(t, rs, v1alpha1.ConditionClassAccepted, metav1.ConditionFalse, c.reason)
			msg := condition(cur, v1alpha1.ConditionClassAccepted).Message
			for _, s := range c.says {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not say %q", msg, s)
				}
			}
			if strings.Contains(msg, "glrt-") {
				t.Errorf("the message repeats a token: %q", msg)
			}
			if ready := condition(cur, v1alpha1.ConditionReady); ready.Status != metav1.ConditionFalse || ready.Reason != c.reason {
				t.Errorf("Ready = %s/%s, want False/%s", ready.Status, ready.Reason, c.reason)
			}
			s := get(t, ns, n.Config(), &corev1.Secret{})
			if s.ResourceVersion != secretBefore.ResourceVersion {
				t.Errorf("the config Secret was written for a refused spec:\n%s", s.Data[resources.ConfigKey])
			}
			d := get(t, ns, n.Managers(), &appsv1.Deployment{})
			if d.Generation != deployBefore.Generation || d.Spec.Template.Annotations[resources.AnnotationConfigHash] != deployBefore.Spec.Template.Annotations[resources.AnnotationConfigHash] {
				t.Errorf("the managers' Deployment changed for a refused spec (generation %d → %d)", deployBefore.Generation, d.Generation)
			}
		})
	}
	update(t, rs, func(rs *v1alpha1.RunnerSet) { rs.Spec.Jobs = *good.DeepCopy() })
	waitReady(t, rs)
	if s := get(t, ns, n.Config(), &corev1.Secret{}); s.ResourceVersion != secretBefore.ResourceVersion {
		t.Error("the good spec again rewrote the config Secret")
	}
}

// What a class says no to, on a new RunnerSet: nothing is created.
func TestAClassSaysNoToJobSettingsItForbids(t *testing.T) {
	ns := newNamespace(t)
	strict := newClass(t, func(c *v1alpha1.RunnerClass) { c.Spec.Policy.AllowConfigOverride = ptr.To(false) })
	cases := []struct {
		name   string
		change func(*v1alpha1.JobSpec)
		reason string
		says   string
	}{
		{"configOverride", func(j *v1alpha1.JobSpec) { j.ConfigOverride = "[kubernetes]\npoll_interval = 5\n" },
			v1alpha1.ReasonConfigOverrideForbidden, "policy.allowConfigOverride: false"},
		{"helper image", func(j *v1alpha1.JobSpec) { j.HelperImage = "registry.example.com/helper:v1" },
			v1alpha1.ReasonHelperImageForbidden, "policy.allowHelperImage"},
		{"host path by default", func(j *v1alpha1.JobSpec) {
			j.Volumes.HostPaths = []v1alpha1.HostPathVolume{{Name: "c", HostPath: "/var/cache/ci", VolumeMount: v1alpha1.VolumeMount{MountPath: "/c"}}}
		}, v1alpha1.ReasonVolumeKindForbidden, "does not allow hostPath volumes"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("no-%d", i)
			newSecret(t, ns, name+"-token", token)
			rs := runnerSet(ns, name, strict.Name)
			c.change(&rs.Spec.Jobs)
			must(t, k8s.Create(ctx, rs))
			cur := waitCondition(t, rs, v1alpha1.ConditionClassAccepted, metav1.ConditionFalse, c.reason)
			if msg := condition(cur, v1alpha1.ConditionClassAccepted).Message; !strings.Contains(msg, c.says) {
				t.Errorf("message %q does not say %q", msg, c.says)
			}
			for _, obj := range []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: naming.For(ns, name).Config()}}, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: naming.For(ns, name).Managers()}}} {
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: obj.GetName()}, obj); !apierrors.IsNotFound(err) {
					t.Errorf("a refused RunnerSet got %T %s (err=%v)", obj, obj.GetName(), err)
				}
			}
		})
	}
}

// What the CRD itself refuses: keys runnerfleet sets on job pods, and
// host paths that climb out of their directory.
func TestAdmissionRefusesJobSettingsThatCanNeverBeRight(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		change func(*v1alpha1.JobSpec)
		says   string
	}{
		{"do-not-disrupt annotation", func(j *v1alpha1.JobSpec) {
			j.PodAnnotations = map[string]string{"karpenter.sh/do-not-disrupt": "false"}
		}, "jobs.podAnnotations: runnerfleet.dev/, karpenter.sh/"},
		{"runnerset label", func(j *v1alpha1.JobSpec) { j.PodLabels = map[string]string{"runnerfleet.dev/runnerset": "other"} }, "jobs.podLabels"},
		{"host path with ..", func(j *v1alpha1.JobSpec) {
			j.Volumes.HostPaths = []v1alpha1.HostPathVolume{{Name: "up", HostPath: "/var/cache/ci/../../etc", VolumeMount: v1alpha1.VolumeMount{MountPath: "/c"}}}
		}, "hostPath must be an absolute path"},
		{"relative mount path", func(j *v1alpha1.JobSpec) {
			j.Volumes.EmptyDirs = []v1alpha1.EmptyDirVolume{{Name: "x", VolumeMount: v1alpha1.VolumeMount{MountPath: "scratch"}}}
		}, "mountPath must be an absolute path"},
		{"a feature flag that is not one", func(j *v1alpha1.JobSpec) { j.FeatureFlags = map[string]bool{"print_pod_events": true} }, "jobs.featureFlags"},
		{"a poll timeout of a second", func(j *v1alpha1.JobSpec) { j.PollTimeout = &metav1.Duration{Duration: time.Second} }, "jobs.pollTimeout"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := runnerSet(ns, fmt.Sprintf("adm-%d", i), "any")
			c.change(&rs.Spec.Jobs)
			err := k8s.Create(ctx, rs)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("create: %v, want Invalid saying %q", err, c.says)
			}
		})
	}
}
