package crds

import (
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// undescribed lists the paths of the fields under s that kubectl explain
// would show without a description. metadata, apiVersion and kind are the
// API machinery's.
func undescribed(path string, s *apiextensionsv1.JSONSchemaProps) []string {
	var out []string
	for name, p := range s.Properties {
		child := path + "." + name
		if path == "" {
			child = name
			if name == "metadata" || name == "apiVersion" || name == "kind" {
				continue
			}
		}
		if strings.TrimSpace(p.Description) == "" {
			out = append(out, child)
		}
		out = append(out, undescribed(child, &p)...)
	}
	if s.Items != nil && s.Items.Schema != nil {
		out = append(out, undescribed(path+"[]", s.Items.Schema)...)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		out = append(out, undescribed(path+"{}", s.AdditionalProperties.Schema)...)
	}
	return out
}

func TestEveryFieldOfEveryCRDHasADescription(t *testing.T) {
	defs, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range defs {
		for _, v := range crd.Spec.Versions {
			missing := undescribed("", v.Schema.OpenAPIV3Schema)
			sort.Strings(missing)
			for _, m := range missing {
				t.Errorf("%s %s: %s has no description: write a doc comment on its Go field in runnerset/api/v1alpha1 and run make manifests", crd.Name, v.Name, m)
			}
		}
	}
}

// The walk's negative control: a field without a description is found,
// however deep it sits.
func TestTheWalkFindsAnUndescribedField(t *testing.T) {
	s := &apiextensionsv1.JSONSchemaProps{Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"spec": {Description: "d", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"list": {Description: "d", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"deep": {}},
			}}},
		}},
		"metadata": {},
	}}
	if got := undescribed("", s); len(got) != 1 || got[0] != "spec.list[].deep" {
		t.Errorf("undescribed = %v, want [spec.list[].deep]", got)
	}
}
