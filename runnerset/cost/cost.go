// Package cost is the price table that turns the node-seconds of a tag's
// capacity and the VM-seconds of a shared fleet's groups into money: hourly
// prices by instance (or machine) type and capacity type, the defaults for
// the types the project's stacks and defaults use, and the check that a
// table names a price for every entry. It is a model: the stack config
// decodes into it (cost:), runnerset/monitoring builds the recording rules
// from it, and fleet cost reads what those rules record.
package cost

import (
	"fmt"
	"maps"
	"regexp"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// Capacity types, as Karpenter labels its nodes (karpenter.sh/capacity-type)
// and as the controller exports a GKE node (spot when GKE labels it a Spot
// VM, on-demand otherwise).
const (
	Spot     = karpv1.CapacityTypeSpot
	OnDemand = karpv1.CapacityTypeOnDemand
)

// DefaultCurrency is what the default prices are in.
const DefaultCurrency = "USD"

// Price is what one instance type costs per hour.
type Price struct {
	// InstanceType is the node's node.kubernetes.io/instance-type (an EC2
	// instance type, a GCE machine type) or a shared fleet group's
	// machineType.
	InstanceType string `json:"instanceType"`
	// OnDemand is the hourly price of an on-demand instance.
	OnDemand *float64 `json:"onDemand,omitempty"`
	// Spot is the hourly price of a spot instance.
	Spot *float64 `json:"spot,omitempty"`
}

// Table is a price table.
type Table struct {
	// Currency the prices are in (a label on the cost series); default USD.
	Currency string `json:"currency,omitempty"`
	// Prices by instance type. The stack's entries are added to the
	// defaults (DefaultPrices); an entry replaces the default of its type.
	Prices []Price `json:"prices,omitempty"`
}

// Rate is one hourly price of a table: an instance type at a capacity type.
type Rate struct {
	InstanceType string
	CapacityType string
	PerHour      float64
}

// Source says where the default prices come from and when they were
// recorded; docs/operations/cost.md says the same.
const Source = "the providers' list prices as known in mid-2025 (AWS EC2 On-Demand and Spot pricing, us-east-1, Linux; " +
	"Google Compute Engine VM instance and Spot VM pricing, us-central1), written down without access to those pages " +
	"and not checked against them: the on-demand figures are the published hourly rates as remembered, the spot figures " +
	"typical values rather than a snapshot (spot prices move daily on AWS, about monthly on GCE), and prices differ by region: set your own"

var currency = regexp.MustCompile(`^[A-Z]{3}$`)

func p(v float64) *float64 { return &v }

// DefaultPrices are the hourly list prices of the instance types the
// project's stacks and defaults use: the EC2 types of the eks-dev stack and
// their neighbours of the same families, the GCE machine types of the
// default ComputeClass family (n2d, v1alpha1.DefaultMachineFamily) and of
// the gke-shared stack's groups (e2).
func DefaultPrices() []Price {
	return []Price{
		// EC2, us-east-1, Linux.
		{InstanceType: "m5.large", OnDemand: p(0.096), Spot: p(0.0378)},
		{InstanceType: "m5.xlarge", OnDemand: p(0.192), Spot: p(0.0756)},
		{InstanceType: "m6i.large", OnDemand: p(0.096), Spot: p(0.0375)},
		{InstanceType: "m6i.xlarge", OnDemand: p(0.192), Spot: p(0.075)},
		{InstanceType: "m6a.large", OnDemand: p(0.0864), Spot: p(0.0366)},
		{InstanceType: "m6a.xlarge", OnDemand: p(0.1728), Spot: p(0.0732)},
		{InstanceType: "m7i.large", OnDemand: p(0.1008), Spot: p(0.0389)},
		{InstanceType: "m7i.xlarge", OnDemand: p(0.2016), Spot: p(0.0778)},
		{InstanceType: "m7g.large", OnDemand: p(0.0816), Spot: p(0.0332)},
		{InstanceType: "m7g.xlarge", OnDemand: p(0.1632), Spot: p(0.0664)},
		{InstanceType: "c6i.large", OnDemand: p(0.085), Spot: p(0.0339)},
		{InstanceType: "c6i.xlarge", OnDemand: p(0.17), Spot: p(0.0678)},
		{InstanceType: "c7i.large", OnDemand: p(0.08925), Spot: p(0.0346)},
		{InstanceType: "c7i.xlarge", OnDemand: p(0.1785), Spot: p(0.0692)},
		{InstanceType: "c7g.large", OnDemand: p(0.0725), Spot: p(0.0294)},
		{InstanceType: "c7g.xlarge", OnDemand: p(0.145), Spot: p(0.0588)},
		// GCE, us-central1.
		{InstanceType: "n2d-standard-2", OnDemand: p(0.084984), Spot: p(0.025495)},
		{InstanceType: "n2d-standard-4", OnDemand: p(0.169968), Spot: p(0.05099)},
		{InstanceType: "n2d-standard-8", OnDemand: p(0.339936), Spot: p(0.10198)},
		{InstanceType: "n2d-standard-16", OnDemand: p(0.679872), Spot: p(0.20396)},
		{InstanceType: "e2-standard-2", OnDemand: p(0.067006), Spot: p(0.020102)},
		{InstanceType: "e2-standard-4", OnDemand: p(0.134012), Spot: p(0.040204)},
		{InstanceType: "e2-standard-8", OnDemand: p(0.268024), Spot: p(0.080407)},
	}
}

// Defaults is the default table.
func Defaults() Table { return Table{Currency: DefaultCurrency, Prices: DefaultPrices()} }

// Validate names every entry of t without an instance type, with a price
// missing or negative, and every instance type listed twice, under path
// (the stack config's cost).
func (t Table) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Currency != "" && !currency.MatchString(t.Currency) {
		errs = append(errs, field.Invalid(path.Child("currency"), t.Currency, "an ISO 4217 code such as USD or EUR"))
	}
	seen := map[string]int{}
	for i, pr := range t.Prices {
		at := path.Child("prices").Index(i)
		if pr.InstanceType == "" {
			errs = append(errs, field.Required(at.Child("instanceType"), "name the instance type this price is for, such as m7i.large or n2d-standard-4"))
		} else if j, ok := seen[pr.InstanceType]; ok {
			errs = append(errs, field.Duplicate(at.Child("instanceType"), fmt.Sprintf("%s (also prices[%d]): give each instance type once", pr.InstanceType, j)))
		} else {
			seen[pr.InstanceType] = i
		}
		for _, f := range []struct {
			name string
			v    *float64
		}{{"onDemand", pr.OnDemand}, {"spot", pr.Spot}} {
			switch {
			case f.v == nil:
				errs = append(errs, field.Required(at.Child(f.name), fmt.Sprintf("give the hourly %s price of %s in %s (0 for a type you are not billed for)", f.name, pr.InstanceType, t.currency())))
			case !(*f.v >= 0):
				errs = append(errs, field.Invalid(at.Child(f.name), *f.v, "a price is 0 or more: give the hourly price in "+t.currency()))
			}
		}
	}
	return errs
}

func (t Table) currency() string {
	if t.Currency == "" {
		return DefaultCurrency
	}
	return t.Currency
}

// Effective is t over the defaults: the defaults' prices with t's entries
// added, an entry of t replacing the default of its instance type, and t's
// currency (default USD). A nil t is the defaults.
func Effective(t *Table) Table {
	byType := map[string]Price{}
	for _, pr := range DefaultPrices() {
		byType[pr.InstanceType] = pr
	}
	out := Table{Currency: DefaultCurrency}
	if t != nil {
		out.Currency = t.currency()
		for _, pr := range t.Prices {
			byType[pr.InstanceType] = pr
		}
	}
	for _, k := range slices.Sorted(maps.Keys(byType)) {
		out.Prices = append(out.Prices, byType[k])
	}
	return out
}

// Rates are t's prices, one per instance type and capacity type, sorted;
// a missing price is left out (Validate refuses it in a stack's table).
func (t Table) Rates() []Rate {
	var out []Rate
	for _, pr := range t.Prices {
		if pr.OnDemand != nil {
			out = append(out, Rate{InstanceType: pr.InstanceType, CapacityType: OnDemand, PerHour: *pr.OnDemand})
		}
		if pr.Spot != nil {
			out = append(out, Rate{InstanceType: pr.InstanceType, CapacityType: Spot, PerHour: *pr.Spot})
		}
	}
	slices.SortFunc(out, func(a, b Rate) int {
		if a.InstanceType != b.InstanceType {
			if a.InstanceType < b.InstanceType {
				return -1
			}
			return 1
		}
		if a.CapacityType < b.CapacityType {
			return -1
		}
		if a.CapacityType > b.CapacityType {
			return 1
		}
		return 0
	})
	return out
}

// CurrencyOf is t's currency, USD when it names none.
func (t Table) CurrencyOf() string { return t.currency() }
