package sharedfleet

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// cloudClients are the packages of a cloud client: the builders read the
// names the cloud code publishes from leaves (providers/gcp/gcenames)
// instead.
var cloudClients = []string{
	"cloud.google.com/go/",
	"google.golang.org/api/",
	"github.com/aws/aws-sdk-go-v2/",
	"github.com/runnerfleet/runnerfleet/providers/gcp",
	"github.com/runnerfleet/runnerfleet/providers/aws",
}

// The pure builders link no cloud client, not even through another
// package: every dependency go list reports is checked.
func TestTheBuildersLinkNoCloudClient(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, c := range cloudClients {
			if strings.HasPrefix(dep+"/", c) && dep != "github.com/runnerfleet/runnerfleet/providers/gcp/gcenames" {
				t.Errorf("provisioning/sharedfleet links %s, a cloud client", dep)
			}
		}
	}
}
