package pulumix

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Schema is what the generated constructor of one provider resource knows
// of it, read from the pinned SDK's source by infra/sdkschema.
type Schema struct {
	Token string
	// Doc is the resource's documentation page.
	Doc string
	// Deprecated is the SDK's deprecation notice of the resource, if any;
	// DeprecatedInputs those of its inputs, by input name.
	Deprecated       string
	DeprecatedInputs map[string]string
	// Inputs and Outputs are the property names; Required the inputs
	// without which the SDK's constructor refuses the resource.
	Inputs, Outputs, Required []string
	// SecretInputs are made secret before they are sent, SecretOutputs
	// marked secret in the state, as the SDK's constructor does.
	SecretInputs, SecretOutputs []string
	// Aliases are the type tokens the resource was known by before.
	Aliases []string
	// Consts are inputs the constructor always sets (a Kubernetes
	// resource's apiVersion and kind).
	Consts map[string]string
}

// FromFields declares a resource from its inputs as plain values (an
// unstructured Kubernetes object, say), decoded into its typed Args.
type FromFields func(ctx *pulumi.Context, name string, fields map[string]any, opts ...pulumi.ResourceOption) (pulumi.CustomResource, error)

var (
	schemaMu sync.RWMutex
	schemas  = map[string]*Schema{}
	fromMaps = map[string]FromFields{}
)

// AddSchema records a generated resource's schema and its constructor from
// plain fields (from its package's init).
func AddSchema(s *Schema, from FromFields) {
	schemaMu.Lock()
	defer schemaMu.Unlock()
	schemas[s.Token] = s
	fromMaps[s.Token] = from
}

// DeclareFields declares a resource of a generated type from plain fields
// through its typed constructor: a field the type does not have, or a value
// of the wrong shape, is an error naming its path.
func DeclareFields(ctx *pulumi.Context, token, name string, fields map[string]any, opts ...pulumi.ResourceOption) (pulumi.CustomResource, error) {
	schemaMu.RLock()
	from, ok := fromMaps[token]
	schemaMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%s %q: no generated resource of this type (add it to infra/sdkschema.Resources and run make generate, or import its package)", token, name)
	}
	res, err := from(ctx, name, fields, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", token, name, err)
	}
	return res, nil
}

// SchemaOf returns the schema of a generated resource type, nil for a token
// no generated constructor declares.
func SchemaOf(token string) *Schema {
	schemaMu.RLock()
	defer schemaMu.RUnlock()
	return schemas[token]
}

// Schemas returns every generated resource's schema, by token.
func Schemas() map[string]*Schema {
	schemaMu.RLock()
	defer schemaMu.RUnlock()
	out := make(map[string]*Schema, len(schemas))
	for k, v := range schemas {
		out[k] = v
	}
	return out
}

// Declare registers a resource of schema s with the typed args (a generated
// XArgs), reading its outputs into res. It does what the SDK's constructor
// does: refuses a missing required input, sets the constant inputs, makes
// the secret inputs secret, marks the secret outputs, adds the aliases, and
// pins the provider version.
func Declare(ctx *pulumi.Context, s *Schema, name string, args any, res pulumi.CustomResource, opts ...pulumi.ResourceOption) error {
	inputs := Inputs(args)
	var missing []string
	for _, r := range s.Required {
		if _, ok := inputs[r]; !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s %q: missing required input %s", s.Token, name, strings.Join(missing, ", "))
	}
	for k, v := range s.Consts {
		inputs[k] = pulumi.String(v)
	}
	for _, k := range s.SecretInputs {
		if v, ok := inputs[k]; ok {
			inputs[k] = pulumi.ToSecret(v)
		}
	}
	return register(ctx, s.Token, name, inputs, res, append(opts, s.options()...)...)
}

// options are what the SDK's constructors add for a resource of schema s:
// its secret outputs and the type tokens it was known by before.
func (s *Schema) options() []pulumi.ResourceOption {
	var extra []pulumi.ResourceOption
	if len(s.SecretOutputs) > 0 {
		extra = append(extra, pulumi.AdditionalSecretOutputs(s.SecretOutputs))
	}
	if len(s.Aliases) > 0 {
		aliases := make([]pulumi.Alias, len(s.Aliases))
		for i, a := range s.Aliases {
			aliases[i] = pulumi.Alias{Type: pulumi.String(a)}
		}
		extra = append(extra, pulumi.Aliases(aliases))
	}
	return extra
}

// Read reads an existing resource of schema s with the given ID into res,
// as the SDK's Get functions do (no state is passed), pinned to the
// provider version the schema was read from.
func Read(ctx *pulumi.Context, s *Schema, name string, id pulumi.IDInput, res pulumi.CustomResource, opts ...pulumi.ResourceOption) error {
	v, err := version(s.Token, name)
	if err != nil {
		return err
	}
	opts = append([]pulumi.ResourceOption{pulumi.Version(v)}, append(opts, s.options()...)...)
	return ctx.ReadResource(s.Token, name, id, pulumi.Map{}, res, opts...)
}

// version is the pinned provider version of the type token tok.
func version(tok, name string) (string, error) {
	pkg, _, _ := strings.Cut(tok, ":")
	if pkg == "pulumi" { // pulumi:providers:<pkg>
		pkg = strings.TrimPrefix(tok, "pulumi:providers:")
	}
	v, ok := Versions[pkg]
	if !ok {
		return "", fmt.Errorf("pulumix: no pinned provider version for %s (resource %s)", tok, name)
	}
	return v, nil
}

// register registers a provider resource of the type token tok with the
// given inputs, pinned to the provider version the schema was read from.
func register(ctx *pulumi.Context, tok, name string, inputs pulumi.Map, res pulumi.CustomResource, opts ...pulumi.ResourceOption) error {
	v, err := version(tok, name)
	if err != nil {
		return err
	}
	if inputs == nil {
		inputs = pulumi.Map{}
	}
	opts = append([]pulumi.ResourceOption{pulumi.Version(v)}, opts...)
	return ctx.RegisterResource(tok, name, inputs, res, opts...)
}

// Inputs turns generated Args (a struct, or a pointer to one, whose fields
// carry `pulumi:"name"` tags and hold Inputs, nested Args, or slices and
// maps of them) into the property map the provider receives. Unset fields
// are left out.
func Inputs(args any) pulumi.Map {
	v := reflect.ValueOf(args)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return pulumi.Map{}
		}
		v = v.Elem()
	}
	m, _ := toInput(v).(pulumi.Map)
	if m == nil {
		m = pulumi.Map{}
	}
	return m
}

var inputType = reflect.TypeFor[pulumi.Input]()

// toInput converts one value of generated Args; nil for an unset one.
func toInput(v reflect.Value) pulumi.Input {
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		in, ok := v.Interface().(pulumi.Input)
		if !ok {
			panic(fmt.Sprintf("pulumix: a %s is not an input", v.Elem().Type()))
		}
		return in
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		if v.Type().Implements(inputType) {
			return v.Interface().(pulumi.Input)
		}
		return toInput(v.Elem())
	case reflect.Struct:
		if v.Type().Implements(inputType) {
			return v.Interface().(pulumi.Input)
		}
		m := pulumi.Map{}
		t := v.Type()
		for i := range t.NumField() {
			tag := t.Field(i).Tag.Get("pulumi")
			if tag == "" {
				continue
			}
			if in := toInput(v.Field(i)); in != nil {
				m[tag] = in
			}
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		if v.Type().Implements(inputType) {
			return v.Interface().(pulumi.Input)
		}
		a := make(pulumi.Array, 0, v.Len())
		for i := range v.Len() {
			in := toInput(v.Index(i))
			if in == nil {
				in = pulumi.Map{}
			}
			a = append(a, in)
		}
		return a
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		if v.Type().Implements(inputType) {
			return v.Interface().(pulumi.Input)
		}
		m := pulumi.Map{}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			if in := toInput(v.MapIndex(k)); in != nil {
				m[k.String()] = in
			}
		}
		return m
	}
	panic(fmt.Sprintf("pulumix: no input for a %s", v.Type()))
}

// DeclareCustomResource declares a Kubernetes custom resource (of a CRD
// outside the provider's schema) from its fields, as the SDK's own
// apiextensions.CustomResource does: untyped, pinned to the provider
// version.
func DeclareCustomResource(ctx *pulumi.Context, token, name string, fields map[string]any, opts ...pulumi.ResourceOption) (pulumi.CustomResource, error) {
	var res customResource
	if err := register(ctx, token, name, ToInput(fields).(pulumi.Map), &res, opts...); err != nil {
		return nil, fmt.Errorf("%s %q: %w", token, name, err)
	}
	return &res, nil
}

type customResource struct {
	pulumi.CustomResourceState
}
