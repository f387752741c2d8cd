package kube

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	apiextv1 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/apiextensions/v1"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// KEDA scales the shared fleets' managers above a group's floor and the
// managers of RunnerSets with spec.managers.autoscale (ScaledObjects,
// keda.sh/v1alpha1). It is a prerequisite, not part of the stack: a
// cluster runs one KEDA, often for more than runners. The
// program reads its ScaledObject CRD before it declares any fleet object,
// so that pulumi up stops at that read, naming it, when KEDA is missing,
// instead of failing on the first ScaledObject after the managers exist.
// KEDAScaledObjectCRD is the CRD the program reads.
const KEDAScaledObjectCRD = "scaledobjects.keda.sh"

var (
	// KEDATestedVersion is the KEDA release the ScaledObjects are written
	// for and the local stack runs (README, Prerequisites), without its v.
	KEDATestedVersion = strings.TrimPrefix(resources.KEDAVersion, "v")
	// kedaPrerequisite is the read's name, which pulumi up prints when it
	// fails.
	kedaPrerequisite = "prerequisite-keda-" + KEDAScaledObjectCRD + "-install-KEDA-" + KEDATestedVersion + "-see-README-Prerequisites"
)

// RequireKEDA reads KEDA's ScaledObject CRD from the cluster and returns c
// with the read among the resources every object declared on it waits
// for; once per cluster (a c that has read it is returned as it is).
func RequireKEDA(ctx *pulumi.Context, c *Cluster) (*Cluster, error) {
	if c.KEDA {
		return c, nil
	}
	opts := []pulumi.ResourceOption{pulumi.Provider(c.Provider)}
	if len(c.DependsOn) > 0 {
		opts = append(opts, pulumi.DependsOn(c.DependsOn))
	}
	crd, err := apiextv1.GetCustomResourceDefinition(ctx, kedaPrerequisite, pulumi.ID(KEDAScaledObjectCRD), opts...)
	if err != nil {
		return nil, fmt.Errorf("reading KEDA's %s: %w", KEDAScaledObjectCRD, err)
	}
	out := *c
	out.DependsOn = append(slices.Clone(c.DependsOn), crd)
	out.KEDA = true
	return &out, nil
}
