package sharedfleet

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
