package stackconfig

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/internal/docscheck"
)

// keys are the stack config's keys down to depth levels, as
// docs/reference/stack-config.md lists them: the JSON names of the model's
// fields, an embedded struct's inline, [] after a list, the project's own
// struct types opened and every other type a leaf.
func keys(t reflect.Type, prefix string, depth int) []docscheck.Field {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || depth == 0 || !strings.HasPrefix(t.PkgPath(), "github.com/runnerfleet/runnerfleet/") {
		return nil
	}
	var out []docscheck.Field
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			out = append(out, keys(f.Type, prefix, depth)...)
			continue
		}
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		typ := f.Type
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		sep := "."
		if typ.Kind() == reflect.Slice {
			sep = "[]."
		}
		out = append(out, docscheck.Field{Path: prefix + name, Type: typ.String()})
		out = append(out, keys(f.Type, prefix+name+sep, depth-1)...)
	}
	return out
}

// The stack config reference lists every key of the model, four levels
// deep, and no key the model lacks: a key added without a row, or a row
// left behind by a rename, fails naming it.
func TestTheStackConfigReferenceListsEveryKey(t *testing.T) {
	const page = "docs/reference/stack-config.md"
	src, err := os.ReadFile("../../" + page)
	if err != nil {
		t.Fatal(err)
	}
	doc := docscheck.Doc{Path: page, Src: src}
	fields := keys(reflect.TypeFor[Fleet](), "", 4)
	listed := docscheck.TableKeys(doc)
	if len(fields) < 100 || len(listed) < 100 {
		t.Fatalf("%d keys in the model, %d rows on the page: the walk missed them", len(fields), len(listed))
	}
	row := func(f docscheck.Field) string { return "| `" + f.Path + "` | " + f.Type + " | (what it is) |" }
	for _, p := range docscheck.CheckFields(doc, fields, listed, row) {
		t.Error(p)
	}
	// The negative control: the same page without its first key's row, and
	// with a key the model has not, fails on both.
	bad := strings.Replace(string(src), "| `platform` |", "| `platfrom` |", 1)
	got := docscheck.CheckFields(docscheck.Doc{Path: page, Src: []byte(bad)}, fields, docscheck.TableKeys(docscheck.Doc{Path: page, Src: []byte(bad)}), row)
	if len(got) != 2 || !strings.Contains(got[0].Msg+got[1].Msg, "the source has platform,") || !strings.Contains(got[0].Msg+got[1].Msg, "no platfrom") {
		t.Errorf("a misspelt row: %v", got)
	}
}
