// Package local is the local platform of the runnerfleet program: the
// control plane fleet up starts on this machine, with kwok nodes and
// Karpenter's kwok provider. Its one resource is the Kubernetes provider
// pointed at that control plane; the controller runs as a process beside
// it (kwok's pods run no code).
package local

import (
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// PlatformArgs are what the local platform is declared from.
type PlatformArgs struct {
	// Cluster identifies the cluster (the stack's clusterName).
	Cluster string
	// Kubeconfig is the path of the local control plane's kubeconfig.
	Kubeconfig string
	// PrometheusAddress is the local control plane's Prometheus, which the
	// RunnerClass names (KEDA reads the managers' metrics from it); empty
	// when unknown (the program run outside fleet up).
	PrometheusAddress string
}

// Platform is the local platform.
type Platform struct {
	pulumi.ResourceState

	// Cluster is what the Kubernetes part of the program deploys into.
	Cluster *kube.Cluster
}

// NewPlatform declares the local platform.
func NewPlatform(ctx *pulumi.Context, name string, args *PlatformArgs, opts ...pulumi.ResourceOption) (*Platform, error) {
	if args == nil || args.Kubeconfig == "" {
		return nil, fmt.Errorf("creating the local platform: no kubeconfig")
	}
	b, err := os.ReadFile(args.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("creating the local platform: %w (is the local control plane up? fleet up --stack local)", err)
	}
	p := &Platform{}
	if err := ctx.RegisterComponentResource("runnerfleet:local:Platform", name, p, opts...); err != nil {
		return nil, fmt.Errorf("creating the local platform: %w", err)
	}
	// The provider was declared at the stack's top level before this
	// component held it; the alias keeps it, and every object on it.
	prov, err := kube.NewProvider(ctx, "local", args.Cluster, pulumi.ToSecret(pulumi.String(b)).(pulumi.StringOutput),
		pulumi.Parent(p), pulumi.Aliases([]pulumi.Alias{{NoParent: pulumi.Bool(true)}}))
	if err != nil {
		return nil, fmt.Errorf("creating the local platform: %w", err)
	}
	p.Cluster = &kube.Cluster{
		Provider: prov,
		Class:    v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK},
	}
	if args.PrometheusAddress != "" {
		p.Cluster.Class.Prometheus = &v1alpha1.PrometheusEndpoint{Address: args.PrometheusAddress}
	}
	if err := ctx.RegisterResourceOutputs(p, pulumi.Map{"cluster": pulumi.String(args.Cluster)}); err != nil {
		return nil, fmt.Errorf("registering the local platform's outputs: %w", err)
	}
	return p, nil
}
