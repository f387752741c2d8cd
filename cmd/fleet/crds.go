package main

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"
)

// localCRDs are the CRDs the local stack installs beside runnerfleet's, as
// Karpenter's modules ship them: Karpenter's core kinds (NodePool, NodeClaim,
// NodeOverlay, CapacityBuffer) and the KWOKNodeClass of its kwok provider.
func localCRDs() []*apiextensionsv1.CustomResourceDefinition {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, c := range append(append([]*apiextensionsv1.CustomResourceDefinition{}, karpenterapis.CRDs...), kwokapis.CRDs...) {
		out = append(out, c.DeepCopy())
	}
	return out
}
