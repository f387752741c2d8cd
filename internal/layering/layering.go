// Package layering states the project's layers and the one direction its
// imports may point, and finds the imports that point the other way.
// ARCHITECTURE.md draws the same picture; the test in this package holds the
// whole tree to it.
package layering

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Module is the project's module path.
const Module = "github.com/runnerfleet/runnerfleet"

// Rule forbids packages under From (a folder of the module, "" for every
// package) but not under any of But to import packages under any of Not,
// unless the import is one of Except (from-package → to-packages, all
// module-relative). A Reach rule
// holds for every package From reaches through the module's imports, not
// only for its own imports: what it forbids may not come in through another
// package either.
type Rule struct {
	From   string
	But    []string
	Not    []string
	Why    string
	Except map[string][]string
	Reach  bool
}

// Rules are the layers, lowest first: runnerset/ (everything a RunnerSet
// owns, the controller and its API), provisioning/ (what runs the shared and
// VM fleets), infra/ (the Pulumi program), cmd/ (binaries). providers/ are
// the cloud VM APIs the fleets operate; localstack/ is the local stack's
// wing (control plane, real node, stand-in runner, loopback GitLab), which
// only the binaries that run it and the tests import.
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
	{From: "infra/stackconfig", Reach: true, Not: append([]string{"provisioning/"}, builders...),
		Except: map[string][]string{"infra/stackconfig": {"provisioning/fleetspec", "runnerset/runnerconfig/oracle", "provisioning/vmimage"}},
		Why:    "the stack config decodes into models (provisioning/fleetspec, runnerset/api) and reaches no renderer or builder; gitlab-runner's value parsers (runnerconfig/oracle) only check values; provisioning/vmimage (standard library only) names a VM group's image from its imageInputs and checks its tags"},
	{From: "provisioning/fleetspec", Not: append([]string{"provisioning/", "infra/"}, builders...),
		Except: map[string][]string{"provisioning/fleetspec": {"runnerset/runnerconfig/oracle"}},
		Why:    "the shared fleet's model renders nothing and builds no Kubernetes object: provisioning/sharedfleet builds from it"},
	{From: "infra/aws", Not: []string{"infra/sharedfleet", "infra/gcp", "infra/local"},
		Why: "a platform declares the cluster and reads the names it grants from provisioning/; it never depends on the fleets' declarations or another platform"},
	{From: "infra/gcp", Not: []string{"infra/sharedfleet", "infra/aws", "infra/local"},
		Why: "a platform declares the cluster and reads the names it grants from provisioning/ (the shared fleets' identities from provisioning/sharedfleet); it never depends on the fleets' declarations or another platform"},
	{From: "infra/local", Not: []string{"infra/sharedfleet", "infra/aws", "infra/gcp"},
		Why: "a platform declares the cluster; it never depends on the fleets' declarations or another platform"},
	{From: "internal/", Not: []string{"runnerset/", "provisioning/", "infra/", "cmd/", "providers/", "localstack/", "stacks", "charts"},
		Why: "internal/ holds leaf helpers; what packages the chart (charts/release) sits beside the chart, above everything it packages"},
	{From: "localstack/", Not: []string{"infra/", "cmd/", "stacks", "charts"},
		Why: "the local stack's wing runs what runnerset/'s builders build; fleet and the tests call it, never the reverse"},
	{From: "", But: []string{"localstack/", "cmd/fleet", "cmd/standin-runner", "e2e/"}, Not: []string{"localstack/"},
		Why: "the local stack's wing (control plane, real node, stand-in runner, loopback GitLab) is run by fleet, the stand-in's binary and the tests; no other production package depends on a stand-in"},
	{From: "", But: append([]string{"e2e/"}, TestOnly...), Not: TestOnly,
		Why: "a test fake or test environment serves tests (and e2e/, which is tests): production code never imports one"},
}

// TestOnly are the packages that exist for tests: fakes of the clouds'
// APIs, the API server of envtest, the program under Pulumi's mocks, the
// scheduler's filters. Every package named *test or testenv is one (the
// layering test holds the tree to this list); the local stack's stand-ins
// are production code of localstack/, not test fakes.
var TestOnly = []string{"runnerset/testenv", "infra/infratest", "internal/schedtest", "providers/gcp/gcetest", "providers/aws/ec2test"}

// IsTestOnlyName reports whether a package's name says it exists for tests:
// it ends in "test" or is "testenv".
func IsTestOnlyName(pkg string) bool {
	base := pkg[strings.LastIndex(pkg, "/")+1:]
	return strings.HasSuffix(base, "test") || base == "testenv"
}

// builders are the packages that render files or build objects from the
// models: what a model, and the stack config that decodes into one, must
// not import.
var builders = []string{"runnerset/runnerconfig", "runnerset/resources", "runnerset/capacity", "runnerset/install", "runnerset/monitoring", "runnerset/controller"}

// Violations returns one line for every import in imports (module-relative
// package → its module-relative imports, other modules left out) that a
// rule forbids, sorted.
func Violations(imports map[string][]string, rules []Rule) []string {
	var out []string
	for pkg, deps := range imports {
		for _, r := range rules {
			if !under(pkg, r.From) || slices.ContainsFunc(r.But, func(b string) bool { return under(pkg, b) }) {
				continue
			}
			ds, via := deps, map[string]string{}
			if r.Reach {
				ds, via = reach(imports, pkg)
			}
			for _, d := range ds {
				if slices.Contains(r.Except[pkg], d) {
					continue
				}
				for _, n := range r.Not {
					if !under(d, n) {
						continue
					}
					if v, ok := via[d]; ok && v != pkg {
						out = append(out, fmt.Sprintf("%s reaches %s (through %s): %s", pkg, d, v, r.Why))
					} else {
						out = append(out, fmt.Sprintf("%s imports %s: %s", pkg, d, r.Why))
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// reach returns every package pkg reaches through imports, and for each the
// package that imports it on the way there (pkg for its own imports).
func reach(imports map[string][]string, pkg string) ([]string, map[string]string) {
	via := map[string]string{}
	todo := []string{pkg}
	var out []string
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		for _, d := range imports[p] {
			if _, seen := via[d]; seen || d == pkg {
				continue
			}
			via[d] = p
			out = append(out, d)
			todo = append(todo, d)
		}
	}
	sort.Strings(out)
	return out, via
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
