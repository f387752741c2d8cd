package kube

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
)

// Token is the Kubernetes provider's type token of a kind: the group (core
// for the legacy group), the version and the kind, as
// kubernetes:apps/v1:Deployment or kubernetes:runnerfleet.dev/v1alpha1:RunnerSet.
func Token(gvk schema.GroupVersionKind) string {
	group := gvk.Group
	if group == "" {
		group = "core"
	}
	return fmt.Sprintf("kubernetes:%s/%s:%s", group, gvk.Version, gvk.Kind)
}

// Object is a Kubernetes object declared through the provider.
type Object struct {
	pulumi.CustomResource
}

// Declare declares obj, a typed object with its TypeMeta set, as a resource
// named name. The object goes to the provider as the same JSON the API
// server would get (its status dropped), so the builders the controller uses
// serve the program too. set overrides fields by dotted path with values
// only known at deploy time (ARNs, secrets): "spec.jobs.identity.awsRoleARN";
// a number in a path names an element of a list obj already has
// ("metadata.ownerReferences.0.uid").
//
// A kind of the Kubernetes provider's own schema is declared through its
// generated constructor (infra/internal/sdk/kubernetes/...), into whose
// typed Args the object is decoded: a field the provider does not know is
// an error naming its path. A custom resource (runnerfleet's, KEDA's) has no
// schema in the provider; like the SDK's apiextensions.CustomResource it
// goes as an untyped object, and the tests judge it by its CRD on a real
// kube-apiserver.
func Declare(ctx *pulumi.Context, name string, obj runtime.Object, set map[string]pulumi.Input, opts ...pulumi.ResourceOption) (*Object, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" || gvk.Version == "" {
		return nil, fmt.Errorf("kube: %s: object of type %T has no apiVersion/kind set", name, obj)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("kube: %s: %w", name, err)
	}
	delete(u, "status")
	if md, ok := u["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	fields := normalize(u).(map[string]any)
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := setPath(fields, strings.Split(k, "."), set[k]); err != nil {
			return nil, fmt.Errorf("kube: %s: setting %s: %w", name, k, err)
		}
	}
	tok := Token(gvk)
	var res pulumi.CustomResource
	if pulumix.SchemaOf(tok) != nil {
		res, err = pulumix.DeclareFields(ctx, tok, name, fields, opts...)
	} else if custom(gvk) {
		res, err = pulumix.DeclareCustomResource(ctx, tok, name, fields, opts...)
	} else {
		err = fmt.Errorf("kube: %s: %s has no generated resource: add it to infra/sdkschema.Resources and run make generate", name, tok)
	}
	if err != nil {
		return nil, err
	}
	return &Object{res}, nil
}

// custom reports whether gvk is a custom resource's, outside the groups of
// the Kubernetes provider's schema.
func custom(gvk schema.GroupVersionKind) bool {
	g := gvk.Group
	return strings.Contains(g, ".") && !strings.HasSuffix(g, ".k8s.io") && g != "helm.sh"
}

// schemaExtensions are the OpenAPI extension keys the Kubernetes provider's
// schema spells with underscores (JSONSchemaProps.x_kubernetes_list_type).
// The provider turns them back into dashes on the wire, and keeps its state
// in the underscored form: inputs sent dashed would differ from the state at
// every preview.
var schemaExtensions = map[string]string{
	"x-kubernetes-embedded-resource":       "x_kubernetes_embedded_resource",
	"x-kubernetes-int-or-string":           "x_kubernetes_int_or_string",
	"x-kubernetes-list-map-keys":           "x_kubernetes_list_map_keys",
	"x-kubernetes-list-type":               "x_kubernetes_list_type",
	"x-kubernetes-map-type":                "x_kubernetes_map_type",
	"x-kubernetes-preserve-unknown-fields": "x_kubernetes_preserve_unknown_fields",
	"x-kubernetes-validations":             "x_kubernetes_validations",
}

// normalize renames the schema extension keys the provider spells with
// underscores, throughout an unstructured object.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if u, ok := schemaExtensions[k]; ok {
				k = u
			}
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	}
	return v
}

func setPath(m map[string]any, path []string, v pulumi.Input) error {
	var cur any = m
	for i, k := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[k] = v
				return nil
			}
			next, ok := c[k]
			if !ok {
				next = map[string]any{}
				c[k] = next
			}
			cur = next
		case []any:
			// A number names an element the object already has.
			n, err := strconv.Atoi(k)
			if err != nil || n < 0 || n >= len(c) {
				return fmt.Errorf("%s: no element %s in a list of %d", strings.Join(path[:i], "."), k, len(c))
			}
			if last {
				c[n] = v
				return nil
			}
			cur = c[n]
		default:
			return fmt.Errorf("%s is not an object", strings.Join(path[:i], "."))
		}
	}
	return nil
}
