package aws

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/sdkschema"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/internal/schedtest"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	rspolicy "github.com/runnerfleet/runnerfleet/runnerset/policy"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

const (
	stack   = "prod"
	cluster = "ci-prod"
)

// fleet is a realistic eks stack config: three zones, a user tag, a short
// cache expiry and three teams, one of which wants no identity. Namespaces
// "team" and "team-a" are there because a name prefix of one is the other.
func fleet(mutate func(f map[string]any)) map[string]any {
	token := map[string]any{"name": "runner-token", "key": "token"}
	f := map[string]any{
		"platform":    "eks",
		"clusterName": cluster,
		"gitlabURL":   "https://gitlab.example.com",
		"controller":  map[string]any{"image": "example.invalid/runnerset-controller:v1"},
		"aws": map[string]any{
			"region": "eu-west-1",
			"zones":  []string{"eu-west-1a", "eu-west-1b", "eu-west-1c"},
			"tags":   map[string]string{"cost-center": "ci-4711"},
		},
		"cache": map[string]any{"expireDays": 9},
		"teams": []any{
			map[string]any{"namespace": "team", "name": "build", "tags": []string{"build"}, "tokenSecretRef": token},
			map[string]any{"namespace": "team-a", "name": "deploy", "tags": []string{"deploy"}, "tokenSecretRef": token},
			map[string]any{"namespace": "docs", "name": "site", "tags": []string{"docs"}, "tokenSecretRef": token, "identity": false},
		},
	}
	if mutate != nil {
		mutate(f)
	}
	return f
}

// deployment is one run of NewPlatform under the mocks.
type deployment struct {
	m  *infratest.Mocks
	f  *stackconfig.Fleet
	c  *kube.Cluster
	mu sync.Mutex
	// resolved outputs of c: "bucket", and "identity:<ns>/<rs>".
	out map[string]string
}

func (d *deployment) set(k, v string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.out[k] = v
}

// newMocks are infratest's mocks with the outputs of AWS this platform
// reads made as AWS makes them: a role's ARN holds its path, a bucket
// declared without a name gets one, a launch template has a version.
func newMocks(t *testing.T) *infratest.Mocks {
	m := infratest.NewMocks(t)
	m.Outputs["aws:iam/role:Role"] = func(r infratest.Resource) resource.PropertyMap {
		name, path := str(r, "name"), str(r, "path")
		if name == "" {
			name = r.Name + "-a1b2c3d"
		}
		if path == "" {
			path = "/"
		}
		return resource.PropertyMap{
			"arn":  resource.NewStringProperty("arn:aws:iam::123456789012:role" + path + name),
			"name": resource.NewStringProperty(name),
		}
	}
	m.Outputs["aws:s3/bucketV2:BucketV2"] = func(r infratest.Resource) resource.PropertyMap {
		name := r.Name + "-a1b2c3d"
		return resource.PropertyMap{"bucket": resource.NewStringProperty(name), "arn": resource.NewStringProperty("arn:aws:s3:::" + name)}
	}
	m.Outputs["aws:ec2/launchTemplate:LaunchTemplate"] = func(r infratest.Resource) resource.PropertyMap {
		return resource.PropertyMap{"latestVersion": resource.NewNumberProperty(1)}
	}
	return m
}

// deploy decodes the fleet the way the program does (defaults applied) and
// runs NewPlatform on it; every registration is checked against the
// pulumi-aws and pulumi-kubernetes schemas.
func deploy(t *testing.T, f map[string]any) *deployment {
	t.Helper()
	return deployWith(t, f, nil)
}

// deployWith is deploy with the mocks changed first.
func deployWith(t *testing.T, f map[string]any, mocks func(m *infratest.Mocks)) *deployment {
	t.Helper()
	raw, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{m: newMocks(t), out: map[string]string{}}
	if mocks != nil {
		mocks(d.m)
	}
	d.f, err = stackconfig.Decode(raw, stack)
	if err != nil {
		t.Fatal(err)
	}
	err = infratest.Run(d.m, stack, map[string]string{"runnerfleet:fleet": string(raw)}, nil, func(ctx *pulumi.Context) error {
		c, err := newPlatform(ctx, d.f)
		if err != nil {
			return err
		}
		d.c = c
		c.Cache.Bucket.ApplyT(func(s string) string { d.set("bucket", s); return s })
		for i, r := range c.DependsOn {
			r.URN().ApplyT(func(u pulumi.URN) string { d.set(fmt.Sprintf("dependsOn:%d", i), string(u)); return "" })
		}
		for k, v := range c.Identities {
			v.ApplyT(func(s string) string { d.set("identity:"+k, s); return s })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := d.m.Problems(); len(p) > 0 {
		t.Fatalf("schema problems: %v", p)
	}
	return d
}

func str(r infratest.Resource, path string) string {
	v := r.Input(path)
	if !v.IsString() {
		return ""
	}
	return v.StringValue()
}

func strs(r infratest.Resource, path string) []string {
	v := r.Input(path)
	if !v.IsArray() {
		return nil
	}
	var out []string
	for _, e := range v.ArrayValue() {
		for e.IsSecret() {
			e = e.SecretValue().Element
		}
		if e.IsString() {
			out = append(out, e.StringValue())
		}
	}
	return out
}

func tagsOf(r infratest.Resource) map[string]string {
	v := r.Input("tags")
	if !v.IsObject() {
		return nil
	}
	out := map[string]string{}
	for k, e := range v.ObjectValue() {
		if e.IsString() {
			out[string(k)] = e.StringValue()
		}
	}
	return out
}

// arr is an array input's elements, none when it is not an array.
func arr(v resource.PropertyValue) []resource.PropertyValue {
	if !v.IsArray() {
		return nil
	}
	return v.ArrayValue()
}

// id is the ID the mocks give a resource.
func id(r infratest.Resource) string { return r.Name + "-id" }

// document parses a policy document input.
func document(t *testing.T, r infratest.Resource, key string) PolicyDocument {
	t.Helper()
	s := str(r, key)
	if s == "" {
		t.Fatalf("%s %s has no %s", r.Token, r.Name, key)
	}
	var d PolicyDocument
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		t.Fatalf("%s %s: %s is not a policy document: %v\n%s", r.Token, r.Name, key, err, s)
	}
	return d
}

func subnets(d *deployment, kind string) []infratest.Resource {
	var out []infratest.Resource
	for _, r := range d.m.ByToken("aws:ec2/subnet:Subnet") {
		if strings.HasPrefix(r.Name, cluster+"-"+kind+"-") {
			out = append(out, r)
		}
	}
	return out
}

func idsOf(rs []infratest.Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = id(r)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string { s = slices.Clone(s); sort.Strings(s); return s }

func TestSystemNodesAreOnDemandBottlerocketInPrivateSubnets(t *testing.T) {
	d := deploy(t, fleet(nil))
	ngs := d.m.ByToken("aws:eks/nodeGroup:NodeGroup")
	if len(ngs) == 0 {
		t.Fatal("no node group")
	}
	private := idsOf(subnets(d, "private"))
	if len(private) != 3 {
		t.Fatalf("%d private subnets, want 3", len(private))
	}
	for _, ng := range ngs {
		// The managers' pool, though the stack allows no on-demand job
		// capacity.
		if got := str(ng, "capacityType"); got != "ON_DEMAND" {
			t.Errorf("node group %s capacityType %q: the managers run there and must never be on spot", ng.Name, got)
		}
		if got := strs(ng, "instanceTypes"); len(got) < 3 {
			t.Errorf("node group %s has instance types %v; want several", ng.Name, got)
		}
		if got := str(ng, "amiType"); got != "BOTTLEROCKET_x86_64" {
			t.Errorf("node group %s amiType %q, want BOTTLEROCKET_x86_64", ng.Name, got)
		}
		if got := sorted(strs(ng, "subnetIds")); !slices.Equal(got, private) {
			t.Errorf("node group %s subnets %v, want the private ones %v", ng.Name, got, private)
		}
		min, max := ng.Input("scalingConfig.minSize"), ng.Input("scalingConfig.maxSize")
		if !min.IsNumber() || !max.IsNumber() || min.NumberValue() != 1 || max.NumberValue() != 3 {
			t.Errorf("node group %s scaling %v..%v, want 1..3", ng.Name, min, max)
		}
	}
}

// The managers' node group is where managers, the controller and Karpenter
// land, judged with the scheduler's own rules: its labels and taints as
// declared against the pod specs the controller and the charts get.
func TestManagersControllerAndKarpenterLandOnTheOnDemandNodeGroup(t *testing.T) {
	d := deploy(t, fleet(nil))
	ng := d.m.Get(t, "aws:eks/nodeGroup:NodeGroup", cluster+"-system")
	node, err := ng.Node("labels", "taints")
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Spec.Taints) == 0 {
		t.Fatalf("the managers' node group has no taint: any pod lands on the on-demand nodes")
	}
	karpenter, err := d.m.Get(t, "kubernetes:helm.sh/v3:Release", cluster+"-karpenter").PodPlacement("")
	if err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]corev1.PodSpec{
		"a RunnerSet's manager": resources.Deployment(&v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "build"}}, "gitlab-runner", "h", "team-build-j1").Spec.Template.Spec,
		"Karpenter":             karpenter,
	} {
		if err := schedtest.Fits(spec, node); err != nil {
			t.Errorf("%s does not fit the managers' node group: %v", name, err)
		}
	}
	if err := schedtest.Fits(corev1.PodSpec{}, node); err == nil {
		t.Error("a pod without the toleration fits the managers' node group")
	}
}

// Spot managers are refused, and allowOnDemand (the teams' job capacity)
// has nothing to do with it.
func TestSpotSystemNodesAreRefused(t *testing.T) {
	spot := func(f map[string]any) {
		f["aws"].(map[string]any)["systemNodes"] = map[string]any{"capacityType": "spot"}
		f["capacity"] = map[string]any{"allowOnDemand": true}
	}
	raw, _ := json.Marshal(fleet(spot))
	if _, err := stackconfig.Decode(raw, stack); err == nil || !strings.Contains(err.Error(), "runnerfleet:fleet.aws.systemNodes.capacityType") {
		t.Errorf("Decode of spot system nodes = %v, want the key named", err)
	}
	// NewPlatform refuses it too for a Fleet built without Decode.
	raw, _ = json.Marshal(fleet(nil))
	f, err := stackconfig.Decode(raw, stack)
	if err != nil {
		t.Fatal(err)
	}
	f.AWS.SystemNodes.CapacityType = stackconfig.CapacityTypeSpot
	m := newMocks(t)
	err = infratest.Run(m, stack, nil, nil, func(ctx *pulumi.Context) error {
		_, err := newPlatform(ctx, f)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "runnerfleet:fleet.aws.systemNodes.capacityType") || !strings.Contains(err.Error(), "set it to on-demand") {
		t.Errorf("spot system nodes: got %v, want an error naming the key and the fix", err)
	}
	if n := len(m.ByToken("aws:eks/nodeGroup:NodeGroup")); n > 0 {
		t.Errorf("%d node groups declared before the refusal", n)
	}
}

func TestNoPublicNodeIPs(t *testing.T) {
	d := deploy(t, fleet(nil))
	all := d.m.ByToken("aws:ec2/subnet:Subnet")
	if len(all) != 6 {
		t.Fatalf("%d subnets, want 3 public and 3 private", len(all))
	}
	for _, s := range all {
		if v := s.Input("mapPublicIpOnLaunch"); !v.IsBool() || v.BoolValue() {
			t.Errorf("subnet %s mapPublicIpOnLaunch %v, want an explicit false", s.Name, v)
		}
	}
	for _, lt := range d.m.ByToken("aws:ec2/launchTemplate:LaunchTemplate") {
		for _, ni := range arr(lt.Input("networkInterfaces")) {
			if v := ni.ObjectValue()["associatePublicIpAddress"]; v.IsString() && v.StringValue() == "true" {
				t.Errorf("launch template %s gives nodes public IPs", lt.Name)
			}
		}
		if got := lt.Input("metadataOptions.httpTokens"); !got.IsString() || got.StringValue() != "required" {
			t.Errorf("launch template %s httpTokens %v, want required (IMDSv2)", lt.Name, got)
		}
		if got := lt.Input("metadataOptions.httpPutResponseHopLimit"); !got.IsNumber() || got.NumberValue() != 1 {
			t.Errorf("launch template %s hop limit %v, want 1 (pods cannot reach node credentials)", lt.Name, got)
		}
	}
	for _, ng := range d.m.ByToken("aws:eks/nodeGroup:NodeGroup") {
		for _, s := range strs(ng, "subnetIds") {
			if !strings.Contains(s, "-private-") {
				t.Errorf("node group %s in subnet %s, not a private one", ng.Name, s)
			}
		}
		lts := d.m.ByToken("aws:ec2/launchTemplate:LaunchTemplate")
		if len(lts) != 1 || str(ng, "launchTemplate.id") != id(lts[0]) || str(ng, "launchTemplate.version") != "1" {
			t.Errorf("node group %s launch template %v, want the system one at its latest version", ng.Name, ng.Input("launchTemplate"))
		}
		if ng.Input("remoteAccess").IsObject() {
			t.Errorf("node group %s opens remote access", ng.Name)
		}
	}
}

func TestPrivateSubnetsRouteThroughOneNAT(t *testing.T) {
	d := deploy(t, fleet(nil))
	if n := len(d.m.ByToken("aws:ec2/natGateway:NatGateway")); n != 1 {
		t.Errorf("%d NAT gateways, want 1", n)
	}
	nat := d.m.ByToken("aws:ec2/natGateway:NatGateway")[0]
	if got := str(nat, "subnetId"); !strings.Contains(got, "-public-") {
		t.Errorf("NAT gateway in %s, want a public subnet", got)
	}
	routes := map[string]infratest.Resource{}
	for _, r := range d.m.ByToken("aws:ec2/route:Route") {
		routes[str(r, "routeTableId")] = r
	}
	assoc := map[string]string{} // subnet → route table
	for _, a := range d.m.ByToken("aws:ec2/routeTableAssociation:RouteTableAssociation") {
		assoc[str(a, "subnetId")] = str(a, "routeTableId")
	}
	for _, s := range subnets(d, "private") {
		r, ok := routes[assoc[id(s)]]
		if !ok || str(r, "natGatewayId") != id(nat) || str(r, "destinationCidrBlock") != "0.0.0.0/0" || str(r, "gatewayId") != "" {
			t.Errorf("private subnet %s: default route %v, want through the NAT gateway only", s.Name, r.Inputs)
		}
	}
	igw := d.m.ByToken("aws:ec2/internetGateway:InternetGateway")[0]
	for _, s := range subnets(d, "public") {
		if r := routes[assoc[id(s)]]; str(r, "gatewayId") != id(igw) {
			t.Errorf("public subnet %s: default route %v, want through the internet gateway", s.Name, r.Inputs)
		}
	}
	vpc := d.m.ByToken("aws:ec2/vpc:Vpc")[0]
	if v := vpc.Input("enableDnsHostnames"); !v.IsBool() || !v.BoolValue() {
		t.Error("VPC without DNS hostnames")
	}
	if v := vpc.Input("enableDnsSupport"); !v.IsBool() || !v.BoolValue() {
		t.Error("VPC without DNS support")
	}
}

// The subnets and security group that runnerset/capacity's EC2NodeClass
// selects must be exactly the private subnets and the node security group.
func TestDiscoveryTagsMatchWhatCapacitySelects(t *testing.T) {
	d := deploy(t, fleet(nil))
	class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: cluster}, Spec: d.c.Class}
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "build"}}
	nc := capacity.EC2NodeClass(class, v1alpha1.Effective(rs, class))

	selects := func(r infratest.Resource, terms []map[string]string) bool {
		tags := tagsOf(r)
		for _, term := range terms {
			match := true
			for k, v := range term {
				if tags[k] != v {
					match = false
				}
			}
			if match {
				return true
			}
		}
		return false
	}
	var subnetTerms, sgTerms []map[string]string
	for _, t := range nc.Spec.SubnetSelectorTerms {
		subnetTerms = append(subnetTerms, t.Tags)
	}
	for _, t := range nc.Spec.SecurityGroupSelectorTerms {
		sgTerms = append(sgTerms, t.Tags)
	}
	var selected []string
	for _, s := range d.m.ByToken("aws:ec2/subnet:Subnet") {
		if selects(s, subnetTerms) {
			selected = append(selected, id(s))
		}
	}
	if want := idsOf(subnets(d, "private")); !slices.Equal(sorted(selected), want) {
		t.Errorf("EC2NodeClass selects subnets %v, want exactly the private ones %v", selected, want)
	}
	for _, s := range subnets(d, "private") {
		if tagsOf(s)["kubernetes.io/role/internal-elb"] != "1" {
			t.Errorf("private subnet %s lacks kubernetes.io/role/internal-elb=1", s.Name)
		}
	}
	for _, s := range subnets(d, "public") {
		if tagsOf(s)["kubernetes.io/role/elb"] != "1" {
			t.Errorf("public subnet %s lacks kubernetes.io/role/elb=1", s.Name)
		}
	}
	sgs := d.m.ByToken("aws:ec2/securityGroup:SecurityGroup")
	var nodeSG []infratest.Resource
	for _, sg := range sgs {
		if selects(sg, sgTerms) {
			nodeSG = append(nodeSG, sg)
		}
	}
	if len(nodeSG) != 1 {
		t.Fatalf("EC2NodeClass selects %d security groups, want the one node group", len(nodeSG))
	}
	// The system nodes and the control plane are in it too, so all nodes
	// and the API server reach each other through its self rule.
	sg := id(nodeSG[0])
	for _, lt := range d.m.ByToken("aws:ec2/launchTemplate:LaunchTemplate") {
		if got := strs(lt, "vpcSecurityGroupIds"); !slices.Equal(got, []string{sg}) {
			t.Errorf("system nodes in security groups %v, want [%s]", got, sg)
		}
	}
	eks := d.m.ByToken("aws:eks/cluster:Cluster")[0]
	if got := strs(eks, "vpcConfig.securityGroupIds"); !slices.Equal(got, []string{sg}) {
		t.Errorf("control plane in security groups %v, want [%s]", got, sg)
	}
	ingress := nodeSG[0].Input("ingress").ArrayValue()
	if len(ingress) != 1 || !ingress[0].ObjectValue()["self"].BoolValue() || ingress[0].ObjectValue()["cidrBlocks"].IsArray() {
		t.Errorf("node security group ingress %v, want only from itself", ingress)
	}

	// The node role the EC2NodeClass names exists, may join the cluster,
	// and is the only role Karpenter may pass.
	role := d.m.Get(t, "aws:iam/role:Role", cluster+"-karpenter-node")
	if str(role, "name") != nc.Spec.Role {
		t.Errorf("EC2NodeClass role %q, the node role is named %q", nc.Spec.Role, str(role, "name"))
	}
	entry := d.m.Get(t, "aws:eks/accessEntry:AccessEntry", cluster+"-karpenter-node")
	if str(entry, "type") != "EC2_LINUX" || str(entry, "principalArn") != "arn:aws:iam::123456789012:role/"+nc.Spec.Role {
		t.Errorf("access entry %v, want EC2_LINUX for the node role", entry.Inputs)
	}
	profile := d.m.Get(t, "aws:iam/instanceProfile:InstanceProfile", cluster+"-karpenter-node")
	if str(profile, "name") != nc.Spec.Role || str(profile, "role") != nc.Spec.Role {
		t.Errorf("instance profile %v, want one named like and holding the node role", profile.Inputs)
	}
}

// issuerHost is the mocked EKS cluster's issuer, as IRSA conditions name it.
const issuerHost = "oidc.eks.eu-west-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"

func TestEveryIRSATrustIsExact(t *testing.T) {
	d := deploy(t, fleet(nil))
	oidc := d.m.ByToken("aws:iam/openIdConnectProvider:OpenIdConnectProvider")
	if len(oidc) != 1 || !slices.Equal(strs(oidc[0], "clientIdLists"), []string{"sts.amazonaws.com"}) || str(oidc[0], "url") != "https://"+issuerHost {
		t.Fatalf("OIDC provider %v, want the cluster's issuer with audience sts.amazonaws.com", oidc)
	}
	// A team role trusts exactly its RunnerSet's job ServiceAccount, in its
	// jobs namespace, and its manager's, in the team's namespace, which
	// signs the cache URLs the jobs use.
	team := func(ns, rs string) []string {
		n := naming.For(ns, rs)
		return []string{n.ServiceAccountSubject(), n.ManagerServiceAccountSubject()}
	}
	want := map[string]any{ // role name → the exact subject, or list of subjects, that may assume it
		cluster + "-karpenter":                          "system:serviceaccount:kube-system:karpenter",
		naming.For("team", "build").IAMRole(cluster):    team("team", "build"),
		naming.For("team-a", "deploy").IAMRole(cluster): team("team-a", "deploy"),
	}
	if got := team("team-a", "deploy"); !slices.Equal(got, []string{"system:serviceaccount:team-a-deploy-j6:deploy-job", "system:serviceaccount:team-a:deploy-manager"}) {
		t.Fatalf("team-a/deploy's subjects %v", got)
	}
	found := map[string]bool{}
	for _, r := range d.m.ByToken("aws:iam/role:Role") {
		raw := str(r, "assumeRolePolicy")
		if !strings.Contains(raw, "Federated") && !strings.Contains(raw, "WebIdentity") {
			continue
		}
		name := str(r, "name")
		subject, ok := want[name]
		if !ok {
			t.Errorf("role %s (%s) trusts web identities but is not a known IRSA role", r.Name, name)
			continue
		}
		found[name] = true
		doc := document(t, r, "assumeRolePolicy")
		if len(doc.Statement) != 1 {
			t.Errorf("role %s: %d trust statements, want 1", name, len(doc.Statement))
			continue
		}
		s := doc.Statement[0]
		if s.Effect != "Allow" || !slices.Equal(s.Action, []string{"sts:AssumeRoleWithWebIdentity"}) {
			t.Errorf("role %s trusts %s %v, want Allow sts:AssumeRoleWithWebIdentity only", name, s.Effect, s.Action)
		}
		if len(s.Principal) != 1 || s.Principal["Federated"] != "arn:aws:iam::123456789012:oidc-provider/"+issuerHost {
			t.Errorf("role %s principal %v, want the cluster's OIDC provider only", name, s.Principal)
		}
		wantCond := map[string]map[string]any{"StringEquals": {issuerHost + ":sub": subject, issuerHost + ":aud": "sts.amazonaws.com"}}
		if !equalJSON(s.Condition, wantCond) {
			t.Errorf("role %s condition %v, want exactly %v", name, s.Condition, wantCond)
		}
		cond, _ := json.Marshal(s.Condition)
		if strings.Contains(string(cond), "*") || strings.Contains(string(cond), "Like") {
			t.Errorf("role %s condition has a wildcard: %s", name, cond)
		}
	}
	for name := range want {
		if !found[name] {
			t.Errorf("no IRSA role %s", name)
		}
	}
	// docs/site asked for no identity.
	if _, ok := d.c.Identities[kube.IdentityKey("docs", "site")]; ok {
		t.Error("docs/site got an identity it did not ask for")
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestIdentityPatternsMatchOnlyTheirNamespace(t *testing.T) {
	d := deploy(t, fleet(nil))
	patterns := d.c.Class.Policy.Identity.AWSRoleARNPatterns
	if len(patterns) == 0 {
		t.Fatal("no identity pattern")
	}
	namespaces := []string{"team", "team-a", "docs"}
	for key := range d.c.Identities {
		arn := d.out["identity:"+key]
		ns, rs, _ := strings.Cut(key, "/")
		if want := naming.For(ns, rs).IAMRole(cluster); !strings.HasSuffix(arn, "/"+want) {
			t.Errorf("identity %s is %s, want the role named %s", key, arn, want)
		}
		for _, other := range namespaces {
			if got := rspolicy.AnyMatch(patterns, other, arn); got != (other == ns) {
				t.Errorf("patterns %v for namespace %s on %s's role %s: match %v", patterns, other, ns, arn, got)
			}
		}
	}
	if len(d.c.Identities) != 2 {
		t.Errorf("identities %v, want team/build and team-a/deploy", slices.Collect(maps.Keys(d.c.Identities)))
	}
}

func TestCacheBucketPrivateEncryptedExpiring(t *testing.T) {
	d := deploy(t, fleet(nil))
	buckets := d.m.ByToken("aws:s3/bucketV2:BucketV2")
	if len(buckets) != 1 {
		t.Fatalf("%d buckets, want 1", len(buckets))
	}
	b := id(buckets[0])
	one := func(tok string) infratest.Resource {
		rs := d.m.ByToken(tok)
		if len(rs) != 1 {
			t.Fatalf("%d %s, want 1", len(rs), tok)
		}
		if str(rs[0], "bucket") != b {
			t.Fatalf("%s is for bucket %q, not the cache %q", tok, str(rs[0], "bucket"), b)
		}
		return rs[0]
	}
	pab := one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
	for _, k := range []string{"blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"} {
		if v := pab.Input(k); !v.IsBool() || !v.BoolValue() {
			t.Errorf("public access block %s = %v, want true", k, v)
		}
	}
	sse := one("aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2")
	rules := arr(sse.Input("rules"))
	if len(rules) != 1 {
		t.Fatalf("%d encryption rules", len(rules))
	}
	if alg := rules[0].ObjectValue()["applyServerSideEncryptionByDefault"].ObjectValue()["sseAlgorithm"]; !alg.IsString() || (alg.StringValue() != "AES256" && alg.StringValue() != "aws:kms") {
		t.Errorf("sseAlgorithm %v, want AES256 or aws:kms", alg)
	}
	own := one("aws:s3/bucketOwnershipControls:BucketOwnershipControls")
	if got := str(own, "rule.objectOwnership"); got != "BucketOwnerEnforced" {
		t.Errorf("object ownership %q, want BucketOwnerEnforced (no ACLs)", got)
	}
	lc := one("aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2")
	lrules := arr(lc.Input("rules"))
	if len(lrules) != 1 {
		t.Fatalf("%d lifecycle rules, want 1", len(lrules))
	}
	r := lrules[0].ObjectValue()
	if r["status"].StringValue() != "Enabled" {
		t.Errorf("lifecycle rule %v not enabled", r)
	}
	if days := r["expiration"].ObjectValue()["days"]; !days.IsNumber() || int(days.NumberValue()) != d.f.Cache.ExpireDays || d.f.Cache.ExpireDays != 9 {
		t.Errorf("expiration after %v days, want cache.expireDays (9)", days)
	}
	if days := r["abortIncompleteMultipartUpload"].ObjectValue()["daysAfterInitiation"]; !days.IsNumber() || days.NumberValue() < 1 {
		t.Errorf("incomplete uploads aborted after %v days", days)
	}
	if f := r["filter"]; !f.IsObject() || len(f.ObjectValue()) != 0 {
		t.Errorf("lifecycle filter %v, want every object", f)
	}
	if d.out["bucket"] == "" || d.c.Cache.Type != v1alpha1.CacheTypeS3 || d.c.Cache.Region != "eu-west-1" {
		t.Errorf("cache %+v (bucket %q), want s3 in eu-west-1 with the bucket's name", d.c.Cache, d.out["bucket"])
	}
}

func TestCacheBucketPolicyGrantsOnlyTeamRoles(t *testing.T) {
	d := deploy(t, fleet(nil))
	bp := d.m.ByToken("aws:s3/bucketPolicy:BucketPolicy")
	if len(bp) != 1 {
		t.Fatalf("%d bucket policies", len(bp))
	}
	doc := document(t, bp[0], "policy")
	bucketARN := "arn:aws:s3:::" + d.out["bucket"]
	roles := map[string]string{} // role ARN → namespace
	for key := range d.c.Identities {
		ns, _, _ := strings.Cut(key, "/")
		roles[d.out["identity:"+key]] = ns
	}
	denied, granted := false, map[string]bool{}
	for _, s := range doc.Statement {
		switch s.Effect {
		case "Deny":
			if equalJSON(s.Condition, map[string]map[string]any{"Bool": {"aws:SecureTransport": "false"}}) &&
				slices.Contains(s.Action, "s3:*") && slices.Contains(s.Resource, bucketARN+"/*") && slices.Contains(s.Resource, bucketARN) {
				denied = true
			}
		case "Allow":
			p, _ := s.Principal["AWS"].(string)
			ns, ok := roles[p]
			if len(s.Principal) != 1 || !ok {
				t.Errorf("statement grants %v to %v, which is not a team role", s.Action, s.Principal)
				continue
			}
			granted[p] = true
			for _, a := range s.Action {
				if strings.Contains(a, "*") || !strings.HasPrefix(a, "s3:") {
					t.Errorf("team %s granted %s", ns, a)
				}
			}
			for _, res := range s.Resource {
				if res != bucketARN && res != bucketARN+"/"+ns+"/*" {
					t.Errorf("team %s granted %s, want only its prefix %s/", ns, res, ns)
				}
			}
			if slices.Contains(s.Resource, bucketARN) && !equalJSON(s.Condition, map[string]map[string]any{"StringLike": {"s3:prefix": ns + "/*"}}) {
				t.Errorf("team %s may list the bucket with condition %v, want its prefix only", ns, s.Condition)
			}
		}
	}
	if !denied {
		t.Errorf("no statement denies requests without TLS: %s", str(bp[0], "policy"))
	}
	if len(granted) != len(roles) {
		t.Errorf("granted %v, want every team role %v", granted, roles)
	}
}

// TestCachePrefixesAreWhereTheRunnersWrite ties the bucket policy to what
// the controller makes of the fleet's RunnerClass and RunnerSets: each
// team's runner keeps its cache under the prefix its role is granted, in
// the cache bucket, and its managers, which sign the cache URLs, carry the
// team's role.
func TestCachePrefixesAreWhereTheRunnersWrite(t *testing.T) {
	d := deploy(t, fleet(nil))
	doc := document(t, d.m.ByToken("aws:s3/bucketPolicy:BucketPolicy")[0], "policy")
	bucketARN := "arn:aws:s3:::" + d.out["bucket"]
	class := kube.RunnerClass(d.f, d.c)
	class.Spec.Defaults.Cache.Bucket = d.out["bucket"] // Declare sets it at deploy time
	checked := 0
	for _, team := range d.f.Teams {
		key := kube.IdentityKey(team.Namespace, team.Name)
		role, ok := d.out["identity:"+key]
		if !ok {
			continue
		}
		rs := kube.RunnerSet(team, class.Name)
		rs.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: role}
		c := runnerconfig.ForRunnerSet(rs, class, runnerconfig.JobPlacement{}).Runners[0].Cache
		if c == nil || c.Type != "s3" || c.S3 == nil || c.S3.BucketName != d.out["bucket"] || c.S3.BucketLocation != "eu-west-1" || c.S3.AuthenticationType != "iam" {
			t.Errorf("%s: cache %+v, want the S3 cache bucket with IAM credentials", key, c)
			continue
		}
		// gitlab-runner's object names: <Path>/[runner/<token>/]project/<id>/<key>.
		objects := []string{
			bucketARN + "/" + path.Join(c.Path, "project", "42", "main-1"),
			bucketARN + "/" + path.Join(c.Path, "runner", "t0k3n", "project", "42", "main-1"),
		}
		for _, obj := range objects {
			if !grantsObject(doc, role, obj) {
				t.Errorf("%s: its role %s may not read and write %s (cache Path %q)", key, role, obj, c.Path)
			}
		}
		for _, other := range d.f.Teams {
			if other.Namespace != team.Namespace && grantsObject(doc, role, bucketARN+"/"+path.Join(other.Namespace, "project", "42", "main-1")) {
				t.Errorf("%s's role reaches namespace %s's cache", key, other.Namespace)
			}
		}
		if got := resources.ManagerServiceAccountFor(rs, v1alpha1.Effective(rs, class)).Annotations[resources.AnnotationIRSA]; got != role {
			t.Errorf("%s: manager ServiceAccount IRSA role %q, want %q: the managers could not sign cache URLs", key, got, role)
		}
		checked++
	}
	if checked != 2 {
		t.Errorf("checked %d teams, want team/build and team-a/deploy", checked)
	}
}

// grantsObject reports whether an Allow statement of doc for exactly role
// gives it s3:GetObject and s3:PutObject on object, matching '*' in its
// resources as IAM does.
func grantsObject(doc PolicyDocument, role, object string) bool {
	get, put := false, false
	for _, s := range doc.Statement {
		if s.Effect != "Allow" || s.Principal["AWS"] != role {
			continue
		}
		for _, res := range s.Resource {
			prefix, wild := strings.CutSuffix(res, "*")
			if res == object || (wild && strings.HasPrefix(object, prefix)) {
				get = get || slices.Contains(s.Action, "s3:GetObject")
				put = put || slices.Contains(s.Action, "s3:PutObject")
			}
		}
	}
	return get && put
}

func TestInterruptionQueueWired(t *testing.T) {
	d := deploy(t, fleet(nil))
	queues := d.m.ByToken("aws:sqs/queue:Queue")
	if len(queues) != 1 {
		t.Fatalf("%d queues, want 1", len(queues))
	}
	q := queues[0]
	queueARN := "arn:aws:sqs:eu-west-1:123456789012:" + str(q, "name")
	if v := q.Input("sqsManagedSseEnabled"); !v.IsBool() || !v.BoolValue() {
		if str(q, "kmsMasterKeyId") == "" {
			t.Error("interruption queue is not encrypted")
		}
	}
	if v := q.Input("messageRetentionSeconds"); !v.IsNumber() || v.NumberValue() != 300 {
		t.Errorf("message retention %v, want 300s", v)
	}
	qp := d.m.ByToken("aws:sqs/queuePolicy:QueuePolicy")
	if len(qp) != 1 || str(qp[0], "queueUrl") != "https://sqs.eu-west-1.amazonaws.com/123456789012/"+str(q, "name") {
		t.Fatalf("queue policies %v, want one on the queue", qp)
	}
	services := map[string]bool{}
	for _, s := range document(t, qp[0], "policy").Statement {
		if s.Effect != "Allow" {
			continue
		}
		if !slices.Equal(s.Action, []string{"sqs:SendMessage"}) || !slices.Equal(s.Resource, []string{queueARN}) {
			t.Errorf("queue policy allows %v on %v", s.Action, s.Resource)
		}
		svc, _ := s.Principal["Service"].([]any)
		for _, x := range svc {
			services[x.(string)] = true
		}
		if len(s.Principal) != 1 || len(svc) == 0 {
			t.Errorf("queue policy allows principal %v", s.Principal)
		}
	}
	if !services["events.amazonaws.com"] || !services["sqs.amazonaws.com"] || len(services) != 2 {
		t.Errorf("queue policy lets %v send, want events.amazonaws.com and sqs.amazonaws.com", services)
	}

	rules := d.m.ByToken("aws:cloudwatch/eventRule:EventRule")
	targets := map[string]infratest.Resource{}
	for _, tg := range d.m.ByToken("aws:cloudwatch/eventTarget:EventTarget") {
		targets[str(tg, "rule")] = tg
	}
	want := map[string]bool{
		"aws.ec2/EC2 Spot Instance Interruption Warning": true,
		"aws.ec2/EC2 Instance Rebalance Recommendation":  true,
		"aws.ec2/EC2 Instance State-change Notification": true,
		"aws.health/AWS Health Event":                    true,
	}
	if len(rules) != len(want) {
		t.Errorf("%d event rules, want %d", len(rules), len(want))
	}
	for _, r := range rules {
		var pattern struct {
			Source     []string `json:"source"`
			DetailType []string `json:"detail-type"`
		}
		if err := json.Unmarshal([]byte(str(r, "eventPattern")), &pattern); err != nil || len(pattern.Source) != 1 || len(pattern.DetailType) != 1 {
			t.Errorf("rule %s pattern %q", r.Name, str(r, "eventPattern"))
			continue
		}
		key := pattern.Source[0] + "/" + pattern.DetailType[0]
		if !want[key] {
			t.Errorf("rule %s matches %s, not an interruption event", r.Name, key)
		}
		delete(want, key)
		tg, ok := targets[str(r, "name")]
		if !ok || str(tg, "arn") != queueARN {
			t.Errorf("rule %s targets %v, want the queue %s", r.Name, tg.Inputs, queueARN)
		}
	}
	for k := range want {
		t.Errorf("no rule for %s", k)
	}
	// Karpenter is told the queue.
	rel := d.m.Get(t, "kubernetes:helm.sh/v3:Release", cluster+"-karpenter")
	if got := str(rel, "values.settings.interruptionQueue"); got != str(q, "name") {
		t.Errorf("Karpenter's interruptionQueue %q, want %q", got, str(q, "name"))
	}
}

func TestKarpenterControllerPolicyIsScoped(t *testing.T) {
	d := deploy(t, fleet(nil))
	rp := d.m.Get(t, "aws:iam/rolePolicy:RolePolicy", cluster+"-karpenter")
	raw := str(rp, "policy")
	if n := len(strings.Join(strings.Fields(raw), "")); n > 10240 {
		t.Errorf("inline policy of %d characters; IAM allows 10240", n)
	}
	doc := document(t, rp, "policy")
	nodeRole := "arn:aws:iam::123456789012:role/" + d.c.Class.Karpenter.NodeRole
	queue := "arn:aws:sqs:eu-west-1:123456789012:" + str(d.m.ByToken("aws:sqs/queue:Queue")[0], "name")
	for _, s := range doc.Statement {
		if s.Effect != "Allow" {
			t.Errorf("%s: unexpected %s", s.Sid, s.Effect)
		}
		for _, a := range s.Action {
			if strings.HasSuffix(a, ":*") || a == "*" {
				t.Errorf("%s: wildcard action %s", s.Sid, a)
			}
			service, verb, _ := strings.Cut(a, ":")
			switch {
			case a == "iam:PassRole":
				if !slices.Equal(s.Resource, []string{nodeRole}) {
					t.Errorf("iam:PassRole on %v, want only the node role %s", s.Resource, nodeRole)
				}
			case service == "sqs":
				if !slices.Equal(s.Resource, []string{queue}) {
					t.Errorf("%s on %v, want only the queue", a, s.Resource)
				}
			case a == "ec2:TerminateInstances" || a == "ec2:DeleteLaunchTemplate" || a == "ec2:CreateTags" || (service == "iam" && verb != "GetInstanceProfile" && verb != "ListInstanceProfiles"):
				if len(s.Condition) == 0 {
					t.Errorf("%s (%s) without a tag condition", a, s.Sid)
				}
				if !strings.Contains(mustJSON(s.Condition), "kubernetes.io/cluster/"+cluster) {
					t.Errorf("%s (%s) not scoped to the cluster's tag: %v", a, s.Sid, s.Condition)
				}
			}
			if slices.Contains(s.Resource, "*") && !strings.HasPrefix(verb, "Describe") && !strings.HasPrefix(verb, "List") && a != "pricing:GetProducts" {
				t.Errorf("%s on every resource", a)
			}
		}
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestKarpenterRelease(t *testing.T) {
	d := deploy(t, fleet(nil))
	rel := d.m.Get(t, "kubernetes:helm.sh/v3:Release", cluster+"-karpenter")
	for k, want := range map[string]string{
		"chart":                       "oci://public.ecr.aws/karpenter/karpenter",
		"version":                     stackconfig.DefaultKarpenterVersion,
		"namespace":                   "kube-system",
		"values.settings.clusterName": cluster,
		"values.serviceAccount.name":  "karpenter",
		"values.controller.resources.requests.memory": "1Gi",
		"values.controller.resources.limits.memory":   "1Gi",
	} {
		if got := str(rel, k); got != want {
			t.Errorf("release %s = %q, want %q", k, got, want)
		}
	}
	annotations := rel.Input("values.serviceAccount.annotations")
	if !annotations.IsObject() || annotations.ObjectValue()["eks.amazonaws.com/role-arn"].StringValue() != "arn:aws:iam::123456789012:role/"+cluster+"-karpenter" {
		t.Errorf("Karpenter's service account annotations %v, want eks.amazonaws.com/role-arn of the controller role", annotations)
	}
	if !strings.Contains(rel.Provider, "pulumi:providers:kubernetes::"+cluster+"-k8s") {
		t.Errorf("release through provider %q, want the cluster's", rel.Provider)
	}
	ng := d.m.ByToken("aws:eks/nodeGroup:NodeGroup")[0]
	if !slices.ContainsFunc(rel.DependsOn, func(u string) bool { return strings.HasSuffix(u, "aws:eks/nodeGroup:NodeGroup::"+ng.Name) }) {
		t.Errorf("release depends on %v, not on the node group", rel.DependsOn)
	}
	var deps []string
	for i := range d.c.DependsOn {
		deps = append(deps, d.out[fmt.Sprintf("dependsOn:%d", i)])
	}
	if len(deps) != 2 || !strings.HasSuffix(deps[0], "aws:eks/nodeGroup:NodeGroup::"+ng.Name) || !strings.HasSuffix(deps[1], "kubernetes:helm.sh/v3:Release::"+rel.Name) {
		t.Errorf("the Kubernetes part waits for %v, want the node group and the Karpenter release", deps)
	}
	crd := d.m.Get(t, "kubernetes:helm.sh/v3:Release", cluster+"-karpenter-crd")
	if str(crd, "version") != str(rel, "version") {
		t.Errorf("CRD chart %s, controller chart %s: keep them equal", str(crd, "version"), str(rel, "version"))
	}
}

func TestKubeconfigIsSecretAndPrivateEndpointByDefault(t *testing.T) {
	d := deploy(t, fleet(nil))
	k8s := d.m.Get(t, "pulumi:providers:kubernetes", cluster+"-k8s")
	kc := k8s.Inputs["kubeconfig"]
	if !kc.IsSecret() && !(kc.IsOutput() && kc.OutputValue().Secret) {
		t.Errorf("kubeconfig is not a secret: %v", kc)
	}
	cfg := str(k8s, "kubeconfig")
	for _, want := range []string{`"server":"https://`, `"certificate-authority-data":"LS0t`, `"command":"aws"`, `"get-token"`, `"--cluster-name","` + cluster + `"`, `"--region","eu-west-1"`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("kubeconfig lacks %s:\n%s", want, cfg)
		}
	}
	eks := d.m.ByToken("aws:eks/cluster:Cluster")[0]
	if v := eks.Input("vpcConfig.endpointPrivateAccess"); !v.IsBool() || !v.BoolValue() {
		t.Error("private endpoint off")
	}
	if v := eks.Input("vpcConfig.endpointPublicAccess"); !v.IsBool() || v.BoolValue() {
		t.Errorf("public endpoint %v without endpointPublicAccessCIDRs", v)
	}
	if str(eks, "accessConfig.authenticationMode") != "API" {
		t.Errorf("authentication mode %q, want API", str(eks, "accessConfig.authenticationMode"))
	}
	if str(eks, "name") != cluster || str(eks, "version") != stackconfig.DefaultKubernetesVersion {
		t.Errorf("cluster %s version %s", str(eks, "name"), str(eks, "version"))
	}

	d = deploy(t, fleet(func(f map[string]any) {
		f["aws"].(map[string]any)["endpointPublicAccessCIDRs"] = []string{"203.0.113.0/24"}
	}))
	eks = d.m.ByToken("aws:eks/cluster:Cluster")[0]
	if v := eks.Input("vpcConfig.endpointPublicAccess"); !v.IsBool() || !v.BoolValue() {
		t.Error("public endpoint off although CIDRs are given")
	}
	if got := strs(eks, "vpcConfig.publicAccessCidrs"); !slices.Equal(got, []string{"203.0.113.0/24"}) {
		t.Errorf("public endpoint open to %v, want only 203.0.113.0/24", got)
	}
}

// taggable reports whether a resource type takes tags, from the SDK schema.
func taggable(t *testing.T, tok string) bool {
	t.Helper()
	s, err := sdkschema.Load(t.Context(), infratest.SchemaPackages...)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := s.Resources[tok]
	return ok && r.Fields["tags"] != nil
}

func TestEveryTaggableResourceCarriesTheStackTags(t *testing.T) {
	d := deploy(t, fleet(nil))
	want := map[string]string{"runnerfleet:stack": stack, "runnerfleet:cluster": cluster, "cost-center": "ci-4711"}
	n := 0
	for _, r := range d.m.Resources() {
		if !r.Custom || !strings.HasPrefix(r.Token, "aws:") || !taggable(t, r.Token) {
			continue
		}
		n++
		tags := tagsOf(r)
		for k, v := range want {
			if tags[k] != v {
				t.Errorf("%s %s: tag %s = %q, want %q", r.Token, r.Name, k, tags[k], v)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d taggable AWS resources checked", n)
	}
	prov := d.m.Get(t, "pulumi:providers:aws", cluster+"-aws")
	if str(prov, "region") != "eu-west-1" {
		t.Errorf("AWS provider region %q, want the stack config's", str(prov, "region"))
	}
	for k, v := range want {
		if got := str(prov, "defaultTags.tags."+k); got != v {
			t.Errorf("provider default tag %s = %q, want %q", k, got, v)
		}
	}
	// Karpenter's nodes carry them too.
	for k, v := range want {
		if d.c.Class.Karpenter.Tags[k] != v {
			t.Errorf("Karpenter node tag %s = %q, want %q", k, d.c.Class.Karpenter.Tags[k], v)
		}
	}
}

func TestChildrenParentedAndOnTheStackProvider(t *testing.T) {
	d := deploy(t, fleet(nil))
	components := map[string]int{}
	for _, r := range d.m.Resources() {
		if !r.Custom {
			if strings.HasPrefix(r.Token, "runnerfleet:aws:") {
				components[r.Token]++
			}
			continue
		}
		if r.Token == "pulumi:providers:aws" {
			continue
		}
		if !strings.Contains(r.Parent, "runnerfleet:aws:") {
			t.Errorf("%s %s has parent %q, not a runnerfleet:aws component", r.Token, r.Name, r.Parent)
		}
		if !strings.HasPrefix(r.Name, cluster) {
			t.Errorf("%s %s is not named from its component", r.Token, r.Name)
		}
		if strings.HasPrefix(r.Token, "aws:") && !strings.Contains(r.Provider, "pulumi:providers:aws::"+cluster+"-aws::") {
			t.Errorf("%s %s uses provider %q, not the stack's explicit AWS provider", r.Token, r.Name, r.Provider)
		}
	}
	for tok, want := range map[string]int{
		"runnerfleet:aws:Network": 1, "runnerfleet:aws:Cluster": 1, "runnerfleet:aws:Karpenter": 1,
		"runnerfleet:aws:Identity": 2, "runnerfleet:aws:Cache": 1,
	} {
		if components[tok] != want {
			t.Errorf("%d %s components, want %d", components[tok], tok, want)
		}
	}
}

func TestReturnedCluster(t *testing.T) {
	d := deploy(t, fleet(nil))
	c := d.c
	if c.Provider == nil || !c.InCluster {
		t.Errorf("provider %v, in cluster %v", c.Provider, c.InCluster)
	}
	k := c.Class.Karpenter
	if c.Class.Provider != v1alpha1.CapacityProviderKarpenter || k == nil || k.ClusterName != cluster || k.NodeRole == "" || k.AMIAlias == "" {
		t.Fatalf("class %+v", c.Class)
	}
	if len(k.NodeRole) > 64 {
		t.Errorf("node role %q longer than IAM allows", k.NodeRole)
	}
	if len(k.Tags) > 30 {
		t.Errorf("%d Karpenter tags leave no room for the per-tag ones (32 at most)", len(k.Tags))
	}
	for _, key := range []string{kube.IdentityKey("team", "build"), kube.IdentityKey("team-a", "deploy")} {
		if _, ok := c.Identities[key]; !ok {
			t.Errorf("no identity %s", key)
		}
	}
	if !strings.HasPrefix(d.out["bucket"], cluster+"-cache") {
		t.Errorf("cache bucket %q", d.out["bucket"])
	}
	// The class is valid for the RunnerClass CRD's patterns.
	for _, p := range c.Class.Policy.Identity.AWSRoleARNPatterns {
		if !strings.HasPrefix(p, "arn:") || !strings.Contains(p, "{namespace}") {
			t.Errorf("pattern %q", p)
		}
	}
}

// newPlatform declares the eks platform of f, as the program does.
func newPlatform(ctx *pulumi.Context, f *stackconfig.Fleet) (*kube.Cluster, error) {
	p, err := NewPlatform(ctx, f.ClusterName, ArgsFor(f))
	if err != nil {
		return nil, err
	}
	return p.Cluster, nil
}

// NetworkPolicy is enforced on EKS only by the VPC CNI's network policy
// agent, which its managed add-on turns on from its configuration values;
// the managers' nodes start after it.
func TestTheVPCCNIAddOnEnforcesNetworkPolicy(t *testing.T) {
	d := deploy(t, fleet(nil))
	addons := d.m.ByToken("aws:eks/addon:Addon")
	if len(addons) != 1 {
		t.Fatalf("%d EKS add-ons, want the vpc-cni one", len(addons))
	}
	cni := addons[0]
	if got := str(cni, "addonName"); got != "vpc-cni" {
		t.Errorf("add-on %q, want vpc-cni", got)
	}
	var values map[string]any
	if err := json.Unmarshal([]byte(str(cni, "configurationValues")), &values); err != nil {
		t.Fatalf("configurationValues %q: %v", str(cni, "configurationValues"), err)
	}
	// The add-on's schema types it as a string.
	if values["enableNetworkPolicy"] != "true" {
		t.Errorf("configurationValues %v: the network policy agent is off", values)
	}
	ng := d.m.Get(t, "aws:eks/nodeGroup:NodeGroup", cluster+"-system")
	if !slices.ContainsFunc(ng.DependsOn, func(u string) bool { return strings.HasSuffix(u, "aws:eks/addon:Addon::"+cni.Name) }) {
		t.Errorf("the system node group does not wait for the %s add-on: %v", cni.Name, ng.DependsOn)
	}
}

// An EKS managed node group update drains one node at a time and is never
// forced: a manager whose PodDisruptionBudget holds for EKS's 15 minutes
// fails the update instead of being deleted mid-drain.
func TestTheManagersNodeGroupUpdatesOneNodeAtATimeAndIsNeverForced(t *testing.T) {
	d := deploy(t, fleet(nil))
	ng := d.m.Get(t, "aws:eks/nodeGroup:NodeGroup", cluster+"-system")
	if v := ng.Input("updateConfig.maxUnavailable"); !v.IsNumber() || v.NumberValue() != 1 {
		t.Errorf("updateConfig.maxUnavailable %v, want 1", v)
	}
	if v := ng.Input("updateConfig.maxUnavailablePercentage"); v.IsNumber() {
		t.Errorf("updateConfig.maxUnavailablePercentage %v set", v)
	}
	if v := ng.Input("forceUpdateVersion"); !v.IsBool() || v.BoolValue() {
		t.Errorf("forceUpdateVersion %v, want false: a forced update deletes the pods it could not drain", v)
	}
}
