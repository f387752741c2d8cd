package infratest

import (
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/eks"
)

// A mock that makes up an output the provider does not have (here a
// misspelt "endpont") fails the run; the real outputs pass.
func TestMockOutputsMustBeTheProviders(t *testing.T) {
	for _, c := range []struct {
		output string
		fails  bool
	}{{"endpoint", false}, {"endpont", true}} {
		m := NewMocks(t)
		m.Outputs = map[string]func(Resource) resource.PropertyMap{
			"aws:eks/cluster:Cluster": func(Resource) resource.PropertyMap {
				return resource.PropertyMap{resource.PropertyKey(c.output): resource.NewStringProperty("https://example")}
			},
		}
		err := Run(m, "test", nil, nil, func(ctx *pulumi.Context) error {
			_, err := eks.NewCluster(ctx, "c", &eks.ClusterArgs{
				RoleArn:   pulumi.String("arn:aws:iam::123456789012:role/c"),
				VpcConfig: &eks.ClusterVpcConfigArgs{SubnetIds: pulumi.ToStringArray([]string{"subnet-1"})},
			})
			return err
		})
		if got := err != nil && strings.Contains(err.Error(), "endpont"); got != c.fails {
			t.Errorf("a mock output %q: error %v, want a failure naming it: %v", c.output, err, c.fails)
		}
	}
}
