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
			if v == "escalate" || v == "bind" || v == "impersonate" {
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

// The API server lets the controller create the manager Role only if the
// controller holds every permission in it (the ClusterRole grants no escalate).
func TestClusterRoleHoldsWhatTheManagerRoleGrants(t *testing.T) {
	cr, err := rbac.ClusterRole()
	if err != nil {
		t.Fatal(err)
	}
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rs"}}
	rules := append(resources.LegacyManagerRole(rs).Rules, resources.ManagerJobsRole(rs, "jobs").Rules...)
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("manager rule %v: nonResourceURLs are not checked here", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if !allows(cr.Rules, g, res, v) {
						t.Errorf("the manager Role grants %s on %q %s, the controller's ClusterRole does not: add a +kubebuilder:rbac marker in runnerset/controller/rbac.go and run make manifests", v, g, res)
					}
				}
			}
		}
	}
}
