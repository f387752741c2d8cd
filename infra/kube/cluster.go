// Package kube declares runnerfleet's Kubernetes objects through the
// Kubernetes provider: the runnerset-controller, the RunnerClass and the
// teams' RunnerSets, on whatever cluster a platform (local, eks, gke) hands
// it.
package kube

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// Cluster is what a platform (infra/aws, infra/gcp, or the local control
// plane) hands to the Kubernetes part of the program.
type Cluster struct {
	// Provider is the Kubernetes provider pointed at the cluster.
	Provider pulumi.ProviderResource
	// Class carries the platform's part of the RunnerClass: the capacity
	// provider and its settings, and the identity patterns of the
	// identities the platform creates. The program adds defaults and policy.
	Class v1alpha1.RunnerClassSpec
	// Identities are the cloud identities created for teams, by
	// "<namespace>/<runnerset>": an IAM role ARN or a Google service account
	// email.
	Identities map[string]pulumi.StringOutput
	// Cache is the job cache bucket; nil on the local platform.
	Cache *Cache
	// DependsOn must exist before runnerfleet's objects (node groups, the
	// Karpenter release).
	DependsOn []pulumi.Resource
	// InCluster is true when the controller runs in the cluster as a
	// Deployment (eks, gke); on the local platform it runs as a process
	// beside the control plane, since kwok's pods run no code.
	InCluster bool
	// KEDA is true once RequireKEDA read KEDA's CRD into DependsOn.
	KEDA bool
}

// Cache is the job cache bucket.
type Cache struct {
	Type   v1alpha1.CacheType
	Bucket pulumi.StringOutput
	Region string
}

// IdentityKey is the key of a team in Cluster.Identities.
func IdentityKey(namespace, runnerSet string) string { return namespace + "/" + runnerSet }

// Provider is an explicit Kubernetes provider.
type Provider = kubernetes.Provider

// NewProvider declares a Kubernetes provider for the cluster of kubeconfig
// (the file's content, not its path), with server-side apply so that
// fields other managers own (the controller's status, Karpenter's
// defaults) are left alone. cluster identifies the cluster for good: the
// provider is replaced, and every object on it with it, only when cluster
// changes, never because the kubeconfig did (a new endpoint, a rotated
// certificate, an EKS or GKE update still unknown at preview).
func NewProvider(ctx *pulumi.Context, name, cluster string, kubeconfig pulumi.StringInput, opts ...pulumi.ResourceOption) (*Provider, error) {
	p, err := kubernetes.NewProvider(ctx, name, &kubernetes.ProviderArgs{
		Kubeconfig:            kubeconfig,
		ClusterIdentifier:     pulumi.String(cluster),
		EnableServerSideApply: pulumi.Bool(true),
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes provider %s: %w", name, err)
	}
	return p, nil
}
