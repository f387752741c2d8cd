package gcp

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/sdkschema"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/internal/schedtest"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/policy"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

const (
	stack   = "prod"
	project = "ci-project-1"
	region  = "europe-west1"
)

// fleetJSON is a gke stack config with three teams: two with an identity
// (one in a namespace whose name is another's with a suffix) and one
// without.
const fleetJSON = `{
  "platform": "gke",
  "clusterName": "runners-prod",
  "gitlabURL": "https://gitlab.example.com",
  "controller": {"image": "example.invalid/runnerset-controller:v1"},
  "cache": {"expireDays": 7},
  "gcp": {
    "project": "ci-project-1",
    "region": "europe-west1",
    "masterAuthorizedCIDRs": ["203.0.113.0/24"],
    "autoprovisioning": {"maxCPU": 200, "maxMemoryGB": 800},
    "labels": {"cost-center": "ci"}
  },
  "teams": [
    {"namespace": "team-a", "name": "build", "tags": ["a"], "tokenConfigKey": "teamA"},
    {"namespace": "team-a-ml", "name": "train", "tags": ["ml"], "tokenConfigKey": "teamAML"},
    {"namespace": "team-b", "name": "build", "tags": ["b"], "tokenConfigKey": "teamB", "identity": false}
  ]
}`

// deployed is what one run of NewPlatform gave, resolved.
type deployed struct {
	m          *infratest.Mocks
	fleet      *stackconfig.Fleet
	cluster    *kube.Cluster
	emails     map[string]string
	bucket     string
	kubeconfig string
	secret     bool
}

// run drives NewPlatform under the mocks with the stack config raw.
func run(t *testing.T, raw string) *deployed {
	t.Helper()
	p := &deployed{m: infratest.NewMocks(t), emails: map[string]string{}}
	// GKE's masterAuth also holds an object, which the kubeconfig must
	// read past.
	gke := p.m.Outputs["gcp:container/cluster:Cluster"]
	p.m.Outputs["gcp:container/cluster:Cluster"] = func(r infratest.Resource) resource.PropertyMap {
		out := gke(r)
		out["masterAuth"].ObjectValue()["clientCertificateConfig"] = resource.NewObjectProperty(resource.PropertyMap{"issueClientCertificate": resource.NewBoolProperty(false)})
		return out
	}
	// A pool's and a provider's names hold the project's number.
	for tok, name := range map[string]func(r infratest.Resource) string{
		"gcp:iam/workloadIdentityPool:WorkloadIdentityPool": func(r infratest.Resource) string {
			return "projects/123456789012/locations/global/workloadIdentityPools/" + str(r.Input("workloadIdentityPoolId"))
		},
		"gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider": func(r infratest.Resource) string {
			return "projects/123456789012/locations/global/workloadIdentityPools/" + str(r.Input("workloadIdentityPoolId")) + "/providers/" + str(r.Input("workloadIdentityPoolProviderId"))
		},
	} {
		p.m.Outputs[tok] = func(r infratest.Resource) resource.PropertyMap {
			return resource.PropertyMap{"name": resource.NewStringProperty(name(r))}
		}
	}
	var mu sync.Mutex
	err := infratest.Run(p.m, stack, map[string]string{"runnerfleet:fleet": raw}, nil, func(ctx *pulumi.Context) error {
		f, err := stackconfig.Decode([]byte(raw), ctx.Stack())
		if err != nil {
			return err
		}
		p.fleet = f
		c, err := newPlatform(ctx, f)
		if err != nil {
			return err
		}
		p.cluster = c
		for k, v := range c.Identities {
			v.ApplyT(func(s string) string { mu.Lock(); p.emails[k] = s; mu.Unlock(); return s })
		}
		c.Cache.Bucket.ApplyT(func(s string) string { mu.Lock(); p.bucket = s; mu.Unlock(); return s })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The kubeconfig is the Platform component's output; read it from the
	// Cluster component's provider inputs, where it arrives as a secret.
	prov := p.m.Get(t, "pulumi:providers:kubernetes", "runners-prod-cluster-kubernetes")
	v := prov.Inputs["kubeconfig"]
	p.secret = v.IsSecret()
	p.kubeconfig = prov.Input("kubeconfig").StringValue()
	return p
}

var (
	once   sync.Once
	result *deployed
)

// shared runs the platform of fleetJSON once for the tests that only read.
func shared(t *testing.T) *deployed {
	t.Helper()
	once.Do(func() { result = run(t, fleetJSON) })
	if result == nil {
		t.Fatal("the shared run failed")
	}
	return result
}

func str(v resource.PropertyValue) string {
	if v.IsString() {
		return v.StringValue()
	}
	return ""
}

func strs(v resource.PropertyValue) []string {
	var out []string
	if v.IsArray() {
		for _, e := range v.ArrayValue() {
			out = append(out, str(e))
		}
	}
	return out
}

// The one node pool the program declares is the managers': on-demand,
// labelled and tainted (job capacity comes from the teams' spot
// ComputeClasses).
func TestNodePoolIsTheOnDemandManagersPoolWithWorkloadIdentityMetadata(t *testing.T) {
	p := shared(t)
	pools := p.m.ByToken("gcp:container/nodePool:NodePool")
	if len(pools) == 0 {
		t.Fatal("no node pool")
	}
	for _, r := range pools {
		if r.Input("nodeConfig.spot") != resource.NewBoolProperty(false) {
			t.Errorf("node pool %s is not on-demand: the managers run there and must never be on spot", r.Name)
		}
		node, err := r.Node("nodeConfig.labels", "nodeConfig.taints")
		if err != nil {
			t.Fatal(err)
		}
		manager := resources.Deployment(&v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}, "gitlab-runner", "h", "team-build-j1").Spec.Template.Spec
		if err := schedtest.Fits(manager, node); err != nil {
			t.Errorf("a RunnerSet's manager does not fit node pool %s: %v", r.Name, err)
		}
		if err := schedtest.Fits(corev1.PodSpec{}, node); err == nil {
			t.Errorf("a pod without the toleration fits node pool %s: it is not tainted", r.Name)
		}
		if r.Input("nodeConfig.preemptible").IsBool() {
			t.Errorf("node pool %s sets preemptible (the legacy spot); use spot", r.Name)
		}
		if got := str(r.Input("nodeConfig.workloadMetadataConfig.mode")); got != "GKE_METADATA" {
			t.Errorf("node pool %s has workload metadata mode %q, want GKE_METADATA (pods would see the node's identity)", r.Name, got)
		}
	}
	cl := p.m.Get(t, "gcp:container/cluster:Cluster", "runners-prod-cluster")
	if cl.Input("removeDefaultNodePool") != resource.NewBoolProperty(true) {
		t.Error("the default node pool (on-demand, default service account) is kept")
	}
}

// A team's account trusts exactly two Kubernetes ServiceAccounts of its
// RunnerSet: its jobs' and its managers' (which sign the GCS cache URLs).
func TestWorkloadIdentityBindingsNameExactlyTheTeamsJobAndManagerServiceAccounts(t *testing.T) {
	p := shared(t)
	want := map[string]bool{}
	signers := map[string]bool{}  // the member each team account grants ManagerSignerRole to: itself
	teamOf := map[string]string{} // namespace → the team namespace it belongs to
	for _, team := range p.fleet.Teams {
		if team.WantsIdentity(p.fleet.Platform) {
			n := naming.For(team.Namespace, team.Name)
			teamOf[team.Namespace], teamOf[n.JobsNamespace()] = team.Namespace, team.Namespace
			// The jobs' in the RunnerSet's jobs namespace, never the team's.
			want[fmt.Sprintf("serviceAccount:%s.svc.id.goog[%s/%s]", project, team.Namespace+"-"+team.Name+"-j"+fmt.Sprint(len(team.Namespace)), n.JobServiceAccount())] = true
			want[fmt.Sprintf("serviceAccount:%s.svc.id.goog[%s/%s]", project, team.Namespace, n.ManagerServiceAccount())] = true
			signers["serviceAccount:"+p.emails[team.Namespace+"/"+team.Name]] = true
		}
	}
	if len(want) != 4 || len(signers) != 2 {
		t.Fatalf("want %v and signers %v, for the two teams with an identity", want, signers)
	}
	members := p.m.ByToken("gcp:serviceaccount/iAMMember:IAMMember")
	if len(members) != len(want)+len(signers) {
		t.Fatalf("%d members on service accounts, want two Workload Identity members and one signer per team with an identity (%d)", len(members), len(want)+len(signers))
	}
	for _, r := range members {
		member, sa := str(r.Input("member")), str(r.Input("serviceAccountId"))
		switch role := str(r.Input("role")); role {
		case "roles/iam.workloadIdentityUser":
			if strings.ContainsAny(member, "*{}") || !want[member] {
				t.Errorf("%s grants %s to %q, which is not exactly one team's job or manager ServiceAccount (want one of %v)", r.Name, role, member, want)
			}
			delete(want, member)
			// The member's namespace (the team's, or its RunnerSet's jobs
			// namespace) and the account's must be the same team's.
			ns := teamOf[member[strings.Index(member, "[")+1:strings.Index(member, "/")]]
			if ns == "" || !strings.Contains(sa, "/serviceAccounts/"+ns+"-") {
				t.Errorf("%s lets namespace %s act as %s, another team's account", r.Name, ns, sa)
			}
			if !dependsOn(r, "gcp:container/cluster:Cluster", "runners-prod-cluster") {
				t.Errorf("%s does not wait for the cluster: the project's identity pool may not exist yet", r.Name)
			}
		case "roles/iam.serviceAccountTokenCreator":
			// Only on itself: the managers sign cache URLs as the account.
			if !signers[member] || !strings.HasSuffix(sa, "/serviceAccounts/"+strings.TrimPrefix(member, "serviceAccount:")) {
				t.Errorf("%s grants %s on %s to %q, want a team account on itself only", r.Name, role, sa, member)
			}
			delete(signers, member)
		default:
			t.Errorf("%s grants %s on %s to %q, want roles/iam.workloadIdentityUser or the signer role only", r.Name, role, sa, member)
		}
	}
	if len(want) > 0 || len(signers) > 0 {
		t.Errorf("not granted: Workload Identity %v, signer %v", want, signers)
	}
	for _, tok := range []string{"gcp:serviceaccount/iAMBinding:IAMBinding", "gcp:serviceaccount/iAMPolicy:IAMPolicy", "gcp:projects/iAMBinding:IAMBinding", "gcp:projects/iAMPolicy:IAMPolicy"} {
		if rs := p.m.ByToken(tok); len(rs) > 0 {
			t.Errorf("%s %s would remove members others granted", tok, rs[0].Name)
		}
	}
}

// TestTheManagersThatSignTheCacheActAsTheTeamAccount ties the bindings to
// what the controller makes of the fleet's RunnerClass and RunnerSets: the
// manager ServiceAccount it writes carries the team's account, and that
// account lets exactly that ServiceAccount, and the job ServiceAccount in
// the jobs namespace, act as it.
func TestTheManagersThatSignTheCacheActAsTheTeamAccount(t *testing.T) {
	p := shared(t)
	class := kube.RunnerClass(p.fleet, p.cluster)
	class.Spec.Defaults.Cache.Bucket = p.bucket // Declare sets it at deploy time
	bound := map[string]bool{}
	for _, r := range p.m.ByToken("gcp:serviceaccount/iAMMember:IAMMember") {
		if str(r.Input("role")) == "roles/iam.workloadIdentityUser" {
			bound[str(r.Input("serviceAccountId"))+" "+str(r.Input("member"))] = true
		}
	}
	for _, team := range p.fleet.Teams {
		email, ok := p.emails[kube.IdentityKey(team.Namespace, team.Name)]
		if !ok {
			continue
		}
		rs := kube.RunnerSet(team, class.Name)
		rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{GCPServiceAccount: email}
		sa := resources.ManagerServiceAccountFor(rs, v1alpha1.Effective(rs, class))
		if got := sa.Annotations[resources.AnnotationWorkloadIdentity]; got != email {
			t.Errorf("%s/%s: manager ServiceAccount acts as %q, want %q: the managers could not sign cache URLs", team.Namespace, team.Name, got, email)
		}
		// The job ServiceAccount the controller writes, where it writes it.
		job := resources.JobServiceAccount(rs, v1alpha1.Effective(rs, class).JobsNamespace)
		for _, ksa := range []*corev1.ServiceAccount{sa, job} {
			key := "projects/" + project + "/serviceAccounts/" + email + " " + WorkloadIdentityMember(project, ksa.Namespace, ksa.Name)
			if !bound[key] {
				t.Errorf("%s/%s: no Workload Identity binding %s", team.Namespace, team.Name, key)
			}
		}
	}
}

func TestCacheBucketIsPrivateExpiringAndOnlyForTheTeams(t *testing.T) {
	p := shared(t)
	buckets := p.m.ByToken("gcp:storage/bucket:Bucket")
	if len(buckets) != 1 {
		t.Fatalf("%d buckets, want the cache only", len(buckets))
	}
	b := buckets[0]
	for key, want := range map[string]resource.PropertyValue{
		"uniformBucketLevelAccess":                  resource.NewBoolProperty(true),
		"publicAccessPrevention":                    resource.NewStringProperty("enforced"),
		"forceDestroy":                              resource.NewBoolProperty(false),
		"versioning.enabled":                        resource.NewBoolProperty(false),
		"location":                                  resource.NewStringProperty(region),
		"softDeletePolicy.retentionDurationSeconds": resource.NewNumberProperty(0),
	} {
		if got := b.Input(key); !got.DeepEquals(want) {
			t.Errorf("bucket %s is %v, want %v", key, got, want)
		}
	}
	expires := false
	for _, rule := range b.Input("lifecycleRules").ArrayValue() {
		r := infratest.Resource{Inputs: rule.ObjectValue()}
		if str(r.Input("action.type")) == "Delete" && r.Input("condition.age").DeepEquals(resource.NewNumberProperty(float64(p.fleet.Cache.ExpireDays))) {
			expires = true
		}
	}
	if !expires {
		t.Errorf("no lifecycle rule deletes objects after cache.expireDays (%d): %v", p.fleet.Cache.ExpireDays, b.Input("lifecycleRules"))
	}

	teams := map[string]bool{}
	namespaceOf := map[string]string{}
	for k, e := range p.emails {
		teams["serviceAccount:"+e] = true
		namespaceOf["serviceAccount:"+e], _, _ = strings.Cut(k, "/")
	}
	grants := p.m.ByToken("gcp:storage/bucketIAMMember:BucketIAMMember")
	if len(grants) != len(teams) {
		t.Errorf("%d bucket grants, want one per team service account (%d)", len(grants), len(teams))
	}
	for _, g := range grants {
		member := str(g.Input("member"))
		if !teams[member] {
			t.Errorf("bucket grant %s is for %q, not a team's service account", g.Name, member)
		}
		if role := str(g.Input("role")); role != "roles/storage.objectUser" {
			t.Errorf("bucket grant %s gives %s, want roles/storage.objectUser", g.Name, role)
		}
		want := fmt.Sprintf(`resource.name.startsWith("projects/_/buckets/%s/objects/%s/")`, str(g.Input("bucket")), namespaceOf[member])
		if got := str(g.Input("condition.expression")); got != want {
			t.Errorf("bucket grant %s condition %q, want the team's own prefix: %s", g.Name, got, want)
		}
	}
	for _, tok := range []string{"gcp:storage/bucketIAMBinding:BucketIAMBinding", "gcp:storage/bucketIAMPolicy:BucketIAMPolicy", "gcp:storage/bucketACL:BucketACL", "gcp:storage/bucketAccessControl:BucketAccessControl"} {
		if rs := p.m.ByToken(tok); len(rs) > 0 {
			t.Errorf("%s %s: the bucket's access is IAM members only", tok, rs[0].Name)
		}
	}
	for _, r := range p.m.Resources() {
		for _, public := range []string{"allUsers", "allAuthenticatedUsers"} {
			if str(r.Input("member")) == public || slices.Contains(strs(r.Input("members")), public) {
				t.Errorf("%s %s grants to %s", r.Token, r.Name, public)
			}
		}
	}
}

func TestNoFirewallRuleOpensIngressFromTheInternet(t *testing.T) {
	p := shared(t)
	rules := p.m.ByToken("gcp:compute/firewall:Firewall")
	if len(rules) == 0 {
		t.Fatal("no firewall rule")
	}
	for _, r := range rules {
		if d := str(r.Input("direction")); d != "" && d != "INGRESS" {
			continue
		}
		sources := strs(r.Input("sourceRanges"))
		// An ingress rule without any source is open to 0.0.0.0/0.
		if len(sources) == 0 && len(strs(r.Input("sourceTags"))) == 0 && len(strs(r.Input("sourceServiceAccounts"))) == 0 {
			t.Errorf("ingress rule %s has no source: GCP reads that as 0.0.0.0/0", r.Name)
		}
		for _, s := range sources {
			if s == "0.0.0.0/0" || s == "::/0" {
				t.Errorf("ingress rule %s is open to %s", r.Name, s)
			}
		}
		if len(strs(r.Input("denies"))) > 0 {
			t.Errorf("rule %s denies: the network relies on GCP's implied deny-ingress only", r.Name)
		}
	}
	webhooks := p.m.Get(t, "gcp:compute/firewall:Firewall", "runners-prod-network-allow-master-webhooks")
	if got := strs(webhooks.Input("sourceRanges")); !slices.Equal(got, []string{p.fleet.GCP.MasterCIDR}) {
		t.Errorf("the webhook rule admits %v, want the control plane's %s only", got, p.fleet.GCP.MasterCIDR)
	}
	allow := webhooks.Input("allows").ArrayValue()
	if len(allow) != 1 || !slices.Equal(strs(allow[0].ObjectValue()["ports"]), []string{"443", "8443", "9443", "10250"}) {
		t.Errorf("the webhook rule allows %v, want tcp 443, 8443, 9443, 10250", allow)
	}
	// The webhook rule reaches the nodes by their tag, which every pool,
	// auto-provisioned ones included, must carry.
	tags := strs(webhooks.Input("targetTags"))
	if len(tags) != 1 {
		t.Fatalf("the webhook rule targets tags %v, want the nodes' one tag", tags)
	}
	cl := p.m.Get(t, "gcp:container/cluster:Cluster", "runners-prod-cluster")
	carriers := map[string][]string{"auto-provisioned pools": strs(cl.Input("nodePoolAutoConfig.networkTags.tags"))}
	for _, pool := range p.m.ByToken("gcp:container/nodePool:NodePool") {
		carriers[pool.Name] = strs(pool.Input("nodeConfig.tags"))
	}
	for who, got := range carriers {
		if !slices.Contains(got, tags[0]) {
			t.Errorf("%s have network tags %v, without the webhook rule's %s", who, got, tags[0])
		}
	}
	internal := p.m.Get(t, "gcp:compute/firewall:Firewall", "runners-prod-network-allow-internal")
	if got := strs(internal.Input("sourceRanges")); !slices.Equal(got, []string{p.fleet.GCP.SubnetCIDR, p.fleet.GCP.PodsCIDR}) {
		t.Errorf("the internal rule admits %v, want the subnet's nodes and pods ranges", got)
	}
}

func TestCloudNATCoversEveryRangeOfTheSubnetAndLogsErrors(t *testing.T) {
	p := shared(t)
	nats := p.m.ByToken("gcp:compute/routerNat:RouterNat")
	if len(nats) != 1 {
		t.Fatalf("%d Cloud NATs, want 1", len(nats))
	}
	nat := nats[0]
	subnets := nat.Input("subnetworks").ArrayValue()
	if len(subnets) != 1 || !slices.Equal(strs(subnets[0].ObjectValue()["sourceIpRangesToNats"]), []string{"ALL_IP_RANGES"}) {
		t.Errorf("NAT subnetworks %v, want the subnet with ALL_IP_RANGES (nodes and pods)", subnets)
	}
	if nat.Input("logConfig.enable") != resource.NewBoolProperty(true) || str(nat.Input("logConfig.filter")) != "ERRORS_ONLY" {
		t.Errorf("NAT logging %v, want errors", nat.Input("logConfig"))
	}
}

func TestClusterIsPrivateWithWorkloadIdentityAndAutoProvisioning(t *testing.T) {
	p := shared(t)
	cl := p.m.Get(t, "gcp:container/cluster:Cluster", "runners-prod-cluster")
	nodeSA := p.m.Get(t, "gcp:serviceaccount/account:Account", "runners-prod-cluster-nodes")
	nodeEmail := str(nodeSA.Input("accountId")) + "@" + project + ".iam.gserviceaccount.com"
	for key, want := range map[string]resource.PropertyValue{
		"privateClusterConfig.enablePrivateNodes":                    resource.NewBoolProperty(true),
		"privateClusterConfig.masterIpv4CidrBlock":                   resource.NewStringProperty("172.16.0.0/28"),
		"workloadIdentityConfig.workloadPool":                        resource.NewStringProperty(project + ".svc.id.goog"),
		"deletionProtection":                                         resource.NewBoolProperty(true),
		"location":                                                   resource.NewStringProperty(region),
		"releaseChannel.channel":                                     resource.NewStringProperty("REGULAR"),
		"networkingMode":                                             resource.NewStringProperty("VPC_NATIVE"),
		"ipAllocationPolicy.clusterSecondaryRangeName":               resource.NewStringProperty("pods"),
		"ipAllocationPolicy.servicesSecondaryRangeName":              resource.NewStringProperty("services"),
		"initialNodeCount":                                           resource.NewNumberProperty(1),
		"clusterAutoscaling.enabled":                                 resource.NewBoolProperty(true),
		"clusterAutoscaling.autoProvisioningDefaults.serviceAccount": resource.NewStringProperty(nodeEmail),
		"nodeConfig.serviceAccount":                                  resource.NewStringProperty(nodeEmail),
	} {
		if got := cl.Input(key); !got.DeepEquals(want) {
			t.Errorf("cluster %s is %v, want %v", key, got, want)
		}
	}
	if got := strs(cl.Input("clusterAutoscaling.autoProvisioningDefaults.oauthScopes")); !slices.Equal(got, []string{"https://www.googleapis.com/auth/cloud-platform"}) {
		t.Errorf("auto-provisioned nodes have scopes %v", got)
	}
	if cl.Input("clusterAutoscaling.autoProvisioningDefaults.shieldedInstanceConfig.enableSecureBoot") != resource.NewBoolProperty(true) {
		t.Error("auto-provisioned nodes are not shielded")
	}
	limits := map[string]float64{}
	for _, l := range cl.Input("clusterAutoscaling.resourceLimits").ArrayValue() {
		o := l.ObjectValue()
		limits[str(o["resourceType"])] = o["maximum"].NumberValue()
	}
	if limits["cpu"] != 200 || limits["memory"] != 800 {
		t.Errorf("auto-provisioning limits %v, want cpu 200 and memory 800 from the stack config", limits)
	}
	var cidrs []string
	for _, b := range cl.Input("masterAuthorizedNetworksConfig.cidrBlocks").ArrayValue() {
		cidrs = append(cidrs, str(b.ObjectValue()["cidrBlock"]))
	}
	if !slices.Equal(cidrs, []string{"203.0.113.0/24"}) {
		t.Errorf("master authorized networks %v, want the stack config's", cidrs)
	}
	subnet := p.m.ByToken("gcp:compute/subnetwork:Subnetwork")[0]
	var ranges []string
	for _, r := range subnet.Input("secondaryIpRanges").ArrayValue() {
		ranges = append(ranges, str(r.ObjectValue()["rangeName"]))
	}
	if !slices.Equal(ranges, []string{"pods", "services"}) || subnet.Input("privateIpGoogleAccess") != resource.NewBoolProperty(true) {
		t.Errorf("subnet ranges %v (want pods, services) or no private Google access", ranges)
	}
	if p.m.ByToken("gcp:compute/network:Network")[0].Input("autoCreateSubnetworks") != resource.NewBoolProperty(false) {
		t.Error("the VPC auto-creates subnetworks in every region")
	}

	var roles []string
	for _, r := range p.m.ByToken("gcp:projects/iAMMember:IAMMember") {
		if str(r.Input("member")) != "serviceAccount:"+nodeEmail {
			t.Errorf("project grant %s is for %s, not the nodes' account", r.Name, str(r.Input("member")))
		}
		roles = append(roles, str(r.Input("role")))
	}
	slices.Sort(roles)
	want := []string{"roles/artifactregistry.reader", "roles/logging.logWriter", "roles/monitoring.metricWriter", "roles/monitoring.viewer"}
	if !slices.Equal(roles, want) {
		t.Errorf("the nodes' account has %v, want exactly %v", roles, want)
	}
}

func TestEveryLabelableResourceCarriesTheStackAndClusterLabels(t *testing.T) {
	p := shared(t)
	s, err := sdkschema.Load(context.Background(), infratest.SchemaPackages...)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range p.m.Resources() {
		if !r.Custom || !strings.HasPrefix(r.Token, "gcp:") {
			continue
		}
		typ := s.Resources[r.Token]
		if typ == nil {
			t.Fatalf("%s: not in the schema", r.Token)
		}
		var keys []string
		for _, k := range []string{"labels", "resourceLabels"} {
			if _, ok := typ.Fields[k]; ok {
				keys = append(keys, k)
			}
		}
		if nc, ok := typ.Fields["nodeConfig"]; ok {
			if _, ok := nc.Fields["resourceLabels"]; ok {
				keys = append(keys, "nodeConfig.resourceLabels")
			}
		}
		for _, k := range keys {
			checked++
			for label, want := range map[string]string{"runnerfleet-stack": stack, "runnerfleet-cluster": "runners-prod", "cost-center": "ci"} {
				if got := str(r.Input(k + "." + label)); got != want {
					t.Errorf("%s %s: %s.%s is %q, want %q", r.Token, r.Name, k, label, got, want)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no labelable resource found")
	}
	gcpp := p.m.ByToken("pulumi:providers:gcp")
	if len(gcpp) != 1 || str(gcpp[0].Input("defaultLabels.runnerfleet-stack")) != stack {
		t.Error("the gcp provider does not label what it creates with the stack")
	}
}

func TestLabelValuesFollowGCPRules(t *testing.T) {
	for in, want := range map[string]string{"prod": "prod", "Team.Prod_1": "team-prod_1", strings.Repeat("x", 70): strings.Repeat("x", 63)} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestChildrenAreParentedAndUseTheExplicitProvider(t *testing.T) {
	p := shared(t)
	for _, r := range p.m.Resources() {
		if r.Token == "runnerfleet:gcp:Platform" || r.Token == "pulumi:pulumi:Stack" {
			continue
		}
		if parent := ownType(r.Parent); !strings.HasPrefix(parent, "runnerfleet:gcp:") {
			t.Errorf("%s %s has parent %q, not a component of the platform", r.Token, r.Name, r.Parent)
		}
		if parent := ownName(r.Parent); r.Name != parent && !strings.HasPrefix(r.Name, parent+"-") {
			t.Errorf("%s %s is not named from its component %s", r.Token, r.Name, parent)
		}
		if r.Custom && strings.HasPrefix(r.Token, "gcp:") && !strings.Contains(r.Provider, "pulumi:providers:gcp::runners-prod-gcp::") {
			t.Errorf("%s %s uses provider %q, not the platform's gcp provider", r.Token, r.Name, r.Provider)
		}
	}
}

// ownType is the type of the resource of urn: the last of its type chain.
func ownType(urn string) string {
	parts := strings.Split(urn, "::")
	if len(parts) < 4 {
		return ""
	}
	chain := parts[2]
	return chain[strings.LastIndex(chain, "$")+1:]
}

// ownName is the name of the resource of urn.
func ownName(urn string) string { return urn[strings.LastIndex(urn, "::")+2:] }

func dependsOn(r infratest.Resource, tok, name string) bool {
	for _, d := range r.DependsOn {
		if ownType(d) == tok && strings.HasSuffix(d, "::"+name) {
			return true
		}
	}
	return false
}

func TestTheClusterHandedToKubernetes(t *testing.T) {
	p := shared(t)
	c := p.cluster
	if c.Provider == nil || !c.InCluster {
		t.Error("no Kubernetes provider, or the controller is not in the cluster")
	}
	if c.Class.Provider != "computeclass" || c.Class.ComputeClass == nil || len(c.Class.ComputeClass.MachineFamilies) == 0 {
		t.Errorf("class %+v, want computeclass with machine families", c.Class)
	}
	patterns := c.Class.Policy.Identity.GCPServiceAccountPatterns
	if len(p.emails) != 2 {
		t.Fatalf("identities %v, want team-a/build and team-a-ml/train", p.emails)
	}
	for key, email := range p.emails {
		ns, _, _ := strings.Cut(key, "/")
		if !policy.AnyMatch(patterns, ns, email) {
			t.Errorf("%s's account %s is not allowed to its namespace by %v", key, email, patterns)
		}
		if !strings.HasSuffix(email, "@"+project+".iam.gserviceaccount.com") {
			t.Errorf("%s: %s is not a service account of the project", key, email)
		}
	}
	// Another namespace, one that ends another's name, or one that starts
	// it ("team" and team-a's "team-a-<hash>") may not use it.
	for _, ns := range []string{"team-b", "a", "eam-a", "team", "team-a-ml"} {
		if policy.AnyMatch(patterns, ns, p.emails["team-a/build"]) {
			t.Errorf("namespace %s may use team-a's account %s under %v", ns, p.emails["team-a/build"], patterns)
		}
	}
	if _, ok := p.emails[kube.IdentityKey("team-b", "build")]; ok {
		t.Error("team-b asked for no identity but got one")
	}
	if c.Cache == nil || c.Cache.Type != "gcs" || c.Cache.Region != region || p.bucket != BucketName(project, "runners-prod") {
		t.Errorf("cache %+v (bucket %q)", c.Cache, p.bucket)
	}
	if len(c.DependsOn) != 1 {
		t.Errorf("depends on %d resources, want the system node pool", len(c.DependsOn))
	}
	if !p.secret {
		t.Error("the kubeconfig reaches the Kubernetes provider in the clear")
	}
	for _, want := range []string{"server: https://203.0.113.10", "certificate-authority-data: LS0t", "command: gke-gcloud-auth-plugin"} {
		if !strings.Contains(p.kubeconfig, want) {
			t.Errorf("the kubeconfig has no %q:\n%s", want, p.kubeconfig)
		}
	}
}

func TestATeamNamespaceTooLongForAnAccountIsRefusedBeforeAnyResource(t *testing.T) {
	raw := strings.Replace(fleetJSON, `"team-a-ml"`, `"`+strings.Repeat("n", naming.MaxGCPNamespace+1)+`"`, 1)
	m := infratest.NewMocks(t)
	err := infratest.Run(m, stack, map[string]string{"runnerfleet:fleet": raw}, nil, func(ctx *pulumi.Context) error {
		f, err := stackconfig.Decode([]byte(raw), ctx.Stack())
		if err != nil {
			return err
		}
		_, err = newPlatform(ctx, f)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "runnerfleet:fleet.teams[1].namespace") || !strings.Contains(err.Error(), "at most 23") {
		t.Fatalf("want an error naming runnerfleet:fleet.teams[1].namespace and its limit, got %v", err)
	}
	for _, r := range m.Resources() {
		if r.Custom {
			t.Errorf("%s %s was declared despite the refused config", r.Token, r.Name)
		}
	}
}

func TestLongClusterNamesStillGiveValidNodeAccountIDs(t *testing.T) {
	for _, cluster := range []string{"a", "runners-prod", strings.Repeat("c", 40), strings.Repeat("c", 16) + "-" + strings.Repeat("d", 23)} {
		id := nodeAccountID(cluster)
		if len(id) < 6 || len(id) > 30 || strings.Contains(id, "--") || id[0] < 'a' || id[0] > 'z' {
			t.Errorf("cluster %q: node account ID %q is not valid", cluster, id)
		}
	}
	if nodeAccountID(strings.Repeat("c", 40)) == nodeAccountID(strings.Repeat("c", 39)+"x") {
		t.Error("two long cluster names share a node account")
	}
}

// newPlatform declares the gke platform of f, as the program does.
func newPlatform(ctx *pulumi.Context, f *stackconfig.Fleet) (*kube.Cluster, error) {
	p, err := NewPlatform(ctx, f.ClusterName, ArgsFor(f))
	if err != nil {
		return nil, err
	}
	return p.Cluster, nil
}

// soakOf is the managers' pool's blue-green node pool soak.
func soakOf(t *testing.T, p *deployed) time.Duration {
	t.Helper()
	pool := p.m.Get(t, "gcp:container/nodePool:NodePool", "runners-prod-cluster-"+SystemPool)
	if got := str(pool.Input("upgradeSettings.strategy")); got != "BLUE_GREEN" {
		t.Fatalf("managers' pool upgrade strategy %q, want BLUE_GREEN: a surge upgrade gives a draining manager about an hour", got)
	}
	if pool.Input("upgradeSettings.maxSurge").IsNumber() || pool.Input("upgradeSettings.maxUnavailable").IsNumber() {
		t.Errorf("surge settings on a blue-green pool: %v", pool.Input("upgradeSettings"))
	}
	raw := str(pool.Input("upgradeSettings.blueGreenSettings.nodePoolSoakDuration"))
	secs, err := strconv.ParseInt(strings.TrimSuffix(raw, "s"), 10, 64)
	if err != nil || !strings.HasSuffix(raw, "s") {
		t.Fatalf("nodePoolSoakDuration %q is not GKE's seconds form", raw)
	}
	return time.Duration(secs) * time.Second
}

// A GKE upgrade of the managers' pool drains its old nodes and deletes
// them after the node pool soak: the soak outlasts the longest a manager
// may drain (a RunnerSet's admitted maximum, or a shared fleet's job
// timeout and drain margin), and no more than GKE allows.
func TestTheManagersPoolOutlastsTheLongestDrainInAnUpgrade(t *testing.T) {
	soak := soakOf(t, shared(t))
	if soak < v1alpha1.MaxShutdownTimeout || soak > MaxNodePoolSoak {
		t.Errorf("soak %s: want at least a RunnerSet's longest drain %s and at most GKE's %s", soak, v1alpha1.MaxShutdownTimeout, MaxNodePoolSoak)
	}
	long := run(t, strings.Replace(fleetJSON, `"teams": [`, `"alerting": {"receiver": {"webhookURLConfigKey": "alertWebhookURL"}},
  "sharedFleets": [{"name": "staging", "jobTimeout": "100h", "managerImage": "registry.example.com/ci/gitlab-runner-docker-machine:v19.4.0",
    "vmNetwork": {"cidr": "10.30.0.0/20"},
    "groups": [{"name": "linux", "tokenConfigKey": "stagingLinux", "zone": "europe-west1-b", "machineType": "e2-standard-2", "image": "runner-vm", "maxVMs": 10}]}],
  "teams": [`, 1))
	drain := 100*time.Hour + sharedfleet.DrainMarginSeconds*time.Second
	if got := soakOf(t, long); got < drain || got > MaxNodePoolSoak {
		t.Errorf("soak %s with a shared fleet that drains for %s", got, drain)
	}
	// The longest job timeout a shared fleet may have still fits GKE's soak.
	if _, err := ManagerPoolSoak([]fleetspec.SharedFleet{{JobTimeout: &metav1.Duration{Duration: fleetspec.MaxSharedJobTimeout}}}); err != nil {
		t.Errorf("fleetspec.MaxSharedJobTimeout does not fit GKE's soak: %v", err)
	}
	_, err := ManagerPoolSoak([]fleetspec.SharedFleet{{JobTimeout: &metav1.Duration{Duration: MaxNodePoolSoak}}})
	if err == nil || !strings.Contains(err.Error(), "sharedFleets[].jobTimeout") {
		t.Errorf("a drain longer than GKE's soak: %v", err)
	}
}

// The jobs namespaces' and shared fleets' NetworkPolicies are enforced:
// GKE enforces NetworkPolicy only with Dataplane V2 (or the legacy Calico
// add-on, which it replaces and may not be combined with).
func TestNetworkPoliciesAreEnforcedByDataplaneV2(t *testing.T) {
	cl := shared(t).m.Get(t, "gcp:container/cluster:Cluster", "runners-prod-cluster")
	// GKE's name for Dataplane V2, not a constant that could drift from it.
	if got := str(cl.Input("datapathProvider")); got != "ADVANCED_DATAPATH" {
		t.Errorf("datapathProvider %q: GKE would not enforce the NetworkPolicies", got)
	}
	if v := cl.Input("networkPolicy.enabled"); v.IsBool() && v.BoolValue() {
		t.Error("the Calico network policy add-on is on beside Dataplane V2")
	}
}

// The cluster autoscaler may scale down the managers' pool (its profile
// stays OPTIMIZE_UTILIZATION for the job pools); what keeps a draining
// manager's node is its pods' safe-to-evict, which every manager carries.
func TestTheAutoscalerLeavesTheManagersNodesByTheirPodsAnnotation(t *testing.T) {
	cl := shared(t).m.Get(t, "gcp:container/cluster:Cluster", "runners-prod-cluster")
	if got := str(cl.Input("clusterAutoscaling.autoscalingProfile")); got != "OPTIMIZE_UTILIZATION" && got != "BALANCED" {
		t.Errorf("autoscaling profile %q", got)
	}
	d := resources.Deployment(&v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}, "gitlab-runner", "h", "team-build-j1")
	if d.Spec.Template.Annotations[resources.AnnotationSafeToEvict] != "false" {
		t.Error("manager pods may be evicted by a scale-down, with 10 minutes of grace")
	}
}
