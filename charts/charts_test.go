package charts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

const chartDir = "runnerfleet"

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// capabilities are Helm's defaults on the Kubernetes version the tests'
// kube-apiserver runs.
func capabilities() *chartutil.Capabilities {
	c := *chartutil.DefaultCapabilities
	c.KubeVersion = chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
	return &c
}

// render is helm template through the SDK: an install with a client-only
// dry run, values checked against values.schema.json.
// apis are more APIs the cluster serves, as Helm's Capabilities.APIVersions
// names them (group/version/Kind).
func render(t testing.TB, ch *chart.Chart, release, namespace string, vals map[string]any, crds bool, apis ...string) (string, error) {
	t.Helper()
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: capabilities(),
		Log:          func(string, ...any) {},
	}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace, inst.IncludeCRDs, inst.KubeVersion = release, namespace, crds, &cfg.Capabilities.KubeVersion
	inst.APIVersions = apis // a client-only install adds them to the default capabilities
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

func valuesMap(t testing.TB, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// typed decodes a rendered document strictly into its Go type, so that a
// field the API does not have fails here, and returns it unstructured.
func typed(t *testing.T, doc map[string]any) map[string]any {
	t.Helper()
	u := &unstructured.Unstructured{Object: doc}
	s := testenv.Scheme()
	obj, err := s.New(u.GroupVersionKind())
	if err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	b, _ := json.Marshal(doc)
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return canon(t, obj)
}

func canon(t *testing.T, obj runtime.Object) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	delete(out, "status")
	return out
}

func key(m map[string]any) string {
	md := m["metadata"].(map[string]any)
	return m["kind"].(string) + "/" + md["name"].(string)
}

// pinnedImage is pinnedValues' image: by digest, the tag unused.
const pinnedImage = "registry.internal/mirror/runnerset-controller@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func pinnedValues() charts.Values {
	v := charts.DefaultValues()
	v.Image.Repository, v.Image.Digest = "registry.internal/mirror/runnerset-controller", "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	return v
}

func nonDefaultValues() charts.Values {
	v := charts.DefaultValues()
	v.Image = charts.Image{Repository: "registry.internal/mirror/runnerset-controller", Tag: "v0.1.0-rc.1", PullPolicy: corev1.PullAlways}
	v.Replicas = 3
	v.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
	}
	v.PriorityClassName = ""
	v.NodeSelector = map[string]string{"node.kubernetes.io/pool": "system"}
	v.Tolerations = []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	v.Affinity = corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: "karpenter.sh/capacity-type", Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}}}}},
	}}}
	v.PodAnnotations = map[string]string{"prometheus.io/scrape": "true"}
	v.LogLevel = "debug"
	v.PodDisruptionBudget.Enabled = false
	v.ServiceMonitor = charts.ServiceMonitor{Enabled: true, Interval: "15s", Labels: map[string]string{"release": "kube-prometheus-stack"}}
	v.PrometheusRule = charts.Labelled{Enabled: true, Labels: map[string]string{"release": "kube-prometheus-stack"}}
	v.Dashboards = charts.Labelled{Enabled: true, Labels: map[string]string{"team": "platform"}}
	return v
}

// What the chart renders is exactly what runnerset/install builds from the
// same values, for the defaults and for every value changed, and the
// admission policies (install.AdmissionPolicies) only where the cluster
// serves MutatingAdmissionPolicy (Kubernetes 1.36 and later).
func TestTemplateIsTheBuilder(t *testing.T) {
	ch := loadChart(t)
	for name, tc := range map[string]struct {
		release, namespace string
		values             charts.Values
		policies           bool
	}{
		"defaults":                   {"runnerfleet", "runnerfleet-system", charts.DefaultValues(), false},
		"every value":                {"rf", "ci-system", nonDefaultValues(), false},
		"pinned":                     {"rf", "ci-system", pinnedValues(), false},
		"defaults, with policies":    {"runnerfleet", "runnerfleet-system", charts.DefaultValues(), true},
		"every value, with policies": {"rf", "ci-system", nonDefaultValues(), true},
	} {
		t.Run(name, func(t *testing.T) {
			var vals map[string]any
			if !reflect.DeepEqual(tc.values, charts.DefaultValues()) {
				vals = valuesMap(t, tc.values)
			}
			var apis []string
			if tc.policies {
				apis = append(apis, charts.AdmissionPolicyAPI)
			}
			manifest, err := render(t, ch, tc.release, tc.namespace, vals, false, apis...)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := charts.ObjectsOf([]byte(manifest))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]map[string]any{}
			for _, d := range docs {
				got[key(d)] = typed(t, d)
			}
			if name == "pinned" && !strings.Contains(manifest, `image: "`+pinnedImage+`"`) {
				t.Errorf("the pinned chart does not run %s:\n%s", pinnedImage, manifest)
			}
			objs, err := install.Objects(tc.values.Options(tc.release, tc.namespace))
			if err != nil {
				t.Fatal(err)
			}
			if tc.policies {
				objs = append(objs, install.AdmissionPolicies(tc.values.Options(tc.release, tc.namespace))...)
			}
			want := map[string]map[string]any{}
			for _, o := range objs {
				c := canon(t, o)
				want[key(c)] = c
			}
			if len(got) != len(want) {
				t.Errorf("rendered %v, the builder has %v", keys(got), keys(want))
			}
			for k, w := range want {
				g, ok := got[k]
				if !ok {
					t.Errorf("the chart does not render %s", k)
					continue
				}
				if !reflect.DeepEqual(g, w) {
					gy, _ := yaml.Marshal(g)
					wy, _ := yaml.Marshal(w)
					t.Errorf("%s rendered:\n%s\nbuilder:\n%s", k, gy, wy)
				}
			}
		})
	}
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"defaults": nil, "every value": valuesMap(t, nonDefaultValues())} {
		l := action.NewLint()
		l.Strict, l.Namespace, l.KubeVersion = true, "runnerfleet-system", &capabilities().KubeVersion
		res := l.Run([]string{chartDir}, vals)
		for _, m := range res.Messages {
			t.Logf("%s: %s", name, m)
		}
		if len(res.Errors) > 0 || res.TotalChartsLinted != 1 {
			t.Errorf("%s: helm lint --strict: %v", name, res.Errors)
		}
	}
}

// values.schema.json refuses a value of the wrong type and an unknown key,
// at any depth, and names its path.
func TestSchemaRefusesWrongTypesAndUnknownKeys(t *testing.T) {
	ch := loadChart(t)
	for name, tc := range map[string]struct {
		vals string
		want []string
	}{
		"replicas a string":        {`replicas: two`, []string{"/replicas", "integer"}},
		"unknown top-level key":    {`replica: 2`, []string{"replica"}},
		"unknown image key":        {`image: {repositry: x}`, []string{"/image", "repositry"}},
		"pull policy not an enum":  {`image: {pullPolicy: Sometimes}`, []string{"/image/pullPolicy"}},
		"digest not a sha256":      {`image: {digest: v0.1.0}`, []string{"/image/digest"}},
		"tolerations an object":    {`tolerations: {key: a}`, []string{"/tolerations", "array"}},
		"toleration unknown key":   {`tolerations: [{key: a, efect: NoSchedule}]`, []string{"/tolerations/0", "efect"}},
		"log level":                {`logLevel: verbose`, []string{"/logLevel"}},
		"resources unknown key":    {`resources: {request: {cpu: 1}}`, []string{"/resources", "request"}},
		"quantity not a quantity":  {`resources: {requests: {cpu: lots}}`, []string{"/resources/requests/cpu"}},
		"pdb enabled a string":     {`podDisruptionBudget: {enabled: "yes"}`, []string{"/podDisruptionBudget/enabled", "boolean"}},
		"node selector value list": {`nodeSelector: {pool: [a]}`, []string{"/nodeSelector/pool", "string"}},
		"scrape interval":          {`serviceMonitor: {interval: 30}`, []string{"/serviceMonitor/interval", "string"}},
	} {
		t.Run(name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tc.vals), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := render(t, ch, "rf", "rf", vals, false)
			if err == nil {
				t.Fatalf("values %s were accepted", tc.vals)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

// Every rendered object, CRDs included, defaults and every value changed,
// goes to a real kube-apiserver as a server-side dry run with strict field
// validation.
func TestRenderedObjectsPassTheAPIServer(t *testing.T) {
	ctx := context.Background()
	operator, err := testenv.PrometheusOperatorCRDs(ctx, "servicemonitors", "podmonitors", "prometheusrules")
	if err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start(testenv.WithCRDs(operator...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ch := loadChart(t)
	for name, tc := range map[string]struct {
		ns   string
		vals map[string]any
	}{"defaults": {"runnerfleet-system", nil}, "every value": {"ci-system", valuesMap(t, nonDefaultValues())}} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metaName(tc.ns)}); err != nil {
			t.Fatal(err)
		}
		manifest, err := render(t, ch, "rf", tc.ns, tc.vals, true)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := charts.ObjectsOf([]byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]bool{}
		for _, d := range docs {
			u := &unstructured.Unstructured{Object: d}
			kinds[u.GetKind()] = true
			if err := dryRun(ctx, env.Client, u); err != nil {
				t.Errorf("%s: %s %s: %v", name, u.GetKind(), u.GetName(), err)
			}
		}
		want := []string{"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"}
		if tc.vals != nil {
			want = append(want, "ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap")
		} else {
			want = append(want, "PodDisruptionBudget")
		}
		for _, k := range want {
			if !kinds[k] {
				t.Errorf("%s: no %s rendered", name, k)
			}
		}
	}
	// The negative control: the same dry run refuses a field the API does not have.
	bad := &unstructured.Unstructured{}
	bad.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"})
	bad.SetNamespace("runnerfleet-system")
	bad.SetName("bad")
	bad.Object["automountToken"] = true
	if err := dryRun(ctx, env.Client, bad); err == nil || !strings.Contains(err.Error(), "automountToken") {
		t.Errorf("a ServiceAccount with an unknown field: %v, want it refused", err)
	}
}

func dryRun(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	return c.Patch(ctx, u, client.Apply, client.DryRunAll, client.ForceOwnership, client.FieldOwner("charts-test"), client.FieldValidation("Strict"))
}

// The committed chart and manifests are what Generate writes (make
// manifests), and the chart's CRDs are the embedded, generated ones.
func TestGeneratedFilesAreCommitted(t *testing.T) {
	files, err := charts.Files()
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join("..", p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what make manifests writes (%v): run make manifests", p, err)
		}
	}
	_ = fs.WalkDir(charts.Chart(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if _, ok := files[filepath.Join("charts", chartDir, p)]; !ok {
				t.Errorf("charts/%s/%s is not generated: remove it or generate it", chartDir, p)
			}
		}
		return nil
	})
	for n, b := range crds.YAML() {
		got, err := fs.ReadFile(charts.Chart(), "crds/"+n)
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("crds/%s differs from runnerset/crds (%v)", n, err)
		}
	}
}

func BenchmarkRender(b *testing.B) {
	ch := loadChart(b)
	vals := valuesMap(b, nonDefaultValues())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := render(b, ch, "rf", "ci-system", vals, false); err != nil {
			b.Fatal(err)
		}
	}
}

func metaName(n string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: n} }
