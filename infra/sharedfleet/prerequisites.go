package sharedfleet

import (
	"fmt"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	apiextv1 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/apiextensions/v1"
	"github.com/runnerfleet/runnerfleet/infra/kube"
)

// KEDA scales the managers above a group's floor (ScaledObjects,
// keda.sh/v1alpha1) and is a prerequisite of the shared fleets, not part
// of them: a cluster runs one KEDA, often for more than runners. The
// program reads its ScaledObject CRD before it declares any fleet object,
// so that pulumi up stops at that read, naming it, when KEDA is missing,
// instead of failing on the first ScaledObject after the managers exist.
const (
	// KEDAScaledObjectCRD is the CRD the program reads.
	KEDAScaledObjectCRD = "scaledobjects.keda.sh"
	// KEDATestedVersion is the KEDA release the ScaledObjects are written
	// for (README, Prerequisites).
	KEDATestedVersion = "2.21.0"
	// kedaPrerequisite is the read's name, which pulumi up prints when it
	// fails.
	kedaPrerequisite = "prerequisite-keda-" + KEDAScaledObjectCRD + "-install-KEDA-" + KEDATestedVersion + "-see-README-Prerequisites"
)

// requireKEDA reads KEDA's ScaledObject CRD from the cluster and returns c
// with the read among the resources every fleet object waits for.
func requireKEDA(ctx *pulumi.Context, c *kube.Cluster) (*kube.Cluster, error) {
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
	return &out, nil
}
