// Package pulumix registers provider resources by type token, pinned to the
// provider versions whose schemas infra/sdkschema checks.
//
// runnerfleet does not compile the generated AWS, GCP and Kubernetes SDKs
// (see infra/sdkschema for why). A resource is registered here with its type
// token and a pulumi.Map of inputs, exactly what the generated constructors
// send, and its outputs are read into a small struct of the caller's that
// embeds pulumi.CustomResourceState.
package pulumix

import (
	"fmt"
	"maps"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Provider plugin versions, without the leading v. AWS and GCP match the SDK
// module versions in infra/sdkschema.Modules, whose schemas the mock tests
// check. The Kubernetes provider is the plugin hack/tools.sh builds from
// pulumi-kubernetes/provider/v4 at the only version the module proxy serves,
// a commit of 2026-01-15 named by its Go pseudo-version (a test keeps it
// equal to hack/pulumi-kubernetes/go.mod); its schema is checked against the
// SDK the plugin is built with, v4.29.0 (hack/pulumi-kubernetes/go.mod).
var Versions = map[string]string{
	"aws":        "6.83.4",
	"gcp":        "9.6.0",
	"kubernetes": "4.0.0-20260115033456-f47bc2d6f199",
}

// Resource is a provider resource whose only output read is its ID, plus the
// outputs almost every cloud resource has.
type Resource struct {
	pulumi.CustomResourceState

	// Arn is set on AWS resources.
	Arn pulumi.StringOutput `pulumi:"arn"`
	// Name is the resource's physical name, where it has one.
	Name pulumi.StringOutput `pulumi:"name"`
}

// Register registers a provider resource of the type token tok with the
// given inputs, reading its outputs into res, pinned to the provider version
// the schema was checked against.
func Register(ctx *pulumi.Context, tok, name string, inputs pulumi.Map, res pulumi.CustomResource, opts ...pulumi.ResourceOption) error {
	pkg, _, _ := strings.Cut(tok, ":")
	if pkg == "pulumi" { // pulumi:providers:<pkg>
		pkg = strings.TrimPrefix(tok, "pulumi:providers:")
	}
	v, ok := Versions[pkg]
	if !ok {
		return fmt.Errorf("pulumix: no pinned provider version for %s (resource %s)", tok, name)
	}
	if inputs == nil {
		inputs = pulumi.Map{}
	}
	opts = append([]pulumi.ResourceOption{pulumi.Version(v)}, opts...)
	return ctx.RegisterResource(tok, name, inputs, res, opts...)
}

// New registers a provider resource and returns it with its common outputs.
func New(ctx *pulumi.Context, tok, name string, inputs pulumi.Map, opts ...pulumi.ResourceOption) (*Resource, error) {
	var r Resource
	if err := Register(ctx, tok, name, inputs, &r, opts...); err != nil {
		return nil, err
	}
	return &r, nil
}

// Strings turns a Go string slice into a pulumi.StringArray.
func Strings(ss []string) pulumi.StringArray {
	out := make(pulumi.StringArray, len(ss))
	for i, s := range ss {
		out[i] = pulumi.String(s)
	}
	return out
}

// StringMap turns a Go map into a pulumi.StringMap.
func StringMap(m map[string]string) pulumi.StringMap {
	out := make(pulumi.StringMap, len(m))
	for k, v := range m {
		out[k] = pulumi.String(v)
	}
	return out
}

// ToInput turns a tree of Go values (maps, slices, strings, bools and
// numbers, as encoding/json or an unstructured object holds them) and Pulumi
// inputs into inputs. nil map entries are dropped.
func ToInput(v any) pulumi.Input {
	switch x := v.(type) {
	case pulumi.Input:
		return x
	case map[string]any:
		m := make(pulumi.Map, len(x))
		for k, e := range x {
			if e != nil {
				m[k] = ToInput(e)
			}
		}
		return m
	case []any:
		a := make(pulumi.Array, len(x))
		for i, e := range x {
			a[i] = ToInput(e)
		}
		return a
	case string:
		return pulumi.String(x)
	case bool:
		return pulumi.Bool(x)
	case int:
		return pulumi.Int(x)
	case int64:
		return pulumi.Int(int(x))
	case float64:
		return pulumi.Float64(x)
	}
	panic(fmt.Sprintf("pulumix: no input for a %T", v))
}

// Merge returns the union of the maps; later ones win.
func Merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}
