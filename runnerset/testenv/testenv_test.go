package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/internal/checkout"
)

// children lists the live child processes of this test process.
func children(t *testing.T) []string {
	t.Helper()
	self := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		rest := s[strings.LastIndexByte(s, ')')+2:]
		f := strings.Fields(rest)
		if len(f) > 1 && f[1] == self && f[0] != "Z" {
			out = append(out, s[:strings.IndexByte(s, ')')+1])
		}
	}
	return out
}

func TestAFailedStartLeavesNoControlPlaneRunning(t *testing.T) {
	bad := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget", ListKind: "WidgetList", Plural: "widgets", Singular: "widget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:         "object",
					XValidations: apiextensionsv1.ValidationRules{{Rule: "this is not CEL"}},
				}},
			}},
		},
	}
	env, err := Start(WithCRDs(bad))
	if err == nil {
		_ = env.Stop()
		t.Fatal("the API server accepted a CRD with an invalid CEL rule")
	}
	if left := children(t); len(left) > 0 {
		t.Fatalf("after a failed Start these still run: %v", left)
	}
}

// TestKEDAVersionIsHackKEDAs: the CRDs the tests read are those of the KEDA
// the local stack runs (hack/keda/go.mod, which hack/tools.sh builds).
func TestKEDAVersionIsHackKEDAs(t *testing.T) {
	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "hack", "keda", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, line := range strings.Split(string(b), "\n") {
		// "<module> <version>" inside the require block, or "require <module> <version>".
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == "github.com/kedacore/keda/v2" {
			got = f[1]
		}
	}
	if got != KEDAVersion {
		t.Fatalf("hack/keda/go.mod requires github.com/kedacore/keda/v2 %q, testenv.KEDAVersion is %q: make them the same version", got, KEDAVersion)
	}
}
