package stackconfig

import (
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/runnerset/cost"
)

// A price table with a price missing or negative, an entry without its
// instance type, a type given twice or a currency that is no ISO code is
// refused, each problem naming its key and what to give.
func TestABadPriceTableIsRefusedNamingTheField(t *testing.T) {
	_, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","cost":{"currency":"euro","prices":[
		{"instanceType":"m7i.large","onDemand":0.1008},
		{"instanceType":"n2d-standard-4","onDemand":-0.17,"spot":0.05},
		{"onDemand":1,"spot":0.5},
		{"instanceType":"m7i.large","onDemand":0.1,"spot":0.04}]}}`), "dev")
	for _, want := range []string{
		`runnerfleet:fleet.cost.currency: Invalid value: "euro": an ISO 4217 code such as USD or EUR`,
		`runnerfleet:fleet.cost.prices[0].spot: Required value: give the hourly spot price of m7i.large`,
		`runnerfleet:fleet.cost.prices[1].onDemand: Invalid value: -0.17: a price is 0 or more`,
		`runnerfleet:fleet.cost.prices[2].instanceType: Required value`,
		`runnerfleet:fleet.cost.prices[3].instanceType: Duplicate value: "m7i.large (also prices[0])`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
	for _, ok := range []string{"prices[1].spot", "prices[0].onDemand"} {
		if err != nil && strings.Contains(err.Error(), ok) {
			t.Errorf("a good price is refused: %s in\n%v", ok, err)
		}
	}

	// A good table decodes, and goes over the defaults.
	f, err := Decode([]byte(`{"platform":"local","gitlabURL":"https://gitlab.example.com","cost":{"currency":"EUR","prices":[
		{"instanceType":"m7i.large","onDemand":0.11,"spot":0},{"instanceType":"x9.tiny","onDemand":0.01,"spot":0.005}]}}`), "dev")
	if err != nil {
		t.Fatal(err)
	}
	rates := map[string]float64{}
	for _, r := range cost.Effective(f.Cost).Rates() {
		rates[r.InstanceType+" "+r.CapacityType] = r.PerHour
	}
	if rates["m7i.large on-demand"] != 0.11 || rates["m7i.large spot"] != 0 || rates["x9.tiny spot"] != 0.005 || rates["n2d-standard-4 on-demand"] == 0 {
		t.Errorf("the stack's prices over the defaults: %v", rates)
	}
}
