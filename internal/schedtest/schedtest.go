// Package schedtest answers, for tests, whether kube-scheduler would place
// a pod on a node: the node's labels against the pod's nodeSelector and
// required node affinity, and the node's NoSchedule and NoExecute taints
// against the pod's tolerations, with the scheduler's own helpers
// (k8s.io/component-helpers), not a copy of their rules.
package schedtest

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Fits returns nil when the scheduler's node affinity and taint filters
// admit a pod of spec onto node, and otherwise which one refuses it.
func Fits(spec corev1.PodSpec, node *corev1.Node) error {
	pod := &corev1.Pod{Spec: spec}
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	if err != nil {
		return fmt.Errorf("node affinity: %w", err)
	}
	if !ok {
		return fmt.Errorf("node %s (labels %v) does not match nodeSelector %v / required affinity", node.Name, node.Labels, spec.NodeSelector)
	}
	taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	if untolerated {
		return fmt.Errorf("node %s has taint %s, which tolerations %v do not tolerate", node.Name, taint.ToString(), spec.Tolerations)
	}
	return nil
}
