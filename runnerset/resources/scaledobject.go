package resources

import (
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// KEDAVersion is the KEDA release whose ScaledObject the controller
// writes (its CRD in the tests, the version a condition asks for when
// the CRD is missing).
const KEDAVersion = "v2.21.0"

// ScaledObjectGVK is KEDA's ScaledObject. runnerfleet does not import
// KEDA's module: the object is written unstructured, its fields named as
// KEDA's apis/keda/v1alpha1 (scaledobject_types.go, scaletriggers_types.go)
// names them.
var ScaledObjectGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

// PrometheusTrigger is one trigger of type prometheus of a ScaledObject:
// KEDA's Prometheus scaler reads Query at ServerAddress and, with metric
// type AverageValue, asks for ceil(value / Threshold) managers; the
// trigger is active (scales from zero) above ActivationThreshold.
type PrometheusTrigger struct {
	Name                string
	ServerAddress       string
	Query               string
	Threshold           float64
	ActivationThreshold float64
}

// Trigger metadata keys of KEDA's Prometheus scaler (its
// prometheusMetadata's keda:"name=…" tags).
const (
	KEDAServerAddress       = "serverAddress"
	KEDAQuery               = "query"
	KEDAThreshold           = "threshold"
	KEDAActivationThreshold = "activationThreshold"
	KEDAIgnoreNullValues    = "ignoreNullValues"
)

// ScaledObject has KEDA scale rs's managers' Deployment between
// spec.managers.autoscale's minReplicas and maxReplicas by triggers. A
// manager scaled away drains as on any stop (the Deployment's preStop
// hook and grace period). Scale-down waits scaleDownDelay: the HPA's
// stabilization window, and KEDA's cooldown before the last goes.
func ScaledObject(rs *v1alpha1.RunnerSet, triggers []PrometheusTrigger) *unstructured.Unstructured {
	a := rs.Spec.Managers.Autoscale
	n := naming.For(rs.Namespace, rs.Name)
	delay := int64(a.ScaleDownDelayOrDefault().Seconds())
	ts := make([]any, 0, len(triggers))
	for _, t := range triggers {
		ts = append(ts, map[string]any{
			"type":       "prometheus",
			"name":       t.Name,
			"metricType": "AverageValue",
			"metadata": map[string]any{
				KEDAServerAddress:       t.ServerAddress,
				KEDAQuery:               t.Query,
				KEDAThreshold:           strconv.FormatFloat(t.Threshold, 'f', -1, 64),
				KEDAActivationThreshold: strconv.FormatFloat(t.ActivationThreshold, 'f', -1, 64),
				// The queries never return an empty result or NaN
				// (runnerset/monitoring): one that does is an error KEDA
				// reports, not a silent 0.
				KEDAIgnoreNullValues: "false",
			},
		})
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"scaleTargetRef": map[string]any{
				"apiVersion": "apps/v1",
				"kind":       "Deployment",
				"name":       n.Managers(),
			},
			"pollingInterval": max(1, int64(a.PollingIntervalOrDefault().Seconds())),
			"cooldownPeriod":  delay,
			"minReplicaCount": int64(a.MinReplicas),
			"maxReplicaCount": int64(a.MaxReplicas),
			"advanced": map[string]any{
				"horizontalPodAutoscalerConfig": map[string]any{
					"behavior": map[string]any{
						"scaleDown": map[string]any{"stabilizationWindowSeconds": delay},
					},
				},
			},
			"triggers": ts,
		},
	}}
	u.SetGroupVersionKind(ScaledObjectGVK)
	m := meta(rs, n.Managers(), ComponentManager)
	u.SetNamespace(m.Namespace)
	u.SetName(m.Name)
	u.SetLabels(m.Labels)
	return WithHash(u)
}
