package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// imports reads every non-test Go file of the module (build tags ignored, so
// e2e-only and platform-only files count too) and returns module-relative
// package → module-relative imports.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "hack" || name == "bin" || name == "dist") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == Module {
				out[pkg] = append(out[pkg], "")
			} else if strings.HasPrefix(p, Module+"/") {
				out[pkg] = append(out[pkg], strings.TrimPrefix(p, Module+"/"))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportsPointOneWay(t *testing.T) {
	all := imports(t, "../..")
	if len(all) < 30 || len(all["runnerset/controller"]) == 0 {
		t.Fatalf("read %d packages (runnerset/controller imports %v): the walk missed the tree", len(all), all["runnerset/controller"])
	}
	for _, v := range Violations(all, Rules) {
		t.Error(v)
	}
}

// The negative control: each rule catches the import it forbids, and the
// exception lets exactly its one import through.
func TestEachRuleCatchesTheImportItForbids(t *testing.T) {
	for _, r := range Rules {
		from := strings.TrimSuffix(r.From, "/") + "/x"
		if !strings.HasSuffix(r.From, "/") {
			from = r.From
		}
		for _, n := range r.Not {
			to := strings.TrimSuffix(n, "/") + "/y"
			if got := Violations(map[string][]string{from: {to}}, []Rule{r}); len(got) != 1 {
				t.Errorf("%s → %s: %d violations, want 1", from, to, len(got))
			}
		}
		for pkg, exs := range r.Except {
			if got := Violations(map[string][]string{pkg: exs}, []Rule{r}); len(got) != 0 {
				t.Errorf("excepted %s → %s reported: %v", pkg, exs, got)
			}
		}
	}
	// Folders match whole path elements: runnersetx is not runnerset.
	if got := Violations(map[string][]string{"runnersetx/a": {"infra/b"}}, Rules); len(got) != 0 {
		t.Errorf("runnersetx matched runnerset/: %v", got)
	}
}

// A Reach rule catches what comes in through another package: the stack
// config importing only the model is fine, a model that imports a renderer
// brings the renderer into the stack config, and both rules say so.
func TestTheStackConfigReachesNoRendererThroughTheModel(t *testing.T) {
	clean := map[string][]string{
		"infra/stackconfig":      {"provisioning/fleetspec", "runnerset/api/v1alpha1"},
		"provisioning/fleetspec": {"runnerset/runnerconfig/oracle"},
	}
	if got := Violations(clean, Rules); len(got) != 0 {
		t.Fatalf("the model alone: %v", got)
	}
	for _, renderer := range []string{"provisioning/sharedfleet", "provisioning/vmfleet", "runnerset/runnerconfig", "runnerset/resources"} {
		bad := map[string][]string{
			"infra/stackconfig":      {"provisioning/fleetspec"},
			"provisioning/fleetspec": {"runnerset/runnerconfig/oracle", renderer},
		}
		got := strings.Join(Violations(bad, Rules), "\n")
		for _, want := range []string{
			"infra/stackconfig reaches " + renderer + " (through provisioning/fleetspec)",
			"provisioning/fleetspec imports " + renderer,
		} {
			if !strings.Contains(got, want) {
				t.Errorf("model importing %s: want %q in\n%s", renderer, want, got)
			}
		}
	}
}
