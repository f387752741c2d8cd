package sharedfleet

import (
	"sort"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
)

const localStackJSON = `{
  "platform": "local",
  "clusterName": "local",
  "gitlabURL": "http://10.213.0.1:8929",
  "local": {"chartRepository": "http://127.0.0.1:8930"},
  "sharedFleets": [
    {
      "name": "local-shared",
      "managerImage": "runnerfleet.local/gitlab-runner-standin:local",
      "vmNetwork": {"cidr": "10.30.0.0/20"},
      "groups": [
        {
          "name": "linux", "tokenConfigKey": "sharedLocalLinux", "zone": "us-east1-b",
          "machineType": "n2d-standard-2", "image": "runner-vm",
          "maxVMs": 2, "idleCount": 0, "idleTime": "10m"
        }
      ]
    }
  ]
}`

// The local platform declares a shared fleet's Kubernetes half through the
// same declareGroup as gke (a generation's release, config Secret and
// state claim), with the chart from the stack's local.chartRepository, and
// nothing of the cloud side, monitoring or gc.
func TestLocalPlatformDeclaresTheFleetsKubernetesHalf(t *testing.T) {
	m := infratest.NewMocks(t)
	cfg := map[string]string{"runnerfleet:fleet": localStackJSON, "runnerfleet:sharedLocalLinux": "glrt-localTokenNotReal-1a2b3c"}
	err := infratest.Run(m, "local", cfg, []string{"runnerfleet:sharedLocalLinux"}, func(ctx *pulumi.Context) error {
		f, err := stackconfig.Decode([]byte(localStackJSON), ctx.Stack())
		if err != nil {
			return err
		}
		p, err := kube.NewProvider(ctx, "local", "local", pulumi.ToSecret(pulumi.String("apiVersion: v1\nkind: Config\n")).(pulumi.StringOutput))
		if err != nil {
			return err
		}
		secrets, err := kube.ReadSecrets(ctx, f)
		if err != nil {
			return err
		}
		_, err = New(ctx, &Args{Fleets: f.SharedFleets, Cluster: &kube.Cluster{Provider: p}, Secrets: secrets,
			Local: &Local{ChartRepository: f.Local.ChartRepository, Platform: f.FleetPlatform()}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rels := m.ByToken(tokRelease)
	if len(rels) != 1 {
		t.Fatalf("%d releases; want the one manager's", len(rels))
	}
	if repo := str(t, rels[0], "repositoryOpts.repo"); repo != "http://127.0.0.1:8930" {
		t.Errorf("the release's chart repository is %s; want local.chartRepository", repo)
	}
	if !rels[0].Input("skipAwait").BoolValue() || rels[0].Input("atomic").BoolValue() {
		t.Errorf("the release is not skipAwait and not atomic: its uninstall would wait for the drain")
	}
	gen := generationResources(t, m)
	if len(gen) != 3 {
		t.Errorf("generation resources %v; want the release, its config Secret and its state claim", gen)
	}
	var kinds []string
	for _, r := range m.Resources() {
		if strings.HasPrefix(r.Token, "kubernetes:") && r.Token != "pulumi:providers:kubernetes" {
			kinds = append(kinds, r.Token)
		}
		if strings.HasPrefix(r.Token, "gcp:") {
			t.Errorf("the local platform declared %s %s", r.Token, r.Name)
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		switch k {
		case tokNamespace, tokSecret, tokClaim, tokRelease, tokService, tokPDB, tokNetpol, "kubernetes:core/v1:ServiceAccount":
		default:
			t.Errorf("the local platform declared a %s: only the fleet's Kubernetes half is local", k)
		}
	}
}
