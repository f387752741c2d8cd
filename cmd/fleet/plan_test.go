package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/infra"
	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/stacks"
)

// fleet up --kubeconfig and the program apply one plan of a stack's
// Kubernetes objects (kube.PlanStack): for every committed stack fleet up
// --kubeconfig takes, what fleet applies is what the program declares for
// the same stack, object for object and spec for spec, and the only
// difference is where the controller runs (the program's local stack runs
// it as a process and declares only its executor ClusterRole; fleet
// installs it in the cluster, as runnerset/install builds it).
func TestFleetUpAndTheProgramApplyOnePlan(t *testing.T) {
	tested := 0
	for _, stack := range stacks.Names() {
		b, err := stacks.Config(stack)
		if err != nil {
			t.Fatal(err)
		}
		v, err := parseStack(stack, b)
		if err != nil {
			t.Fatal(err)
		}
		s := &clusterStack{name: stack}
		if s.supported(v) != nil {
			continue // fleet up --kubeconfig refuses it (its class names what its platform creates)
		}
		tested++
		t.Run(stack, func(t *testing.T) {
			objs, err := s.plan(v, "", false, func(string, string) bool { return false }) // the program declares no admission policies
			if err != nil {
				t.Fatal(err)
			}
			applied := map[string]client.Object{}
			for _, o := range objs {
				applied[key(o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName())] = o
			}

			m := infratest.NewMocks(t)
			cfg, secretKeys, err := infratest.StackConfig(filepath.Join("..", "..", "stacks", "Pulumi."+stack+".yaml"), nil)
			if err != nil {
				t.Fatal(err)
			}
			kc := filepath.Join(t.TempDir(), "kubeconfig")
			if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := infratest.Run(m, stack, cfg, secretKeys, infra.ProgramWith(infra.Options{Kubeconfig: kc})); err != nil {
				t.Fatal(err)
			}
			declared := map[string]infratest.Resource{}
			for _, r := range m.Resources() {
				i := strings.LastIndex(r.Parent, "::")
				if !r.Custom || !strings.HasPrefix(r.Token, "kubernetes:") || i < 0 || !strings.HasSuffix(r.Parent[:i], "runnerfleet:kube:Fleet") {
					continue
				}
				str := func(path string) string {
					if v := r.Input(path); v.IsString() {
						return v.StringValue()
					}
					return ""
				}
				declared[key(r.Token[strings.LastIndex(r.Token, ":")+1:], str("metadata.namespace"), str("metadata.name"))] = r
			}

			// What only fleet applies: the controller in the cluster.
			o := install.Defaults()
			o.Namespace = v.fleet.Controller.Namespace
			ctrl, err := install.Objects(o)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, c := range ctrl {
				k := key(c.GetObjectKind().GroupVersionKind().Kind, c.GetNamespace(), c.GetName())
				if _, ok := declared[k]; !ok {
					want = append(want, k)
				}
			}
			sort.Strings(want)
			var onlyFleet, onlyProgram []string
			for k := range applied {
				if _, ok := declared[k]; !ok {
					onlyFleet = append(onlyFleet, k)
				}
			}
			for k := range declared {
				if _, ok := applied[k]; !ok {
					onlyProgram = append(onlyProgram, k)
				}
			}
			sort.Strings(onlyFleet)
			if len(onlyProgram) > 0 {
				t.Errorf("the program declares what fleet up --kubeconfig does not apply: %v", onlyProgram)
			}
			if !slices.Equal(onlyFleet, want) {
				t.Errorf("fleet up --kubeconfig applies beyond the program\n  %s\nwant only the controller's in-cluster objects\n  %s", strings.Join(onlyFleet, "\n  "), strings.Join(want, "\n  "))
			}
			if len(declared) < 6 {
				t.Fatalf("the program declared %d objects: %v", len(declared), slices.Sorted(maps.Keys(declared)))
			}

			// The same objects, field for field, but for the installer's
			// labels and what the program sets at deploy time (the Secrets'
			// token).
			for k, r := range declared {
				a, ok := applied[k]
				if !ok {
					continue
				}
				got, err := runtime.DefaultUnstructuredConverter.ToUnstructured(a)
				if err != nil {
					t.Fatal(err)
				}
				for _, field := range []string{"spec", "rules", "type"} {
					prog := plain(t, r.Inputs.Mappable()[field])
					if field == "spec" && strings.HasPrefix(k, "CustomResourceDefinition ") {
						continue // the program spells the schema extensions as its provider does (kube.Declare)
					}
					if fl := plain(t, got[field]); !reflect.DeepEqual(prog, fl) {
						t.Errorf("%s: %s differs\nprogram: %v\nfleet:   %v", k, field, prog, fl)
					}
				}
			}
		})
	}
	if tested == 0 {
		t.Fatal("no committed stack is one fleet up --kubeconfig takes: the test compared nothing")
	}
}

func key(kind, ns, name string) string { return fmt.Sprintf("%s %s/%s", kind, ns, name) }

// plain is v through JSON, so that the program's inputs and an object's
// fields compare alike (numbers as float64).
func plain(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// On an API server that serves MutatingAdmissionPolicy, fleet up applies
// the drain finalizer's policy after the controller and before the
// RunnerClass and any RunnerSet; elsewhere the plan is the program's.
func TestFleetUpAppliesTheAdmissionPoliciesBeforeAnyRunnerSet(t *testing.T) {
	b, err := stacks.Config("local")
	if err != nil {
		t.Fatal(err)
	}
	v, err := parseStack("local", b)
	if err != nil {
		t.Fatal(err)
	}
	s := &clusterStack{name: "local"}
	without, err := s.plan(v, "", false, func(string, string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	with, err := s.plan(v, "", true, func(string, string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if len(with) != len(without)+2 {
		t.Fatalf("%d objects with the policies, %d without: want two more", len(with), len(without))
	}
	var kinds []string
	for _, o := range with {
		kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind)
	}
	policy, binding, class := slices.Index(kinds, "MutatingAdmissionPolicy"), slices.Index(kinds, "MutatingAdmissionPolicyBinding"), slices.Index(kinds, "RunnerClass")
	if policy < slices.Index(kinds, "Deployment") || binding < policy || class < binding || slices.Index(kinds, "RunnerSet") < class {
		t.Errorf("order %v: want the policy and its binding after the controller, before the RunnerClass and the RunnerSets", kinds)
	}
}
