package chartrepo

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/repo"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/internal/ociimage"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

func loadStandin(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := StandinChart()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(c.Archive))
	if err != nil {
		t.Fatalf("Helm cannot load the stand-in chart: %v", err)
	}
	return ch
}

// The stand-in chart reads every value the pinned chart reads and the
// program may set, so no value the program sets is silently dropped here
// that the real chart would read.
func TestStandinChartReadsEveryChartValue(t *testing.T) {
	ch := loadStandin(t)
	var templates strings.Builder
	for _, f := range ch.Templates {
		templates.Write(f.Data)
	}
	var missing []string
	for k := range shared.ChartValues {
		if !strings.Contains(templates.String(), ".Values."+k) {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the stand-in chart reads none of %v (sharedfleet.ChartValues)", missing)
	}
	if ch.Metadata.Name != shared.ChartName || ch.Metadata.Version != shared.ChartVersion {
		t.Errorf("the stand-in chart is %s %s; want the pinned %s %s", ch.Metadata.Name, ch.Metadata.Version, shared.ChartName, shared.ChartVersion)
	}
}

func dockerMachineGroup() fleetspec.ManagerGroup {
	return fleetspec.ManagerGroup{
		Fleet: "local-shared", Name: "linux", GitLabURL: "http://10.213.0.1:8929",
		Project: "runnerfleet-local", Region: "us-east1", Zone: "us-east1-b", MachineType: "n2d-standard-2",
		Image: "projects/runnerfleet-local/global/images/family/runner-vm", Spot: ptr.To(true),
		MaxVMs: 2, IdleCount: 0, IdleTime: metav1.Duration{Duration: 30 * time.Minute}, MaxBuilds: 1,
		Network: "projects/runnerfleet-local/global/networks/local", Subnetwork: "projects/runnerfleet-local/regions/us-east1/subnetworks/local-shared-vms",
		Scaling: fleetspec.Scaling{MinManagers: 1, MaxManagers: 1},
	}
}

// A docker+machine manager's values, as the program passes them, render
// the Deployment the chart would: the program's start script before the
// runner, its config Secret and state claim mounted, the SIGQUIT drain on
// preStop and the grace, Recreate, its labels and placement.
func TestStandinChartRendersADockerMachineManagerFromTheProgramsValues(t *testing.T) {
	ch := loadStandin(t)
	r := shared.Releases(dockerMachineGroup(), "")[0]
	s := shared.ReleaseSettings{GitLabURL: "http://10.213.0.1:8929", ManagerImage: "runnerfleet.local/gitlab-runner-standin:local", GraceSeconds: 11400}
	gen, err := r.GenerationOf(s)
	if err != nil {
		t.Fatal(err)
	}
	r.Generation = gen
	cfg, err := r.ConfigTOML("", runnerconfig.TokenPlaceholder)
	if err != nil {
		t.Fatal(err)
	}
	values := r.Values(s, cfg, shared.StartScript(false), "hash", "claim-abc")
	if bad := shared.CheckChartValues(values); len(bad) > 0 {
		t.Fatal(bad)
	}
	// As the provider hands them to Helm: through JSON.
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues(b)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: r.ReleaseName(), Namespace: "local-shared", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	var d appsv1.Deployment
	for name, doc := range out {
		if strings.HasSuffix(name, "deployment.yaml") {
			first, _, _ := strings.Cut(doc, "\n---\n")
			if err := yaml.UnmarshalStrict([]byte(first), &d); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
		}
	}
	if d.Name != r.ReleaseName() || d.Spec.Template.Labels[shared.LabelChartApp] != r.ReleaseName() || d.Spec.Template.Labels[shared.LabelRelease] != r.Name {
		t.Errorf("Deployment %s, pod labels %v: want the release's name and manager label", d.Name, d.Spec.Template.Labels)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || ptr.Deref(d.Spec.Replicas, -1) != 1 {
		t.Errorf("strategy %q, replicas %v: want Recreate, 1", d.Spec.Strategy.Type, d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if ptr.Deref(pod.TerminationGracePeriodSeconds, 0) != 11400 {
		t.Errorf("grace %v; want 11400", pod.TerminationGracePeriodSeconds)
	}
	c := pod.Containers[0]
	if c.Image != s.ManagerImage {
		t.Errorf("image %s; want %s", c.Image, s.ManagerImage)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil || strings.Join(c.Lifecycle.PreStop.Exec.Command, " ") != strings.Join(gitlabrunner.DrainCommand(), " ") {
		t.Errorf("preStop %+v; want the drain %v", c.Lifecycle, gitlabrunner.DrainCommand())
	}
	if !strings.Contains(c.Args[0], shared.StartScript(false)) || !strings.HasSuffix(strings.TrimSpace(c.Args[0]), `exec gitlab-runner run --config "${CONFIG_PATH_FOR_INIT%/}/config.toml"`) {
		t.Errorf("the container does not run the start script, then the runner:\n%s", c.Args[0])
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	claims, secrets := map[string]string{}, []string{}
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					secrets = append(secrets, src.Secret.Name)
				}
			}
		}
	}
	var stateVolume string
	for n, cl := range claims {
		if cl == "claim-abc" {
			stateVolume = n
		}
	}
	if stateVolume == "" || mounts[stateVolume] != shared.MachineStatePath {
		t.Errorf("claims %v mounted at %v; want claim-abc at %s", claims, mounts, shared.MachineStatePath)
	}
	if mounts["runner-secrets"] != "/secrets" || strings.Join(secrets, ",") != shared.TokenSecretName(r.Group)+","+shared.ConfigSecretName(r.ReleaseName()) {
		t.Errorf("secrets %v at %q; want the token and config Secrets at /secrets", secrets, mounts["runner-secrets"])
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env[shared.EnvIncarnation] != "claim-abc" {
		t.Errorf("env %v: want %s=claim-abc", env, shared.EnvIncarnation)
	}
	if ic := pod.InitContainers; len(ic) != 1 || !strings.Contains(strings.Join(ic[0].Args, " "), "chown "+ociimage.NonRoot+" '"+shared.MachineStatePath+"'") || len(ic[0].VolumeMounts) != 1 {
		t.Errorf("init containers %+v: want one giving %s the state volume at %s", ic, ociimage.NonRoot, shared.MachineStatePath)
	}
	if pod.ServiceAccountName != r.Group.ManagerName() || len(pod.NodeSelector) == 0 || len(pod.Tolerations) == 0 {
		t.Errorf("service account %q, nodeSelector %v, tolerations %v: want the program's", pod.ServiceAccountName, pod.NodeSelector, pod.Tolerations)
	}
	if p := c.Ports; len(p) != 1 || p[0].ContainerPort != shared.MetricsPort {
		t.Errorf("ports %v; want the metrics port %d", p, shared.MetricsPort)
	}

	// What the stand-in cannot do is refused, naming the value.
	values["rbac"] = map[string]any{"create": true}
	b, _ = yaml.Marshal(values)
	vals, _ = chartutil.ReadValues(b)
	rv, _ = chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: r.ReleaseName(), Namespace: "local-shared"}, chartutil.DefaultCapabilities)
	if _, err := engine.Render(ch, rv); err == nil || !strings.Contains(err.Error(), "rbac.create") {
		t.Errorf("rbac.create true rendered: %v; want it refused", err)
	}
}

// Helm finds the chart in the repository and downloads it, as the
// Kubernetes provider does from a release's repository URL.
func TestRepositoryServesTheChartToHelm(t *testing.T) {
	c, err := StandinChart()
	if err != nil {
		t.Fatal(err)
	}
	h, err := Handler(c)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	url, err := repo.FindChartInRepoURL(srv.URL, shared.ChartName, shared.ChartVersion, "", "", "", getter.All(cli.New()))
	if err != nil {
		t.Fatalf("Helm does not find %s %s in the repository: %v", shared.ChartName, shared.ChartVersion, err)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !bytes.Equal(b, c.Archive) {
		t.Fatalf("%s served %d bytes, not the chart's %d", url, len(b), len(c.Archive))
	}
	if _, err := repo.FindChartInRepoURL(srv.URL, shared.ChartName, "0.0.1", "", "", "", getter.All(cli.New())); err == nil {
		t.Errorf("a version the repository does not have was found")
	}
}
