package sharedfleet

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

func TestStartScriptCopiesTheConfigSecretAsItIs(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets") + "/"
	if err := os.Mkdir(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(StartScript(false), chartSecretsDir, secrets)
	path := filepath.Join(dir, "pre-entrypoint-script")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := execBash(t, path, "CONFIG_PATH_FOR_INIT="+dir+"/"); err == nil {
		t.Errorf("the script ran without its config Secret:\n%s", out)
	}
	cfg := runnerconfig.Config{Concurrent: 1, Runners: []runnerconfig.Runner{{Name: "m", URL: "https://gitlab.example.com", Executor: "docker+machine",
		Machine: &runnerconfig.Machine{MachineDriver: "google", MachineName: "m-%s", MachineOptions: []string{"google-label=" + vmfleet.LabelIncarnation + ":" + vmfleet.IncarnationPlaceholder}}}}}
	secret, err := runnerconfig.Render(runnerconfig.WithToken(cfg, "glrt-x|;s|https://gitlab.example.com|https://evil.example.com&\n$(touch pwned)`id`"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secrets+ConfigSecretFile, secret, 0o400); err != nil {
		t.Fatal(err)
	}
	// The pod's name becomes the incarnation its VMs carry (a GCE label
	// value: lower case); nothing else changes.
	want := []byte(strings.ReplaceAll(string(secret), vmfleet.IncarnationPlaceholder, vmfleet.IncarnationOfPod("Production-Linux-1-5d4c-x2x7q")))
	if string(want) == string(secret) {
		t.Fatal("the test config has no incarnation placeholder")
	}
	sh, err := execBash(t, path, "CONFIG_PATH_FOR_INIT="+dir+"/", "CI_SERVER_TOKEN=glrt-other|&", "HOSTNAME=Production-Linux-1-5d4c-x2x7q")
	if err != nil {
		t.Fatalf("%v\n%s", err, sh)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(want) {
		t.Errorf("config.toml:\n%s\nwant:\n%s", b, want)
	}
	if fi, err := os.Stat(filepath.Join(dir, "config.toml")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config.toml mode %v (%v), want 0600", fi.Mode(), err)
	}
	if _, err := os.Stat("pwned"); err == nil {
		t.Error("the token ran a command")
	}
}

func execBash(t *testing.T, path string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", path)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// releasesOf are the releases of one group of each kind.
func releasesOf(t *testing.T) []Release {
	t.Helper()
	var out []Release
	for _, g := range []fleetspec.ManagerGroup{production(), autoscaler()} {
		g.Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 2}
		out = append(out, Releases(g, "terminals.example.com")...)
	}
	return out
}

// Every value the program passes is one the pinned chart reads; a value it
// does not read is reported (the negative control).
func TestEveryChartValueIsOneThePinnedChartReads(t *testing.T) {
	s := ReleaseSettings{GitLabURL: "https://gitlab.example.com", ManagerImage: "registry.example.com/ci/runner:v1", GraceSeconds: 11400}
	for _, r := range releasesOf(t) {
		v := r.Values(s, "config", "script", "hash", "claim")
		if bad := CheckChartValues(v); len(bad) > 0 {
			t.Errorf("%s: %v", r.Name, bad)
		}
		v["runners"].(map[string]any)["tags"] = "a,b"                             // runners.tags: not a value the chart reads
		v["deploymentLifecycle"].(map[string]any)["postStart"] = map[string]any{} // under a whole Kubernetes value: fine
		v["metrics"].(map[string]any)["port"] = map[string]any{"number": 9252}
		bad := CheckChartValues(v)
		if len(bad) != 2 || !strings.HasPrefix(bad[0], "metrics.port: the chart reads it as a value") || !strings.HasPrefix(bad[1], "runners.tags: the pinned gitlab-runner chart reads no such value") {
			t.Errorf("%s: the check reports %v", r.Name, bad)
		}
	}
}

// referenceChartDir is where the reference copy of the gitlab-runner chart
// sits relative to a directory above the checkout: CI clones the repository
// with a copy of the project's shared/ directory beside it
// (<parent>/shared/reference/gitlab-runner-chart, chart 0.86.0).
var referenceChartDir = filepath.Join("shared", "reference", "gitlab-runner-chart")

// referenceChart is the reference copy of the gitlab-runner chart beside
// the checkout, found in the working directory or any directory above it,
// and the directories it looked in.
func referenceChart(t *testing.T) (dir string, searched []string) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, referenceChartDir)
		searched = append(searched, p)
		if _, err := os.Stat(filepath.Join(p, "Chart.yaml")); err == nil {
			return p, searched
		}
		if d == filepath.Dir(d) {
			return "", searched
		}
	}
}

// ChartValues itself is checked against the chart's templates: every path
// is read as .Values.<path> by a template. A path the templates do not read
// fails, and so does a checkout without the reference copy beside it, so
// that the check cannot pass by checking nothing.
func TestChartValuesAreReadByTheChartsTemplates(t *testing.T) {
	dir, searched := referenceChart(t)
	if dir == "" {
		t.Fatalf("the reference copy of the gitlab-runner chart (0.86.0, with Chart.yaml and templates/) is not beside this checkout: looked for %s in the working directory and every directory above it (%s). "+
			"It comes from the project's shared/ directory (shared/reference/gitlab-runner-chart), which CI copies beside the clone; put that copy in a parent directory of the checkout",
			referenceChartDir, strings.Join(searched, ", "))
	}
	var templates strings.Builder
	entries, err := os.ReadDir(filepath.Join(dir, "templates"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, "templates", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		templates.Write(b)
	}
	read := func(path string) bool {
		return regexp.MustCompile(`\.Values\.` + regexp.QuoteMeta(path) + `([^A-Za-z0-9_]|$)`).MatchString(templates.String())
	}
	for path := range ChartValues {
		if !read(path) {
			t.Errorf("no template of %s reads .Values.%s", dir, path)
		}
	}
	if read("runnerfleetNoSuchValue") {
		t.Error("the check finds a value no template reads")
	}
}
