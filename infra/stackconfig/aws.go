package stackconfig

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// AWS is the eks platform: a VPC, an EKS cluster with Karpenter, IRSA
// roles per team and an S3 cache bucket.
type AWS struct {
	// Region, for example eu-west-1.
	Region string `json:"region"`
	// Zones are the availability zones of the region to spread subnets over
	// (at least two, for EKS).
	Zones []string `json:"zones"`
	// VPCCIDR is the VPC's range; default 10.0.0.0/16.
	VPCCIDR string `json:"vpcCIDR,omitempty"`
	// PublicSubnetCIDRs and PrivateSubnetCIDRs, one per zone; default cut
	// from VPCCIDR.
	PublicSubnetCIDRs  []string `json:"publicSubnetCIDRs,omitempty"`
	PrivateSubnetCIDRs []string `json:"privateSubnetCIDRs,omitempty"`
	// KubernetesVersion of the EKS control plane, for example "1.33".
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// EndpointPublicAccessCIDRs may reach the Kubernetes API from the
	// internet; empty means private endpoint only.
	EndpointPublicAccessCIDRs []string `json:"endpointPublicAccessCIDRs,omitempty"`
	// SystemNodes is the small managed node group (spot) for the controller,
	// Karpenter and the managers.
	SystemNodes NodeGroup `json:"systemNodes,omitempty"`
	// KarpenterVersion is the Karpenter chart version.
	KarpenterVersion string `json:"karpenterVersion,omitempty"`
	// Tags are added to every AWS resource (the stack tag always is).
	Tags map[string]string `json:"tags,omitempty"`
}

// NodeGroup is a managed node group.
type NodeGroup struct {
	InstanceTypes []string `json:"instanceTypes,omitempty"`
	Min           int      `json:"min,omitempty"`
	Max           int      `json:"max,omitempty"`
	Desired       int      `json:"desired,omitempty"`
}

func (a *AWS) setDefaults() {
	if a.VPCCIDR == "" {
		a.VPCCIDR = "10.0.0.0/16"
	}
}

// Validate checks the aws section.
func (a *AWS) Validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if a.Region == "" {
		errs = append(errs, field.Required(p.Child("region"), "the AWS region to deploy to, for example eu-west-1"))
	}
	return errs
}
