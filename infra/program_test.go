package infra_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/runnerfleet/runnerfleet/infra"
	"github.com/runnerfleet/runnerfleet/infra/infratest"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

const (
	tokCRD         = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
	tokRunnerClass = "kubernetes:runnerfleet.dev/v1alpha1:RunnerClass"
	tokRunnerSet   = "kubernetes:runnerfleet.dev/v1alpha1:RunnerSet"
	tokSecret      = "kubernetes:core/v1:Secret"
	tokNamespace   = "kubernetes:core/v1:Namespace"
	tokDeployment  = "kubernetes:apps/v1:Deployment"
	tokClusterRole = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
)

func stackConfig(t *testing.T, stack string, secrets map[string]string) (map[string]string, []string) {
	t.Helper()
	cfg, secretKeys, err := infratest.StackConfig(filepath.Join("..", "stacks", "Pulumi."+stack+".yaml"), secrets)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, secretKeys
}

// stackSecrets are the config secrets each example stack names, as a test
// supplies them (stack files never hold secrets).
var stackSecrets = map[string]map[string]string{
	"local":   nil,
	"eks-dev": {"runnerfleet:teamABuildToken": "glrt-team-a-secret", "runnerfleet:gitlabAPIToken": "glpat-api-secret"},
	"gke-shared": {
		"runnerfleet:teamCBuildToken":               "glrt-team-c-secret",
		"runnerfleet:sharedProductionLinuxToken":    "glrt-shared-prod-linux-secret",
		"runnerfleet:sharedProductionFleetingToken": "glrt-shared-prod-fleeting-secret",
		"runnerfleet:sharedStagingLinuxToken":       "glrt-shared-staging-linux-secret",
		"runnerfleet:sharedStagingFleetingToken":    "glrt-shared-staging-fleeting-secret",
		"runnerfleet:sharedStagingWindowsToken":     "glrt-shared-staging-windows-secret",
		"runnerfleet:sharedProductionWindowsToken":  "glrt-shared-prod-windows-secret",
		"runnerfleet:rotationWebhookURL":            "https://hooks.slack.com/services/not-a-real-token",
		"runnerfleet:alertWebhookURL":               "https://hooks.example.com/alerts/not-a-real-token",
	},
}

func kubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLocalStack(t *testing.T) {
	m := infratest.NewMocks(t)
	cfg, secretKeys := stackConfig(t, "local", nil)
	if err := infratest.Run(m, "local", cfg, secretKeys, infra.ProgramWith(infra.Options{Kubeconfig: kubeconfig(t)})); err != nil {
		t.Fatal(err)
	}

	if got := len(m.ByToken(tokCRD)); got != 2 {
		t.Errorf("%d CRDs declared, want the 2 of runnerfleet.dev", got)
	}
	class := m.Get(t, tokRunnerClass, "local-class")
	if p := class.Input("spec.provider"); !p.IsString() || p.StringValue() != "kwok" {
		t.Errorf("RunnerClass provider = %v, want kwok", p)
	}
	rs := m.Get(t, tokRunnerSet, "local/team-a/build")
	if v := rs.Input("spec.className"); v.StringValue() != "local" {
		t.Errorf("RunnerSet className = %v, want the class local", v)
	}
	if v := rs.Input("spec.gitlab.tokenSecretRef.name"); v.StringValue() != "build-gitlab-token" {
		t.Errorf("RunnerSet token secret = %v, want build-gitlab-token", v)
	}
	if rs.DeleteTimeout != "11m0s" {
		t.Errorf("RunnerSet delete timeout %q, want its shutdownTimeout (1m) and 10m of margin: the provider must wait for the drain", rs.DeleteTimeout)
	}
	if !rs.DeleteBeforeReplace || !slices.Contains(rs.ReplaceOnChanges, "spec.className") || !slices.Contains(rs.ReplaceOnChanges, "spec.gitlab.runner.type") {
		t.Errorf("RunnerSet replace options %v (delete before replace %v): changes the API refuses must replace it, the old one first", rs.ReplaceOnChanges, rs.DeleteBeforeReplace)
	}
	sec := m.Get(t, tokSecret, "local/team-a/build:token")
	tok := sec.Inputs["stringData"]
	// The Secret's constructor makes all of stringData secret, as the SDK's
	// does; the token itself may be a secret inside it too.
	if !tok.ContainsSecrets() || !sec.Input("stringData.token").IsString() {
		t.Errorf("the runner token Secret's stringData.token is not a Pulumi secret: %v", tok)
	}
	if got := m.ByToken(tokDeployment); len(got) != 0 {
		t.Errorf("the local stack declared %d Deployments; its controller runs as a process", len(got))
	}
	// The controller process binds the executor's ClusterRole in each jobs
	// namespace: without it the managers may create no job pod.
	executor := m.Get(t, tokClusterRole, "local-executor-clusterrole")
	if n := executor.Input("metadata.name"); n.StringValue() != resources.ExecutorClusterRole {
		t.Errorf("executor ClusterRole named %v, want %s (what the controller binds)", n, resources.ExecutorClusterRole)
	}
	if rules := executor.Input("rules"); !rules.IsArray() || len(rules.ArrayValue()) != len(resources.ExecutorRules()) {
		t.Errorf("executor ClusterRole rules %v, want the %d of resources.ExecutorRules", rules, len(resources.ExecutorRules()))
	}
	for _, r := range m.Resources() {
		if !r.Custom || strings.HasPrefix(r.Token, "pulumi:providers:") {
			continue
		}
		if r.Provider == "" || !strings.Contains(r.Provider, "pulumi:providers:kubernetes::local") {
			t.Errorf("%s %s does not use the local cluster's provider (provider %q)", r.Token, r.Name, r.Provider)
		}
		if r.Parent == "" || !strings.Contains(r.Parent, "runnerfleet:kube:Fleet") {
			t.Errorf("%s %s is not parented to the Fleet component (parent %q)", r.Token, r.Name, r.Parent)
		}
		if l := r.Input("metadata.labels"); !l.IsObject() || l.ObjectValue()["runnerfleet.dev/stack"].StringValue() != "local" {
			t.Errorf("%s %s is not labelled with the stack: %v", r.Token, r.Name, l)
		}
	}
}

// Teams whose namespace and name join into the same string with '-', and a
// runner token Secret against an API token Secret, still get distinct
// resource names: the engine refuses a duplicate URN.
func TestTeamNamesNeverCollide(t *testing.T) {
	fleet := `{"platform":"local","clusterName":"local","gitlabURL":"https://gitlab.example.com","teams":[
		{"namespace":"a-b","name":"c","tags":["t1"],"tokenConfigKey":"tok"},
		{"namespace":"a","name":"b-c","tags":["t2"],"tokenConfigKey":"tok"},
		{"namespace":"a","name":"b-api","tags":["t3"],"tokenConfigKey":"tok"},
		{"namespace":"a","name":"b","tags":["t4"],"runner":{"type":"group","groupID":1},"apiTokenConfigKey":"api"}]}`
	m := infratest.NewMocks(t)
	err := infratest.Run(m, "local", map[string]string{"runnerfleet:fleet": fleet, "runnerfleet:tok": "glrt-xxxxxxxx", "runnerfleet:api": "glpat-xxxxxxxx"},
		[]string{"runnerfleet:tok", "runnerfleet:api"}, infra.ProgramWith(infra.Options{Kubeconfig: kubeconfig(t)}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.ByToken(tokRunnerSet)); n != 4 {
		t.Errorf("%d RunnerSets, want 4", n)
	}
	if n := len(m.ByToken(tokSecret)); n != 4 {
		t.Errorf("%d Secrets, want 3 runner tokens and 1 API token", n)
	}
}

func TestBadStackConfigsCreateNothing(t *testing.T) {
	base := `{"platform":"local","clusterName":"local","gitlabURL":"https://gitlab.example.com","teams":[{"namespace":"team-a","name":"build","tags":["a"],"tokenConfigKey":"tok"}]}`
	cases := []struct {
		name, fleet string
		want        []string
	}{
		{"unknown team field", strings.Replace(base, `"tags":["a"]`, `"tags":["a"],"colour":"blue"`, 1),
			[]string{"runnerfleet:fleet.teams[0].colour: Forbidden: unknown key; remove it"}},
		{"misspelt team field", strings.Replace(base, `"tags":["a"]`, `"tag":["a"]`, 1),
			[]string{`runnerfleet:fleet.teams[0].tag: Forbidden: unknown key; did you mean "tags"?`}},
		{"identity pattern without namespace", strings.Replace(base, `"teams"`, `"identity":{"awsRoleARNPatterns":["arn:aws:iam::123456789012:role/ci-*"]},"teams"`, 1),
			[]string{"runnerfleet:fleet.identity.awsRoleARNPatterns[0]: Invalid value: \"arn:aws:iam::123456789012:role/ci-*\": every identity pattern must contain {namespace}"}},
		{"missing region", strings.Replace(base, `"platform":"local"`, `"platform":"eks","aws":{"zones":["eu-west-1a","eu-west-1b"]},"controller":{"image":"example/controller:v1"}`, 1),
			[]string{"runnerfleet:fleet.aws.region: Required value"}},
		{"CIDR overlap", strings.Replace(base, `"platform":"local"`, `"platform":"eks","controller":{"image":"example/controller:v1"},"aws":{"region":"eu-west-1","zones":["eu-west-1a","eu-west-1b"],"vpcCIDR":"10.0.0.0/16","privateSubnetCIDRs":["10.0.0.0/19","10.0.16.0/20"],"publicSubnetCIDRs":["10.0.224.0/24","10.0.225.0/24"]}`, 1),
			[]string{"runnerfleet:fleet.aws.privateSubnetCIDRs[1]"}},
		{"missing platform", strings.Replace(base, `"platform":"local",`, ``, 1),
			[]string{"runnerfleet:fleet.platform: Required value: set platform to local, eks or gke"}},
		{"on-demand not allowed", strings.Replace(base, `"tags":["a"]`, `"tags":["a"],"capacity":{"capacityTypes":["on-demand"]}`, 1),
			[]string{"runnerfleet:fleet.teams[0].capacity.capacityTypes[0]: Forbidden: on-demand capacity is not allowed in this stack"}},
		{"operator monitoring on the local stack", strings.Replace(base, `"teams"`, `"controller":{"monitoring":{"serviceMonitors":true}},"teams"`, 1),
			[]string{"runnerfleet:fleet.controller.monitoring: Forbidden: the local stack runs the controller as a process and its own Prometheus"}},
		{"missing token secret", base,
			[]string{"runnerfleet:fleet.teams[0].tokenConfigKey: config key runnerfleet:tok is not set: pulumi config set --secret tok"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := infratest.NewMocks(t)
			err := infratest.Run(m, "bad", map[string]string{"runnerfleet:fleet": c.fleet}, nil, infra.ProgramWith(infra.Options{Kubeconfig: kubeconfig(t)}))
			if err == nil {
				t.Fatal("the program accepted a bad stack config")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			if rs := m.Resources(); len(rs) != 0 {
				t.Errorf("%d resources were declared before the config was refused, want none (first: %s %s)", len(rs), rs[0].Token, rs[0].Name)
			}
		})
	}
}

func TestMissingFleetKey(t *testing.T) {
	m := infratest.NewMocks(t)
	err := infratest.Run(m, "empty", map[string]string{}, nil, infra.Program)
	if err == nil || !strings.Contains(err.Error(), "runnerfleet:fleet is not set: add it to stacks/Pulumi.empty.yaml") {
		t.Fatalf("Program without config = %v, want an error naming the key and the file", err)
	}
}

func TestMalformedFleetKey(t *testing.T) {
	m := infratest.NewMocks(t)
	err := infratest.Run(m, "bad", map[string]string{"runnerfleet:fleet": `{"platform": 3}`}, nil, infra.Program)
	if err == nil || !strings.Contains(err.Error(), "runnerfleet:fleet.platform") {
		t.Fatalf("Program with a number for platform = %v, want an error naming runnerfleet:fleet.platform", err)
	}
}

// TestCloudStacks runs the example cloud stacks, stacks/Pulumi.eks-dev.yaml
// and stacks/Pulumi.gke-shared.yaml, through the whole program under mocks.
func TestCloudStacks(t *testing.T) {
	cases := []struct {
		stack, identityField, cacheType string
		secrets                         map[string]string
	}{
		{"eks-dev", "awsRoleARN", "s3", stackSecrets["eks-dev"]},
		{"gke-shared", "gcpServiceAccount", "gcs", stackSecrets["gke-shared"]},
	}
	for _, c := range cases {
		t.Run(c.stack, func(t *testing.T) {
			m := infratest.NewMocks(t)
			cfg, secretKeys := stackConfig(t, c.stack, c.secrets)
			if err := infratest.Run(m, c.stack, cfg, secretKeys, infra.Program); err != nil {
				t.Fatal(err)
			}
			sets := m.ByToken(tokRunnerSet)
			if len(sets) == 0 {
				t.Fatal("no RunnerSets declared")
			}
			for _, rs := range sets {
				id := rs.Input("spec.jobs.identity." + c.identityField)
				if !id.IsString() || id.StringValue() == "" {
					t.Errorf("RunnerSet %s has no job identity %s: %v", rs.Name, c.identityField, id)
				}
				if !strings.Contains(rs.Provider, "pulumi:providers:kubernetes") {
					t.Errorf("RunnerSet %s is not on the cluster's Kubernetes provider: %q", rs.Name, rs.Provider)
				}
			}
			class := m.ByToken(tokRunnerClass)
			if len(class) != 1 {
				t.Fatalf("%d RunnerClasses, want 1", len(class))
			}
			if v := class[0].Input("spec.defaults.cache.type"); v.StringValue() != c.cacheType {
				t.Errorf("RunnerClass cache type = %v, want %s", v, c.cacheType)
			}
			if v := class[0].Input("spec.defaults.cache.bucket"); !v.IsString() || v.StringValue() == "" {
				t.Errorf("RunnerClass cache bucket = %v, want the stack's bucket", v)
			}
			if v := class[0].Input("spec.policy.allowedCapacityTypes"); !v.IsArray() || len(v.ArrayValue()) != 1 || v.ArrayValue()[0].StringValue() != "spot" {
				t.Errorf("RunnerClass allowed capacity = %v, want spot only (the stack does not allow on-demand)", v)
			}
			d := m.Get(t, tokDeployment, "ci-"+strings.TrimPrefix(strings.TrimPrefix(c.stack, "eks-"), "gke-")+"-controller")
			if v := d.Input("spec.template.spec.serviceAccountName"); v.StringValue() != "runnerset-controller" {
				t.Errorf("controller runs as %v", v)
			}
			releases := map[string]int{}
			for _, r := range m.ByToken("kubernetes:helm.sh/v3:Release") {
				releases[r.Input("chart").StringValue()]++
			}
			switch c.stack {
			case "eks-dev":
				if releases["oci://public.ecr.aws/karpenter/karpenter"]+releases["karpenter"] == 0 {
					t.Errorf("no Karpenter release: %v", releases)
				}
			case "gke-shared":
				// production: linux up to 6 managers, fleeting up to 3;
				// staging: one each. One release per manager.
				if releases["gitlab-runner"] < 4 {
					t.Errorf("gitlab-runner releases: %v, want one per shared manager", releases)
				}
				// Every config.toml a manager runs passes gitlab-runner's
				// structs and parsers.
				schema, err := oracle.Load(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				values, err := schema.Values()
				if err != nil {
					t.Fatal(err)
				}
				checked := 0
				for _, r := range m.ByToken("kubernetes:core/v1:Secret") {
					v := r.Input("stringData." + shared.ConfigSecretKey)
					if !v.IsString() {
						continue
					}
					checked++
					if err := errors.Join(schema.Check([]byte(v.StringValue())), values.Check([]byte(v.StringValue()))); err != nil {
						t.Errorf("%s: %v", r.Name, err)
					}
				}
				if checked != releases["gitlab-runner"] {
					t.Errorf("%d configs checked for %d managers", checked, releases["gitlab-runner"])
				}
				vmNetworkPaths(t, m)
			}
			// No token in clear in any input: only inside Pulumi secrets.
			for _, r := range m.Resources() {
				for _, tok := range c.secrets {
					if leaks(resource.NewObjectProperty(r.Inputs), tok) {
						t.Errorf("%s %s carries a token outside a secret", r.Token, r.Name)
					}
				}
			}
		})
	}
}

// leaks reports whether s appears in v outside a secret.
func leaks(v resource.PropertyValue, s string) bool {
	switch {
	case v.IsSecret():
		return false
	case v.IsString():
		return strings.Contains(v.StringValue(), s)
	case v.IsArray():
		for _, e := range v.ArrayValue() {
			if leaks(e, s) {
				return true
			}
		}
	case v.IsObject():
		for _, e := range v.ObjectValue() {
			if leaks(e, s) {
				return true
			}
		}
	}
	return false
}

// BenchmarkProgram runs the whole program on each example stack under the
// mocks, every resource checked against the provider schemas.
func BenchmarkProgram(b *testing.B) {
	for _, stack := range []string{"local", "eks-dev", "gke-shared"} {
		b.Run(stack, func(b *testing.B) {
			cfg, keys, err := infratest.StackConfig(filepath.Join("..", "stacks", "Pulumi."+stack+".yaml"), stackSecrets[stack])
			if err != nil {
				b.Fatal(err)
			}
			kc := filepath.Join(b.TempDir(), "kubeconfig")
			if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			infratest.NewMocks(b) // load the schemas outside the timing
			var n int
			b.ReportAllocs()
			for b.Loop() {
				m := infratest.NewMocks(b)
				if err := infratest.Run(m, stack, cfg, keys, infra.ProgramWith(infra.Options{Kubeconfig: kc})); err != nil {
					b.Fatal(err)
				}
				n = len(m.Resources())
			}
			b.ReportMetric(float64(n), "resources")
		})
	}
}

// vmNetworkPaths checks, on the declared resources of gke-shared, the
// network paths a reviewer looks for: each fleet's VM subnetwork reaches
// Google's APIs privately and the internet through its own Cloud NAT; the
// only ingress to a job VM is from the cluster's pod range; no job VM has an
// external address.
func vmNetworkPaths(t *testing.T, m *infratest.Mocks) {
	t.Helper()
	subnets := map[string]bool{}
	for _, r := range m.ByToken("gcp:compute/subnetwork:Subnetwork") {
		name := r.Input("name").StringValue()
		if !strings.HasSuffix(name, "-vms") {
			continue
		}
		subnets[r.Name] = true
		if !r.Input("privateIpGoogleAccess").BoolValue() {
			t.Errorf("VM subnetwork %s has no Private Google Access", name)
		}
	}
	if len(subnets) != 2 {
		t.Errorf("VM subnetworks %v, want one per fleet", subnets)
	}
	nats := 0
	for _, r := range m.ByToken("gcp:compute/routerNat:RouterNat") {
		if strings.HasSuffix(r.Input("name").StringValue(), "-vms") {
			nats++
		}
	}
	if nats != len(subnets) {
		t.Errorf("%d Cloud NATs for %d VM subnetworks", nats, len(subnets))
	}
	var pods string
	for _, r := range m.ByToken("gcp:container/cluster:Cluster") {
		pods = r.Input("ipAllocationPolicy.clusterSecondaryRangeName").StringValue()
	}
	if pods == "" {
		t.Fatal("no pods range on the cluster")
	}
	podsCIDR := ""
	for _, r := range m.ByToken("gcp:compute/subnetwork:Subnetwork") {
		if rs := r.Input("secondaryIpRanges"); rs.IsArray() {
			for _, e := range rs.ArrayValue() {
				if e.ObjectValue()["rangeName"].StringValue() == pods {
					podsCIDR = e.ObjectValue()["ipCidrRange"].StringValue()
				}
			}
		}
	}
	// The accounts of the VM groups' managers, which no job VM runs as.
	managerAccounts := map[string]bool{}
	for _, r := range m.ByToken("gcp:serviceaccount/account:Account") {
		if strings.Contains(r.URN, "$runnerfleet:sharedfleet:VMGroup$") {
			managerAccounts[r.Input("accountId").StringValue()+"@"+r.Input("project").StringValue()+".iam.gserviceaccount.com"] = true
		}
	}
	vmRules := 0
	for _, r := range m.ByToken("gcp:compute/firewall:Firewall") {
		targets := r.Input("targetTags")
		if accounts := r.Input("targetServiceAccounts"); accounts.IsArray() && len(accounts.ArrayValue()) > 0 {
			// A VM group's rule: it reaches the VMs that run as its
			// managers' account, and no job VM.
			for _, a := range accounts.ArrayValue() {
				if !managerAccounts[a.StringValue()] {
					t.Errorf("rule %s targets VMs running as %s, not a VM group's managers' account", r.Name, a.StringValue())
				}
			}
			continue
		}
		if !targets.IsArray() || len(targets.ArrayValue()) == 0 {
			t.Errorf("rule %s targets every instance of the VPC, the job VMs included", r.Name)
			continue
		}
		tag := targets.ArrayValue()[0].StringValue()
		if !strings.HasPrefix(tag, "runnerfleet-") {
			continue // the nodes' rules
		}
		vmRules++
		src := r.Input("sourceRanges").ArrayValue()
		if len(src) != 1 || src[0].StringValue() != podsCIDR {
			t.Errorf("rule %s admits %v to job VMs, want the pods range %s only", r.Name, src, podsCIDR)
		}
	}
	if vmRules == 0 {
		t.Error("no rule lets the managers reach the VMs")
	}
	for _, r := range m.ByToken("gcp:compute/instanceTemplate:InstanceTemplate") {
		for _, nic := range r.Input("networkInterfaces").ArrayValue() {
			if ac := nic.ObjectValue()["accessConfigs"]; ac.IsArray() && len(ac.ArrayValue()) > 0 {
				t.Errorf("%s: a job VM with an external address", r.Name)
			}
		}
	}
	for _, r := range m.ByToken("kubernetes:core/v1:Secret") {
		if c := r.Input("stringData." + shared.ConfigSecretKey); c.IsString() && strings.Contains(c.StringValue(), `"google-`) &&
			!strings.Contains(c.StringValue(), `"google-use-internal-ip-only=true"`) {
			t.Errorf("%s: a docker+machine VM with an external address", r.Name)
		}
	}
}

// Every config secret the stack names is read and checked before anything
// is declared: a missing alert receiver secret, a missing shared-fleet
// token or one that is no runner token stops the gke-shared stack with
// nothing declared, not after the platform and the teams.
func TestAMissingOrBadSecretStopsTheProgramBeforeAnythingIsDeclared(t *testing.T) {
	cases := []struct {
		name, key, value, want string
	}{
		{"alert receiver", "runnerfleet:alertWebhookURL", "", "runnerfleet:fleet.alerting.receiver: config key runnerfleet:alertWebhookURL is not set"},
		{"shared fleet token", "runnerfleet:sharedStagingWindowsToken", "", "runnerfleet:fleet.sharedFleets[1].groups[2].tokenConfigKey: config key runnerfleet:sharedStagingWindowsToken is not set"},
		{"no runner token", "runnerfleet:sharedProductionLinuxToken", "glrt-x|y", "runnerfleet:fleet.sharedFleets[0].groups[0].tokenConfigKey: config key runnerfleet:sharedProductionLinuxToken is not a runner token"},
		{"team token", "runnerfleet:teamCBuildToken", "", "runnerfleet:fleet.teams[0].tokenConfigKey: config key runnerfleet:teamCBuildToken is not set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			secrets := maps.Clone(stackSecrets["gke-shared"])
			if _, ok := secrets[c.key]; !ok {
				t.Fatalf("the stack names no secret %s", c.key)
			}
			if c.value == "" {
				delete(secrets, c.key)
			} else {
				secrets[c.key] = c.value
			}
			m := infratest.NewMocks(t)
			cfg, secretKeys := stackConfig(t, "gke-shared", secrets)
			err := infratest.Run(m, "gke-shared", cfg, secretKeys, infra.Program)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), "glrt-x|y") {
				t.Errorf("the error shows the secret: %v", err)
			}
			if rs := m.Resources(); len(rs) != 0 {
				t.Errorf("%d resources declared before the refusal, want none (first: %s %s)", len(rs), rs[0].Token, rs[0].Name)
			}
		})
	}
}
