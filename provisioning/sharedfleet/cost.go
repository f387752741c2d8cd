package sharedfleet

import (
	"fmt"

	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

// VM-seconds of a shared fleet. The fleet's Prometheus finds its running
// VMs by GCE discovery (PrometheusConfig's VMsJob), each labelled with its
// group (the VM label runnerfleet-manager-group) and its machine type
// (instance_type, from GCE's own record of the VM); the cost rules count
// them per group, mark each group's capacity type (spot unless the group
// says spot: false) and price them by the price table, as the controller's
// cost rules do a tag's nodes (runnerset/monitoring): the same series
// names and labels, so the dashboards and fleet cost read both alike. The
// central Prometheus federates the recorded series.

// PlanOption changes what PlanFleet plans.
type PlanOption func(*FleetPlan)

// WithPrices prices the fleet's VMs by t (the stack's cost table over the
// defaults, cost.Effective); without it, by the defaults.
func WithPrices(t cost.Table) PlanOption {
	return func(p *FleetPlan) { p.Monitoring.Prices = &t }
}

// prices is the fleet's price table.
func (f Fleet) prices() cost.Table {
	if f.Prices != nil {
		return *f.Prices
	}
	return cost.Defaults()
}

// CostRules record the fleet's running VMs per group, capacity type and
// instance type, the price table, and what the VMs cost per hour, every
// monitoring.CostStep.
func (f Fleet) CostRules() prometheus.RuleGroup {
	var rules []prometheus.Rule
	for _, g := range f.Groups {
		capType := cost.OnDemand
		if g.SpotVMs() {
			capType = cost.Spot
		}
		rules = append(rules, prometheus.Rule{
			Record: monitoring.RecordVMs,
			Expr:   fmt.Sprintf(`count by (%s) (up{job=%q, %s=%q})`, metrics.LabelInstanceType, VMsJob, monitoring.LabelGroup, g.Name),
			Labels: map[string]string{monitoring.LabelFleet: f.Name, monitoring.LabelGroup: g.Name, metrics.LabelCapacityType: capType},
		})
	}
	for _, r := range monitoring.PriceRules(f.prices()) {
		rules = append(rules, prometheus.Rule{Record: r.Record, Expr: r.Expr.String(), Labels: r.Labels})
	}
	rules = append(rules, prometheus.Rule{Record: monitoring.RecordVMCost, Expr: monitoring.CostPerHour(monitoring.RecordVMs)})
	return prometheus.RuleGroup{Name: "fleet-" + f.Name + "-cost", Interval: shortDuration(monitoring.CostStep), Rules: rules}
}
