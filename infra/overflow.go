package infra

import (
	"encoding/json"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// primaryStackRef names the StackReference an overflow stack reads its
// primary stack through.
const primaryStackRef = "overflow-primary"

// readPrimary reads, for a stack whose overflowOf names another (the
// primary, in another region), that stack's stackconfig.PrimaryOutput:
// its teams and the address its Prometheus is reached at from here. It
// refuses, before anything is declared, an overflow team whose primary is
// not a team there with the same namespace and tags, naming the key; and
// points each overflow's spec.overflow.prometheus at the primary's
// Prometheus, where KEDA reads the primary's queue time. Why two stacks
// and not two clusters in one: docs/adrs/0009-overflow-region-stack.md.
func readPrimary(ctx *pulumi.Context, f *stackconfig.Fleet) error {
	if f.OverflowOf == nil {
		return nil
	}
	key := stackconfig.Root.Child("overflowOf", "stack")
	ref, err := pulumi.NewStackReference(ctx, primaryStackRef, &pulumi.StackReferenceArgs{Name: pulumi.String(f.OverflowOf.Stack)})
	if err != nil {
		return fmt.Errorf("%s: reading stack %s: %w", key, f.OverflowOf.Stack, err)
	}
	d, err := ref.GetOutputDetails(stackconfig.PrimaryOutput)
	if err != nil {
		return fmt.Errorf("%s: reading the %s output of stack %s: %w", key, stackconfig.PrimaryOutput, f.OverflowOf.Stack, err)
	}
	var primary *stackconfig.PrimaryTeams
	if d.Value != nil {
		raw, err := json.Marshal(d.Value)
		if err != nil {
			return fmt.Errorf("%s: the %s output of stack %s: %w", key, stackconfig.PrimaryOutput, f.OverflowOf.Stack, err)
		}
		primary = &stackconfig.PrimaryTeams{}
		if err := json.Unmarshal(raw, primary); err != nil {
			return fmt.Errorf("%s: the %s output of stack %s is not a primary's teams: %w", key, stackconfig.PrimaryOutput, f.OverflowOf.Stack, err)
		}
	}
	if errs := f.CheckPrimary(primary); len(errs) > 0 {
		return stackconfig.AsError(errs)
	}
	for i := range f.Teams {
		if o := f.Teams[i].Overflow; o != nil {
			o.Prometheus = &v1alpha1.PrometheusEndpoint{Address: primary.PrometheusAddress}
		}
	}
	return nil
}
