package capacity

import (
	"fmt"
	"slices"
	"sync"

	awsapis "github.com/aws/karpenter-provider-aws/pkg/apis"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"

	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	gkecrd "github.com/runnerfleet/runnerfleet/runnerset/crds/gke"
)

var (
	validatorsOnce sync.Once
	validators     map[schema.GroupKind]*crds.Validator
	validatorsErr  error
)

// Validate judges a capacity object as the API server would on create,
// with the CRD its owner ships (Karpenter's modules for NodePool,
// EC2NodeClass and KWOKNodeClass, GKE's schema for ComputeClass), without
// a request: a new tag's capacity is checked whole before any of it is
// written. A kind with no known CRD is not judged here.
func Validate(obj client.Object, scheme *runtime.Scheme) (field.ErrorList, error) {
	validatorsOnce.Do(func() {
		validators = map[schema.GroupKind]*crds.Validator{}
		all := append(slices.Clip(awsapis.CRDs), kwokapis.CRDs...)
		cc, err := gkecrd.ComputeClassCRD()
		if err != nil {
			validatorsErr = err
			return
		}
		all = append(all, cc)
		for _, crd := range all {
			v, err := crds.NewValidator(crd)
			if err != nil {
				validatorsErr = fmt.Errorf("CRD %s: %w", crd.Name, err)
				return
			}
			validators[schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}] = v
		}
	})
	if validatorsErr != nil {
		return nil, validatorsErr
	}
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, err
	}
	v, ok := validators[gvk.GroupKind()]
	if !ok {
		return nil, nil
	}
	typed := obj.DeepCopyObject()
	typed.GetObjectKind().SetGroupVersionKind(gvk)
	return v.Validate(typed), nil
}
