package cost_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
)

// The default table prices every type it lists, on demand and spot, spot
// below on demand, and covers the default ComputeClass family; it passes
// its own check.
func TestTheDefaultPricesAreComplete(t *testing.T) {
	d := cost.Defaults()
	if errs := d.Validate(field.NewPath("cost")); len(errs) > 0 {
		t.Fatalf("the defaults fail their own check: %v", errs)
	}
	var family bool
	for _, p := range d.Prices {
		if *p.OnDemand <= 0 || *p.Spot <= 0 || *p.Spot >= *p.OnDemand {
			t.Errorf("%s: on demand %v, spot %v: want 0 < spot < on demand", p.InstanceType, *p.OnDemand, *p.Spot)
		}
		family = family || strings.HasPrefix(p.InstanceType, v1alpha1.DefaultMachineFamily+"-")
	}
	if !family {
		t.Errorf("no default price for the default machine family %s", v1alpha1.DefaultMachineFamily)
	}
	if got := len(d.Rates()); got != 2*len(d.Prices) {
		t.Errorf("%d rates for %d types", got, len(d.Prices))
	}
}

// Validate names the field of each problem; the negative control is a
// good table, which passes.
func TestValidateNamesTheField(t *testing.T) {
	bad := cost.Table{Prices: []cost.Price{
		{InstanceType: "a", OnDemand: ptr.To(-1.0)},
		{InstanceType: "b", OnDemand: ptr.To(1.0), Spot: ptr.To(-0.5)},
	}}
	var got []string
	for _, e := range bad.Validate(field.NewPath("cost")) {
		got = append(got, e.Field)
	}
	want := []string{"cost.prices[0].onDemand", "cost.prices[0].spot", "cost.prices[1].spot"}
	if !slices.Equal(got, want) {
		t.Errorf("problems at %v, want %v", got, want)
	}
	good := cost.Table{Currency: "EUR", Prices: []cost.Price{{InstanceType: "a", OnDemand: ptr.To(0.0), Spot: ptr.To(0.0)}}}
	if errs := good.Validate(field.NewPath("cost")); len(errs) > 0 {
		t.Errorf("a good table: %v", errs)
	}
}

// Effective lays a table over the defaults: its entries replace the
// defaults of their type and add new types; its currency is kept.
func TestEffectiveLaysTheTableOverTheDefaults(t *testing.T) {
	e := cost.Effective(&cost.Table{Currency: "EUR", Prices: []cost.Price{
		{InstanceType: "m5.large", OnDemand: ptr.To(1.0), Spot: ptr.To(0.5)},
		{InstanceType: "zz.new", OnDemand: ptr.To(2.0), Spot: ptr.To(1.0)},
	}})
	if e.CurrencyOf() != "EUR" || len(e.Prices) != len(cost.DefaultPrices())+1 {
		t.Fatalf("currency %s, %d prices", e.CurrencyOf(), len(e.Prices))
	}
	for _, p := range e.Prices {
		if p.InstanceType == "m5.large" && *p.OnDemand != 1 {
			t.Errorf("m5.large on demand %v, want the table's 1", *p.OnDemand)
		}
	}
	if d := cost.Effective(nil); d.CurrencyOf() != cost.DefaultCurrency || len(d.Prices) != len(cost.DefaultPrices()) {
		t.Errorf("no table: %s, %d prices", d.CurrencyOf(), len(d.Prices))
	}
}
