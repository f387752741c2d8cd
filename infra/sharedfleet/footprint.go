package sharedfleet

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// FootprintOutput is the stack output that holds the shared fleets'
// footprints (provisioning/sharedfleet.Footprint) by namespace, which the
// next update of the stack reads back (CheckFootprint).
const FootprintOutput = "sharedFleetFootprint"

// previousStackRef names the program's StackReference to its own stack.
const previousStackRef = "previous-deployment"

// CheckFootprint refuses, before anything is declared, a change of the
// stack's shared fleets that would orphan the VMs of the previous
// deployment (provisioning/sharedfleet.CheckFootprints), at now. It reads
// the previous deployment's FootprintOutput from the stack's own last
// outputs, through a StackReference to the stack itself
// (organization/project/stack, which the engine answers from the stack's
// last checkpoint; a failed update leaves the outputs before it). A stack
// with no such output (its first deployment, or one deployed before the
// output existed) has nothing to compare and is not refused. It returns
// the value to export as FootprintOutput.
func CheckFootprint(ctx *pulumi.Context, fleets []fleetspec.SharedFleet, now time.Time) (pulumi.Input, error) {
	self := fmt.Sprintf("%s/%s/%s", ctx.Organization(), ctx.Project(), ctx.Stack())
	ref, err := pulumi.NewStackReference(ctx, previousStackRef, &pulumi.StackReferenceArgs{Name: pulumi.String(self)})
	if err != nil {
		return nil, fmt.Errorf("reading the previous deployment's %s output of stack %s: %w", FootprintOutput, self, err)
	}
	d, err := ref.GetOutputDetails(FootprintOutput)
	if err != nil {
		return nil, fmt.Errorf("reading the previous deployment's %s output of stack %s: %w", FootprintOutput, self, err)
	}
	var prev map[string]shared.Footprint
	if d.Value != nil {
		raw, err := json.Marshal(d.Value)
		if err != nil {
			return nil, fmt.Errorf("the previous deployment's %s output: %w", FootprintOutput, err)
		}
		if err := json.Unmarshal(raw, &prev); err != nil {
			return nil, fmt.Errorf("the previous deployment's %s output is not the shared fleets' footprints: %w", FootprintOutput, err)
		}
		errs, err := shared.CheckFootprints(prev, fleets, stackconfig.Root.Child("sharedFleets"), now)
		if err != nil {
			return nil, err
		}
		if len(errs) > 0 {
			return nil, &stackconfig.Error{List: errs}
		}
	}
	v, err := FootprintValue(fleets, prev, now)
	if err != nil {
		return nil, err
	}
	return pulumi.Any(v), nil
}

// FootprintValue is the value of FootprintOutput for fleets deployed at
// now after a deployment that left prev: their footprints' JSON, so that
// the next update reads back what was written.
func FootprintValue(fleets []fleetspec.SharedFleet, prev map[string]shared.Footprint, now time.Time) (map[string]any, error) {
	fps, err := shared.Footprints(fleets, prev, now)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(fps)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}
