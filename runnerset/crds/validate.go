package crds

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// Validator judges objects of one CRD as the API server would on create:
// defaults applied, then the OpenAPI schema, list-type uniqueness and the
// x-kubernetes-validations CEL rules, all from the embedded CRD. It lets
// code that never reaches an API server (the Pulumi program's stack
// config) refuse what admission would, with the same rules and messages.
type Validator struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

var (
	validatorsOnce sync.Once
	validators     map[string]*Validator
	validatorsErr  error
)

// ValidatorFor returns the Validator of the embedded CRD named name (for
// example runnersets.runnerfleet.dev), for its storage version.
func ValidatorFor(name string) (*Validator, error) {
	validatorsOnce.Do(func() {
		all, err := CRDs()
		if err != nil {
			validatorsErr = err
			return
		}
		validators = map[string]*Validator{}
		for _, crd := range all {
			v, err := NewValidator(crd)
			if err != nil {
				validatorsErr = fmt.Errorf("CRD %s: %w", crd.Name, err)
				return
			}
			validators[crd.Name] = v
		}
	})
	if validatorsErr != nil {
		return nil, validatorsErr
	}
	v, ok := validators[name]
	if !ok {
		return nil, fmt.Errorf("no embedded CRD %s", name)
	}
	return v, nil
}

// NewValidator returns the Validator of crd's storage version, for CRDs
// that are not runnerfleet's own (GKE's ComputeClass in runnerset/crds/gke).
func NewValidator(crd *apiextensionsv1.CustomResourceDefinition) (*Validator, error) {
	for _, ver := range crd.Spec.Versions {
		if !ver.Storage || ver.Schema == nil || ver.Schema.OpenAPIV3Schema == nil {
			continue
		}
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(ver.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			return nil, err
		}
		s, err := structuralschema.NewStructural(internal)
		if err != nil {
			return nil, err
		}
		sv, _, err := apiservervalidation.NewSchemaValidator(internal)
		if err != nil {
			return nil, err
		}
		return &Validator{structural: s, schema: sv, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}, nil
	}
	return nil, fmt.Errorf("no storage version with a schema")
}

// Validate returns every problem the API server would find in obj (a typed
// object of the CRD's kind, with apiVersion and kind set) on create. Paths
// are the object's own (spec.tags[0], metadata.name).
func (v *Validator) Validate(obj runtime.Object) field.ErrorList {
	// The object as the API server receives it: its JSON, decoded as the
	// server decodes it (whole numbers as int64).
	b, err := json.Marshal(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	u := map[string]any{}
	if err := utiljson.Unmarshal(b, &u); err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	pruneCopy := map[string]any{}
	_ = utiljson.Unmarshal(b, &pruneCopy)
	structuraldefaulting.Default(u, v.structural)
	// The API server drops a null it may not keep (what a Go client sends
	// for a nil slice) before it validates.
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u, v.structural)
	var errs field.ErrorList
	// A field the schema does not know is dropped by the API server, so a
	// wish written there would silently not take effect: report it as
	// kubectl's strict field validation does.
	pruned := structuralpruning.PruneWithOptions(pruneCopy, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, p := range pruned {
		errs = append(errs, field.Invalid(field.NewPath(p), "", "unknown field: the API server drops it"))
	}
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u, v.schema)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, u)...)
	if v.cel != nil {
		celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, u, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return errs
}
