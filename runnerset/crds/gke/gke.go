// Package gke holds GKE's ComputeClass CRD as runnerfleet writes
// ComputeClasses against it (computeclasses.cloud.google.com.yaml), so that
// tests install it in place of GKE and judge every ComputeClass the
// controller builds as GKE would. No Go module ships it; it is never
// installed into a cluster by runnerfleet.
package gke

import (
	_ "embed"
	"fmt"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/runnerset/crds"
)

//go:embed computeclasses.cloud.google.com.yaml
var computeClassYAML []byte

// ComputeClassCRD returns the ComputeClass CRD.
func ComputeClassCRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(computeClassYAML, crd); err != nil {
		return nil, fmt.Errorf("decoding the ComputeClass CRD: %w", err)
	}
	return crd, nil
}

var (
	once      sync.Once
	validator *crds.Validator
	errV      error
)

// ComputeClassValidator judges a ComputeClass as GKE's API server would on
// create, unknown fields included.
func ComputeClassValidator() (*crds.Validator, error) {
	once.Do(func() {
		crd, err := ComputeClassCRD()
		if err != nil {
			errV = err
			return
		}
		validator, errV = crds.NewValidator(crd)
	})
	return validator, errV
}
