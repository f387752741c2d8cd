package charts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/runnerfleet/runnerfleet/runnerset/install"
)

// value is one documented key of the chart's values, in values.yaml order.
type value struct {
	key    string
	doc    string
	schema map[string]any
}

func object(props []value, required ...string) map[string]any {
	p := map[string]any{}
	for _, v := range props {
		s := map[string]any{"description": v.doc}
		for k, x := range v.schema {
			s[k] = x
		}
		p[v.key] = s
	}
	o := map[string]any{"type": "object", "additionalProperties": false, "properties": p}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

func stringMap() map[string]any {
	return map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}}
}

func quantities() map[string]any {
	return map[string]any{"type": "object", "additionalProperties": map[string]any{
		"type": []string{"string", "number"}, "pattern": `^[0-9.]+([eE][-+]?[0-9]+|[munkMGTPE]|[KMGTPE]i)?$`,
	}}
}

var imageValues = []value{
	{"repository", "Image repository of the runnerset-controller.", map[string]any{"type": "string", "minLength": 1}},
	{"tag", "Image tag; the release's by default.", map[string]any{"type": "string", "minLength": 1}},
	{"digest", "Image digest (sha256:…, the image index's, as a release's digests.json lists it); when set the controller runs repository@digest and the tag is not used.", map[string]any{"type": "string", "pattern": `^(sha256:[a-f0-9]{64})?$`}},
	{"pullPolicy", "Image pull policy.", map[string]any{"type": "string", "enum": []string{"Always", "IfNotPresent", "Never"}}},
}

// values are the chart's top-level values, documented.
var values = []value{
	{"image", "The controller's image.", object(imageValues, "repository", "tag")},
	{"replicas", "Controller replicas; one leader reconciles, the others stand by (leader election).", map[string]any{"type": "integer", "minimum": 1, "maximum": 5}},
	{"resources", "The controller container's resources.", object([]value{
		{"requests", "Resource requests, for example cpu: 100m, memory: 128Mi.", quantities()},
		{"limits", "Resource limits.", quantities()},
	})},
	{"priorityClassName", "PriorityClass of the controller's pods; empty for none.", map[string]any{"type": "string"}},
	{"nodeSelector", "Node labels the controller's pods must match (keep them off spot capacity).", stringMap()},
	{"tolerations", "Tolerations of the controller's pods.", map[string]any{"type": "array", "items": object([]value{
		{"key", "Taint key.", map[string]any{"type": "string"}},
		{"operator", "Exists or Equal.", map[string]any{"type": "string", "enum": []string{"Exists", "Equal"}}},
		{"value", "Taint value.", map[string]any{"type": "string"}},
		{"effect", "Taint effect.", map[string]any{"type": "string", "enum": []string{"", "NoSchedule", "PreferNoSchedule", "NoExecute"}}},
		{"tolerationSeconds", "How long a NoExecute taint is tolerated.", map[string]any{"type": "integer"}},
	})}},
	{"affinity", "Affinity of the controller's pods (a Kubernetes Affinity; the API server checks its fields).", map[string]any{"type": "object"}},
	{"podAnnotations", "Annotations of the controller's pods.", stringMap()},
	{"logLevel", "Log level of the controller (JSON logs).", map[string]any{"type": "string", "enum": install.LogLevels}},
	{"podDisruptionBudget", "A PodDisruptionBudget that lets node drains take one controller replica at a time.", object([]value{
		{"enabled", "Create the PodDisruptionBudget.", map[string]any{"type": "boolean"}},
	})},
	{"serviceMonitor", "Prometheus operator ServiceMonitors for the controller's metrics and every RunnerSet's managers (needs the operator's CRDs; bind the ClusterRole runnerset-controller-metrics-reader to your Prometheus' ServiceAccount).", object([]value{
		{"enabled", "Create the ServiceMonitors.", map[string]any{"type": "boolean"}},
		{"interval", "Scrape interval, a Prometheus duration.", map[string]any{"type": "string", "pattern": `^([0-9]+(ms|s|m|h))+$`}},
		{"labels", "Labels your Prometheus selects ServiceMonitors by, for example release: kube-prometheus-stack.", stringMap()},
	})},
	{"prometheusRule", "A Prometheus operator PrometheusRule with the team runners' alerts (needs the operator's CRDs).", object([]value{
		{"enabled", "Create the PrometheusRule.", map[string]any{"type": "boolean"}},
		{"labels", "Labels your Prometheus selects rules by, for example release: kube-prometheus-stack.", stringMap()},
	})},
	{"dashboards", "The Grafana dashboards as ConfigMaps labelled grafana_dashboard, which Grafana's sidecar loads.", object([]value{
		{"enabled", "Create the dashboard ConfigMaps.", map[string]any{"type": "boolean"}},
		{"labels", "More labels of the ConfigMaps.", stringMap()},
	})},
}

// Schema is values.schema.json: every key typed, no key unknown.
func Schema() map[string]any {
	s := object(values)
	s["$schema"] = "https://json-schema.org/draft-07/schema#"
	s["title"] = "runnerfleet chart values"
	return s
}

func schemaJSON() ([]byte, error) {
	b, err := json.MarshalIndent(Schema(), "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// valuesYAML is values.yaml: DefaultValues, each key under its description.
func valuesYAML() ([]byte, error) { return ValuesYAML(DefaultValues()) }

// ValuesYAML is a values.yaml of vals (a release's pins the image digest),
// each key under its description.
func ValuesYAML(vals Values) ([]byte, error) {
	raw, err := json.Marshal(vals)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# Values of the runnerfleet chart. Generated from runnerset/install's defaults\n# by make manifests; values.schema.json refuses unknown keys and wrong types.\n")
	for _, v := range values {
		j, ok := m[v.key]
		if !ok {
			return nil, fmt.Errorf("value %s has no field in Values", v.key)
		}
		y, err := toYAML(map[string]json.RawMessage{v.key: j})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "\n# %s\n%s", v.doc, y)
		delete(m, v.key)
	}
	if len(m) > 0 {
		return nil, fmt.Errorf("Values fields without documentation: %v", m)
	}
	return b.Bytes(), nil
}

// valuesTable is the README's table of values.
func valuesTable() (string, error) {
	raw, err := json.Marshal(DefaultValues())
	if err != nil {
		return "", err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| key | type | default | description |\n| --- | --- | --- | --- |\n")
	var rows func(prefix string, vs []value, defaults map[string]any)
	rows = func(prefix string, vs []value, defaults map[string]any) {
		for _, v := range vs {
			key := prefix + v.key
			d := defaults[v.key]
			if sub, ok := v.schema["properties"].(map[string]any); ok && v.key != "resources" {
				var subs []value
				switch v.key {
				case "image":
					subs = imageValues
				default:
					// In key order: a map's order would make the README drift.
					for _, k := range slices.Sorted(maps.Keys(sub)) {
						s := sub[k].(map[string]any)
						subs = append(subs, value{k, s["description"].(string), s})
					}
				}
				dm, _ := d.(map[string]any)
				rows(key+".", subs, dm)
				continue
			}
			dj, _ := json.Marshal(d)
			fmt.Fprintf(&b, "| `%s` | %v | `%s` | %s |\n", key, v.schema["type"], dj, v.doc)
		}
	}
	rows("", values, m)
	return b.String(), nil
}
