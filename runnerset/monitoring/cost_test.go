package monitoring_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/internal/promtool"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

type expSample struct {
	Labels string  `json:"labels"`
	Value  float64 `json:"value"`
}

type exprCase struct {
	Expr       string      `json:"expr"`
	EvalTime   string      `json:"eval_time"`
	ExpSamples []expSample `json:"exp_samples"`
}

type costTest struct {
	Interval   string        `json:"interval"`
	InputSerie []inputSeries `json:"input_series"`
	Exprs      []exprCase    `json:"promql_expr_test"`
	AlertRules []alertCase   `json:"alert_rule_test"`
}

type costTests struct {
	RuleFiles          []string   `json:"rule_files"`
	EvaluationInterval string     `json:"evaluation_interval"`
	Tests              []costTest `json:"tests"`
}

// testPrices are round prices, so that promtool's figures are exact: 60 an
// hour for a spot node, 120 on demand.
var testPrices = cost.Table{Currency: "EUR", Prices: []cost.Price{
	{InstanceType: "m7i.large", OnDemand: ptr.To(120.0), Spot: ptr.To(60.0)},
	{InstanceType: "n2d-standard-4", OnDemand: ptr.To(120.0), Spot: ptr.To(60.0)},
}}

// The cost rules, as shipped, turn the controller's nodes-per-RunnerSet
// gauge into node-seconds and money per team: promtool test rules on the
// series the controller's Nodes collector exports. Two replicas exporting
// the same nodes count once; a node counts for as long as its series
// exists, to the step; a type without a price is counted, not priced, and
// alerted on. The negative controls: summed instead of deduplicated, and
// priced with spot and on-demand swapped, the same tests fail.
func TestCostRulesTurnNodesIntoNodeSecondsAndMoney(t *testing.T) {
	series := func(ns, capType, instanceType, instance string) string {
		return fmt.Sprintf(`%s{%s=%q,%s=%q,%s=%q,%s=%q,job="runnerfleet-controller",instance=%q}`, metrics.RunnerSetNodes,
			metrics.LabelNamespace, ns, metrics.LabelRunnerSet, "build", metrics.LabelCapacityType, capType, metrics.LabelInstanceType, instanceType, instance)
	}
	in := []inputSeries{
		// team-a: two spot nodes for the whole hour, exported by the
		// leader and, for a while, by a second replica too.
		{series("team-a", cost.Spot, "m7i.large", "10.0.0.1:8443"), "2x60"},
		{series("team-a", cost.Spot, "m7i.large", "10.0.0.2:8443"), "_x20 2x20"},
		// team-b: one on-demand node for the first 30 minutes.
		{series("team-b", cost.OnDemand, "n2d-standard-4", "10.0.0.1:8443"), "1x29 stale"},
		// team-c: a spot node of a type the table has no price for.
		{series("team-c", cost.Spot, "c9.huge", "10.0.0.1:8443"), "1x60"},
	}
	for _, s := range in {
		if name := s.Series[:strings.Index(s.Series, "{")]; !exported(t, name) {
			t.Fatalf("%s is not a metric the controller exports", name)
		}
	}
	// Over a window longer than the data: every evaluation at 0..60m.
	const window = "2h"
	cases := []exprCase{
		{Expr: monitoring.NodeSeconds("", metrics.LabelNamespace, window), EvalTime: "60m", ExpSamples: []expSample{
			{`{namespace="team-a"}`, 61 * 2 * 60},
			{`{namespace="team-b"}`, 30 * 1 * 60},
			{`{namespace="team-c"}`, 61 * 1 * 60},
		}},
		// 60 an hour for two spot nodes is 2 a minute; 120 an hour for
		// one on-demand node is 2 a minute; team-c's node has no price.
		{Expr: monitoring.Spent("", metrics.LabelNamespace, window), EvalTime: "60m", ExpSamples: []expSample{
			{`{namespace="team-a",currency="EUR"}`, 61 * 2},
			{`{namespace="team-b",currency="EUR"}`, 30 * 2},
		}},
		{Expr: monitoring.RecordCost, EvalTime: "10m", ExpSamples: []expSample{
			{fmt.Sprintf(`%s{namespace="team-a",runnerset="build",capacity_type="spot",instance_type="m7i.large",currency="EUR"}`, monitoring.RecordCost), 120},
			{fmt.Sprintf(`%s{namespace="team-b",runnerset="build",capacity_type="on-demand",instance_type="n2d-standard-4",currency="EUR"}`, monitoring.RecordCost), 120},
		}},
	}
	unpriced := map[string]string{"namespace": "team-c", "runnerset": "build", "capacity_type": cost.Spot, "instance_type": "c9.huge"}
	alerts := []alertCase{
		{"10m", monitoring.AlertCostUnpriced, nil},
		{"20m", monitoring.AlertCostUnpriced, []expAlert{expectIn(t, monitoring.CostRuleGroups(testPrices)[0].Rules, monitoring.AlertCostUnpriced, unpriced)}},
	}

	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := monitoring.RuleFileYAML(testPrices)
	if err != nil {
		t.Fatal(err)
	}
	write("rules.yaml", rules)
	if out, err := promtool.Run(dir, nil, "check", "rules", "rules.yaml"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	tests, err := yaml.Marshal(costTests{RuleFiles: []string{"rules.yaml"}, EvaluationInterval: "1m",
		Tests: []costTest{{Interval: "1m", InputSerie: in, Exprs: cases, AlertRules: alerts}}})
	if err != nil {
		t.Fatal(err)
	}
	write("cost.test.yaml", tests)
	if out, err := promtool.Run(dir, nil, "test", "rules", "cost.test.yaml"); err != nil {
		t.Errorf("%v\n%s", err, out)
	}

	// The negative controls.
	summed := strings.Replace(string(rules), "max by (namespace, runnerset, capacity_type, instance_type) ("+metrics.RunnerSetNodes, "sum by (namespace, runnerset, capacity_type, instance_type) ("+metrics.RunnerSetNodes, 1)
	if summed == string(rules) {
		t.Fatal("the rule file does not deduplicate the replicas' series as this test expects")
	}
	write("rules.yaml", []byte(summed))
	if out, err := promtool.Run(dir, nil, "test", "rules", "cost.test.yaml"); err == nil || !strings.Contains(out, "team-a") {
		t.Errorf("promtool passed the tests with the replicas' nodes summed (%v):\n%s", err, out)
	}
	swapped := cost.Table{Currency: "EUR"}
	for _, p := range testPrices.Prices {
		swapped.Prices = append(swapped.Prices, cost.Price{InstanceType: p.InstanceType, OnDemand: p.Spot, Spot: p.OnDemand})
	}
	if rules, err = monitoring.RuleFileYAML(swapped); err != nil {
		t.Fatal(err)
	}
	write("rules.yaml", rules)
	if out, err := promtool.Run(dir, nil, "test", "rules", "cost.test.yaml"); err == nil {
		t.Errorf("promtool passed the tests with spot and on-demand prices swapped:\n%s", out)
	}
}

// expectIn is expect for an alert of rules.
func expectIn(t *testing.T, rules []monitoringv1.Rule, alert string, labels map[string]string) expAlert {
	t.Helper()
	for _, r := range rules {
		if r.Alert != alert {
			continue
		}
		l := map[string]string{}
		for k, v := range labels {
			l[k] = v
		}
		for k, v := range r.Labels {
			l[k] = v
		}
		ann := map[string]string{}
		for k, v := range r.Annotations {
			for lk, lv := range labels {
				v = strings.ReplaceAll(v, "{{ $labels."+lk+" }}", lv)
			}
			ann[k] = v
		}
		return expAlert{ExpLabels: l, ExpAnnotations: ann}
	}
	t.Fatalf("no alert %s", alert)
	return expAlert{}
}
