package sharedfleet_test

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/runnerfleet/runnerfleet/infra/gcp"
	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

const (
	tokSharedIdentity = "runnerfleet:sharedfleet:Identity"
	managersGSA       = "ci-shared-managers@ci-project-1.iam.gserviceaccount.com"
	// The Prometheus account lives in another project than the cluster;
	// its Workload Identity members are still the cluster project's pool.
	prometheusGSA = "ci-prometheus@ci-monitoring-1.iam.gserviceaccount.com"
	vmProject     = "ci-vms-2"
	// production's docker+machine VMs run as this account.
	vmGSA = "ci-shared-vms@ci-vms-2.iam.gserviceaccount.com"
)

// sharedFleetsJSON adds to fleetJSON a production fleet (both executors, the
// groups' VMs in another project, a Prometheus account) and a
// staging fleet sharing production's managers account, with its own cache
// bucket and no Prometheus account.
var sharedFleetsJSON = strings.Replace(fleetJSON, `"teams": [`, `"alerting": {"receiver": {"webhookURLConfigKey": "alertWebhookURL"}},
  "sharedFleets": [
    {
      "name": "production",
      "managerImage": "registry.example.com/ci/gitlab-runner-docker-machine:v19.4.0",
      "gcpServiceAccount": "`+managersGSA+`",
      "vmServiceAccount": "`+vmGSA+`",
      "monitoring": {"gcpServiceAccount": "`+prometheusGSA+`"},
      "vmNetwork": {"subnetwork": "projects/ci-project-1/regions/europe-west1/subnetworks/ci-shared-vms"},
      "groups": [
        {"name": "linux", "tokenConfigKey": "prodLinux", "project": "`+vmProject+`", "zone": "europe-west1-b", "machineType": "n2d-standard-4",
         "image": "runner-vm", "maxVMs": 100, "idleCount": 10, "idleTime": "30m", "scaling": {"minManagers": 2, "maxManagers": 4}},
        {"name": "fleeting", "executor": "docker-autoscaler", "tokenConfigKey": "prodFleeting", "project": "`+vmProject+`",
         "zone": "europe-west1-c", "machineType": "n2d-standard-8", "image": "runner-vm",
         "maxVMs": 50, "idleCount": 5, "idleTime": "20m"}
      ]
    },
    {
      "name": "staging",
      "managerImage": "registry.example.com/ci/gitlab-runner-docker-machine:v19.4.0",
      "gcpServiceAccount": "`+managersGSA+`",
      "cacheBucket": "ci-staging-cache",
      "monitoring": {"nodeExporterPort": 9200},
      "vmNetwork": {"cidr": "10.30.0.0/20"},
      "groups": [
        {"name": "linux", "tokenConfigKey": "stagingLinux", "zone": "europe-west1-b", "machineType": "e2-standard-2",
         "image": "runner-vm", "maxVMs": 10, "idleCount": 1, "idleTime": "10m"}
      ]
    }
  ],
  "teams": [`, 1)

var (
	sharedFleetsOnce   sync.Once
	sharedFleetsResult *deployed
)

// withSharedFleets runs the platform of sharedFleetsJSON once.
func withSharedFleets(t *testing.T) *deployed {
	t.Helper()
	sharedFleetsOnce.Do(func() { sharedFleetsResult = run(t, sharedFleetsJSON) })
	if sharedFleetsResult == nil {
		t.Fatal("the run with shared fleets failed")
	}
	return sharedFleetsResult
}

// sharedChildren are the resources of tok under the SharedFleetIdentity
// component.
func sharedChildren(p *deployed, tok string) []infratest.Resource {
	var out []infratest.Resource
	for _, r := range p.m.ByToken(tok) {
		if ownType(r.Parent) == tokSharedIdentity {
			out = append(out, r)
		}
	}
	return out
}

// grants are the resources' "<target> <role> <member>", sorted, target
// being the input named by targetKey.
func grants(rs []infratest.Resource, targetKey string) []string {
	var out []string
	for _, r := range rs {
		out = append(out, str(r.Input(targetKey))+" "+str(r.Input("role"))+" "+str(r.Input("member")))
	}
	slices.Sort(out)
	return out
}

func wi(ns, ksa string) string {
	return "serviceAccount:" + project + ".svc.id.goog[" + ns + "/" + ksa + "]"
}

func TestSharedFleetAccountsTrustExactlyTheirKubernetesServiceAccounts(t *testing.T) {
	p := withSharedFleets(t)
	managers := "projects/ci-project-1/serviceAccounts/" + managersGSA
	prometheus := "projects/ci-monitoring-1/serviceAccounts/" + prometheusGSA
	want := []string{
		// One per manager group's ServiceAccount, and the fleet's Prometheus.
		managers + " roles/iam.workloadIdentityUser " + wi("production", "production-fleeting"),
		managers + " roles/iam.workloadIdentityUser " + wi("production", "production-linux"),
		managers + " roles/iam.workloadIdentityUser " + wi("staging", "staging-linux"),
		// Each fleet's gc CronJob as its own account, never the managers'.
		gcAccountID("production") + " roles/iam.workloadIdentityUser " + wi("production", "production-gc"),
		gcAccountID("staging") + " roles/iam.workloadIdentityUser " + wi("staging", "staging-gc"),
		prometheus + " roles/iam.workloadIdentityUser " + wi("production", "prometheus"),
		// The cache's URL signing, on the managers' own account only.
		managers + " roles/iam.serviceAccountTokenCreator serviceAccount:" + managersGSA,
		// Acting as production's VM account, which creating its VMs and
		// noting them needs: its managers and its gc, on that account
		// only. Staging names none, so no one gets it there.
		"projects/ci-vms-2/serviceAccounts/" + vmGSA + " roles/iam.serviceAccountUser serviceAccount:" + managersGSA,
		"projects/ci-vms-2/serviceAccounts/" + vmGSA + " roles/iam.serviceAccountUser serviceAccount:" + gcEmail("production"),
	}
	slices.Sort(want)
	rs := sharedChildren(p, "gcp:serviceaccount/iAMMember:IAMMember")
	if got := grants(rs, "serviceAccountId"); !slices.Equal(got, want) {
		t.Errorf("service account grants:\n  %s\nwant exactly:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, r := range rs {
		if str(r.Input("role")) == "roles/iam.workloadIdentityUser" && !dependsOn(r, "gcp:container/cluster:Cluster", "runners-prod-cluster") {
			t.Errorf("%s does not wait for the cluster: the project's identity pool may not exist yet", r.Name)
		}
	}

	// The members name the ServiceAccounts infra/sharedfleet declares.
	var fromSharedfleet []string
	for _, s := range p.fleet.SharedFleets {
		for _, g := range s.Groups {
			fromSharedfleet = append(fromSharedfleet, wi(sharedfleet.Namespace(s), sharedfleet.ManagerServiceAccount(g)))
		}
		fromSharedfleet = append(fromSharedfleet, wi(sharedfleet.Namespace(s), sharedfleet.GCName(sharedfleet.Namespace(s))))
		if s.Monitoring.GCPServiceAccount != "" {
			fromSharedfleet = append(fromSharedfleet, wi(sharedfleet.Namespace(s), sharedfleet.PrometheusServiceAccount))
		}
	}
	var members []string
	for _, r := range rs {
		if str(r.Input("role")) == "roles/iam.workloadIdentityUser" {
			members = append(members, str(r.Input("member")))
		}
	}
	slices.Sort(members)
	slices.Sort(fromSharedfleet)
	if !slices.Equal(members, fromSharedfleet) {
		t.Errorf("Workload Identity members %v, but infra/sharedfleet's ServiceAccounts are %v", members, fromSharedfleet)
	}
}

func TestSharedFleetAccountsGetExactlyTheirRoles(t *testing.T) {
	p := withSharedFleets(t)
	want := []string{
		// Managers create and delete VMs in the project their fleet's groups
		// use (fleet gc covers one per fleet): production's in vmProject,
		// staging's in the cluster's; production's Prometheus lists them
		// there. Production's and staging's managers share an account: one
		// grant per project.
		"ci-project-1 roles/compute.instanceAdmin.v1 serviceAccount:" + managersGSA,
		vmProject + " roles/compute.instanceAdmin.v1 serviceAccount:" + managersGSA,
		vmProject + " roles/compute.viewer serviceAccount:" + prometheusGSA,
		// Each fleet's gc: its two custom roles where its VMs are
		// (TestFleetGCHasItsOwnLeastPrivilegeAccount checks them).
		vmProject + " projects/" + vmProject + "/roles/runnerfleetGCList_runners_prod serviceAccount:" + gcEmail("production"),
		vmProject + " projects/" + vmProject + "/roles/runnerfleetGCInstance_runners_prod serviceAccount:" + gcEmail("production"),
		"ci-project-1 projects/ci-project-1/roles/runnerfleetGCList_runners_prod serviceAccount:" + gcEmail("staging"),
		"ci-project-1 projects/ci-project-1/roles/runnerfleetGCInstance_runners_prod serviceAccount:" + gcEmail("staging"),
	}
	slices.Sort(want)
	if got := grants(sharedChildren(p, "gcp:projects/iAMMember:IAMMember"), "project"); !slices.Equal(got, want) {
		t.Errorf("project grants:\n  %s\nwant exactly:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	want = []string{
		// Production uses the platform's cache bucket, staging its own.
		gcp.BucketName(project, "runners-prod") + " roles/storage.objectUser serviceAccount:" + managersGSA,
		"ci-staging-cache roles/storage.objectUser serviceAccount:" + managersGSA,
	}
	slices.Sort(want)
	if got := grants(sharedChildren(p, "gcp:storage/bucketIAMMember:BucketIAMMember"), "bucket"); !slices.Equal(got, want) {
		t.Errorf("bucket grants:\n  %s\nwant exactly:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	for _, r := range p.m.Resources() {
		if strings.HasSuffix(r.Token, "IAMBinding") || strings.HasSuffix(r.Token, "IAMPolicy") {
			t.Errorf("%s %s would remove members others granted", r.Token, r.Name)
		}
		member := str(r.Input("member"))
		if strings.ContainsAny(member, "*{}") || strings.HasPrefix(member, "principalSet:") || member == "allUsers" || member == "allAuthenticatedUsers" {
			t.Errorf("%s %s grants to %q, not one exact principal", r.Token, r.Name, member)
		}
		role := str(r.Input("role"))
		if role == "roles/owner" || role == "roles/editor" {
			t.Errorf("%s %s grants %s", r.Token, r.Name, role)
		}
		// actAs only on the fleet's VM account, never a project's.
		if role == "roles/iam.serviceAccountUser" && (r.Token != "gcp:serviceaccount/iAMMember:IAMMember" || str(r.Input("serviceAccountId")) != "projects/ci-vms-2/serviceAccounts/"+vmGSA) {
			t.Errorf("%s %s grants %s beyond the fleet's VM account", r.Token, r.Name, role)
		}
	}
	if got := len(sharedChildren(p, "gcp:projects/iAMMember:IAMMember")) + len(sharedChildren(p, "gcp:storage/bucketIAMMember:BucketIAMMember")) +
		len(sharedChildren(p, "gcp:serviceaccount/iAMMember:IAMMember")); got != 18 {
		t.Errorf("%d grants under the shared fleets' identity component, want the 18 above", got)
	}
}

// The shared fleets' identities are one component for all fleets (a grant
// two fleets need is declared once), at the stack's top level beside the
// platform it is composed from; its gcp resources use the platform's
// provider.
func TestSharedFleetIdentityIsOneComponentOnThePlatformsProvider(t *testing.T) {
	p := withSharedFleets(t)
	comps := p.m.ByToken(tokSharedIdentity)
	if len(comps) != 1 {
		t.Fatalf("%d %s components, want 1", len(comps), tokSharedIdentity)
	}
	if ownType(comps[0].Parent) != "pulumi:pulumi:Stack" {
		t.Errorf("%s has parent %q, not the stack", comps[0].Name, comps[0].Parent)
	}
	children := 0
	for _, r := range p.m.Resources() {
		if ownType(r.Parent) != tokSharedIdentity {
			continue
		}
		children++
		if !r.Custom || !strings.HasPrefix(r.Name, comps[0].Name+"-") || !strings.Contains(r.Provider, "pulumi:providers:gcp::runners-prod-gcp::") {
			t.Errorf("%s %s: not a gcp resource named from %s on the platform's provider (provider %q)", r.Token, r.Name, comps[0].Name, r.Provider)
		}
	}
	if children == 0 {
		t.Error("the component has no children")
	}
	// Every gcp resource is the platform's or a shared fleet's.
	for _, r := range p.m.Resources() {
		if strings.HasPrefix(r.Token, "gcp:") && !strings.HasPrefix(ownType(r.Parent), "runnerfleet:gcp:") && !strings.HasPrefix(ownType(r.Parent), "runnerfleet:sharedfleet:") {
			t.Errorf("%s %s has parent %q, not a component of the platform or the shared fleets", r.Token, r.Name, r.Parent)
		}
	}
}

func TestNoSharedFleetIdentityWithoutSharedFleets(t *testing.T) {
	p := shared(t)
	if len(p.fleet.SharedFleets) != 0 {
		t.Fatal("fleetJSON has shared fleets")
	}
	for _, r := range p.m.Resources() {
		if r.Token == tokSharedIdentity || ownType(r.Parent) == tokSharedIdentity {
			t.Errorf("%s %s declared without shared fleets", r.Token, r.Name)
		}
	}
}

// TestSharedFleetBindingsMatchTheDeployedServiceAccounts deploys the shared
// fleets on the platform and checks every Kubernetes ServiceAccount
// annotated with a Google service account against the bindings: each has
// exactly one, to the account it names.
func TestSharedFleetBindingsMatchTheDeployedServiceAccounts(t *testing.T) {
	m := withSharedFleets(t).m
	annotated := map[string]string{}
	for _, r := range m.ByToken("kubernetes:core/v1:ServiceAccount") {
		ann := r.Input("metadata.annotations")
		if !ann.IsObject() {
			continue
		}
		if gsa := str(ann.ObjectValue()["iam.gke.io/gcp-service-account"]); gsa != "" {
			annotated[wi(str(r.Input("metadata.namespace")), str(r.Input("metadata.name")))] = gsa
		}
	}
	bound := map[string]string{}
	for _, r := range m.ByToken("gcp:serviceaccount/iAMMember:IAMMember") {
		if ownType(r.Parent) != tokSharedIdentity || str(r.Input("role")) != "roles/iam.workloadIdentityUser" {
			continue
		}
		member := str(r.Input("member"))
		if _, dup := bound[member]; dup {
			t.Errorf("%s is bound twice", member)
		}
		bound[member] = str(r.Input("serviceAccountId"))
	}
	if len(annotated) != 6 {
		t.Errorf("%d annotated ServiceAccounts, want 6 (each group's managers, each fleet's gc, production's Prometheus): %v", len(annotated), annotated)
	}
	for member, gsa := range annotated {
		if got := bound[member]; !strings.HasSuffix(got, "/serviceAccounts/"+gsa) {
			t.Errorf("ServiceAccount %s is annotated with %s but bound to %q", member, gsa, got)
		}
	}
	if extra := slices.DeleteFunc(slices.Collect(maps.Keys(bound)), func(k string) bool { _, ok := annotated[k]; return ok }); len(extra) > 0 {
		t.Errorf("bindings for ServiceAccounts that carry no such annotation: %v", extra)
	}
}

// gcEmail is the email of fleet ns's gc account in the platform's project.
func gcEmail(ns string) string { return sharedfleet.GCAccountEmail(project, "runners-prod", ns) }

// gcAccountID is its IAM resource name.
func gcAccountID(ns string) string { return "projects/" + project + "/serviceAccounts/" + gcEmail(ns) }

// Each fleet's gc acts as an account of its own, which only the fleet's gc
// ServiceAccount may act as, and which may list instances in its fleet's
// VM project and get, note, read the job report of and delete only the
// docker+machine VMs in its fleet's zones: never create a VM, never act as
// another account, never the managers' account or roles.
func TestFleetGCHasItsOwnLeastPrivilegeAccount(t *testing.T) {
	p := withSharedFleets(t)
	var accounts []string
	for _, a := range sharedChildren(p, "gcp:serviceaccount/account:Account") {
		accounts = append(accounts, str(a.Input("project"))+"/"+str(a.Input("accountId")))
	}
	slices.Sort(accounts)
	if want := []string{project + "/" + sharedfleet.GCAccountID("runners-prod", "production"), project + "/" + sharedfleet.GCAccountID("runners-prod", "staging")}; !slices.Equal(accounts, want) {
		t.Errorf("gc accounts %v, want one per fleet %v", accounts, want)
	}

	roles := map[string][]string{}
	for _, r := range sharedChildren(p, "gcp:projects/iAMCustomRole:IAMCustomRole") {
		var perms []string
		for _, v := range r.Input("permissions").ArrayValue() {
			perms = append(perms, v.StringValue())
		}
		slices.Sort(perms)
		roles["projects/"+str(r.Input("project"))+"/roles/"+str(r.Input("roleId"))] = perms
	}
	list := []string{"compute.instances.list", "compute.zoneOperations.get"}
	instance := []string{"compute.instances.delete", "compute.instances.get", "compute.instances.getGuestAttributes", "compute.instances.setMetadata"}
	wantRoles := map[string][]string{
		"projects/" + vmProject + "/roles/runnerfleetGCList_runners_prod":     list,
		"projects/" + vmProject + "/roles/runnerfleetGCInstance_runners_prod": instance,
		"projects/ci-project-1/roles/runnerfleetGCList_runners_prod":          list,
		"projects/ci-project-1/roles/runnerfleetGCInstance_runners_prod":      instance,
	}
	if !maps.EqualFunc(roles, wantRoles, slices.Equal[[]string]) {
		t.Errorf("gc's custom roles %v, want exactly %v", roles, wantRoles)
	}

	// The instance role only under the condition naming the fleet's zones
	// and docker+machine's names; the list role without one.
	wantCond := map[string]string{
		gcEmail("production"): `resource.type == "compute.googleapis.com/Instance" && (resource.name.startsWith("projects/` + vmProject + `/zones/europe-west1-b/instances/runner-") || resource.name.startsWith("projects/` + vmProject + `/zones/europe-west1-c/instances/runner-"))`,
		gcEmail("staging"):    `resource.type == "compute.googleapis.com/Instance" && (resource.name.startsWith("projects/ci-project-1/zones/europe-west1-b/instances/runner-"))`,
	}
	gcGrants := 0
	for _, r := range p.m.Resources() {
		member := str(r.Input("member"))
		email := strings.TrimPrefix(member, "serviceAccount:")
		if _, isGC := wantCond[email]; !isGC {
			continue
		}
		gcGrants++
		role, cond := str(r.Input("role")), r.Input("condition")
		// Production names its VMs' account: gc may act as it, and only
		// it, to note its VMs (checked with the other actAs grants in
		// TestSharedFleetAccountsTrustExactlyTheirKubernetesServiceAccounts).
		if r.Token == "gcp:serviceaccount/iAMMember:IAMMember" && role == "roles/iam.serviceAccountUser" &&
			email == gcEmail("production") && str(r.Input("serviceAccountId")) == "projects/ci-vms-2/serviceAccounts/"+vmGSA {
			continue
		}
		perms, custom := roles[role]
		if r.Token != "gcp:projects/iAMMember:IAMMember" || !custom {
			t.Errorf("%s %s grants gc's account %s: gc has only its two custom roles", r.Token, r.Name, role)
			continue
		}
		deletes := slices.Contains(perms, "compute.instances.delete") || slices.Contains(perms, "compute.instances.setMetadata")
		switch {
		case deletes && (!cond.IsObject() || str(cond.ObjectValue()["expression"]) != wantCond[email]):
			t.Errorf("%s grants %s delete on instances under condition %v, want exactly %q", r.Name, email, cond, wantCond[email])
		case !deletes && cond.IsObject():
			t.Errorf("%s: the list role under a condition %v: listing is checked on the project, where a name condition never holds", r.Name, cond)
		}
	}
	if gcGrants != 5 {
		t.Errorf("%d grants to gc's accounts, want 5 (list and instance roles, per fleet; production's VM account)", gcGrants)
	}
	// The managers' account, which creates VMs, is not gc's.
	for _, e := range []string{gcEmail("production"), gcEmail("staging")} {
		if e == managersGSA {
			t.Errorf("gc acts as the managers' account %s", e)
		}
	}
}
