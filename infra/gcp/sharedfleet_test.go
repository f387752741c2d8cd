package gcp

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/sharedfleet"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
)

const (
	tokSharedIdentity = "runnerfleet:gcp:SharedFleetIdentity"
	managersGSA       = "ci-shared-managers@ci-project-1.iam.gserviceaccount.com"
	// The Prometheus account lives in another project than the cluster;
	// its Workload Identity members are still the cluster project's pool.
	prometheusGSA = "ci-prometheus@ci-monitoring-1.iam.gserviceaccount.com"
	vmProject     = "ci-vms-2"
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
	sharedFleetsResult *platform
)

// withSharedFleets runs the platform of sharedFleetsJSON once.
func withSharedFleets(t *testing.T) *platform {
	t.Helper()
	sharedFleetsOnce.Do(func() { sharedFleetsResult = run(t, sharedFleetsJSON) })
	if sharedFleetsResult == nil {
		t.Fatal("the run with shared fleets failed")
	}
	return sharedFleetsResult
}

// sharedChildren are the resources of tok under the SharedFleetIdentity
// component.
func sharedChildren(p *platform, tok string) []infratest.Resource {
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
		// And each fleet's gc CronJob, which deletes the managers' VMs.
		managers + " roles/iam.workloadIdentityUser " + wi("production", "production-gc"),
		managers + " roles/iam.workloadIdentityUser " + wi("staging", "staging-gc"),
		prometheus + " roles/iam.workloadIdentityUser " + wi("production", "prometheus"),
		// The cache's URL signing, on the managers' own account only.
		managers + " roles/iam.serviceAccountTokenCreator serviceAccount:" + managersGSA,
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
		if s.GCPServiceAccount != "" {
			fromSharedfleet = append(fromSharedfleet, wi(sharedfleet.Namespace(s), sharedfleet.GCName(sharedfleet.Namespace(s))))
		}
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
	}
	slices.Sort(want)
	if got := grants(sharedChildren(p, "gcp:projects/iAMMember:IAMMember"), "project"); !slices.Equal(got, want) {
		t.Errorf("project grants:\n  %s\nwant exactly:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	want = []string{
		// Production uses the platform's cache bucket, staging its own.
		BucketName(project, "runners-prod") + " roles/storage.objectUser serviceAccount:" + managersGSA,
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
		if role := str(r.Input("role")); role == "roles/iam.serviceAccountUser" || role == "roles/owner" || role == "roles/editor" {
			t.Errorf("%s %s grants %s", r.Token, r.Name, role)
		}
	}
	if got := len(sharedChildren(p, "gcp:projects/iAMMember:IAMMember")) + len(sharedChildren(p, "gcp:storage/bucketIAMMember:BucketIAMMember")) +
		len(sharedChildren(p, "gcp:serviceaccount/iAMMember:IAMMember")); got != 12 {
		t.Errorf("%d grants under the shared fleets' identity component, want the 12 above", got)
	}
}

func TestSharedFleetIdentityIsAParentedChildOfThePlatform(t *testing.T) {
	p := withSharedFleets(t)
	comps := p.m.ByToken(tokSharedIdentity)
	if len(comps) != 1 {
		t.Fatalf("%d %s components, want 1", len(comps), tokSharedIdentity)
	}
	if ownType(comps[0].Parent) != "runnerfleet:gcp:Platform" {
		t.Errorf("%s has parent %q, not the platform", comps[0].Name, comps[0].Parent)
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
	// Every other resource's parenting holds as without shared fleets.
	for _, r := range p.m.Resources() {
		if r.Token != "runnerfleet:gcp:Platform" && r.Token != "pulumi:pulumi:Stack" && !strings.HasPrefix(ownType(r.Parent), "runnerfleet:gcp:") {
			t.Errorf("%s %s has parent %q, not a component of the platform", r.Token, r.Name, r.Parent)
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
	m := infratest.NewMocks(t)
	cfg := map[string]string{"runnerfleet:fleet": sharedFleetsJSON}
	var keys []string
	// Every secret the stack names is read (kube.ReadSecrets): the teams'
	// tokens too.
	for _, k := range []string{"prodLinux", "prodFleeting", "stagingLinux", "teamA", "teamAML", "teamB"} {
		cfg["runnerfleet:"+k] = "glrt-" + k + "TokenNotReal"
		keys = append(keys, "runnerfleet:"+k)
	}
	cfg["runnerfleet:alertWebhookURL"] = "https://hooks.example.com/alerts/not-a-real-token"
	keys = append(keys, "runnerfleet:alertWebhookURL")
	err := infratest.Run(m, stack, cfg, keys, func(ctx *pulumi.Context) error {
		f, err := stackconfig.Decode([]byte(sharedFleetsJSON), ctx.Stack())
		if err != nil {
			return err
		}
		c, err := newPlatform(ctx, f)
		if err != nil {
			return err
		}
		secrets, err := kube.ReadSecrets(ctx, f)
		if err != nil {
			return err
		}
		_, err = sharedfleet.New(ctx, &sharedfleet.Args{Fleets: f.SharedFleets, Cluster: c, Secrets: secrets, Alerting: f.Alerting})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
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
