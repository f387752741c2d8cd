package crds

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
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
	// internal is the schema structural was made from.
	internal *apiextensions.JSONSchemaProps
	// statusSubresource: the API server drops status on create.
	statusSubresource bool
	// cuts are the subtrees a Batch judges apart (see cutsOf), found on
	// the first Batch.
	cutsOnce sync.Once
	cuts     []cut
	// trunk judges what is left of an object without its cuts: the
	// schema without the cut properties of spec.
	trunk *Validator
	// bareMetadata: the schema of metadata is {type: object} (what
	// controller-gen writes), so that only metadata.name and
	// metadata.generateName can change a verdict (see trunkKey).
	bareMetadata bool
}

// cut is a property of spec that is judged alone, by validators of a
// schema of its own (an object with only that property), with the same
// result as in the whole object.
type cut struct {
	property string
	required bool
	def      []byte // the property's default as JSON, nil without one
	v        *Validator
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
		return &Validator{structural: s, schema: sv, cel: cel.NewValidator(s, true, celconfig.PerCallLimit), internal: internal,
			statusSubresource: ver.Subresources != nil && ver.Subresources.Status != nil}, nil
	}
	return nil, fmt.Errorf("no storage version with a schema")
}

// cutsOf returns the properties of spec that can be judged alone: those
// no rule of spec or of the root names, when spec has no bound on its
// number of properties and no additionalProperties. Every rule, default,
// list type and unknown field under such a property looks only at the
// property's own value, so that judging it apart gives what judging the
// whole object gives.
func cutsOf(root *structuralschema.Structural, internal *apiextensions.JSONSchemaProps) []cut {
	spec, ok := root.Properties["spec"]
	ispec, iok := internal.Properties["spec"]
	if !ok || !iok || ispec.MinProperties != nil || ispec.MaxProperties != nil || ispec.AdditionalProperties != nil || spec.AdditionalProperties != nil {
		return nil
	}
	named := func(rules apiextensionsv1.ValidationRules, property string) bool {
		for _, r := range rules {
			if strings.Contains(r.Rule, property) || strings.Contains(r.MessageExpression, property) {
				return true
			}
		}
		return false
	}
	var out []cut
	for _, name := range slices.Sorted(maps.Keys(spec.Properties)) {
		if named(root.XValidations, name) || named(spec.XValidations, name) {
			continue
		}
		sub := &structuralschema.Structural{Generic: structuralschema.Generic{Type: "object"},
			Properties: map[string]structuralschema.Structural{name: spec.Properties[name]}}
		isub := &apiextensions.JSONSchemaProps{Type: "object",
			Properties: map[string]apiextensions.JSONSchemaProps{name: ispec.Properties[name]}}
		sv, _, err := apiservervalidation.NewSchemaValidator(isub)
		if err != nil {
			continue // judged with the rest
		}
		var def []byte
		if d := spec.Properties[name].Default.Object; d != nil {
			if def, err = json.Marshal(d); err != nil {
				continue
			}
		}
		out = append(out, cut{property: name, required: slices.Contains(ispec.Required, name), def: def,
			v: &Validator{structural: sub, schema: sv, cel: cel.NewValidator(sub, false, celconfig.PerCallLimit)}})
	}
	return out
}

// Validate returns every problem the API server would find in obj (a typed
// object of the CRD's kind, with apiVersion and kind set) on create. Paths
// are the object's own (spec.tags[0], metadata.name).
func (v *Validator) Validate(obj runtime.Object) field.ErrorList {
	u, err := decoded(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	if v.statusSubresource {
		delete(u, "status") // as the API server does on create
	}
	return v.validate(u, nil, true)
}

// decoded is obj as the API server receives it: its JSON, decoded as the
// server decodes it (whole numbers as int64).
func decoded(obj runtime.Object) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := map[string]any{}
	if err := utiljson.Unmarshal(b, &u); err != nil {
		return nil, err
	}
	return u, nil
}

// validate judges u, the object (root) or a subtree at path, and changes
// it (defaults).
func (v *Validator) validate(u map[string]any, path *field.Path, root bool) field.ErrorList {
	errs := v.unknownFields(u, path, root)
	structuraldefaulting.Default(u, v.structural)
	// The API server drops a null it may not keep (what a Go client sends
	// for a nil slice) before it validates.
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u, v.structural)
	return append(errs, v.judge(u, path)...)
}

// unknownFields reports the fields of u the schema does not know. The API
// server drops them, so a wish written there would silently not take
// effect: report it as kubectl's strict field validation does.
func (v *Validator) unknownFields(u map[string]any, path *field.Path, root bool) field.ErrorList {
	var errs field.ErrorList
	pruned := structuralpruning.PruneWithOptions(runtime.DeepCopyJSON(u), v.structural, root, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, p := range pruned {
		if path != nil {
			p = path.String() + "." + p
		}
		errs = append(errs, field.Invalid(field.NewPath(p), "", "unknown field: the API server drops it"))
	}
	return errs
}

// judge checks u, defaulted, against the schema, the list types and the
// CEL rules.
func (v *Validator) judge(u map[string]any, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, e := range apiservervalidation.ValidateCustomResource(path, u, v.schema) {
		if path != nil {
			// The schema's messages name the field from the schema's root
			// ("replicas in body"); the API server's from the object's.
			if rel, ok := strings.CutPrefix(e.Field, path.String()+"."); ok {
				e.Detail = strings.Replace(e.Detail, rel+" in body", e.Field+" in body", 1)
			}
		}
		errs = append(errs, e)
	}
	errs = append(errs, listtype.ValidateListSetsAndMaps(path, v.structural, u)...)
	if v.cel != nil {
		celErrs, _ := v.cel.Validate(context.Background(), path, v.structural, u, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return errs
}

// Batch judges many objects of one CRD as Validate does, judging each
// subtree of spec it has judged before (the same JSON at the same path,
// for example the managers of teams that all ask for the same) only once.
// A stack config of thousands of teams, which differ in their names and
// tags and rarely in anything else, is judged in a fraction of the time.
// A Batch remembers every distinct subtree it judged: use one per set of
// objects, not one per process. Its Validate may be called from several
// goroutines at once.
type Batch struct {
	v    *Validator
	mu   sync.Mutex
	memo map[memoKey]field.ErrorList
}

type memoKey struct {
	cut  int
	json string
}

// Batch returns a new Batch of v.
func (v *Validator) Batch() *Batch {
	v.cutsOnce.Do(func() {
		cuts := cutsOf(v.structural, v.internal)
		if len(cuts) == 0 {
			return
		}
		trunk, err := trunkOf(v.structural, v.internal, cuts, v.statusSubresource)
		if err != nil {
			return // every object is judged whole
		}
		v.cuts, v.trunk = cuts, trunk
		meta, ok := v.internal.Properties["metadata"]
		v.bareMetadata = ok && reflect.DeepEqual(meta, apiextensions.JSONSchemaProps{Type: "object"})
	})
	return &Batch{v: v, memo: map[memoKey]field.ErrorList{}}
}

// Validate returns what v.Validate(obj) returns, in another order.
func (b *Batch) Validate(obj runtime.Object) field.ErrorList {
	v := b.v
	whole := func() field.ErrorList { return v.Validate(obj) }
	if v.trunk == nil {
		return whole()
	}
	// The object's JSON, its spec's properties left as JSON: a property
	// judged before is neither decoded nor judged again.
	j, err := json.Marshal(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	top, ok := members(j)
	if !ok {
		return whole()
	}
	spec, ok := members(top["spec"])
	if !ok {
		return whole()
	}
	values := make([][]byte, len(v.cuts))
	for i, c := range v.cuts {
		x, ok := spec[c.property]
		switch {
		case ok && string(x) == "null", !ok && c.required:
			// A null the API server may drop, or a property it requires:
			// judged whole, for the same Required error.
			return whole()
		case !ok && c.def == nil:
			continue
		case !ok:
			x = c.def
		}
		values[i] = x
	}
	specPath := field.NewPath("spec")
	var errs field.ErrorList
	for i, c := range v.cuts {
		if values[i] == nil {
			continue
		}
		found, err := b.judged(memoKey{cut: i, json: string(values[i])}, func() (field.ErrorList, error) {
			var x any
			if err := utiljson.Unmarshal(values[i], &x); err != nil {
				return nil, err
			}
			return c.v.validate(map[string]any{c.property: x}, specPath, false), nil
		})
		if err != nil {
			return field.ErrorList{field.InternalError(specPath.Child(c.property), err)}
		}
		errs = append(errs, found...)
	}
	// The rest: the object with what spec holds besides the cuts (fields
	// the schema does not know, reported as unknown) and without status,
	// which the API server drops on create, judged by the trunk, once per
	// distinct rest as the trunk sees it (teams that differ only in their
	// namespaces share one verdict).
	var rest []string
	for k := range spec {
		if !slices.ContainsFunc(v.cuts, func(c cut) bool { return c.property == k }) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	judgeTrunk := func() (field.ErrorList, error) {
		u := map[string]any{}
		s := map[string]any{}
		for _, k := range rest {
			var x any
			if err := utiljson.Unmarshal(spec[k], &x); err != nil {
				return nil, err
			}
			s[k] = x
		}
		u["spec"] = s
		for k, raw := range top {
			if k == "spec" || k == "status" && v.statusSubresource {
				continue
			}
			var x any
			if err := utiljson.Unmarshal(raw, &x); err != nil {
				return nil, err
			}
			u[k] = x
		}
		return v.trunk.validate(u, nil, true), nil
	}
	var found field.ErrorList
	if key, ok := v.trunkKey(top, spec, rest); ok {
		found, err = b.judged(memoKey{cut: -1, json: key}, judgeTrunk)
	} else {
		found, err = judgeTrunk()
	}
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	return append(slices.Clip(found), errs...)
}

// judged returns the memo's verdict under k, or judge's, remembered.
// Two goroutines may judge the same subtree at once; both find the same.
func (b *Batch) judged(k memoKey, judge func() (field.ErrorList, error)) (field.ErrorList, error) {
	b.mu.Lock()
	found, ok := b.memo[k]
	b.mu.Unlock()
	if ok {
		return found, nil
	}
	found, err := judge()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.memo[k] = found
	b.mu.Unlock()
	return found, nil
}

// trunkKey returns what the trunk's verdict on an object depends on: its
// members but status (when the API server drops it) and the cut
// properties of spec, each as its JSON, except that of metadata only
// name and generateName count when the CRD's schema of metadata is a bare
// object. The API server validates the rest of metadata itself, not by
// the CRD: a bare object schema accepts any metadata, pruning and
// defaulting leave metadata alone, and CEL rules see only metadata.name
// and metadata.generateName. ok is false when the key cannot be read;
// the object's trunk is then judged without the memo.
func (v *Validator) trunkKey(top, spec map[string][]byte, rest []string) (string, bool) {
	var b []byte
	// Each name and value is written after its length, so that no two
	// objects share a key.
	put := func(name string, value []byte) {
		b = strconv.AppendInt(b, int64(len(name)), 10)
		b = append(append(append(b, ':'), name...), ' ')
		b = strconv.AppendInt(b, int64(len(value)), 10)
		b = append(append(b, ':'), value...)
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		raw := top[k]
		switch {
		case k == "status" && v.statusSubresource:
			continue
		case k == "spec":
			put(k, nil)
			for _, r := range rest {
				put(r, spec[r])
			}
			b = append(b, ';')
			continue
		case k == "metadata" && v.bareMetadata:
			meta, ok := members(raw)
			if !ok {
				return "", false
			}
			put(k, nil)
			for _, m := range []string{"name", "generateName"} {
				if x, ok := meta[m]; ok {
					put(m, x)
				}
			}
			b = append(b, ';')
			continue
		}
		put(k, raw)
	}
	return string(b), true
}

// trunkOf returns the Validator of the schema without the cut properties
// of spec.
func trunkOf(root *structuralschema.Structural, internal *apiextensions.JSONSchemaProps, cuts []cut, statusSubresource bool) (*Validator, error) {
	s := *root
	s.Properties = maps.Clone(root.Properties)
	spec := s.Properties["spec"]
	spec.Properties = maps.Clone(spec.Properties)
	in := *internal
	in.Properties = maps.Clone(internal.Properties)
	ispec := in.Properties["spec"]
	ispec.Properties = maps.Clone(ispec.Properties)
	for _, c := range cuts {
		delete(spec.Properties, c.property)
		delete(ispec.Properties, c.property)
		// A required property is judged only when present (Batch.Validate).
		ispec.Required = slices.DeleteFunc(slices.Clone(ispec.Required), func(r string) bool { return r == c.property })
	}
	s.Properties["spec"] = spec
	in.Properties["spec"] = ispec
	if statusSubresource {
		// The API server drops status on create; Batch.Validate does too.
		delete(s.Properties, "status")
		delete(in.Properties, "status")
	}
	sv, _, err := apiservervalidation.NewSchemaValidator(&in)
	if err != nil {
		return nil, err
	}
	return &Validator{structural: &s, schema: sv, cel: cel.NewValidator(&s, true, celconfig.PerCallLimit)}, nil
}
