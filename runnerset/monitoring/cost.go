package monitoring

import (
	"fmt"
	"strconv"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
)

// Cost. The controller exports how many nodes each RunnerSet has now, by
// capacity type and instance type (metrics.RunnerSetNodes); the recording
// rules below keep that gauge once per CostStep, deduplicated across the
// controller's replicas, record the price table as series and multiply
// the two into money per hour. What a team spent over a window is the
// integral of those gauges, NodeSeconds and Spent: a subquery samples them
// at every CostStep and adds the steps up, so the figure is the same on the
// cluster's Prometheus and on one that federates or remote-writes the
// recorded series at another interval. Each node is counted to within one
// step of when it came and went.

// CostStep is how often the cost rules are evaluated and the step the
// integrals sample them at.
const CostStep = time.Minute

// Recorded series of the cost rules.
const (
	// RecordNodes is metrics.RunnerSetNodes, one series per RunnerSet,
	// capacity type and instance type whichever replica exported it.
	RecordNodes = "runnerfleet:runnerset_nodes:max"
	// RecordPrice is the price table: one series per instance type and
	// capacity type, labelled with the currency, valued per hour.
	RecordPrice = "runnerfleet:instance_price:per_hour"
	// RecordCost is what each RunnerSet's nodes cost per hour now.
	RecordCost = "runnerfleet:runnerset_cost:per_hour"
	// RecordVMs and RecordVMCost are a shared fleet's running VMs by
	// group, capacity type and instance (machine) type, and what they
	// cost per hour (runnerfleet's shared fleet Prometheus records them).
	RecordVMs    = "runnerfleet:sharedfleet_vms:count"
	RecordVMCost = "runnerfleet:sharedfleet_cost:per_hour"
)

// Labels of the cost series beyond metrics' own.
const (
	LabelCurrency = "currency"
	LabelFleet    = "fleet"
	LabelGroup    = "group"
)

// AlertCostUnpriced fires for nodes whose instance type and capacity type
// the price table has no price for: their cost is left out.
const AlertCostUnpriced = "RunnerCostUnpriced"

// CostGroupName is the name of the cost rule group.
const CostGroupName = "runnerfleet.cost"

var (
	nodeKeys  = fmt.Sprintf("%s, %s, %s, %s", metrics.LabelNamespace, metrics.LabelRunnerSet, metrics.LabelCapacityType, metrics.LabelInstanceType)
	priceKeys = fmt.Sprintf("%s, %s", metrics.LabelCapacityType, metrics.LabelInstanceType)
)

// PriceRules record the prices of t, one constant series per instance type
// and capacity type.
func PriceRules(t cost.Table) []monitoringv1.Rule {
	var out []monitoringv1.Rule
	for _, r := range t.Rates() {
		out = append(out, monitoringv1.Rule{
			Record: RecordPrice,
			Expr:   intstr.FromString(fmt.Sprintf("vector(%s)", strconv.FormatFloat(r.PerHour, 'g', -1, 64))),
			Labels: map[string]string{metrics.LabelInstanceType: r.InstanceType, metrics.LabelCapacityType: r.CapacityType, LabelCurrency: t.CurrencyOf()},
		})
	}
	return out
}

// CostPerHour is the expression that prices the series of a recorded gauge
// of instances (RecordNodes, RecordVMs) by the price table's series.
func CostPerHour(instances string) string {
	return fmt.Sprintf("%s * on (%s) group_left (%s) %s", instances, priceKeys, LabelCurrency, RecordPrice)
}

// CostRuleGroups are the cost rules priced by t.
func CostRuleGroups(t cost.Table) []monitoringv1.RuleGroup {
	step := monitoringv1.Duration(promDuration(CostStep))
	rules := []monitoringv1.Rule{
		{Record: RecordNodes, Expr: intstr.FromString(fmt.Sprintf("max by (%s) (%s)", nodeKeys, metrics.RunnerSetNodes))},
	}
	rules = append(rules, PriceRules(t)...)
	rules = append(rules,
		monitoringv1.Rule{Record: RecordCost, Expr: intstr.FromString(CostPerHour(RecordNodes))},
		rule(AlertCostUnpriced,
			fmt.Sprintf("%s unless on (%s) %s", RecordNodes, priceKeys, RecordPrice),
			15*time.Minute, "warning",
			"{{ $labels.instance_type }} {{ $labels.capacity_type }} nodes of {{ $labels.namespace }}/{{ $labels.runnerset }} have no price",
			"RunnerSet {{ $labels.namespace }}/{{ $labels.runnerset }} has run {{ $labels.capacity_type }} nodes of instance type {{ $labels.instance_type }} for 15 minutes, and the price table has no price for them: their node-seconds are counted, their cost is left out of runnerfleet:runnerset_cost:per_hour, the dashboards and fleet cost. Add the type to the stack config's cost.prices (docs/operations/cost.md)."),
	)
	return []monitoringv1.RuleGroup{{Name: CostGroupName, Interval: &step, Rules: rules}}
}

// NodeSeconds is the PromQL of the node-seconds of the nodes that sel
// selects of RecordNodes (`{namespace="team-a"}`, or ""), summed by the
// labels by, over the window ending at the query's time (a PromQL
// duration such as 7d or Grafana's $__range).
func NodeSeconds(sel, by, window string) string {
	return integral(RecordNodes+sel, by, window, fmt.Sprintf("* %d", int64(CostStep.Seconds())))
}

// Spent is the PromQL of the money that the RecordCost series sel selects
// cost over window, summed by the labels by (currency is kept).
func Spent(sel, by, window string) string {
	return integral(RecordCost+sel, withCurrency(by), window, fmt.Sprintf("* %d / 3600", int64(CostStep.Seconds())))
}

// VMSeconds and VMSpent are NodeSeconds and Spent of a shared fleet's VMs.
func VMSeconds(sel, by, window string) string {
	return integral(RecordVMs+sel, by, window, fmt.Sprintf("* %d", int64(CostStep.Seconds())))
}

// VMSpent is Spent of a shared fleet's VMs.
func VMSpent(sel, by, window string) string {
	return integral(RecordVMCost+sel, withCurrency(by), window, fmt.Sprintf("* %d / 3600", int64(CostStep.Seconds())))
}

func withCurrency(by string) string {
	if by == "" {
		return LabelCurrency
	}
	return by + ", " + LabelCurrency
}

// integral samples series at every CostStep over window and adds the
// samples up, scaled.
func integral(series, by, window, scale string) string {
	return fmt.Sprintf("sum by (%s) (sum_over_time(%s[%s:%s])) %s", by, series, window, promDuration(CostStep), scale)
}
