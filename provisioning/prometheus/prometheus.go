// Package prometheus holds the parts of Prometheus's configuration runnerfleet
// writes, as typed structs rendered to YAML, and a wrapper of promtool for
// the tests that check every file before it ships.
package prometheus

import (
	"sigs.k8s.io/yaml"
)

// Config is a prometheus.yml.
type Config struct {
	Global        Global         `json:"global"`
	RuleFiles     []string       `json:"rule_files,omitempty"`
	Alerting      *Alerting      `json:"alerting,omitempty"`
	ScrapeConfigs []ScrapeConfig `json:"scrape_configs"`
}

// Global settings.
type Global struct {
	ScrapeInterval     string            `json:"scrape_interval,omitempty"`
	EvaluationInterval string            `json:"evaluation_interval,omitempty"`
	ExternalLabels     map[string]string `json:"external_labels,omitempty"`
}

// ScrapeConfig is one scrape_configs entry.
type ScrapeConfig struct {
	JobName              string               `json:"job_name"`
	ScrapeInterval       string               `json:"scrape_interval,omitempty"`
	MetricsPath          string               `json:"metrics_path,omitempty"`
	HonorLabels          bool                 `json:"honor_labels,omitempty"`
	Params               map[string][]string  `json:"params,omitempty"`
	StaticConfigs        []StaticConfig       `json:"static_configs,omitempty"`
	GCESDConfigs         []GCESDConfig        `json:"gce_sd_configs,omitempty"`
	DNSSDConfigs         []DNSSDConfig        `json:"dns_sd_configs,omitempty"`
	KubernetesSDConfigs  []KubernetesSDConfig `json:"kubernetes_sd_configs,omitempty"`
	MetricRelabelConfigs []RelabelConfig      `json:"metric_relabel_configs,omitempty"`
	RelabelConfigs       []RelabelConfig      `json:"relabel_configs,omitempty"`
}

// StaticConfig lists fixed targets.
type StaticConfig struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// GCESDConfig finds targets among GCE instances.
type GCESDConfig struct {
	Project         string `json:"project"`
	Zone            string `json:"zone"`
	Filter          string `json:"filter,omitempty"`
	Port            int    `json:"port"`
	RefreshInterval string `json:"refresh_interval,omitempty"`
}

// DNSSDConfig finds targets by DNS, for example the SRV records of a
// Kubernetes headless Service (_metrics._tcp.<service>.<namespace>.svc.cluster.local).
type DNSSDConfig struct {
	Names           []string `json:"names"`
	Type            string   `json:"type,omitempty"`
	RefreshInterval string   `json:"refresh_interval,omitempty"`
}

// KubernetesSDConfig finds targets through the Kubernetes API (in
// cluster, as the pod's ServiceAccount).
type KubernetesSDConfig struct {
	// Role is pod, endpoints, endpointslice, service, node or ingress.
	Role       string                 `json:"role"`
	Namespaces *KubernetesNamespaces  `json:"namespaces,omitempty"`
	Selectors  []KubernetesSDSelector `json:"selectors,omitempty"`
}

// KubernetesNamespaces limits discovery to named namespaces.
type KubernetesNamespaces struct {
	Names []string `json:"names"`
}

// KubernetesSDSelector narrows what the API lists and watches.
type KubernetesSDSelector struct {
	Role  string `json:"role"`
	Label string `json:"label,omitempty"`
	Field string `json:"field,omitempty"`
}

// Alerting is where alerts go.
type Alerting struct {
	Alertmanagers []AlertmanagerConfig `json:"alertmanagers"`
}

// AlertmanagerConfig is one set of Alertmanagers.
type AlertmanagerConfig struct {
	APIVersion    string         `json:"api_version,omitempty"`
	StaticConfigs []StaticConfig `json:"static_configs"`
}

// RelabelConfig is a relabelling step.
type RelabelConfig struct {
	SourceLabels []string `json:"source_labels,omitempty"`
	Separator    string   `json:"separator,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	TargetLabel  string   `json:"target_label,omitempty"`
	Replacement  string   `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// RuleFile is a rule file.
type RuleFile struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is a group of rules evaluated together.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is a recording rule (Record) or an alerting rule (Alert).
type Rule struct {
	Record      string            `json:"record,omitempty"`
	Alert       string            `json:"alert,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Render encodes any of the above as YAML.
func Render(v any) ([]byte, error) { return yaml.Marshal(v) }
