package infratest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node is a node of a declared EKS node group or GKE node pool: the labels
// and taints at the given input paths (labels; taints, whose effects are
// spelt NO_SCHEDULE and so on), as Kubernetes gives them to the node.
func (r Resource) Node(labelsPath, taintsPath string) (*corev1.Node, error) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Labels: map[string]string{}}}
	if l := r.Input(labelsPath); l.IsObject() {
		for k, v := range l.ObjectValue().Mappable() {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%s: label %s is %T", r.Name, k, v)
			}
			n.Labels[k] = s
		}
	}
	if ts := r.Input(taintsPath); ts.IsArray() {
		for _, t := range ts.ArrayValue() {
			if !t.IsObject() {
				return nil, fmt.Errorf("%s: a taint is %v", r.Name, t)
			}
			m := t.ObjectValue().Mappable()
			key, _ := m["key"].(string)
			value, _ := m["value"].(string)
			effect, _ := m["effect"].(string)
			e, ok := map[string]corev1.TaintEffect{
				"NO_SCHEDULE": corev1.TaintEffectNoSchedule, "PREFER_NO_SCHEDULE": corev1.TaintEffectPreferNoSchedule, "NO_EXECUTE": corev1.TaintEffectNoExecute,
			}[effect]
			if !ok {
				return nil, fmt.Errorf("%s: taint %s has effect %q, which neither EKS nor GKE knows", r.Name, key, effect)
			}
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: e})
		}
	}
	return n, nil
}

// PodPlacement is the nodeSelector and tolerations of a chart's pods, from
// the release's values at path (dotted; "" for the top level), decoded
// into the Kubernetes types the chart's templates copy them to.
func (r Resource) PodPlacement(path string) (corev1.PodSpec, error) {
	v := r.Input(strings.TrimSuffix("values."+path, "."))
	var spec corev1.PodSpec
	if !v.IsObject() {
		return spec, fmt.Errorf("%s: no values at %s", r.Name, path)
	}
	m := v.ObjectValue().Mappable()
	b, err := json.Marshal(map[string]any{"nodeSelector": m["nodeSelector"], "tolerations": m["tolerations"]})
	if err != nil {
		return spec, err
	}
	// A misspelt toleration key is an error, as the chart's pods would
	// fail to validate.
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	err = d.Decode(&spec)
	return spec, err
}
