package localcluster

import (
	"context"
	"fmt"

	kwokcloud "sigs.k8s.io/karpenter/kwok/cloudprovider"
	kwokoptions "sigs.k8s.io/karpenter/kwok/options"

	"github.com/runnerfleet/runnerfleet/runnerset/cost"
)

// KWOKPrices are the prices of the local stack's job nodes: the hourly
// price of each instance type Karpenter's kwok provider launches, on
// demand and spot, as that provider offers them (its instance types, the
// ones it picks the cheapest of). The cheapest offering of each capacity
// type is taken when zones differ.
func KWOKPrices(ctx context.Context) ([]cost.Price, error) {
	its, err := kwokcloud.ConstructInstanceTypes(kwokoptions.ToContext(ctx, &kwokoptions.Options{}))
	if err != nil {
		return nil, fmt.Errorf("the kwok provider's instance types: %w", err)
	}
	var out []cost.Price
	for _, it := range its {
		pr := cost.Price{InstanceType: it.Name}
		for _, o := range it.Offerings {
			p := o.Price
			switch o.CapacityType() {
			case cost.Spot:
				if pr.Spot == nil || p < *pr.Spot {
					pr.Spot = &p
				}
			case cost.OnDemand:
				if pr.OnDemand == nil || p < *pr.OnDemand {
					pr.OnDemand = &p
				}
			}
		}
		out = append(out, pr)
	}
	return out, nil
}
