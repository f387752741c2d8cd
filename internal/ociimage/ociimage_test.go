package ociimage

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildHello compiles testdata/hello once per test.
func buildHello(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "hello")
	if err := GoBuild(context.Background(), ".", "./testdata/hello", out, "", ""); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImageRunsItsBinaryAsNonRootFromAnEmptyBase(t *testing.T) {
	bin := buildHello(t)
	img, err := Build(Spec{
		Binary:     bin,
		Path:       "/usr/local/bin/hello",
		StopSignal: "SIGQUIT",
		Labels:     map[string]string{"org.opencontainers.image.version": "v1.2.3"},
		CACerts:    true,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(dir, img, "example.test/hello:v1.2.3"); err != nil {
		t.Fatal(err)
	}

	// Read it back as a consumer would: from the layout, not from img.
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "example.test/hello:v1.2.3" {
		t.Fatalf("layout index = %+v, want one image named example.test/hello:v1.2.3", im.Manifests)
	}
	if im.Manifests[0].MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type = %s, want %s", im.Manifests[0].MediaType, types.OCIManifestSchema1)
	}
	got, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if strings.Join(c.Entrypoint, " ") != "/usr/local/bin/hello" || c.User != NonRoot || c.StopSignal != "SIGQUIT" ||
		c.Labels["org.opencontainers.image.version"] != "v1.2.3" || cf.OS != "linux" {
		t.Errorf("config = %+v, os %s", c, cf.OS)
	}
	layers, err := got.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v; want exactly one on an empty base", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]*tar.Header{}
	run := filepath.Join(t.TempDir(), "extracted")
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = h
		if h.Name == "usr/local/bin/hello" {
			b, _ := io.ReadAll(tr)
			if err := os.WriteFile(run, b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, want := range []string{"usr/", "usr/local/", "usr/local/bin/", "tmp/", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/hello"} {
		if entries[want] == nil {
			t.Errorf("layer lacks %s; has %v", want, keys(entries))
		}
	}
	if h := entries["tmp/"]; h != nil && h.Mode != 0o1777 {
		t.Errorf("/tmp mode = %o, want 1777", h.Mode)
	}
	if h := entries["usr/local/bin/hello"]; h != nil && (h.Mode != 0o755 || h.Uid != 0) {
		t.Errorf("binary mode %o uid %d, want 755 owned by root", h.Mode, h.Uid)
	}
	out, err := exec.Command(run, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello from") || !strings.Contains(string(out), "--version") {
		t.Errorf("the image's binary ran with %v: %s", err, out)
	}
}

func TestArchiveLoadsWithTheSameConfig(t *testing.T) {
	img, err := Build(Spec{Binary: buildHello(t)})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "hello.tar")
	if err := WriteArchive(file, img, "example.test/hello:dev"); err != nil {
		t.Fatal(err)
	}
	loaded, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.ConfigName()
	got, err := loaded.ConfigName()
	if err != nil || got != want {
		t.Errorf("archive config digest = %v (%v), want %v", got, err, want)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil || len(m) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != "example.test/hello:dev" {
		t.Errorf("archive manifest = %+v, %v", m, err)
	}
}

func TestSameInputsGiveTheSameDigest(t *testing.T) {
	bin := buildHello(t)
	a, err := Build(Spec{Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a second later: wall-clock time must not leak into the image
	b, err := Build(Spec{Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("digests differ for the same binary: %s, %s", da, db)
	}
	c, err := Build(Spec{Binary: bin, Labels: map[string]string{"x": "y"}})
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := c.Digest(); dc == da {
		t.Error("a different config gave the same digest")
	}
}

func TestBadSpecsAreRefusedWithTheField(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{}, "Spec.Binary"},
		{Spec{Binary: "/nonexistent/bin"}, "reading the image's binary"},
	} {
		if _, err := Build(tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%+v) = %v, want an error naming %q", tc.spec, err, tc.want)
		}
	}
	bin := buildHello(t)
	if _, err := Build(Spec{Binary: bin, Path: "relative"}); err == nil || !strings.Contains(err.Error(), "Spec.Path") {
		t.Errorf("relative path: %v", err)
	}
	img, _ := Build(Spec{Binary: bin})
	if err := WriteArchive(filepath.Join(t.TempDir(), "x.tar"), img, "Not A Ref"); err == nil {
		t.Error("an invalid reference was accepted")
	}
}

func keys(m map[string]*tar.Header) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}
