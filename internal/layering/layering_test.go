package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// imports reads every non-test Go file of the module (build tags ignored, so
// e2e-only and platform-only files count too) and returns module-relative
// package → module-relative imports, with every package of the module as a
// key.
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
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil // a package that imports nothing of the module is one too
		}
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
	// A package under folder (a rule's From or But): below it when it ends
	// in a slash, the package itself otherwise; any production package for
	// "" (every package).
	pkgIn := func(folder string) string {
		switch {
		case folder == "":
			return "provisioning/x"
		case strings.HasSuffix(folder, "/"):
			return folder + "x"
		}
		return folder
	}
	for _, r := range Rules {
		from := pkgIn(r.From)
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
		// But lets exactly its folders through.
		for _, b := range r.But {
			for _, n := range r.Not {
				to := strings.TrimSuffix(n, "/") + "/y"
				if got := Violations(map[string][]string{pkgIn(b): {to}}, []Rule{r}); len(got) != 0 {
					t.Errorf("%s is let through %s's rule, but %s → %s is reported: %v", b, r.From, pkgIn(b), to, got)
				}
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

// The rules the local stack's wing and the test fakes add, each refusing
// the import that brought it: a production package importing a test fake
// (what cmd/fleet and the stand-in runner did with runnerset/gitlab's
// gitlabtest), a package other than fleet importing the wing, internal/
// importing the chart (what internal/release did).
func TestTheWingTheFakesAndTheChartRules(t *testing.T) {
	refused := map[string]string{
		"cmd/fleet → runnerset/testenv":                  "a test fake or test environment serves tests",
		"provisioning/vmfleet → providers/gcp/gcetest":   "a test fake or test environment serves tests",
		"infra/kube → infra/infratest":                   "a test fake or test environment serves tests",
		"localstack/standin → runnerset/testenv":         "a test fake or test environment serves tests",
		"runnerset/controller → localstack/gitlabserver": "the local stack's wing",
		"infra/local → localstack/localcluster":          "the local stack's wing",
		"cmd/runnerset-controller → localstack/standin":  "the local stack's wing",
		"internal/version → charts":                      "internal/ holds leaf helpers",
		"internal/ociimage → charts/release":             "internal/ holds leaf helpers",
		"localstack/localcluster → infra/stackconfig":    "the local stack's wing runs",
	}
	for imp, why := range refused {
		from, to, _ := strings.Cut(imp, " → ")
		got := strings.Join(Violations(map[string][]string{from: {to}}, Rules), "\n")
		if !strings.Contains(got, from+" imports "+to+": ") || !strings.Contains(got, why) {
			t.Errorf("%s: want it refused (%q), got %q", imp, why, got)
		}
	}
	allowed := []string{
		"cmd/fleet → localstack/gitlabserver",
		"cmd/fleet → localstack/localcluster",
		"cmd/standin-runner → localstack/standin",
		"e2e/cmd/controlplane → localstack/localcluster",
		"e2e/cmd/controlplane → runnerset/testenv",
		"localstack/standin → localstack/gitlabserver",
		"runnerset/testenv → runnerset/crds",
		"charts/release → charts",
		"charts/release → internal/ociimage",
	}
	for _, imp := range allowed {
		from, to, _ := strings.Cut(imp, " → ")
		if got := Violations(map[string][]string{from: {to}}, Rules); len(got) != 0 {
			t.Errorf("%s: want it allowed, got %v", imp, got)
		}
	}
}

// Every package of the tree whose name says it exists for tests is on the
// TestOnly list, so a new fake is kept out of production code the day it
// is written; and every package on the list exists.
func TestEveryTestPackageIsListed(t *testing.T) {
	all := imports(t, "../..")
	pkgs := map[string]bool{}
	for p, deps := range all {
		pkgs[p] = true
		for _, d := range deps {
			pkgs[d] = true
		}
	}
	for p := range pkgs {
		if IsTestOnlyName(p) && !slices.Contains(TestOnly, p) {
			t.Errorf("%s is named as a test package but is not in layering.TestOnly: add it (or rename it if production code needs it)", p)
		}
	}
	for _, p := range TestOnly {
		if !pkgs[p] {
			t.Errorf("layering.TestOnly lists %s, which is not in the tree", p)
		}
	}
}
