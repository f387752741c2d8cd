package docscheck

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// ReferenceDepth is how deep the reference pages list a CRD's spec: spec.a,
// spec.a.b and spec.a.b.c.
const ReferenceDepth = 3

// Field is one field of a CRD's spec, as a reference page lists it.
type Field struct {
	Path        string // spec.a.b, with [] after a list of objects: spec.a[].b
	Type        string // string, object, []string, []object…
	Default     string // JSON, "" for none
	Description string
}

// Row is the reference table's row for f.
func (f Field) Row() string {
	def := ""
	if f.Default != "" {
		def = "`" + f.Default + "`"
	}
	desc := strings.Join(strings.Fields(f.Description), " ")
	return fmt.Sprintf("| `%s` | %s | %s | %s |", f.Path, f.Type, def, strings.ReplaceAll(desc, "|", `\|`))
}

type schema struct {
	Type        string             `json:"type"`
	Description string             `json:"description"`
	Default     json.RawMessage    `json:"default"`
	Properties  map[string]*schema `json:"properties"`
	Items       *schema            `json:"items"`
}

// CRDFields are the spec fields of a CRD's first version down to depth
// levels.
func CRDFields(crdYAML []byte, depth int) ([]Field, error) {
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema schema `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(crdYAML, &crd); err != nil {
		return nil, err
	}
	if len(crd.Spec.Versions) == 0 || crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] == nil {
		return nil, fmt.Errorf("no spec schema in the CRD")
	}
	var out []Field
	var walk func(s *schema, path string, level int)
	walk = func(s *schema, path string, level int) {
		props := s.Properties
		if props == nil && s.Items != nil {
			props = s.Items.Properties
		}
		for name, p := range props {
			typ := p.Type
			if typ == "array" && p.Items != nil {
				typ = "[]" + p.Items.Type
			}
			f := Field{Path: path + name, Type: typ, Description: p.Description}
			if len(p.Default) > 0 {
				f.Default = string(p.Default)
			}
			out = append(out, f)
			if level+1 < depth {
				sep := "."
				if strings.HasPrefix(typ, "[]") {
					sep = "[]."
				}
				walk(p, path+name+sep, level+1)
			}
		}
	}
	walk(crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"], "spec.", 0)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

var tableKey = regexp.MustCompile("^\\| `([^`]+)` \\|")

// ReferenceFields are the spec fields a reference page's tables list, with
// their lines.
func ReferenceFields(d Doc) map[string]int {
	out := map[string]int{}
	for k, line := range TableKeys(d) {
		if strings.HasPrefix(k, "spec.") {
			out[k] = line
		}
	}
	return out
}

// TableKeys are the keys in the first column of d's table rows (a code
// span), with their lines.
func TableKeys(d Doc) map[string]int {
	out := map[string]int{}
	for i, l := range strings.Split(string(d.Src), "\n") {
		if m := tableKey.FindStringSubmatch(l); m != nil {
			out[m[1]] = i + 1
		}
	}
	return out
}

// CheckReference returns a problem for every field of the CRD the page does
// not list (with the row to add) and every row the CRD has no field for.
func CheckReference(d Doc, crdYAML []byte, depth int) []Problem {
	fields, err := CRDFields(crdYAML, depth)
	if err != nil {
		return []Problem{{d.Path, 1, fmt.Sprintf("reading its CRD: %v", err)}}
	}
	return CheckFields(d, fields, ReferenceFields(d), Field.Row)
}

// CheckFields returns a problem for every field listed lacks (with the row
// that row makes of it) and every key of listed that fields lack (at its
// line): what a reference page's table must hold against its source.
func CheckFields(d Doc, fields []Field, listed map[string]int, row func(Field) string) []Problem {
	listed = maps.Clone(listed)
	var out []Problem
	for _, f := range fields {
		if _, ok := listed[f.Path]; ok {
			delete(listed, f.Path)
			continue
		}
		out = append(out, Problem{d.Path, 1, fmt.Sprintf("the source has %s, which the page does not list; add the row\n%s", f.Path, row(f))})
	}
	for p, line := range listed {
		out = append(out, Problem{d.Path, line, fmt.Sprintf("the source has no %s (removed or renamed?): fix or remove the row", p)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}
