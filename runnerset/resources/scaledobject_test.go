package resources

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// kedaPrometheusMetadata is what KEDA v2.21.0's Prometheus scaler reads of
// a trigger's metadata, read by its rules:
//   - pkg/scalers/prometheus_scaler.go:52-59 (prometheusMetadata's keda
//     tags): serverAddress, query and threshold required; activationThreshold
//     optional; ignoreNullValues defaults to true;
//   - pkg/scalers/scalersconfig/typed_config.go:500-520 (configParamValue):
//     a value is trimmed, and an empty one is a missing one (a required one
//     missing is an error, lines 266-271);
//   - typed_config.go:440-496 (setConfigValueHelper): a string is taken as
//     is, a bool by strconv.ParseBool (481), a float64 by json.Unmarshal
//     (490);
//   - pkg/scalers/scaler.go:101-111 (GetMetricTargetType): metricType ""
//     is AverageValue, Utilization is refused.
type kedaPrometheusMetadata struct {
	serverAddress, query           string
	threshold, activationThreshold float64
	ignoreNullValues               bool
	metricType                     string
}

func parseKEDAPrometheus(trigger map[string]any) (kedaPrometheusMetadata, error) {
	var m kedaPrometheusMetadata
	if trigger["type"] != "prometheus" {
		return m, fmt.Errorf("trigger type %v", trigger["type"])
	}
	md, ok := trigger["metadata"].(map[string]any)
	if !ok {
		return m, fmt.Errorf("metadata %T", trigger["metadata"])
	}
	value := func(key string, required bool) (string, bool, error) {
		raw, ok := md[key]
		if !ok {
			if required {
				return "", false, fmt.Errorf("missing required parameter %q", key)
			}
			return "", false, nil
		}
		s, isString := raw.(string) // map[string]string in KEDA's types
		if !isString {
			return "", false, fmt.Errorf("%s: %T, not a string", key, raw)
		}
		s = strings.TrimSpace(s)
		if s == "" && required {
			return "", false, fmt.Errorf("missing required parameter %q", key)
		}
		return s, s != "", nil
	}
	float := func(key string, required bool, into *float64) error {
		s, ok, err := value(key, required)
		if err != nil || !ok {
			return err
		}
		return json.Unmarshal([]byte(s), into)
	}
	var err error
	if m.serverAddress, _, err = value(KEDAServerAddress, true); err != nil {
		return m, err
	}
	if m.query, _, err = value(KEDAQuery, true); err != nil {
		return m, err
	}
	if err := float(KEDAThreshold, true, &m.threshold); err != nil {
		return m, fmt.Errorf("threshold: %w", err)
	}
	if err := float(KEDAActivationThreshold, false, &m.activationThreshold); err != nil {
		return m, fmt.Errorf("activationThreshold: %w", err)
	}
	m.ignoreNullValues = true
	if s, ok, err := value(KEDAIgnoreNullValues, false); err != nil {
		return m, err
	} else if ok {
		if m.ignoreNullValues, err = strconv.ParseBool(s); err != nil {
			return m, fmt.Errorf("ignoreNullValues: %w", err)
		}
	}
	switch mt, _ := trigger["metricType"].(string); mt {
	case "", "AverageValue":
		m.metricType = "AverageValue"
	case "Value":
		m.metricType = mt
	default:
		return m, fmt.Errorf("metricType %q", mt)
	}
	return m, nil
}

// The ScaledObject's trigger metadata reads, by KEDA's Prometheus scaler's
// own parsing rules, as the values the builder was given: thresholds as
// numbers (a fractional one too), the address and query as they are.
func TestScaledObjectTriggersParseAsKEDAsPrometheusScalerReadsThem(t *testing.T) {
	rs := &v1alpha1.RunnerSet{}
	rs.Namespace, rs.Name = "team-a", "build"
	rs.Spec.Managers.Autoscale = &v1alpha1.ManagerAutoscale{MinReplicas: 0, MaxReplicas: 3, TargetRunningJobs: 4}
	in := []PrometheusTrigger{
		{Name: "running-jobs", ServerAddress: "http://prometheus:9090", Query: `sum(x{a="b"}) or vector(0)`, Threshold: 4},
		{Name: "queue-time", ServerAddress: "https://other:9090", Query: "y", Threshold: 90.5, ActivationThreshold: 90.5},
	}
	u := ScaledObject(rs, in)
	// Through JSON, as the API server and KEDA see it.
	b, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	back := &unstructured.Unstructured{}
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	triggers, _, _ := unstructured.NestedSlice(back.Object, "spec", "triggers")
	if len(triggers) != len(in) {
		t.Fatalf("%d triggers, want %d", len(triggers), len(in))
	}
	for i, tr := range triggers {
		got, err := parseKEDAPrometheus(tr.(map[string]any))
		if err != nil {
			t.Fatalf("trigger %d: KEDA would refuse it: %v", i, err)
		}
		want := kedaPrometheusMetadata{in[i].ServerAddress, in[i].Query, in[i].Threshold, in[i].ActivationThreshold, false, "AverageValue"}
		if got != want {
			t.Errorf("trigger %d reads %+v, want %+v", i, got, want)
		}
	}
	// The negative control: a threshold KEDA could not read is caught.
	bad := ScaledObject(rs, in[:1])
	tr, _, _ := unstructured.NestedSlice(bad.Object, "spec", "triggers")
	tr[0].(map[string]any)["metadata"].(map[string]any)[KEDAThreshold] = "4 jobs"
	if _, err := parseKEDAPrometheus(tr[0].(map[string]any)); err == nil {
		t.Error(`the parser read threshold "4 jobs"`)
	}
}

// An autoscaled Deployment's spec hash leaves out replicas, so that no
// count KEDA sets, and no minReplicas, makes it look out of date; it is
// marked for the writer to keep the live count. Without autoscale the
// count is part of the hash.
func TestAutoscaledDeploymentLeavesTheCountToKEDA(t *testing.T) {
	build := func(mutate func(*v1alpha1.RunnerSet)) string {
		rs := rs()
		mutate(rs)
		d := Deployment(rs, "gitlab-runner:v19", "h", "jobs")
		if got := ScaledExternally(d); got != (rs.Spec.Managers.Autoscale != nil) {
			t.Errorf("ScaledExternally %v with autoscale %v", got, rs.Spec.Managers.Autoscale)
		}
		if a := rs.Spec.Managers.Autoscale; a != nil && *d.Spec.Replicas != a.MinReplicas {
			t.Errorf("a new autoscaled Deployment starts with %d, want minReplicas %d", *d.Spec.Replicas, a.MinReplicas)
		}
		return SpecHash(d)
	}
	one := build(func(rs *v1alpha1.RunnerSet) {
		rs.Spec.Managers.Autoscale = &v1alpha1.ManagerAutoscale{MinReplicas: 1, MaxReplicas: 5, TargetRunningJobs: 2}
	})
	three := build(func(rs *v1alpha1.RunnerSet) {
		rs.Spec.Managers.Autoscale = &v1alpha1.ManagerAutoscale{MinReplicas: 3, MaxReplicas: 5, TargetRunningJobs: 2}
		rs.Spec.Managers.Replicas = new(int32)
	})
	if one != three {
		t.Error("minReplicas or replicas changed an autoscaled Deployment's spec hash")
	}
	r1 := build(func(rs *v1alpha1.RunnerSet) {})
	r2 := build(func(rs *v1alpha1.RunnerSet) { rs.Spec.Managers.Replicas = new(int32) })
	if r1 == r2 {
		t.Error("replicas left out of a Deployment's hash without autoscale")
	}
}
