package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
