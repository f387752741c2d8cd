package pulumix_test

import (
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/eks"
	corev1 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/core/v1"
)

// The generated constructor refuses a missing required input, as the SDK's
// does, before anything is registered.
func TestDeclareRefusesAMissingRequiredInput(t *testing.T) {
	m := infratest.NewMocks(t)
	err := infratest.Run(m, "test", nil, nil, func(ctx *pulumi.Context) error {
		_, err := eks.NewCluster(ctx, "c", &eks.ClusterArgs{RoleArn: pulumi.String("arn:aws:iam::123456789012:role/c")})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "missing required input vpcConfig") {
		t.Fatalf("want the missing vpcConfig named, got %v", err)
	}
	if n := len(m.ByToken("aws:eks/cluster:Cluster")); n != 0 {
		t.Errorf("%d clusters registered", n)
	}
}

// A Secret declared from plain fields gets its kind and apiVersion, its
// data made secret, and a misspelt field is refused by its path.
func TestDeclareFieldsOfASecret(t *testing.T) {
	m := infratest.NewMocks(t)
	err := infratest.Run(m, "test", nil, nil, func(ctx *pulumi.Context) error {
		_, err := pulumix.DeclareFields(ctx, "kubernetes:core/v1:Secret", "s", map[string]any{
			"metadata":   map[string]any{"name": "s", "namespace": "ns"},
			"stringData": map[string]any{"token": "glrt-x"},
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s := m.Get(t, "kubernetes:core/v1:Secret", "s")
	if s.Input("kind").StringValue() != "Secret" || s.Input("apiVersion").StringValue() != "v1" {
		t.Errorf("kind %v apiVersion %v", s.Input("kind"), s.Input("apiVersion"))
	}
	if !s.Inputs["stringData"].IsSecret() {
		t.Errorf("stringData %v is not a secret", s.Inputs["stringData"])
	}
	var _ corev1.SecretArgs

	err = infratest.Run(infratest.NewMocks(t), "test", nil, nil, func(ctx *pulumi.Context) error {
		_, err := pulumix.DeclareFields(ctx, "kubernetes:core/v1:Secret", "s", map[string]any{
			"metadata": map[string]any{"name": "s", "lables": map[string]any{}},
		})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "metadata.lables: unknown input of ObjectMeta") || !strings.Contains(err.Error(), `"labels"`) {
		t.Errorf("want metadata.lables refused with a did-you-mean, got %v", err)
	}
}
