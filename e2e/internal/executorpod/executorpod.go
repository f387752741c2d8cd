// Package executorpod builds a job pod as gitlab-runner's kubernetes
// executor builds it from the config.toml the controller wrote: the e2e
// tests and the capacity benchmark create such pods where a manager that
// runs no job (a kwok pod, a stand-in) would.
package executorpod

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// Build is the pod, named name, that gitlab-runner's kubernetes executor
// creates for a job from cfg: its namespace, service account, node
// selector, tolerations ("key=value" → effect), node affinity, annotations,
// labels, and the build and helper containers with their requests and
// limits.
func Build(cfg runnerconfig.Config, name string) *corev1.Pod {
	k := cfg.Runners[0].Kubernetes
	res := func(cpuReq, cpuLim, memReq, memLim string) corev1.ResourceRequirements {
		r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
		for q, into := range map[string][2]any{
			cpuReq: {r.Requests, corev1.ResourceCPU}, cpuLim: {r.Limits, corev1.ResourceCPU},
			memReq: {r.Requests, corev1.ResourceMemory}, memLim: {r.Limits, corev1.ResourceMemory},
		} {
			if q != "" {
				into[0].(corev1.ResourceList)[into[1].(corev1.ResourceName)] = resource.MustParse(q)
			}
		}
		return r
	}
	var tolerations []corev1.Toleration
	for kv, effect := range k.NodeTolerations {
		key, value, hasValue := strings.Cut(kv, "=")
		tol := corev1.Toleration{Key: key, Effect: corev1.TaintEffect(effect), Operator: corev1.TolerationOpExists}
		if hasValue {
			tol.Operator, tol.Value = corev1.TolerationOpEqual, value
		}
		tolerations = append(tolerations, tol)
	}
	slices.SortFunc(tolerations, func(a, b corev1.Toleration) int { return strings.Compare(a.Key, b.Key) })
	// The required node affinity, one term per node_selector_terms entry.
	var affinity *corev1.Affinity
	if a := k.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.Required != nil {
		sel := &corev1.NodeSelector{}
		for _, term := range a.NodeAffinity.Required.Terms {
			var st corev1.NodeSelectorTerm
			for _, r := range term.MatchExpressions {
				st.MatchExpressions = append(st.MatchExpressions, corev1.NodeSelectorRequirement{Key: r.Key, Operator: corev1.NodeSelectorOperator(r.Operator), Values: r.Values})
			}
			sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, st)
		}
		affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: sel}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   k.Namespace,
			Name:        name,
			Labels:      k.PodLabels,
			Annotations: k.PodAnnotations,
		},
		Spec: corev1.PodSpec{
			ServiceAccountName:           k.ServiceAccount,
			AutomountServiceAccountToken: k.AutomountServiceAccountToken,
			NodeSelector:                 k.NodeSelector,
			Tolerations:                  tolerations,
			Affinity:                     affinity,
			RestartPolicy:                corev1.RestartPolicyNever,
			Containers: []corev1.Container{
				{Name: "build", Image: k.Image, Resources: res(k.CPURequest, k.CPULimit, k.MemoryRequest, k.MemoryLimit)},
				{Name: "helper", Image: "gitlab-runner-helper", Resources: res(k.HelperCPURequest, k.HelperCPULimit, k.HelperMemoryRequest, k.HelperMemoryLimit)},
			},
		},
	}
}
