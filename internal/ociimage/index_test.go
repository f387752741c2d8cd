package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// machines are the ELF machines of the architectures a release builds.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

var (
	helloOnce sync.Once
	helloDir  string
	helloErr  error
)

// helloFor compiles testdata/hello for linux/amd64 and linux/arm64 once for
// the package's tests (the arm64 one is a cross build: no emulator needed).
func helloFor(t *testing.T, arch string) string {
	t.Helper()
	helloOnce.Do(func() {
		helloDir, helloErr = os.MkdirTemp("", "ociimage-hello-")
		for a := range machines {
			if helloErr == nil {
				helloErr = GoBuild(context.Background(), ".", "./testdata/hello", filepath.Join(helloDir, a, "hello"), a, "")
			}
		}
	})
	if helloErr != nil {
		t.Fatal(helloErr)
	}
	return filepath.Join(helloDir, arch, "hello")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if helloDir != "" {
		os.RemoveAll(helloDir)
	}
	os.Exit(code)
}

// indexProblems reads the OCI layout at dir as a consumer does and says
// what is wrong with it as a multi-arch image of hello for archs: the
// layout names one image index, which has one manifest per platform, whose
// descriptor's platform, config architecture and binary's ELF machine
// agree. binaries are the binaries found, by architecture.
func indexProblems(dir string, archs ...string) (problems []string, binaries map[string][]byte, err error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, err
	}
	tm, err := top.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex {
		return []string{fmt.Sprintf("the layout's index.json holds %+v, want one OCI image index", tm.Manifests)}, nil, nil
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		return nil, nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	binaries = map[string][]byte{}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			problems = append(problems, fmt.Sprintf("manifest %s has no platform", d.Digest))
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, nil, err
		}
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture {
			problems = append(problems, fmt.Sprintf("manifest for %s holds a config for %s/%s", d.Platform, cf.OS, cf.Architecture))
		}
		bin, err := fileOf(img, "hello")
		if err != nil {
			return nil, nil, err
		}
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: the binary is not ELF: %v", d.Platform, err))
			continue
		}
		if want, ok := machines[d.Platform.Architecture]; !ok || f.Machine != want {
			problems = append(problems, fmt.Sprintf("manifest for %s holds a %s binary", d.Platform, f.Machine))
		}
		binaries[d.Platform.Architecture] = bin
	}
	for _, a := range archs {
		if binaries[a] == nil {
			problems = append(problems, fmt.Sprintf("no linux/%s image in %v", a, im.Manifests))
		}
	}
	if len(im.Manifests) != len(archs) {
		problems = append(problems, fmt.Sprintf("%d manifests, want %d", len(im.Manifests), len(archs)))
	}
	return problems, binaries, nil
}

// fileOf is the file at path (no leading slash) in img's one layer.
func fileOf(img v1.Image, path string) ([]byte, error) {
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		return nil, fmt.Errorf("%d layers (%v), want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			return nil, fmt.Errorf("%s not in the layer: %v", path, err)
		}
		if h.Name == path {
			return io.ReadAll(tr)
		}
	}
}

// A multi-arch image read back from its OCI layout: one index with a
// linux/amd64 and a linux/arm64 manifest, each with its architecture's
// config and binary, and the binary of this machine's architecture runs.
func TestIndexHoldsAnImagePerArchitecture(t *testing.T) {
	var imgs []v1.Image
	for _, a := range []string{"amd64", "arm64"} {
		img, err := Build(Spec{Binary: helloFor(t, a), Arch: a})
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	idx, err := Index(imgs...)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteIndexLayout(dir, idx, "example.test/hello:v1.2.3"); err != nil {
		t.Fatal(err)
	}
	problems, bins, err := indexProblems(dir, "amd64", "arm64")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	top, _ := layout.ImageIndexFromPath(dir)
	tm, _ := top.IndexManifest()
	want, _ := idx.Digest()
	if tm.Manifests[0].Digest != want || tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "example.test/hello:v1.2.3" {
		t.Errorf("layout index %+v, want the index %s named example.test/hello:v1.2.3", tm.Manifests[0], want)
	}
	bin, ok := bins[runtime.GOARCH]
	if !ok {
		t.Fatalf("no image for this machine's %s", runtime.GOARCH)
	}
	run := filepath.Join(t.TempDir(), "hello")
	if err := os.WriteFile(run, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(run, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello from") {
		t.Errorf("the %s image's binary ran with %v: %s", runtime.GOARCH, err, out)
	}
	if _, err := Index(imgs[0], imgs[0]); err == nil || !strings.Contains(err.Error(), "two images for linux/amd64") {
		t.Errorf("an index with amd64 twice: %v", err)
	}
}

// The check above fails on an index whose descriptor says arm64 for the
// amd64 image, and on one that lacks an architecture: it can fail.
func TestIndexProblemsFindAWrongPlatform(t *testing.T) {
	amd, err := Build(Spec{Binary: helloFor(t, "amd64"), Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	arm, err := Build(Spec{Binary: helloFor(t, "arm64"), Arch: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	wrong := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	dir := filepath.Join(t.TempDir(), "wrong")
	if err := WriteIndexLayout(dir, wrong, "example.test/hello:bad"); err != nil {
		t.Fatal(err)
	}
	problems, _, err := indexProblems(dir, "amd64", "arm64")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(problems, "\n")
	for _, want := range []string{"manifest for linux/arm64 holds a config for linux/amd64", "manifest for linux/arm64 holds a EM_X86_64 binary", "no linux/amd64 image"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems:\n%s\nwant %q", got, want)
		}
	}
}
