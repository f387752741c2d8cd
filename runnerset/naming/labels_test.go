package naming

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/runnerfleet/runnerfleet/internal/checkout"
)

// keysOfLabelsGo returns the constants of labels.go by value.
func keysOfLabelsGo(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "labels.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("labels.go: %s is not a string literal", n.Name)
				}
				val, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				if other, dup := keys[val]; dup {
					t.Errorf("labels.go: %s and %s are both %q", other, n.Name, val)
				}
				keys[val] = n.Name
			}
		}
	}
	return keys
}

func TestEveryKeyOfLabelsGoIsAValidKey(t *testing.T) {
	keys := keysOfLabelsGo(t)
	if len(keys) < 40 {
		t.Fatalf("labels.go defines %d keys; the parse lost some", len(keys))
	}
	for val, name := range keys {
		if name == "KeyPrefix" {
			if !strings.HasSuffix(val, "/") || len(validation.IsDNS1123Subdomain(strings.TrimSuffix(val, "/"))) > 0 {
				t.Errorf("KeyPrefix %q is not a DNS subdomain and a slash", val)
			}
			continue
		}
		if errs := validation.IsQualifiedName(val); len(errs) > 0 {
			t.Errorf("%s = %q is not a label or annotation key: %v", name, val, errs)
		}
		if strings.Contains(val, "runnerfleet.dev") && !strings.HasPrefix(val, KeyPrefix) {
			t.Errorf("%s = %q: runnerfleet's own keys begin with KeyPrefix %q", name, val, KeyPrefix)
		}
	}
}

// TestNoGoFileSpellsAKeyOfLabelsGo keeps labels.go the one place of every
// key: a production Go file of the module that writes one of its values as a
// string literal fails, with the constant to use. Tests may spell a key
// where the literal is what they check.
func TestNoGoFileSpellsAKeyOfLabelsGo(t *testing.T) {
	keys := keysOfLabelsGo(t)
	// "type" is kwok's node label, and a word a JSON or YAML document
	// spells for other reasons everywhere.
	delete(keys, LabelKwokNodeType)
	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	self, err := filepath.Abs("labels.go")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name := d.Name(); strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // hack/'s tool modules
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == self {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if v, err := strconv.Unquote(lit.Value); err == nil {
				if name, ok := keys[v]; ok {
					rel, _ := filepath.Rel(root, path)
					found = append(found, rel+":"+strconv.Itoa(fset.Position(lit.Pos()).Line)+": "+lit.Value+": use naming."+name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files under %s; the walk missed the module", files, root)
	}
	sort.Strings(found)
	for _, f := range found {
		t.Error(f)
	}
}
