package runnerconfig

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/runnerfleet/runnerfleet/internal/suggest"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

// ownedKey is a key of [[runners]] (a dotted path; a segment may hold '*')
// that spec.jobs.configOverride may not set, and what to do instead.
type ownedKey struct {
	path string
	fix  string
}

const (
	fixGitLab     = "runnerfleet sets it from spec.gitlab and the runner's token; it cannot be overridden"
	fixAPI        = "the managers reach the Kubernetes API with their own ServiceAccount; it cannot be overridden"
	fixNamespace  = "jobs run in the RunnerSet's jobs namespace (status.jobsNamespace, spec.jobs.namespace); it cannot be overridden"
	fixSA         = "jobs run with no API token, as the jobs namespace's default ServiceAccount or, with spec.jobs.identity, the RunnerSet's job ServiceAccount; use spec.jobs.identity for a cloud identity"
	fixPrivileged = "use spec.jobs.privileged (the RunnerClass must allow it)"
	fixPlacement  = "jobs run only on this runner's own capacity; use spec.capacity"
	fixOtherExec  = "the runner's executor is kubernetes, which does not read it; remove it"
)

// ownedKeys are what configOverride may not set: what isolation rests on
// (the token and GitLab URL, the namespace, the ServiceAccount and its
// token, the API server, privileges, host access through pod_spec,
// placement on this runner's capacity), and what has a field of its own
// (one place per setting, where the class's policy applies). Keys are
// matched case-insensitively, as BurntSushi/toml matches them.
var ownedKeys = []ownedKey{
	{"name", fixGitLab}, {"url", fixGitLab}, {"id", fixGitLab}, {"token", fixGitLab},
	{"token_obtained_at", fixGitLab}, {"token_expires_at", fixGitLab},
	{"tls-ca-file", fixGitLab}, {"tls-cert-file", fixGitLab}, {"tls-key-file", fixGitLab},
	{"executor", "runnerfleet runs the kubernetes executor; it cannot be overridden"},
	{"limit", "use spec.managers.concurrent, or spec.capacity.limits (each manager then takes the jobs that fit them)"}, {"request_concurrency", "use spec.managers.concurrent"},
	{"environment", "use spec.jobs.environment"},
	{"feature_flags", "use spec.jobs.featureFlags"},
	{"cache", "use spec.cache (credentials come from the job identity)"},
	{"docker", fixOtherExec}, {"machine", fixOtherExec}, {"autoscaler", fixOtherExec}, {"custom", fixOtherExec},
	{"ssh", fixOtherExec}, {"parallels", fixOtherExec}, {"virtualbox", fixOtherExec}, {"instance", fixOtherExec},

	{"kubernetes.host", fixAPI}, {"kubernetes.context", fixAPI}, {"kubernetes.cert_file", fixAPI},
	{"kubernetes.key_file", fixAPI}, {"kubernetes.ca_file", fixAPI},
	{"kubernetes.bearer_token", fixAPI}, {"kubernetes.bearer_token_overwrite_allowed", fixAPI},
	{"kubernetes.namespace", fixNamespace}, {"kubernetes.namespace_overwrite_allowed", fixNamespace},
	{"kubernetes.namespace_per_job", fixNamespace},
	{"kubernetes.service_account", fixSA}, {"kubernetes.service_account_overwrite_allowed", fixSA},
	{"kubernetes.automount_service_account_token", fixSA},
	{"kubernetes.privileged", fixPrivileged}, {"kubernetes.allow_privilege_escalation", fixPrivileged},
	{"kubernetes.cap_add", fixPrivileged},
	{"kubernetes.*_container_security_context.privileged", fixPrivileged},
	{"kubernetes.*_container_security_context.allow_privilege_escalation", fixPrivileged},
	{"kubernetes.*_container_security_context.proc_mount", fixPrivileged},
	{"kubernetes.*_container_security_context.capabilities.add", fixPrivileged},
	{"kubernetes.pod_spec", "pod_spec patches the whole job pod (host paths, ServiceAccount, privileges, namespace-wide reach); use the fields of spec.jobs"},
	{"kubernetes.node_selector", fixPlacement}, {"kubernetes.node_selector_overwrite_allowed", fixPlacement},
	{"kubernetes.node_tolerations", fixPlacement}, {"kubernetes.node_tolerations_overwrite_allowed", fixPlacement},
	{"kubernetes.affinity", fixPlacement}, {"kubernetes.scheduler_name", fixPlacement},
	{"kubernetes.priority_class_name", fixPlacement + " (a priority class could preempt other teams' jobs)"},
	{"kubernetes.pod_labels_overwrite_allowed", "jobs could replace the labels runnerfleet finds its job pods by; use spec.jobs.podLabels"},
	{"kubernetes.pod_annotations_overwrite_allowed", "jobs could remove the annotations that keep a running job's node from being consolidated; use spec.jobs.podAnnotations"},
	{"kubernetes.volumes", "use spec.jobs.volumes (the RunnerClass's policy.volumes applies)"},
	{"kubernetes.image", "use spec.jobs.image"},
	{"kubernetes.helper_image", "use spec.jobs.helperImage (the RunnerClass must allow it)"},
	{"kubernetes.pod_annotations", "use spec.jobs.podAnnotations"},
	{"kubernetes.pod_labels", "use spec.jobs.podLabels"},
	{"kubernetes.image_pull_secrets", "use spec.jobs.imagePullSecrets"},
	{"kubernetes.poll_timeout", "use spec.jobs.pollTimeout"},
	{"kubernetes.services", "use spec.jobs.services"},
	{"kubernetes.cpu_request", "use spec.jobs.resources.build"}, {"kubernetes.cpu_limit", "use spec.jobs.resources.build"},
	{"kubernetes.memory_request", "use spec.jobs.resources.build"}, {"kubernetes.memory_limit", "use spec.jobs.resources.build"},
	{"kubernetes.helper_cpu_request", "use spec.jobs.resources.helper"}, {"kubernetes.helper_cpu_limit", "use spec.jobs.resources.helper"},
	{"kubernetes.helper_memory_request", "use spec.jobs.resources.helper"}, {"kubernetes.helper_memory_limit", "use spec.jobs.resources.helper"},
	{"kubernetes.service_cpu_request", "use spec.jobs.resources.service"}, {"kubernetes.service_cpu_limit", "use spec.jobs.resources.service"},
	{"kubernetes.service_memory_request", "use spec.jobs.resources.service"}, {"kubernetes.service_memory_limit", "use spec.jobs.resources.service"},
}

// owner returns the owned key that keyPath (dotted, as decoded) is or lies
// below, if any.
func owner(keyPath []string) (ownedKey, bool) {
	for _, o := range ownedKeys {
		segs := strings.Split(o.path, ".")
		if len(keyPath) < len(segs) {
			continue
		}
		match := true
		for i, seg := range segs {
			if ok, _ := path.Match(seg, strings.ToLower(keyPath[i])); !ok {
				match = false
				break
			}
		}
		if match {
			return o, true
		}
	}
	return ownedKey{}, false
}

// CheckJobSettings judges what spec.jobs asks of gitlab-runner, with the
// gitlab-runner schema and feature flags built into the controller
// (oracle.Embedded): the feature flags, the pod labels and annotations,
// and configOverride (valid TOML, no key runnerfleet owns, and the merged
// [[runners]] table every key of which gitlab-runner knows, with values of
// the types it decodes). It returns nil or the first problem, naming the
// field and the fix. The class's policy is policy.Check's.
func CheckJobSettings(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass) *v1alpha1.Failure {
	sn, err := oracle.Embedded()
	if err != nil {
		return v1alpha1.Failf(v1alpha1.ReasonRenderFailed, "the controller's gitlab-runner schema cannot be read (%v): this is a bug of runnerfleet's build", err)
	}
	j := rs.Spec.Jobs
	for _, name := range sortedFlagNames(j.FeatureFlags) {
		if _, ok := sn.FeatureFlag(name); ok {
			continue
		}
		msg := fmt.Sprintf("spec.jobs.featureFlags: gitlab-runner %s has no feature flag %q", oracle.GitLabRunnerRelease, name)
		if s := suggest.Closest(name, sn.FeatureFlagNames()); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		msg += "; remove it or use one listed at https://docs.gitlab.com/runner/configuration/feature-flags/"
		return &v1alpha1.Failure{Reason: v1alpha1.ReasonUnknownFeatureFlag, Message: msg}
	}
	if f := checkVolumes(j.Volumes); f != nil {
		return f
	}
	if f := checkMeta("spec.jobs.podLabels", j.PodLabels, true); f != nil {
		return f
	}
	if f := checkMeta("spec.jobs.podAnnotations", j.PodAnnotations, false); f != nil {
		return f
	}
	if j.ConfigOverride == "" {
		return nil
	}
	override, err := ParseOverride(j.ConfigOverride)
	if err != nil {
		return v1alpha1.Failf(v1alpha1.ReasonConfigOverrideInvalid, "spec.jobs.configOverride: %v; write keys of one [[runners]] table, for example [kubernetes] then poll_interval = 5", err)
	}
	if f := ownedIn(override, nil); f != nil {
		return f
	}
	out, err := Render(ForRunnerSet(rs, class, JobPlacement{}))
	if err != nil {
		return v1alpha1.Failf(v1alpha1.ReasonConfigOverrideInvalid, "spec.jobs.configOverride: %v", err)
	}
	for _, p := range oracle.Problems(sn.Schema.Check(out)) {
		key := p.Path
		if i := strings.Index(key, "]."); strings.HasPrefix(key, "runners[") && i > 0 {
			key = key[i+2:]
		}
		if strings.HasPrefix(p.Message, "unknown key") {
			return v1alpha1.Failf(v1alpha1.ReasonConfigOverrideUnknownKey,
				"spec.jobs.configOverride: %s: %s; remove it or fix its name (keys are those of [[runners]] in gitlab-runner %s's config.toml)", key, p.Message, oracle.GitLabRunnerRelease)
		}
		return v1alpha1.Failf(v1alpha1.ReasonConfigOverrideWrongType,
			"spec.jobs.configOverride: %s: %s; give it a value of that type", key, p.Message)
	}
	return nil
}

// ownedIn returns a Failure for the first key of m (at keyPath) that
// runnerfleet owns, in key order, looking into tables and arrays of tables.
func ownedIn(m map[string]any, keyPath []string) *v1alpha1.Failure {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := append(append([]string(nil), keyPath...), k)
		if o, ok := owner(p); ok {
			return v1alpha1.Failf(v1alpha1.ReasonConfigOverrideOwnedKey,
				"spec.jobs.configOverride: %s is runnerfleet's to set: %s; remove it from the override", strings.Join(p, "."), o.fix)
		}
		switch v := m[k].(type) {
		case map[string]any:
			if f := ownedIn(v, p); f != nil {
				return f
			}
		case []map[string]any:
			for _, e := range v {
				if f := ownedIn(e, p); f != nil {
					return f
				}
			}
		}
	}
	return nil
}

// checkMeta checks pod label or annotation keys (and label values) as the
// API server will when the job pod is created, so that a bad one fails
// here, named, rather than every job.
func checkMeta(field string, m map[string]string, labels bool) *v1alpha1.Failure {
	for _, k := range sortedKeys(m) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return v1alpha1.Failf(v1alpha1.ReasonJobSettingInvalid, "%s: key %q: %s", field, k, strings.Join(errs, "; "))
		}
		if labels {
			if errs := validation.IsValidLabelValue(m[k]); len(errs) > 0 {
				return v1alpha1.Failf(v1alpha1.ReasonJobSettingInvalid, "%s: value %q of %s: %s", field, m[k], k, strings.Join(errs, "; "))
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortedFlagNames(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// OwnedKeys are the dotted paths (below [[runners]]) configOverride may not set.
func OwnedKeys() []string {
	out := make([]string, len(ownedKeys))
	for i, o := range ownedKeys {
		out[i] = o.path
	}
	return out
}

// executorVolumes are the volumes the kubernetes executor adds to every job
// pod itself (executors/kubernetes/kubernetes.go).
var executorVolumes = []string{"repo", "scripts", "logs"}

// checkVolumes refuses what would make every job pod invalid: two volumes
// of one name (across kinds, or one of the executor's own), two at one
// mount path.
func checkVolumes(v v1alpha1.JobVolumes) *v1alpha1.Failure {
	type vol struct{ field, name, mountPath string }
	var all []vol
	for i, x := range v.ConfigMaps {
		all = append(all, vol{fmt.Sprintf("configMaps[%d]", i), x.Name, x.MountPath})
	}
	for i, x := range v.Secrets {
		all = append(all, vol{fmt.Sprintf("secrets[%d]", i), x.Name, x.MountPath})
	}
	for i, x := range v.EmptyDirs {
		all = append(all, vol{fmt.Sprintf("emptyDirs[%d]", i), x.Name, x.MountPath})
	}
	for i, x := range v.PVCs {
		all = append(all, vol{fmt.Sprintf("pvcs[%d]", i), x.Name, x.MountPath})
	}
	for i, x := range v.HostPaths {
		all = append(all, vol{fmt.Sprintf("hostPaths[%d]", i), x.Name, x.MountPath})
	}
	names, paths := map[string]string{}, map[string]string{}
	for _, x := range all {
		for _, own := range executorVolumes {
			if x.name == own {
				return v1alpha1.Failf(v1alpha1.ReasonJobSettingInvalid,
					"spec.jobs.volumes.%s.name: %q is a volume gitlab-runner adds to every job pod itself (%s); choose another name", x.field, x.name, strings.Join(executorVolumes, ", "))
			}
		}
		if other, ok := names[x.name]; ok {
			return v1alpha1.Failf(v1alpha1.ReasonJobSettingInvalid,
				"spec.jobs.volumes.%s.name: %q is also the name of spec.jobs.volumes.%s; a pod's volumes need names of their own", x.field, x.name, other)
		}
		names[x.name] = x.field
		mp := path.Clean(x.mountPath)
		if other, ok := paths[mp]; ok {
			return v1alpha1.Failf(v1alpha1.ReasonJobSettingInvalid,
				"spec.jobs.volumes.%s.mountPath: %s is also where spec.jobs.volumes.%s is mounted; give each volume its own mountPath", x.field, x.mountPath, other)
		}
		paths[mp] = x.field
	}
	return nil
}
