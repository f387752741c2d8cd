package infra_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/infra"
	"github.com/runnerfleet/runnerfleet/infra/infratest"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// TestStackObjectsAreAcceptedByTheAPIServer sends every Kubernetes object the
// program declares on each example stack to a real kube-apiserver as a
// server-side dry run, with runnerfleet's, Karpenter's, GKE's ComputeClass and
// KEDA's CRDs installed: the schemas and CEL rules of the CRDs judge the
// RunnerClass and RunnerSets (which the provider schema check cannot), and
// the API server's own validation everything else. Helm releases and patches
// of objects a chart creates are the provider's and the chart's, not objects
// of their own, and are left out.
func TestStackObjectsAreAcceptedByTheAPIServer(t *testing.T) {
	ctx := context.Background()
	keda, err := testenv.KEDACRDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	operator, err := testenv.PrometheusOperatorCRDs(ctx, "servicemonitors", "podmonitors", "prometheusrules")
	if err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start(testenv.WithCRDs(append(keda, operator...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	for _, stack := range []string{"local", "eks-dev", "gke-shared", monitoredStack} {
		t.Run(stack, func(t *testing.T) {
			m := infratest.NewMocks(t)
			base := strings.TrimSuffix(stack, "+monitoring")
			cfg, keys := stackConfig(t, base, stackSecrets[base])
			want := []string{"RunnerClass", "RunnerSet", "Namespace"}
			if stack == monitoredStack {
				cfg[fleetKey] = withMonitoring(t, cfg[fleetKey])
				want = append(want, "ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap")
			}
			if err := infratest.Run(m, base, cfg, keys, infra.ProgramWith(infra.Options{Kubeconfig: kubeconfig(t)})); err != nil {
				t.Fatal(err)
			}
			var objs []*unstructured.Unstructured
			for _, r := range m.Resources() {
				if !r.Custom || !strings.HasPrefix(r.Token, "kubernetes:") || r.Token == "kubernetes:helm.sh/v3:Release" || strings.HasSuffix(r.Token, "Patch") {
					continue
				}
				objs = append(objs, object(t, r))
			}
			if len(objs) == 0 {
				t.Fatal("the program declared no Kubernetes objects")
			}
			// Namespaces for real, first: a dry run in a namespace that
			// does not exist is refused before it is judged.
			sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GetKind()]++
				var err error
				if o.GetKind() == "Namespace" {
					err = env.Client.Create(ctx, o)
					if apierrors.IsAlreadyExists(err) {
						err = nil
					}
				} else {
					err = env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("pulumi-kubernetes"), client.ForceOwnership, client.DryRunAll)
				}
				if err != nil {
					t.Errorf("%s %s/%s refused by the API server: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
			t.Logf("%d objects accepted: %v", len(objs), kinds)
			for _, o := range objs {
				if o.GetKind() != "PrometheusRule" {
					continue
				}
				// The cost rules price by the stack's table over the defaults.
				b, err := json.Marshal(o.Object)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(b), `"vector(0.0412)"`) || !strings.Contains(string(b), `"currency":"EUR"`) || !strings.Contains(string(b), `"instance_type":"n2d-standard-4"`) {
					t.Errorf("the PrometheusRule does not price by the stack's cost table over the defaults:\n%s", b)
				}
			}
			for _, want := range want {
				if kinds[want] == 0 {
					t.Errorf("no %s among the stack's objects", want)
				}
			}
		})
	}
}

// monitoredStack is eks-dev with controller.monitoring on: the
// ServiceMonitors, the PrometheusRule and the dashboards' ConfigMaps,
// judged by the Prometheus operator's own CRDs.
const monitoredStack = "eks-dev+monitoring"

const fleetKey = "runnerfleet:fleet"

// withMonitoring turns every controller.monitoring option on in a fleet
// config (JSON, as the Pulumi engine hands it over).
func withMonitoring(t *testing.T, fleet string) string {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal([]byte(fleet), &f); err != nil {
		t.Fatalf("%s: %v", fleetKey, err)
	}
	ctrl, _ := f["controller"].(map[string]any)
	if ctrl == nil {
		ctrl = map[string]any{}
	}
	ctrl["monitoring"] = map[string]any{"serviceMonitors": true, "prometheusRule": true, "dashboards": true,
		"labels": map[string]any{"release": "kube-prometheus-stack"}}
	f["controller"] = ctrl
	// A price table of the stack's own, for the PrometheusRule's cost rules.
	f["cost"] = map[string]any{"currency": "EUR", "prices": []any{map[string]any{"instanceType": "m7i.large", "onDemand": 0.1176, "spot": 0.0412}}}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// object turns a registered Kubernetes resource's inputs back into the
// object the provider sends: secrets revealed, schema extension keys dashed.
func object(t *testing.T, r infratest.Resource) *unstructured.Unstructured {
	t.Helper()
	m := r.Inputs.MapRepl(func(k string) (string, bool) {
		if strings.HasPrefix(k, "x_kubernetes_") {
			return strings.ReplaceAll(k, "_", "-"), true
		}
		return "", false
	}, func(v resource.PropertyValue) (any, bool) {
		if v.IsSecret() {
			return v.SecretValue().Element.Mappable(), true
		}
		return nil, false
	})
	o := &unstructured.Unstructured{Object: m}
	if o.GetAPIVersion() == "" || o.GetKind() == "" {
		t.Fatalf("%s %s has no apiVersion/kind among its inputs", r.Token, r.Name)
	}
	if o.GetName() == "" {
		// Declared without a name: the provider names it after the
		// resource, with a random suffix (a docker+machine state claim).
		o.SetName(r.Name + "-" + infratest.MockAutonameSuffix)
	}
	if o.GetKind() == "Secret" && o.GetAPIVersion() == "v1" {
		// The token arrives as stringData; make sure it is there. (The
		// gitlab-runner chart's Secret also carries an empty
		// runner-registration-token: registration tokens are gone; a shared
		// fleet manager's config Secret holds config.toml with its token;
		// the Alertmanager's, the receiver's secret.)
		sd, _, _ := unstructured.NestedStringMap(o.Object, "stringData")
		if sd["token"] == "" && sd["runner-token"] == "" && !strings.Contains(sd[shared.ConfigSecretKey], "token = \"glrt-") && sd[shared.AlertmanagerSecretKey] == "" {
			t.Errorf("Secret %s/%s carries no token: %v", o.GetNamespace(), o.GetName(), slices.Sorted(maps.Keys(sd)))
		}
	}
	return o
}
