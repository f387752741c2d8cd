package sharedfleet_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/gcp"
	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	infrasharedfleet "github.com/runnerfleet/runnerfleet/infra/sharedfleet"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
)

// The shared fleets' cloud side is tested on the gke platform it is
// composed from: run declares the platform of a stack config and its
// shared fleets, as the program does.

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

// deployed is what one run gave.
type deployed struct {
	m     *infratest.Mocks
	fleet *stackconfig.Fleet
}

// run declares the gke platform of the stack config raw and its shared
// fleets under the mocks, every config secret the stack names given a
// made-up value.
func run(t *testing.T, raw string) *deployed {
	t.Helper()
	p := &deployed{m: infratest.NewMocks(t)}
	f, err := stackconfig.Decode([]byte(raw), stack)
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]string{"runnerfleet:fleet": raw}
	var keys []string
	for _, s := range f.ConfigSecrets() {
		k := "runnerfleet:" + s.Key
		if _, ok := cfg[k]; !ok {
			cfg[k] = "glrt-" + s.Key + "NotReal"
			if strings.HasPrefix(s.Key, "alert") {
				cfg[k] = "https://hooks.example.com/alerts/not-a-real-token"
			}
			keys = append(keys, k)
		}
	}
	err = infratest.Run(p.m, stack, cfg, keys, func(ctx *pulumi.Context) error {
		f, err := stackconfig.Decode([]byte(raw), ctx.Stack())
		if err != nil {
			return err
		}
		p.fleet = f
		pl, err := gcp.NewPlatform(ctx, f.ClusterName, gcp.ArgsFor(f))
		if err != nil {
			return err
		}
		secrets, err := kube.ReadSecrets(ctx, f)
		if err != nil {
			return err
		}
		_, err = infrasharedfleet.New(ctx, &infrasharedfleet.Args{Fleets: f.SharedFleets, Cluster: pl.Cluster, Secrets: secrets, Alerting: f.Alerting, Platform: pl})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	once   sync.Once
	result *deployed
)

// shared runs the platform of fleetJSON, without shared fleets, once.
func shared(t *testing.T) *deployed {
	t.Helper()
	once.Do(func() { result = run(t, fleetJSON) })
	if result == nil {
		t.Fatal("the run without shared fleets failed")
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

// ownType is the type of the resource of urn.
func ownType(urn string) string {
	parts := strings.Split(urn, "::")
	if len(parts) < 4 {
		return ""
	}
	chain := parts[2]
	return chain[strings.LastIndex(chain, "$")+1:]
}
func dependsOn(r infratest.Resource, tok, name string) bool {
	for _, d := range r.DependsOn {
		if ownType(d) == tok && strings.HasSuffix(d, "::"+name) {
			return true
		}
	}
	return false
}
