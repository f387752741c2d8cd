package rbac_test

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/rbac"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

func TestClusterRoleDecodes(t *testing.T) {
	cr, err := rbac.ClusterRole()
	if err != nil {
		t.Fatal(err)
	}
	if cr.APIVersion != rbacv1.SchemeGroupVersion.String() || cr.Name != rbac.Name {
		t.Errorf("got %s %s", cr.APIVersion, cr.Name)
	}
	for _, r := range cr.Rules {
		for _, s := range [][]string{r.APIGroups, r.Resources, r.Verbs} {
			if slices.Contains(s, rbacv1.ResourceAll) {
				t.Errorf("rule %v has a wildcard", r)
			}
		}
		for _, v := range r.Verbs {
			switch {
			case v == "bind" && slices.Equal(r.APIGroups, []string{rbacv1.GroupName}) && slices.Equal(r.Resources, []string{"clusterroles"}) &&
				slices.Equal(r.ResourceNames, []string{resources.ExecutorClusterRole}) && slices.Equal(r.Verbs, []string{"bind"}):
				// The one role it binds for the managers, by name.
			case v == "escalate" || v == "bind" || v == "impersonate":
				t.Errorf("rule %v grants %s", r, v)
			}
		}
	}
	cr.Rules = nil
	if again, _ := rbac.ClusterRole(); len(again.Rules) == 0 {
		t.Error("ClusterRole returns a shared object")
	}
}

// allows reports whether rules grant verb on group/resource.
func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// The managers get the executor's rules through a RoleBinding to
// resources.ExecutorClusterRole, which the API server lets the controller
// write because it may bind that ClusterRole by name: it holds none of
// those rules itself (it never creates pods, execs into them or writes job
// Secrets), and may bind no other role. Deleting pods is the one verb it
// shares with the executor: it deletes the job pods no manager is left to
// delete (runnerset/controller/orphans.go).
func TestTheControllerBindsTheExecutorsClusterRoleAndHoldsNoneOfItsRules(t *testing.T) {
	cr, err := rbac.ClusterRole()
	if err != nil {
		t.Fatal(err)
	}
	binds := 0
	for _, r := range cr.Rules {
		if slices.Contains(r.Verbs, "bind") {
			binds++
			if !slices.Equal(r.Resources, []string{"clusterroles"}) || !slices.Equal(r.ResourceNames, []string{resources.ExecutorClusterRole}) {
				t.Errorf("rule %v binds more than ClusterRole %s", r, resources.ExecutorClusterRole)
			}
		}
	}
	if binds != 1 {
		t.Errorf("%d rules grant bind, want one, on ClusterRole %s (the name in the marker in runnerset/controller/rbac.go must be resources.ExecutorClusterRole)", binds, resources.ExecutorClusterRole)
	}
	for _, need := range []struct{ resource, verb string }{{"pods", "create"}, {"pods/exec", "create"}, {"pods/attach", "create"}, {"pods/log", "get"}} {
		if !allows(resources.ExecutorRules(), "", need.resource, need.verb) {
			t.Fatalf("the executor's rules lack %s %s: the check below proves nothing", need.verb, need.resource)
		}
		if allows(cr.Rules, "", need.resource, need.verb) {
			t.Errorf("the controller may %s %s itself: it only binds the executor's ClusterRole", need.verb, need.resource)
		}
	}
	if !allows(cr.Rules, "", "pods", "delete") {
		t.Error("the controller may not delete pods: a job pod no manager is left to delete would hold its RunnerSet's deletion forever")
	}
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rs"}}
	b := resources.ManagerExecutorRoleBinding(rs, "jobs")
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != resources.ExecutorClusterRole || b.Namespace != "jobs" {
		t.Errorf("the managers' binding %s/%s refers to %+v", b.Namespace, b.Name, b.RoleRef)
	}
}
