package sharedfleet

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/gcp"
	"github.com/runnerfleet/runnerfleet/infra/infratest"
	gcpsdk "github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

const (
	tokRelease      = "kubernetes:helm.sh/v3:Release"
	tokClaim        = "kubernetes:core/v1:PersistentVolumeClaim"
	tokPatch        = "kubernetes:apps/v1:DeploymentPatch"
	tokScaledObject = "kubernetes:keda.sh/v1alpha1:ScaledObject"
	tokPDB          = "kubernetes:policy/v1:PodDisruptionBudget"
	tokNetpol       = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
	tokService      = "kubernetes:core/v1:Service"
	tokSecret       = "kubernetes:core/v1:Secret"
	tokConfigMap    = "kubernetes:core/v1:ConfigMap"
	tokNamespace    = "kubernetes:core/v1:Namespace"
	tokDeployment   = "kubernetes:apps/v1:Deployment"

	cacheBucket = "ci-shared-cache-20261130"
)

// stackJSON is a gke stack (the gcp section as infra/gcp reads it) with a
// production fleet of both executors and a web terminal, and a staging
// fleet of less capacity.
const stackJSON = `{
  "platform": "gke",
  "clusterName": "ci-shared",
  "gitlabURL": "https://gitlab.example.com",
  "controller": {"image": "example.invalid/runnerset-controller:v1"},
  "gcp": {
    "project": "ci-platform-example",
    "region": "europe-west1",
    "masterAuthorizedCIDRs": ["203.0.113.0/24"],
    "labels": {"cost-center": "ci"}
  },
  "alerting": {"receiver": {"name": "ci-platform", "webhookURLConfigKey": "alertWebhookURL"}},
  "cost": {"currency": "EUR", "prices": [{"instanceType": "n2d-standard-4", "onDemand": 0.1866, "spot": 0.0561}]},
  "sharedFleets": [
    {
      "name": "production",
      "managerImage": "registry.example.com/ci/gitlab-runner-docker-machine:v19.4.0",
      "gcpServiceAccount": "ci-shared-managers@ci-platform-example.iam.gserviceaccount.com",
      "monitoring": {"vmQuota": 800, "gcpServiceAccount": "ci-shared-prometheus@ci-platform-example.iam.gserviceaccount.com"},
      "webTerminal": {"domain": "terminals.ci.example.com", "allowedCIDRs": ["203.0.113.10/32", "198.51.100.0/28"]},
      "vmNetwork": {"cidr": "10.30.0.0/20"},
      "groups": [
        {
          "name": "linux", "tokenConfigKey": "sharedProductionLinux",
          "zone": "europe-west1-b", "machineType": "n2d-standard-4",
          "image": "projects/ci-platform-example/global/images/family/runner-vm",
          "networkTags": ["ci-runner"],
          "maxVMs": 100, "idleCount": 10, "idleTime": "30m", "maxBuilds": 1,
          "periods": [{"periods": ["* * 0-7,19-23 * * mon-fri *", "* * * * * sat,sun *"], "timezone": "Europe/Berlin", "idleCount": 2, "idleTime": "10m"}],
          "scaling": {"minManagers": 2, "maxManagers": 4}
        },
        {
          "name": "fleeting", "executor": "docker-autoscaler", "tokenConfigKey": "sharedProductionFleeting",
          "zone": "europe-west1-c", "machineType": "n2d-standard-8", "image": "runner-vm",
          "maxVMs": 50, "idleCount": 5, "idleTime": "20m",
          "scaling": {"minManagers": 1, "maxManagers": 2, "targetUtilization": 0.5}
        }
      ]
    },
    {
      "name": "staging",
      "managerImage": "registry.example.com/ci/gitlab-runner-docker-machine:v19.4.0",
      "jobTimeout": "4h",
      "cacheBucket": "ci-staging-cache",
      "vmNetwork": {"subnetwork": "projects/ci-platform-example/regions/europe-west1/subnetworks/ci-staging-vms"},
      "groups": [
        {
          "name": "linux", "tokenConfigKey": "sharedStagingLinux",
          "zone": "europe-west1-b", "machineType": "e2-standard-2", "image": "runner-vm",
          "maxVMs": 10, "idleCount": 1, "idleTime": "10m"
        }
      ]
    }
  ]
}`

// tokens are the groups' runner tokens, as stack config secrets.
var tokens = map[string]string{
	"runnerfleet:sharedProductionLinux":    "glrt-prodLinuxTokenNotReal-4f1c2b",
	"runnerfleet:sharedProductionFleeting": "glrt-prodFleetingTokenNotReal-9a8b7c",
	"runnerfleet:sharedStagingLinux":       "glrt-stagingLinuxTokenNotReal-1d2e3f",
	"runnerfleet:alertWebhookURL":          "https://hooks.example.com/alerts/T0k3nNotReal",
}

// deploy runs New under the mocks for the stack config raw with the given
// config secrets, on a cluster whose cache bucket is cacheBucket.
// fakePlatform stands for the gke platform the fleets' cloud side is
// composed from (infra/gcp's own tests declare the real one): its
// component, its gcp provider, a made-up VPC, the component for the GKE
// cluster, and c's cache bucket.
func fakePlatform(ctx *pulumi.Context, f *stackconfig.Fleet, c *kube.Cluster) (*gcp.Platform, error) {
	p := &gcp.Platform{Cluster: c, Args: gcp.ArgsFor(f)}
	if err := ctx.RegisterComponentResource("runnerfleet:gcp:Platform", f.ClusterName, p); err != nil {
		return nil, err
	}
	prov, err := gcpsdk.NewProvider(ctx, f.ClusterName+"-gcp", &gcpsdk.ProviderArgs{Project: pulumi.String(f.GCP.Project), Region: pulumi.String(f.GCP.Region)}, pulumi.Parent(p))
	if err != nil {
		return nil, err
	}
	p.Provider, p.GKE, p.CacheBucket = prov, p, c.Cache.Bucket
	p.Network = pulumi.String(stackconfig.GCPNetworkPath(f.GCP.Project, f.ClusterName)).ToStringOutput()
	return p, nil
}

func deploy(t *testing.T, raw string, secrets map[string]string) (*infratest.Mocks, *SharedFleets, error) {
	t.Helper()
	m := infratest.NewMocks(t)
	cfg := map[string]string{"runnerfleet:fleet": raw}
	var keys []string
	for k, v := range secrets {
		cfg[k] = v
		keys = append(keys, k)
	}
	var out *SharedFleets
	err := infratest.Run(m, "gke-shared", cfg, keys, func(ctx *pulumi.Context) error {
		f, err := stackconfig.Decode([]byte(raw), ctx.Stack())
		if err != nil {
			return err
		}
		p, err := kube.NewProvider(ctx, "gke", "runners-prod", pulumi.ToSecret(pulumi.String("apiVersion: v1\nkind: Config\n")).(pulumi.StringOutput))
		if err != nil {
			return err
		}
		c := &kube.Cluster{
			Provider:  p,
			Cache:     &kube.Cache{Type: v1alpha1.CacheTypeGCS, Bucket: pulumi.String(cacheBucket).ToStringOutput()},
			InCluster: true,
		}
		pl, err := fakePlatform(ctx, f, c)
		if err != nil {
			return err
		}
		secrets, err := kube.ReadSecrets(ctx, f)
		if err != nil {
			return err
		}
		out, err = New(ctx, &Args{Fleets: f.SharedFleets, Cluster: c, Secrets: secrets, Alerting: f.Alerting, Platform: pl, Prices: f.Cost})
		return err
	})
	return m, out, err
}

var (
	once     sync.Once
	deployed *infratest.Mocks
	result   *SharedFleets
)

// deployedStack deploys stackJSON once for the tests that only read.
func deployedStack(t *testing.T) *infratest.Mocks {
	t.Helper()
	once.Do(func() {
		m, out, err := deploy(t, stackJSON, tokens)
		if err != nil {
			t.Fatal(err)
		}
		deployed, result = m, out
	})
	if deployed == nil {
		t.Fatal("the shared deployment failed")
	}
	return deployed
}

func str(t *testing.T, r infratest.Resource, path string) string {
	t.Helper()
	v := r.Input(path)
	if !v.IsString() {
		t.Fatalf("%s %s: %s is %v, not a string", r.Token, r.Name, path, v)
	}
	return v.StringValue()
}

func num(t *testing.T, r infratest.Resource, path string) float64 {
	t.Helper()
	v := r.Input(path)
	if !v.IsNumber() {
		t.Fatalf("%s %s: %s is %v, not a number", r.Token, r.Name, path, v)
	}
	return v.NumberValue()
}

// object returns the object at path, looking through secrets.
func object(t *testing.T, r infratest.Resource, path string) resource.PropertyMap {
	t.Helper()
	v := r.Input(path)
	if !v.IsObject() {
		t.Fatalf("%s %s: %s is %v, not an object", r.Token, r.Name, path, v)
	}
	return v.ObjectValue()
}

// managers are the managers the stack should have, by release name.
var managers = map[string]struct {
	fleet, group, executor string
	index, min             int
}{
	"production-linux-0":    {"production", "production-linux", "docker+machine", 0, 2},
	"production-linux-1":    {"production", "production-linux", "docker+machine", 1, 2},
	"production-linux-2":    {"production", "production-linux", "docker+machine", 2, 2},
	"production-linux-3":    {"production", "production-linux", "docker+machine", 3, 2},
	"production-fleeting-0": {"production", "production-fleeting", "docker-autoscaler", 0, 1},
	"production-fleeting-1": {"production", "production-fleeting", "docker-autoscaler", 1, 1},
	"staging-linux-0":       {"staging", "staging-linux", "docker+machine", 0, 1},
}

func TestOneReleasePerManagerWithThePinnedChart(t *testing.T) {
	m := deployedStack(t)
	releases := m.ByToken(tokRelease)
	if len(releases) != len(managers) {
		t.Errorf("%d releases, want one per manager (%d)", len(releases), len(managers))
	}
	for name, want := range managers {
		r := releaseOf(t, m, name)
		release := str(t, r, "name")
		if gen, ok := strings.CutPrefix(release, name+"-"); !ok || !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(gen) {
			t.Errorf("%s: release %s is not <manager>-<8 hex digits of its generation>", name, release)
		}
		if r.Name != "shared-"+want.fleet+"-"+release {
			t.Errorf("%s: resource %s, want shared-%s-%s", name, r.Name, want.fleet, release)
		}
		for path, v := range map[string]string{
			"chart": "gitlab-runner", "version": shared.ChartVersion, "namespace": want.fleet,
			"repositoryOpts.repo":     "https://charts.gitlab.io",
			"values.fullnameOverride": release,
			"values.gitlabUrl":        "https://gitlab.example.com",
			"values.runners.name":     want.group,
			"values.runners.executor": want.executor,
			"values.image.registry":   "registry.example.com",
			"values.image.image":      "ci/gitlab-runner-docker-machine",
			"values.image.tag":        "v19.4.0",
		} {
			if got := str(t, r, path); got != v {
				t.Errorf("%s: %s = %q, want %q", name, path, got, v)
			}
		}
		if !strings.Contains(r.Parent, "runnerfleet:sharedfleet:SharedFleet::shared-"+want.fleet) {
			t.Errorf("%s is not parented to its fleet's component: %q", name, r.Parent)
		}
		if !strings.Contains(r.Provider, "pulumi:providers:kubernetes::gke") {
			t.Errorf("%s is not on the cluster's provider: %q", name, r.Provider)
		}
		labels := object(t, r, "values.podLabels")
		if labels["runnerfleet.dev/manager"].StringValue() != want.group || labels[shared.LabelRelease].StringValue() != name {
			t.Errorf("%s: pod labels %v", name, labels)
		}
	}
	if shared.ChartVersion == "" || strings.HasPrefix(shared.ChartVersion, "v") {
		t.Errorf("chart version %q is not pinned as the chart repository spells it", shared.ChartVersion)
	}
}

// releaseOf is the one release of manager name (its pods' LabelRelease).
func releaseOf(t *testing.T, m *infratest.Mocks, name string) infratest.Resource {
	t.Helper()
	var found []infratest.Resource
	var all []string
	for _, r := range m.ByToken(tokRelease) {
		all = append(all, r.Name)
		if v := object(t, r, "values.podLabels")[resource.PropertyKey(shared.LabelRelease)]; v.IsString() && v.StringValue() == name {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d releases of manager %s, want one; registered: %v", len(found), name, all)
	}
	return found[0]
}

// configOf returns the config.toml a manager runs, with its token, from the
// config Secret its release mounts, and checks that it is runners.config
// with only the token put in.
func configOf(t *testing.T, m *infratest.Mocks, r infratest.Resource) string {
	t.Helper()
	c := str(t, r, "values.runners.config")
	script := str(t, r, "values.preEntrypointScript")
	// The one edit allowed: the pod's name for the incarnation placeholder
	// (a constant expression; the token is in no command line).
	copyCmd := `sed "s|` + vmfleet.IncarnationPlaceholder + `|${incarnation}|g" /secrets/` + shared.ConfigSecretFile + " > "
	if !strings.Contains(script, copyCmd) || strings.Count(script, "sed") != 1 || strings.Contains(script, "TOKEN") {
		t.Errorf("%s: the start script does not copy the config Secret's config.toml as it is:\n%s", r.Name, script)
	}
	s := m.Get(t, tokSecret, r.Name+"-config")
	if name := str(t, s, "metadata.name"); name != shared.ConfigSecretName(str(t, r, "values.fullnameOverride")) {
		t.Errorf("%s: config Secret %s", r.Name, name)
	}
	// The Secret's constructor makes all of stringData secret, as the SDK's does.
	if d := s.Inputs["stringData"]; !d.ContainsSecrets() || !s.Input("stringData."+shared.ConfigSecretKey).IsString() {
		t.Errorf("%s: the config Secret's config.toml is not a Pulumi secret", r.Name)
	}
	if !slices.ContainsFunc(r.DependsOn, func(u string) bool { return strings.HasSuffix(u, "::"+s.Name) }) {
		t.Errorf("%s: the release does not wait for its config Secret", r.Name)
	}
	mounted := r.Inputs["values"].ObjectValue()["secrets"].ArrayValue()
	if len(mounted) != 1 || mounted[0].ObjectValue()["name"].StringValue() != str(t, s, "metadata.name") {
		t.Errorf("%s: the chart mounts %v, not the config Secret", r.Name, mounted)
	}
	full := str(t, s, "stringData."+shared.ConfigSecretKey)
	var withToken, template runnerconfig.Config
	if _, err := toml.Decode(full, &withToken); err != nil {
		t.Fatalf("%s: %v", r.Name, err)
	}
	if _, err := toml.Decode(c, &template); err != nil {
		t.Fatalf("%s: %v", r.Name, err)
	}
	if withToken.Runners[0].Token == runnerconfig.TokenPlaceholder || withToken.Runners[0].Token == "" {
		t.Errorf("%s: the config Secret has no token", r.Name)
	}
	withToken.Runners[0].Token = runnerconfig.TokenPlaceholder
	if !reflect.DeepEqual(withToken, template) {
		t.Errorf("%s: the config Secret differs from runners.config by more than the token:\n%s\n%s", r.Name, full, c)
	}
	return full
}

func TestEveryManagersConfigIsAcceptedByGitLabRunnersOwnStructsAndParsers(t *testing.T) {
	m := deployedStack(t)
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	values, err := schema.Values()
	if err != nil {
		t.Fatal(err)
	}
	executors := map[string]bool{}
	for _, r := range m.ByToken(tokRelease) {
		c := configOf(t, m, r)
		if err := schema.Check([]byte(c)); err != nil {
			t.Errorf("%s: %v\n%s", r.Name, err, c)
		}
		if err := values.Check([]byte(c)); err != nil {
			t.Errorf("%s: %v\n%s", r.Name, err, c)
		}
		var parsed runnerconfig.Config
		if _, err := toml.Decode(c, &parsed); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		executors[parsed.Runners[0].Executor] = true
		if parsed.Runners[0].Token == runnerconfig.TokenPlaceholder || parsed.LogFormat != "json" || parsed.ListenAddress != ":9252" {
			t.Errorf("%s: token %q, log format %q, listen address %q", r.Name, parsed.Runners[0].Token, parsed.LogFormat, parsed.ListenAddress)
		}
		if got := int(num(t, r, "values.concurrent")); got != parsed.Concurrent || got != 100 {
			t.Errorf("%s: concurrent %d in values, %d in config.toml, want 100", r.Name, got, parsed.Concurrent)
		}
	}
	if !executors["docker+machine"] || !executors["docker-autoscaler"] {
		t.Errorf("executors checked: %v, want both", executors)
	}
}

func TestDockerMachineVMsAreInternalSpotAndNameTheirManager(t *testing.T) {
	m := deployedStack(t)
	c := configOf(t, m, releaseOf(t, m, "production-linux-1"))
	for _, want := range []string{
		`"google-use-internal-ip-only=true"`, `"google-preemptible=true"`, `"google-project=ci-platform-example"`,
		`"google-zone=europe-west1-b"`, `"google-machine-type=n2d-standard-4"`, `"google-tags=runnerfleet-production-dm,ci-runner"`,
		// Each manager's VMs carry its own name and the incarnation the
		// start script fills in.
		`"google-label=runnerfleet-manager:production-linux-1"`, `"google-label=runnerfleet-fleet:production"`,
		`"google-label=runnerfleet-manager-group:linux"`, `"google-label=runnerfleet-incarnation:` + vmfleet.IncarnationPlaceholder + `"`,
		`MachineName = "production-linux-1-%s"`,
		`IdleCount = 10`, `IdleTime = 1800`, `MaxBuilds = 1`, `Periods = ["* * 0-7,19-23 * * mon-fri *", "* * * * * sat,sun *"]`,
		`Timezone = "Europe/Berlin"`, `Type = "gcs"`, `BucketName = "` + cacheBucket + `"`,
		`advertise_address = "production-linux-1.terminals.ci.example.com:443"`, `listen_address = "0.0.0.0:8093"`,
	} {
		if !strings.Contains(c, want) {
			t.Errorf("config.toml lacks %s:\n%s", want, c)
		}
	}
	staging := configOf(t, m, releaseOf(t, m, "staging-linux-0"))
	if strings.Contains(staging, "session_server") || !strings.Contains(staging, `BucketName = "ci-staging-cache"`) {
		t.Errorf("staging has no web terminal and its own bucket:\n%s", staging)
	}
	script := str(t, releaseOf(t, m, "production-fleeting-0"), "values.preEntrypointScript")
	if !strings.Contains(script, "gitlab-runner fleeting --config") {
		t.Errorf("docker-autoscaler managers do not install their plugin:\n%s", script)
	}
}

func TestManagersDrainGracefullyAndNeverDropBelowTheFloor(t *testing.T) {
	m := deployedStack(t)
	for name, want := range managers {
		r := releaseOf(t, m, name)
		grace := num(t, r, "values.terminationGracePeriodSeconds")
		timeout := 3 * 3600
		if want.fleet == "staging" {
			timeout = 4 * 3600
		}
		if grace < 10800 || int(grace) != timeout+shared.DrainMarginSeconds {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want the job timeout %ds plus the margin", name, grace, timeout)
		}
		// docker+machine managers keep their state on a volume one manager
		// at a time may own: the old one drains, then the new one starts.
		if strings.Contains(name, "fleeting") {
			if s := str(t, r, "values.strategy.type"); s != "RollingUpdate" ||
				num(t, r, "values.strategy.rollingUpdate.maxUnavailable") != 0 || num(t, r, "values.strategy.rollingUpdate.maxSurge") != 1 {
				t.Errorf("%s: strategy %v", name, r.Input("values.strategy"))
			}
		} else if s := str(t, r, "values.strategy.type"); s != "Recreate" {
			t.Errorf("%s: strategy %v, want Recreate for a manager with a state volume", name, r.Input("values.strategy"))
		}
		// A manager below the floor runs one pod; one above it sets no
		// replicas, which are KEDA's (its ScaledObject).
		if want.index < want.min {
			if got := num(t, r, "values.replicas"); got != 1 {
				t.Errorf("%s: replicas %v, want 1 (minManagers %d)", name, got, want.min)
			}
		} else if v := r.Input("values.replicas"); !v.IsNull() {
			t.Errorf("%s: replicas %v, want none: KEDA scales it (minManagers %d) and a Helm upgrade would reset what KEDA set", name, v, want.min)
		}
		if v := r.Input("values.unregisterRunners"); !v.IsBool() || v.BoolValue() {
			t.Errorf("%s: the chart's unregister hook is on: %v", name, v)
		}
		if v := r.Input("values.metrics.enabled"); !v.IsBool() || !v.BoolValue() {
			t.Errorf("%s: metrics off", name)
		}
		// The cluster autoscaler would give a draining manager 10 minutes,
		// not its grace: its node is kept from scale-down.
		if v := object(t, r, "values.podAnnotations")[resource.PropertyKey(resources.AnnotationSafeToEvict)]; !v.IsString() || v.StringValue() != "false" {
			t.Errorf("%s: pod annotation %s %v, want \"false\"", name, resources.AnnotationSafeToEvict, v)
		}
		// The chart's deploymentLifecycle carries the drain: SIGQUIT, then
		// wait for gitlab-runner to exit.
		cmd := r.Input("values.deploymentLifecycle.preStop.exec.command")
		if !cmd.IsArray() || len(cmd.ArrayValue()) != 3 || !strings.Contains(cmd.ArrayValue()[2].StringValue(), "kill -QUIT 1") {
			t.Errorf("%s: preStop %v", name, cmd)
		}
	}
	if n := len(m.ByToken(tokPatch)); n != 0 {
		t.Errorf("%d post-render patches; the chart's deploymentLifecycle does the job", n)
	}
}

// secretFree reports where v holds needle outside a secret.
func secretFree(v resource.PropertyValue, needle, path string, found *[]string) {
	switch {
	case v.IsSecret():
		return
	case v.IsString():
		if strings.Contains(v.StringValue(), needle) {
			*found = append(*found, path)
		}
	case v.IsArray():
		for i, e := range v.ArrayValue() {
			secretFree(e, needle, fmt.Sprintf("%s[%d]", path, i), found)
		}
	case v.IsObject():
		for k, e := range v.ObjectValue() {
			secretFree(e, needle, path+"."+string(k), found)
		}
	case v.IsOutput():
		secretFree(v.OutputValue().Element, needle, path, found)
	}
}

func TestNoTokenIsInClearInAnyResource(t *testing.T) {
	m := deployedStack(t)
	for _, tok := range tokens {
		var found []string
		for _, r := range m.Resources() {
			secretFree(resource.NewObjectProperty(r.Inputs), tok, r.Token+" "+r.Name, &found)
		}
		if len(found) > 0 {
			t.Errorf("a runner token is in clear in %v", found)
		}
	}
	for name, want := range managers {
		r := releaseOf(t, m, name)
		secret := str(t, r, "values.runners.secret")
		s := m.Get(t, tokSecret, "shared-"+want.fleet+"-"+want.group+"-token")
		if str(t, s, "metadata.name") != secret || str(t, s, "metadata.namespace") != want.fleet {
			t.Errorf("%s: runners.secret %q, the token Secret is %s", name, secret, str(t, s, "metadata.name"))
		}
		data := s.Inputs["stringData"]
		if !data.ContainsSecrets() || !s.Input("stringData."+shared.SecretKeyRunnerToken).IsString() {
			t.Errorf("%s: the Secret's %s is not a Pulumi secret", name, shared.SecretKeyRunnerToken)
		}
		if !slices.ContainsFunc(r.DependsOn, func(u string) bool { return strings.HasSuffix(u, "::"+s.Name) }) {
			t.Errorf("%s: the release does not wait for its token Secret", name)
		}
	}
	if got := str(t, m.Get(t, tokSecret, "shared-production-production-fleeting-token"), "stringData."+shared.SecretKeyRunnerToken); got != tokens["runnerfleet:sharedProductionFleeting"] {
		t.Errorf("the fleeting group's Secret holds another token")
	}
}

func TestEveryGroupHasADisruptionBudgetAndManagersAboveTheFloorScaleOnJobs(t *testing.T) {
	m := deployedStack(t)
	for group, min := range map[string]float64{"production-linux": 2, "production-fleeting": 1, "staging-linux": 1} {
		fleet, _, _ := strings.Cut(group, "-")
		pdb := m.Get(t, tokPDB, "shared-"+fleet+"-"+group+"-pdb")
		// Label keys have dots: read the map.
		sel := object(t, pdb, "spec.selector.matchLabels")
		if num(t, pdb, "spec.minAvailable") != min || sel["runnerfleet.dev/manager"].StringValue() != group {
			t.Errorf("%s: PDB minAvailable %v selecting %v", group, pdb.Input("spec.minAvailable"), sel)
		}
		svc := m.Get(t, tokService, "shared-"+fleet+"-"+group+"-metrics")
		if str(t, svc, "spec.clusterIP") != "None" || str(t, svc, "metadata.name") != group {
			t.Errorf("%s: metrics Service %v", group, svc.Inputs)
		}
	}
	scalers := m.ByToken(tokScaledObject)
	want := 0
	for name, w := range managers {
		if w.index < w.min {
			continue
		}
		want++
		so := m.Get(t, tokScaledObject, "shared-"+w.fleet+"-"+name+"-scaler")
		md := so.Input("spec.triggers").ArrayValue()[0].ObjectValue()["metadata"].ObjectValue()
		threshold, _ := strconv.Atoi(md["threshold"].StringValue())
		if str(t, so, "spec.scaleTargetRef.name") != str(t, releaseOf(t, m, name), "values.fullnameOverride") || num(t, so, "spec.minReplicaCount") != 0 || num(t, so, "spec.maxReplicaCount") != 1 ||
			md["activationThreshold"].StringValue() != strconv.Itoa(w.index*threshold) || threshold == 0 {
			t.Errorf("%s: ScaledObject %v", name, so.Inputs)
		}
		if q := md["query"].StringValue(); !strings.Contains(q, `manager="`+w.group+`"`) || !strings.Contains(md["serverAddress"].StringValue(), "prometheus."+w.fleet+".svc") {
			t.Errorf("%s: trigger %v", name, md)
		}
	}
	if len(scalers) != want {
		t.Errorf("%d ScaledObjects, want one per manager above the floor (%d)", len(scalers), want)
	}
	if th := m.Get(t, tokScaledObject, "shared-production-production-fleeting-1-scaler").Input("spec.triggers").ArrayValue()[0].ObjectValue()["metadata"].ObjectValue()["threshold"]; th.StringValue() != "50" {
		t.Errorf("fleeting threshold %v, want 100 × 0.5", th)
	}
}

// Each manager's session server is reached through its own passthrough
// load balancer that admits only the GitLab ranges and keeps the client's
// address, and the NetworkPolicy admits only those ranges to the session
// port: no ingress controller, no other source.
func TestEveryManagerHasATerminalHostReachableOnlyFromGitLab(t *testing.T) {
	m := deployedStack(t)
	allowed := []string{"203.0.113.10/32", "198.51.100.0/28"}
	var hosts []string
	for _, svc := range m.ByToken(tokService) {
		if !strings.HasSuffix(svc.Name, "-session") {
			continue
		}
		manager := strings.TrimSuffix(strings.TrimPrefix(svc.Name, "shared-production-"), "-session")
		host := object(t, svc, "metadata.annotations")[shared.AnnotationExternalDNSHostname].StringValue()
		hosts = append(hosts, host)
		if host != manager+".terminals.ci.example.com" {
			t.Errorf("%s: hostname %q", svc.Name, host)
		}
		if got := str(t, svc, "spec.type"); got != "LoadBalancer" {
			t.Errorf("%s: type %s, want its own passthrough LoadBalancer", svc.Name, got)
		}
		var ranges []string
		for _, r := range svc.Input("spec.loadBalancerSourceRanges").ArrayValue() {
			ranges = append(ranges, r.StringValue())
		}
		if !slices.Equal(ranges, allowed) {
			t.Errorf("%s: loadBalancerSourceRanges %v, want the allowed CIDRs %v", svc.Name, ranges, allowed)
		}
		if got := str(t, svc, "spec.externalTrafficPolicy"); got != "Local" {
			t.Errorf("%s: externalTrafficPolicy %s: the NetworkPolicy would see the node's address, not GitLab's", svc.Name, got)
		}
		sel := object(t, svc, "spec.selector")
		port := svc.Input("spec.ports").ArrayValue()[0].ObjectValue()
		if sel[shared.LabelRelease].StringValue() != manager || port["targetPort"].NumberValue() != shared.SessionPort || port["port"].NumberValue() != shared.TerminalPort {
			t.Errorf("%s: selects %v, port %v", svc.Name, sel, port)
		}
	}
	slices.Sort(hosts)
	if len(hosts) != 6 || !slices.Contains(hosts, "production-linux-3.terminals.ci.example.com") {
		t.Errorf("hosts %v, want one per production manager", hosts)
	}
	if n := len(m.ByToken("kubernetes:networking.k8s.io/v1:Ingress")); n > 0 {
		t.Errorf("%d Ingresses: an ingress controller would pass any source to the session servers", n)
	}
	np := m.Get(t, tokNetpol, "shared-production-production-linux-netpol")
	for _, rule := range np.Input("spec.ingress").ArrayValue() {
		port := rule.ObjectValue()["ports"].ArrayValue()[0].ObjectValue()["port"].NumberValue()
		var cidrs []string
		for _, from := range rule.ObjectValue()["from"].ArrayValue() {
			b, ok := from.ObjectValue()["ipBlock"]
			if !ok {
				if port == shared.SessionPort {
					t.Errorf("the session port admits %v besides the GitLab ranges", from)
				}
				continue
			}
			cidrs = append(cidrs, b.ObjectValue()["cidr"].StringValue())
		}
		if port == shared.SessionPort && !slices.Equal(cidrs, allowed) {
			t.Errorf("the NetworkPolicy admits %v to the session port, want %v", cidrs, allowed)
		}
	}
	for _, r := range m.ByToken(tokService) {
		if strings.HasPrefix(r.Name, "shared-staging") && strings.HasSuffix(r.Name, "-session") {
			t.Errorf("staging has no web terminal, yet %s", r.Name)
		}
	}
	if got := result.Fleets[0].TerminalHosts; !slices.Contains(got, "production-fleeting-1.terminals.ci.example.com") || len(got) != 6 {
		t.Errorf("terminal hosts output %v", got)
	}
}

func TestEveryPrometheusConfigPassesPromtool(t *testing.T) {
	m := deployedStack(t)
	for name, ns := range map[string]string{"shared-production": "production", "shared-staging": "staging", "shared-monitoring": "monitoring"} {
		cm := m.Get(t, tokConfigMap, name+"-prometheus-config")
		if str(t, cm, "metadata.namespace") != ns || str(t, cm, "metadata.name") != "prometheus" {
			t.Errorf("%s: ConfigMap %s/%s", name, str(t, cm, "metadata.namespace"), str(t, cm, "metadata.name"))
		}
		dir := t.TempDir()
		files := prometheus.Files{}
		for k, v := range object(t, cm, "data") {
			files[string(k)] = []byte(v.StringValue())
		}
		if err := files.Write(dir); err != nil {
			t.Fatal(err)
		}
		out, err := prometheus.Promtool(dir, "check", "config", shared.PrometheusConfigFile)
		if err != nil || !strings.Contains(out, "SUCCESS") {
			t.Errorf("%s: %v\n%s", name, err, out)
		}
		// 8 recording rules, the VMs' cost rules (a count per group, the
		// default price table, the cost) and 8 alerts.
		recording := 0
		if m := regexp.MustCompile(`Checking recording.yml\s+SUCCESS: (\d+) rules found`).FindStringSubmatch(out); m != nil {
			recording, _ = strconv.Atoi(m[1])
		}
		if ns != "monitoring" && (recording <= 8+1+2*len(cost.DefaultPrices()) || !regexp.MustCompile(`Checking alerts.yml\s+SUCCESS: 8 rules found`).MatchString(out)) {
			t.Errorf("%s: promtool did not check the recording and alert rules:\n%s", name, out)
		}
		// The VMs are priced by the stack's table over the defaults.
		if rec := string(files[shared.RecordingRulesFile]); ns != "monitoring" && (!strings.Contains(rec, "vector(0.0561)") || !strings.Contains(rec, "currency: EUR") || !strings.Contains(rec, "instance_type: e2-standard-2")) {
			t.Errorf("%s: the VMs are not priced by the stack's cost table over the defaults:\n%s", name, rec)
		}
		dep := m.Get(t, tokDeployment, name+"-prometheus")
		args := dep.Input("spec.template.spec.containers").ArrayValue()[0].ObjectValue()["args"].ArrayValue()
		if args[0].StringValue() != "--config.file=/etc/prometheus/prometheus.yml" {
			t.Errorf("%s: args %v", name, args)
		}
		svc := m.Get(t, tokService, name+"-prometheus-svc")
		if str(t, svc, "metadata.name") != "prometheus" {
			t.Errorf("%s: KEDA and the central Prometheus reach prometheus.%s.svc, the Service is %s", name, ns, str(t, svc, "metadata.name"))
		}
	}
	central := object(t, m.Get(t, tokConfigMap, "shared-monitoring-prometheus-config"), "data")[shared.PrometheusConfigFile].StringValue()
	for _, target := range []string{"prometheus.production.svc:9090", "prometheus.staging.svc:9090"} {
		if !strings.Contains(central, target) {
			t.Errorf("the central Prometheus does not federate %s:\n%s", target, central)
		}
	}
	fleet := object(t, m.Get(t, tokConfigMap, "shared-production-prometheus-config"), "data")[shared.PrometheusConfigFile].StringValue()
	for _, want := range []string{"role: pod", "label: runnerfleet.dev/manager", "__meta_kubernetes_pod_label_runnerfleet_dev_manager",
		`labels.runnerfleet-fleet = "production"`, "zone: europe-west1-c", "recording.yml"} {
		if !strings.Contains(fleet, want) {
			t.Errorf("production's Prometheus lacks %s:\n%s", want, fleet)
		}
	}
	alerts := object(t, m.Get(t, tokConfigMap, "shared-production-prometheus-config"), "data")[shared.AlertRulesFile].StringValue()
	if !strings.Contains(alerts, "fleet:autoscaled_vms:count > 720") {
		t.Errorf("the quota alert is not at 90%% of vmQuota 800:\n%s", alerts)
	}
	// Each fleet's dashboard is declared in its namespace for Grafana's
	// sidecar, with the fleet's quota.
	dash := m.Get(t, tokConfigMap, "shared-production-prometheus-dashboard")
	if object(t, dash, "metadata.labels")["grafana_dashboard"].StringValue() != "1" || str(t, dash, "metadata.namespace") != "production" ||
		!strings.Contains(object(t, dash, "data")["runnerfleet-shared-production.json"].StringValue(), "vector(800)") {
		t.Errorf("production's dashboard: %v", dash.Inputs)
	}
	if sa := m.Get(t, "kubernetes:core/v1:ServiceAccount", "shared-production-prometheus-sa"); object(t, sa, "metadata.annotations")["iam.gke.io/gcp-service-account"].StringValue() != "ci-shared-prometheus@ci-platform-example.iam.gserviceaccount.com" {
		t.Errorf("GCE discovery has no Workload Identity: %v", sa.Inputs)
	}
}

func TestNamespacesAndOutputs(t *testing.T) {
	m := deployedStack(t)
	var names []string
	for _, r := range m.ByToken(tokNamespace) {
		names = append(names, str(t, r, "metadata.name"))
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"monitoring", "production", "staging"}) {
		t.Errorf("namespaces %v", names)
	}
	for _, r := range m.Resources() {
		// The gcp resources, the fleets' cloud side, are checked by
		// vmnetwork_test.go and identity_test.go on the real platform.
		if !r.Custom || strings.HasPrefix(r.Token, "pulumi:providers:") || strings.HasPrefix(r.Token, "gcp:") {
			continue
		}
		if !strings.Contains(r.Provider, "pulumi:providers:kubernetes::gke") || !strings.Contains(r.Parent, "runnerfleet:sharedfleet:") {
			t.Errorf("%s %s: provider %q, parent %q", r.Token, r.Name, r.Provider, r.Parent)
		}
	}
	if len(result.Fleets) != 2 || result.Monitoring == nil || result.Monitoring.Prometheus != "http://prometheus.monitoring.svc:9090" {
		t.Errorf("result %+v", result)
	}
	if got := result.Fleets[0].Managers["linux"]; !slices.Equal(got, []string{"production-linux-0", "production-linux-1", "production-linux-2", "production-linux-3"}) {
		t.Errorf("production linux managers %v", got)
	}
}

func TestBadInputIsRefusedNamingTheKeyAndNothingIsDeclared(t *testing.T) {
	group := `"name": "linux", "tokenConfigKey": "sharedProductionLinux",
          "zone": "europe-west1-b", "machineType": "n2d-standard-4",`
	cases := []struct {
		name, old, new string
		secrets        map[string]string
		want           []string
		// declared are the resources allowed: the test's own providers and
		// fake platform (3), when the stack config itself was accepted.
		declared int
	}{
		{"machine type format", group, strings.Replace(group, "n2d-standard-4", "n2d_standard_4", 1), tokens,
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].machineType", "is not a GCE machine type"}, 0},
		{"zone outside the region", group, strings.Replace(group, "europe-west1-b", "us-central1-a", 1), tokens,
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].zone", "is not a zone of region europe-west1"}, 0},
		{"idle VMs above the limit", `"idleCount": 10, "idleTime": "30m"`, `"idleCount": 101, "idleTime": "30m"`, tokens,
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].idleCount", "between 0 and maxVMs (100)"}, 0},
		{"bad cron period", `"* * * * * sat,sun *"`, `"* * * * * saturday-ish *"`, tokens,
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].periods[0].periods[1]", "is not a cron expression"}, 0},
		{"node_exporter image without a tag", `"monitoring": {"vmQuota": 800,`, `"images": {"nodeExporter": "quay.io/prometheus/node-exporter"}, "monitoring": {"vmQuota": 800,`, tokens,
			[]string{`runnerfleet:fleet.sharedFleets[0].images.nodeExporter: Invalid value: "quay.io/prometheus/node-exporter": is not an image reference`, "registry/repository:tag"}, 0},
		{"gc image that is no reference", `"monitoring": {"vmQuota": 800,`, `"images": {"gc": "Registry.Example.com/Fleet:v1 --rm"}, "monitoring": {"vmQuota": 800,`, tokens,
			[]string{"runnerfleet:fleet.sharedFleets[0].images.gc", "is not an image reference"}, 0},
		{"node_exporter on the runner's metrics port", `"jobTimeout": "4h",`, `"jobTimeout": "4h", "monitoring": {"nodeExporterPort": 9252},`, tokens,
			[]string{"runnerfleet:fleet.sharedFleets[1].monitoring.nodeExporterPort: Invalid value: 9252: is gitlab-runner's metrics", "choose another port"}, 0},
		{"node_exporter on the session server's port", `"jobTimeout": "4h",`, `"jobTimeout": "4h", "monitoring": {"nodeExporterPort": 8093},`, tokens,
			[]string{"runnerfleet:fleet.sharedFleets[1].monitoring.nodeExporterPort: Invalid value: 8093: is the managers' session server"}, 0},
		{"missing token", "", "", map[string]string{"runnerfleet:sharedProductionLinux": tokens["runnerfleet:sharedProductionLinux"]},
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[1].tokenConfigKey: config key runnerfleet:sharedProductionFleeting is not set",
				"runnerfleet:fleet.sharedFleets[1].groups[0].tokenConfigKey: config key runnerfleet:sharedStagingLinux is not set"}, 3},
		{"token that is no token", "", "", map[string]string{
			"runnerfleet:sharedProductionLinux": "glrt-x|y", "runnerfleet:sharedProductionFleeting": tokens["runnerfleet:sharedProductionFleeting"],
			"runnerfleet:sharedStagingLinux": tokens["runnerfleet:sharedStagingLinux"]},
			[]string{"runnerfleet:fleet.sharedFleets[0].groups[0].tokenConfigKey: config key runnerfleet:sharedProductionLinux is not a runner token"}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := strings.Replace(stackJSON, c.old, c.new, 1)
			if c.old != "" && raw == stackJSON {
				t.Fatalf("the case changes nothing")
			}
			m, _, err := deploy(t, raw, c.secrets)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "glrt-x|y") {
				t.Errorf("the error shows the token: %v", err)
			}
			if rs := m.Resources(); len(rs) != c.declared {
				t.Errorf("%d resources declared, want %d: %v", len(rs), c.declared, rs)
			}
		})
	}
}

// The start script, run by bash as the chart runs it, puts in place the
// config.toml of the config Secret byte for byte, readable by its owner
// only, whatever the token holds (it never passes through the shell), and
// fails when the Secret is not mounted.
// Each fleet runs fleet gc --apply every 15 minutes as its own
// ServiceAccount, which may only list the managers' pods and Deployments
// and record Events in the fleet's namespace; its grace covers the
// longest IdleTime of the fleet's managers.
func TestEachFleetRunsGCOnAScheduleWithALeastPrivilegeIdentity(t *testing.T) {
	m := deployedStack(t)
	for _, fleet := range []string{"production", "staging"} {
		name := shared.GCName(fleet)
		cj := m.Get(t, "kubernetes:batch/v1:CronJob", "shared-"+fleet+"-gc")
		if str(t, cj, "spec.schedule") != shared.GCSchedule() || str(t, cj, "spec.concurrencyPolicy") != "Forbid" {
			t.Errorf("%s: schedule %s", fleet, str(t, cj, "spec.schedule"))
		}
		pod := object(t, cj, "spec.jobTemplate.spec.template.spec")
		if pod["serviceAccountName"].StringValue() != name {
			t.Errorf("%s: runs as %v", fleet, pod["serviceAccountName"])
		}
		// The release's fleet image, whose entrypoint is the fleet binary:
		// the controller's image has no fleet in it.
		c := pod["containers"].ArrayValue()[0].ObjectValue()
		if c["image"].StringValue() != version.Image("fleet") || c.HasValue("command") {
			t.Errorf("%s: gc runs image %v command %v, want %s with its own entrypoint", fleet, c["image"], c["command"], version.Image("fleet"))
		}
		args := gcArgs(pod)
		// Its own fleet's VMs only: production and staging share a zone.
		for _, want := range []string{" --apply ", " --source kubernetes ", " --namespace " + fleet + " ", " --event-cronjob " + name + " ", " --provider gce ",
			" --autoscaled runnerfleet-autoscaled=true ", " --autoscaled runnerfleet-fleet=" + fleet + " "} {
			if !strings.Contains(args, want) {
				t.Errorf("%s: args %q lack %q", fleet, args, want)
			}
		}
		// Its cloud identity is its own account, never the managers'.
		sa := m.Get(t, "kubernetes:core/v1:ServiceAccount", "shared-"+fleet+"-gc-sa")
		if got := object(t, sa, "metadata.annotations")["iam.gke.io/gcp-service-account"].StringValue(); got != shared.GCAccountEmail("ci-platform-example", "ci-shared", fleet) {
			t.Errorf("%s: gc acts as %q, want its own account %s", fleet, got, shared.GCAccountEmail("ci-platform-example", "ci-shared", fleet))
		}
		role := m.Get(t, "kubernetes:rbac.authorization.k8s.io/v1:Role", "shared-"+fleet+"-gc-role")
		for _, r := range role.Inputs["rules"].ArrayValue() {
			for _, v := range r.ObjectValue()["verbs"].ArrayValue() {
				if v.StringValue() != "list" && v.StringValue() != "create" {
					t.Errorf("%s: the gc Role grants %s", fleet, v.StringValue())
				}
			}
		}
	}
	prod := gcArgs(object(t, m.Get(t, "kubernetes:batch/v1:CronJob", "shared-production-gc"), "spec.jobTemplate.spec.template.spec"))
	if !strings.Contains(prod, " --grace 1h0m0s ") {
		t.Errorf("production's grace: args %s, want 1h0m0s (its longest IdleTime, 30m, plus 30m)", prod)
	}
}

// A fleet's images and node_exporter port come from the stack config:
// staging's gc CronJob runs its gc image, its docker+machine VMs start its
// job reporter and node_exporter images with the exporter on its port, and
// its Prometheus scrapes the VMs there; production, which names none,
// runs the release's images and node_exporter's default port.
func TestAFleetsImagesAndExporterPortComeFromTheStackConfig(t *testing.T) {
	const (
		gc       = "registry.example.com/mirror/fleet@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		reporter = "registry.example.com/mirror/fleet-agent:v0.1.0"
		exporter = "registry.example.com/mirror/node-exporter:v1.12.1"
	)
	raw := strings.Replace(stackJSON, `"jobTimeout": "4h",`, `"jobTimeout": "4h",
      "images": {"gc": "`+gc+`", "jobReporter": "`+reporter+`", "nodeExporter": "`+exporter+`"},
      "monitoring": {"nodeExporterPort": 9200},`, 1)
	if raw == stackJSON {
		t.Fatal("the case changes nothing")
	}
	m, _, err := deploy(t, raw, tokens)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		fleet, gc, reporter, exporter string
		port                          int
	}{
		{"staging", gc, reporter, exporter, 9200},
		{"production", version.Image("fleet"), version.Image("fleet-agent"), fleetspec.DefaultNodeExporterImage, fleetspec.DefaultNodeExporterPort},
	} {
		pod := object(t, m.Get(t, "kubernetes:batch/v1:CronJob", "shared-"+c.fleet+"-gc"), "spec.jobTemplate.spec.template.spec")
		if got := pod["containers"].ArrayValue()[0].ObjectValue()["image"].StringValue(); got != c.gc {
			t.Errorf("%s: gc runs %s, want %s", c.fleet, got, c.gc)
		}
		cfg := configOf(t, m, releaseOf(t, m, c.fleet+"-linux-0"))
		for _, want := range []string{
			" " + c.reporter + " --provider gce --report-jobs",
			" " + c.exporter + " --path.rootfs /host --web.listen-address :" + strconv.Itoa(c.port),
		} {
			if !strings.Contains(cfg, want) {
				t.Errorf("%s: the VMs' startup script lacks %q:\n%s", c.fleet, want, cfg)
			}
		}
		prom := object(t, m.Get(t, tokConfigMap, "shared-"+c.fleet+"-prometheus-config"), "data")[shared.PrometheusConfigFile].StringValue()
		if want := "port: " + strconv.Itoa(c.port) + "\n"; !strings.Contains(prom, want) {
			t.Errorf("%s: Prometheus does not scrape the VMs on %d:\n%s", c.fleet, c.port, prom)
		}
	}
}

func gcArgs(pod resource.PropertyMap) string {
	var args []string
	for _, a := range pod["containers"].ArrayValue()[0].ObjectValue()["args"].ArrayValue() {
		args = append(args, a.StringValue())
	}
	return " " + strings.Join(args, " ") + " "
}

// configHashes are the releases' pod template config hashes.
func configHashes(t *testing.T, m *infratest.Mocks) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name := range managers {
		r := releaseOf(t, m, name)
		v := object(t, r, "values.podAnnotations")[resource.PropertyKey(resources.AnnotationConfigHash)]
		for v.IsSecret() {
			v = v.SecretValue().Element
		}
		if !v.IsString() || len(v.StringValue()) != 16 {
			t.Fatalf("%s: config hash %v", name, v)
		}
		out[name] = v.StringValue()
	}
	return out
}

// A rotated token changes the managers' pod template, so the Deployment
// rolls and the old managers drain onto the new token; the same token
// changes nothing (the negative control).
func TestARotatedTokenRollsTheManagers(t *testing.T) {
	before := configHashes(t, deployedStack(t))
	again, _, err := deploy(t, stackJSON, tokens)
	if err != nil {
		t.Fatal(err)
	}
	rotated := maps.Clone(tokens)
	rotated["runnerfleet:sharedProductionLinux"] = "glrt-prodLinuxTokenRotated-77aa00"
	m, _, err := deploy(t, stackJSON, rotated)
	if err != nil {
		t.Fatal(err)
	}
	same, after := configHashes(t, again), configHashes(t, m)
	for name, w := range managers {
		if same[name] != before[name] {
			t.Errorf("%s: the same token changed the pod template (%s → %s)", name, before[name], same[name])
		}
		rolled := after[name] != before[name]
		if want := w.group == "production-linux"; rolled != want {
			t.Errorf("%s: rolled %v on a new production-linux token, want %v", name, rolled, want)
		}
	}
}

// A docker+machine manager keeps its machine directory on a volume of its
// own, and its VMs carry that volume's claim as their incarnation (so fleet
// gc knows a restarted manager still owns them); docker-autoscaler managers,
// whose plugin finds its VMs in its instance group, have none.
func TestDockerMachineStateLivesOnAVolumePerManager(t *testing.T) {
	m := deployedStack(t)
	// By the name the provider gives them (declared without one).
	claims := map[string]infratest.Resource{}
	for _, c := range m.ByToken(tokClaim) {
		if c.Input("metadata.name").IsString() {
			claims[str(t, c, "metadata.name")] = c
			continue
		}
		claims[c.Name+"-"+infratest.MockAutonameSuffix] = c
	}
	for name, want := range managers {
		r := releaseOf(t, m, name)
		claim := shared.StateClaimName(str(t, r, "name")) + "-" + infratest.MockAutonameSuffix
		c, has := claims[claim]
		if want.executor == "docker-autoscaler" {
			if has || r.Input("values.volumes").IsArray() {
				t.Errorf("%s: a docker-autoscaler manager has a state volume", name)
			}
			continue
		}
		if !has {
			t.Errorf("%s: no state claim %s", name, claim)
			continue
		}
		if modes := c.Input("spec.accessModes").ArrayValue(); len(modes) != 1 || modes[0].StringValue() != "ReadWriteOnce" || str(t, c, "metadata.namespace") != want.fleet {
			t.Errorf("%s: claim %v", name, c.Inputs)
		}
		vols := r.Input("values.volumes").ArrayValue()
		mounts := r.Input("values.volumeMounts").ArrayValue()
		if len(vols) != 1 || vols[0].ObjectValue()["persistentVolumeClaim"].ObjectValue()["claimName"].StringValue() != claim ||
			len(mounts) != 1 || mounts[0].ObjectValue()["mountPath"].StringValue() != shared.MachineStatePath ||
			mounts[0].ObjectValue()["name"].StringValue() != vols[0].ObjectValue()["name"].StringValue() {
			t.Errorf("%s: volumes %v mounts %v", name, vols, mounts)
		}
		if got := object(t, r, "values.podLabels")[resource.PropertyKey(vmfleet.PodLabelIncarnation)]; !got.IsString() || got.StringValue() != claim {
			t.Errorf("%s: incarnation label %v, want %s", name, got, claim)
		}
		env := r.Input("values.envVars").ArrayValue()
		if len(env) != 1 || env[0].ObjectValue()["name"].StringValue() != shared.EnvIncarnation || env[0].ObjectValue()["value"].StringValue() != claim {
			t.Errorf("%s: env %v", name, env)
		}
		if !slices.ContainsFunc(r.DependsOn, func(u string) bool { return strings.HasSuffix(u, "::"+c.Name) }) {
			t.Errorf("%s: the release does not wait for its claim", name)
		}
		// The config drains idle VMs when the manager shuts down.
		full := configOf(t, m, r)
		if !strings.Contains(full, "[machine.shutdown_drain]") || !strings.Contains(full, "enabled = true") {
			t.Errorf("%s: no shutdown drain:\n%s", name, full)
		}
	}
}
