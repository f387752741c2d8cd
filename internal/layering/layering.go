// Package layering states the project's layers and the one direction its
// imports may point, and finds the imports that point the other way.
// ARCHITECTURE.md draws the same picture; the test in this package holds the
// whole tree to it.
package layering

import (
	"fmt"
	"sort"
	"strings"
)

// Module is the project's module path.
const Module = "github.com/runnerfleet/runnerfleet"

// Rule forbids packages under From (a folder of the module, "" for every
// package) to import packages under any of Not, unless the import is one of
// Except (from-package → to-package, both module-relative).
type Rule struct {
	From   string
	Not    []string
	Why    string
	Except map[string]string
}

// Rules are the layers, lowest first: runnerset/ (everything a RunnerSet
// owns, the controller and its API), provisioning/ (what runs the shared and
// VM fleets and the local control plane), infra/ (the Pulumi program), cmd/
// (binaries). providers/ are the cloud VM APIs the fleets operate.
var Rules = []Rule{
	{From: "runnerset/api", Not: []string{"runnerset/controller", "runnerset/capacity", "runnerset/resources", "runnerset/runnerconfig", "runnerset/gitlab", "runnerset/install", "runnerset/testenv", "internal/"},
		Why: "the API types are the bottom of the graph: every builder reads them, they read nothing of the project"},
	{From: "runnerset/", Not: []string{"provisioning/", "infra/", "cmd/", "providers/", "stacks", "charts"},
		Why: "a RunnerSet's objects are built under runnerset/ alone; the fleets and the program use them, never the reverse"},
	{From: "provisioning/", Not: []string{"infra/", "cmd/", "stacks", "charts"},
		Why: "pure builders and operations of the fleets; the program (infra/) and the binaries (cmd/) call them"},
	{From: "providers/", Not: []string{"runnerset/", "provisioning/", "infra/", "cmd/", "stacks", "charts"},
		Why: "cloud VM APIs know nothing of runners"},
	{From: "infra/", Not: []string{"cmd/"},
		Why: "the program is a library; cmd/infra runs it"},
	{From: "infra/stackconfig", Not: []string{"infra/sharedfleet", "infra/kube", "infra/aws", "infra/gcp", "infra/local", "infra/internal/sdk"},
		Why: "the stack config is the model every platform reads; it declares nothing"},
	{From: "internal/", Not: []string{"runnerset/", "provisioning/", "infra/", "cmd/", "providers/", "stacks"},
		Why: "internal/ holds leaf helpers", Except: map[string]string{"internal/release": "charts"}},
}

// Violations returns one line for every import in imports (module-relative
// package → its module-relative imports, other modules left out) that a
// rule forbids, sorted.
func Violations(imports map[string][]string, rules []Rule) []string {
	var out []string
	for pkg, deps := range imports {
		for _, r := range rules {
			if !under(pkg, r.From) {
				continue
			}
			for _, d := range deps {
				if ex, ok := r.Except[pkg]; ok && ex == d {
					continue
				}
				for _, n := range r.Not {
					if under(d, n) {
						out = append(out, fmt.Sprintf("%s imports %s: %s", pkg, d, r.Why))
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// under reports whether pkg is the folder or below it. A folder written with
// a trailing slash matches only what is below it; without one it matches
// the package itself too.
func under(pkg, folder string) bool {
	if folder == "" {
		return true
	}
	if strings.HasSuffix(folder, "/") {
		return strings.HasPrefix(pkg, folder) || pkg == strings.TrimSuffix(folder, "/")
	}
	return pkg == folder || strings.HasPrefix(pkg, folder+"/")
}
