package crds_test

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// clashes lists what makes a name ambiguous for kubectl: another resource
// whose name, singular or short name it is.
func clashes(lists []*metav1.APIResourceList, ownGroup, name string) []string {
	var out []string
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		if gv.Group == ownGroup {
			continue
		}
		for _, r := range l.APIResources {
			if r.Name == name || r.SingularName == name || slices.Contains(r.ShortNames, name) {
				out = append(out, fmt.Sprintf("%s.%s", r.Name, gv.Group))
			}
		}
	}
	return out
}

// kubectl api-resources, asked of a real kube-apiserver with Karpenter's
// CRDs installed: no short name of ours is another resource's name.
func TestShortNamesClashWithNothingTheAPIServerServes(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	dc := discovery.NewDiscoveryClientForConfigOrDie(env.Config)
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	defs, err := crds.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, crd := range defs {
		names := append([]string{crd.Spec.Names.Plural, crd.Spec.Names.Singular}, crd.Spec.Names.ShortNames...)
		for _, n := range names {
			checked++
			if c := clashes(lists, crd.Spec.Group, n); len(c) > 0 {
				t.Errorf("%s: %q is also %v: kubectl get %s would be ambiguous; pick another short name", crd.Name, n, c, n)
			}
		}
	}
	if checked < 6 {
		t.Errorf("checked %d names, want the plural, singular and short names of both CRDs", checked)
	}
	// The negative control: the RunnerClass's old short name is
	// ReplicationController's.
	if c := clashes(lists, "runnerfleet.dev", "rc"); !slices.Contains(c, "replicationcontrollers.") {
		t.Errorf("rc clashes with %v, want replicationcontrollers", c)
	}
}
