package pulumix

import (
	"os"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/infra/sdkschema"
)

// The versions resources are pinned to are the versions whose schemas the
// mock tests check, and the Kubernetes plugin hack/tools.sh builds.
func TestVersionsMatchTheCheckedSchemasAndTheBuiltPlugin(t *testing.T) {
	for _, m := range sdkschema.Modules {
		if m.Package == "kubernetes" {
			continue
		}
		if got := Versions[m.Package]; "v"+got != m.Version {
			t.Errorf("%s resources are pinned to %s but checked against the %s SDK %s", m.Package, got, m.Path, m.Version)
		}
	}
	b, err := os.ReadFile("../../../hack/pulumi-kubernetes/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var built string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "github.com/pulumi/pulumi-kubernetes/provider/v4" {
			built = f[1]
		}
		if len(f) >= 3 && f[0] == "require" && f[1] == "github.com/pulumi/pulumi-kubernetes/provider/v4" {
			built = f[2]
		}
	}
	if built == "" {
		t.Fatal("hack/pulumi-kubernetes/go.mod does not require github.com/pulumi/pulumi-kubernetes/provider/v4")
	}
	if "v"+Versions["kubernetes"] != built {
		t.Errorf("kubernetes resources are pinned to %s but hack/tools.sh builds the plugin at %s", Versions["kubernetes"], built)
	}
}
