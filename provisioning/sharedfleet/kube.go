package sharedfleet

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

func labels(g fleetspec.ManagerGroup) map[string]string {
	return map[string]string{LabelManagerPod: g.ManagerName(), resources.LabelManagedBy: resources.ManagedBy}
}

// MetricsService is the manager's headless Service: its SRV records
// (_metrics._tcp.<manager>.<fleet>.svc) are how the fleet's Prometheus finds
// every replica.
func MetricsService(g fleetspec.ManagerGroup) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: g.ManagerName(), Namespace: g.Fleet, Labels: labels(g)},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{LabelManagerPod: g.ManagerName()},
			Ports:     []corev1.ServicePort{{Name: "metrics", Port: gitlabrunner.MetricsPort, TargetPort: intstr.FromInt32(gitlabrunner.MetricsPort), Protocol: corev1.ProtocolTCP}},
			// Draining managers keep being scraped while they finish their jobs.
			PublishNotReadyAddresses: true,
		},
	}
}

// PodDisruptionBudget keeps the group's floor of managers through node
// drains: an evicted manager drains its jobs, but the floor keeps taking new ones.
func PodDisruptionBudget(g fleetspec.ManagerGroup, s fleetspec.Scaling) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: g.ManagerName(), Namespace: g.Fleet, Labels: labels(g)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(max(s.MinManagers, 1))),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{LabelManagerPod: g.ManagerName()}},
		},
	}
}

// ScaledObject scales the manager Deployment (deployment) on the jobs its
// replicas run: one replica per TargetUtilization × concurrent running jobs.
// Scaling down removes a replica gracefully — it drains for up to its grace
// period — so scale-down waits out a long stabilization window.
func ScaledObject(g fleetspec.ManagerGroup, deployment string, s fleetspec.Scaling) (*unstructured.Unstructured, error) {
	if s.MinManagers < 1 || s.MaxManagers < s.MinManagers {
		return nil, fmt.Errorf("%s: minManagers must be at least 1 and maxManagers at least minManagers (got %d and %d)", g.Key("scaling"), s.MinManagers, s.MaxManagers)
	}
	util := s.TargetUtilization
	if util == 0 {
		util = fleetspec.DefaultTargetUtilization
	}
	if util <= 0 || util > 1 {
		return nil, fmt.Errorf("%s: targetUtilization %.2f must be in (0, 1]", g.Key("scaling.targetUtilization"), util)
	}
	concurrent := g.ConcurrentOrDefault()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1",
		"kind":       "ScaledObject",
		"metadata": map[string]any{
			"name": g.ManagerName(), "namespace": g.Fleet,
			"labels": map[string]any{LabelManagerPod: g.ManagerName(), resources.LabelManagedBy: resources.ManagedBy},
		},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": deployment},
			"minReplicaCount": int64(s.MinManagers),
			"maxReplicaCount": int64(s.MaxManagers),
			"pollingInterval": int64(30),
			"advanced": map[string]any{
				"horizontalPodAutoscalerConfig": map[string]any{
					"behavior": map[string]any{
						"scaleDown": map[string]any{
							"stabilizationWindowSeconds": int64(1800),
							"policies":                   []any{map[string]any{"type": "Pods", "value": int64(1), "periodSeconds": int64(600)}},
						},
					},
				},
			},
			"triggers": []any{map[string]any{
				"type": "prometheus",
				"metadata": map[string]any{
					"serverAddress": fmt.Sprintf("http://prometheus.%s.svc:%d", g.Fleet, PrometheusPort),
					"query":         fmt.Sprintf(`sum(gitlab_runner_jobs{job="runner-managers", manager=%q})`, g.ManagerName()),
					"threshold":     fmt.Sprintf("%d", int(float64(concurrent)*util)),
				},
			}},
		},
	}}
	return u, nil
}
