package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The workspace copy of the stack config follows the checkout's file on every
// run. A file without a salt keeps the one the Pulumi CLI wrote into the
// workspace copy (losing it would make the state's secrets unreadable); a
// file with its own keeps that, since its secure values need it.
func TestCopyStackFileKeepsTheSalt(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "Pulumi.local.yaml")
	p := &program{stack: "local", stackFile: src, dir: filepath.Join(dir, "ws")}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(p.dir, "Pulumi.local.yaml")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(dest)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	write(src, "config:\n  runnerfleet:fleet:\n    platform: local\n")
	if err := p.copyStackFile(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "config:\n  runnerfleet:fleet:\n    platform: local\n" {
		t.Fatalf("first copy = %q", got)
	}

	// The CLI adds the salt to the workspace copy; the checkout's file changes.
	write(dest, read()+"encryptionsalt: v1:abc:def\n")
	write(src, "config:\n  runnerfleet:fleet:\n    platform: local\n    clusterName: other\n")
	for range 2 { // and again: the salt is never repeated
		if err := p.copyStackFile(); err != nil {
			t.Fatal(err)
		}
	}
	got := read()
	if !strings.Contains(got, "clusterName: other") {
		t.Errorf("the change to the stack config did not reach the workspace:\n%s", got)
	}
	if n := strings.Count(got, "encryptionsalt: v1:abc:def\n"); n != 1 {
		t.Errorf("the salt appears %d times, want once:\n%s", n, got)
	}

	// A stack config with its own salt (its secure values are encrypted
	// with it) is copied as it is.
	write(src, "encryptionsalt: v1:other:salt\nconfig: {}\n")
	if err := p.copyStackFile(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "encryptionsalt: v1:other:salt\nconfig: {}\n" {
		t.Errorf("workspace copy = %q, want the stack config's own salt only", got)
	}

	// fleet down copies nothing: it runs on the workspace's copy itself.
	p.stackFile = dest
	before := read()
	if err := p.copyStackFile(); err != nil {
		t.Fatal(err)
	}
	if read() != before {
		t.Error("copying the workspace copy onto itself changed it")
	}
}

func TestLocalPassphraseOnlyWhenNoneIsGiven(t *testing.T) {
	p := &program{dir: "/state", tools: "/tools"}
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE_FILE", "")
	env := p.env()
	if env["PULUMI_CONFIG_PASSPHRASE"] != localPassphrase {
		t.Errorf("passphrase = %q, want the local one", env["PULUMI_CONFIG_PASSPHRASE"])
	}
	for k, want := range map[string]string{
		"PULUMI_BACKEND_URL":                          "file:///state/state",
		"PULUMI_HOME":                                 "/tools/home",
		"PULUMI_SKIP_UPDATE_CHECK":                    "true",
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
		"PULUMI_IGNORE_AMBIENT_PLUGINS":               "true",
	} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "mine")
	if got := p.env()["PULUMI_CONFIG_PASSPHRASE"]; got != "mine" {
		t.Errorf("passphrase = %q, want the user's", got)
	}
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE_FILE", "/run/secrets/pass")
	if got, ok := p.env()["PULUMI_CONFIG_PASSPHRASE"]; ok {
		t.Errorf("passphrase = %q set beside the user's passphrase file", got)
	}
}
