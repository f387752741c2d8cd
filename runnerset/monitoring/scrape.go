// Package monitoring builds what watches the team runners: the scrape of
// every RunnerSet's managers (a PodMonitor for the Prometheus operator,
// a plain scrape config for a Prometheus without it), the alert rules (a
// PrometheusRule and the same groups as a rule file) and the Grafana
// dashboards. Everything is pure and built from the facts the controller
// uses (labels, ports, metric names), so a scrape finds what the
// controller creates. The chart and the manifests ship it (runnerset/install).
package monitoring

import (
	"maps"
	"slices"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// ManagersName names the team managers' PodMonitor and scrape job, and is
// the job label of their series either way.
const ManagersName = "runnerfleet-managers"

// LabelRunnerSet is the label every scraped manager series gets: the name
// of its RunnerSet (namespace comes with the target).
const LabelRunnerSet = "runnerset"

// podLabel is the service discovery meta label of a pod label.
func podLabel(name string) string {
	return "__meta_kubernetes_pod_label_" + sanitize(name)
}

// sanitize turns a Kubernetes label name into a Prometheus label name, as
// Prometheus' Kubernetes service discovery does.
func sanitize(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// ManagersPodMonitor has the Prometheus operator scrape every RunnerSet's
// managers, in every namespace, straight from their pods (no Service per
// RunnerSet): each manager pod's metrics port is a target, starting and
// draining ones included, labelled with its namespace, pod and RunnerSet,
// and with job ManagersName as the plain scrape config's.
func ManagersPodMonitor(namespace string, labels map[string]string, interval string) *monitoringv1.PodMonitor {
	port := resources.MetricsPortName
	job := ManagersName
	return &monitoringv1.PodMonitor{
		TypeMeta:   metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PodMonitorsKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ManagersName, Labels: maps.Clone(labels)},
		Spec: monitoringv1.PodMonitorSpec{
			Selector:          metav1.LabelSelector{MatchLabels: resources.ManagerPods()},
			NamespaceSelector: monitoringv1.NamespaceSelector{Any: true},
			PodMetricsEndpoints: []monitoringv1.PodMetricsEndpoint{{
				Port:     &port,
				Path:     "/metrics",
				Interval: monitoringv1.Duration(interval),
				RelabelConfigs: []monitoringv1.RelabelConfig{{
					SourceLabels: []monitoringv1.LabelName{monitoringv1.LabelName(podLabel(resources.LabelRunnerSet))},
					TargetLabel:  LabelRunnerSet,
					Action:       "replace",
				}, {
					// The operator's job would be "<namespace>/<name>"; the
					// dashboards select ManagersName.
					TargetLabel: "job",
					Replacement: &job,
					Action:      "replace",
				}},
				// gitlab-runner's own labels (runner, system_id) stay theirs.
				HonorLabels: false,
			}},
		},
	}
}

// ScrapeConfig is one prometheus.yml scrape_configs entry: the part of
// Prometheus' configuration this package writes.
type ScrapeConfig struct {
	JobName             string          `json:"job_name"`
	ScrapeInterval      string          `json:"scrape_interval,omitempty"`
	MetricsPath         string          `json:"metrics_path,omitempty"`
	KubernetesSDConfigs []KubernetesSD  `json:"kubernetes_sd_configs"`
	RelabelConfigs      []RelabelConfig `json:"relabel_configs"`
}

// KubernetesSD is a kubernetes_sd_configs entry.
type KubernetesSD struct {
	Role string `json:"role"`
	// KubeconfigFile is for a Prometheus outside the cluster (the local
	// stack's); one inside it uses its ServiceAccount.
	KubeconfigFile string `json:"kubeconfig_file,omitempty"`
}

// RelabelConfig is a relabel_configs step.
type RelabelConfig struct {
	SourceLabels []string `json:"source_labels,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	TargetLabel  string   `json:"target_label,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// ManagersScrapeConfig is the scrape of every RunnerSet's managers for a
// Prometheus without the operator, running in the cluster: Kubernetes pod
// discovery, kept to the manager pods and their metrics port, with the
// labels the PodMonitor gives (namespace, pod, runnerset), so that the
// alert rules and dashboards work with either.
func ManagersScrapeConfig(interval string) ScrapeConfig {
	var relabel []RelabelConfig
	for _, k := range sortedKeys(resources.ManagerPods()) {
		relabel = append(relabel, RelabelConfig{
			SourceLabels: []string{podLabel(k)}, Regex: resources.ManagerPods()[k], Action: "keep",
		})
	}
	relabel = append(relabel,
		RelabelConfig{SourceLabels: []string{"__meta_kubernetes_pod_container_port_name"}, Regex: resources.MetricsPortName, Action: "keep"},
		RelabelConfig{SourceLabels: []string{"__meta_kubernetes_namespace"}, TargetLabel: "namespace", Action: "replace"},
		RelabelConfig{SourceLabels: []string{"__meta_kubernetes_pod_name"}, TargetLabel: "pod", Action: "replace"},
		RelabelConfig{SourceLabels: []string{podLabel(resources.LabelRunnerSet)}, TargetLabel: LabelRunnerSet, Action: "replace"},
	)
	return ScrapeConfig{
		JobName:             ManagersName,
		ScrapeInterval:      interval,
		MetricsPath:         "/metrics",
		KubernetesSDConfigs: []KubernetesSD{{Role: "pod"}},
		RelabelConfigs:      relabel,
	}
}

// ScrapeConfigYAML is ManagersScrapeConfig as a scrape_configs list, to
// paste under scrape_configs: of a prometheus.yml.
func ScrapeConfigYAML(interval string) ([]byte, error) {
	return yaml.Marshal([]ScrapeConfig{ManagersScrapeConfig(interval)})
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
