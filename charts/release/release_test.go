package release_test

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"debug/pe"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/charts/release"
	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
)

// The controller's image, read back from its OCI layout as crane would:
// an image index whose one manifest (this machine's platform: make image's
// and the tests' default; internal/ociimage tests the index of two) has
// the binary as entrypoint, runs as a numeric non-root user, has nothing
// but the binary, CA certificates and /tmp (no shell), and its binary says
// the stamped version; the docker archive holds the same image,
// digests.json lists it, and the chart and install.yaml pin it by the
// index's digest.
func TestControllerImage(t *testing.T) {
	root, _ := filepath.Abs("../..")
	out := t.TempDir()
	rep, err := release.Build(context.Background(), release.Options{
		Root: root, Out: out, Version: "v9.8.7-test", Commit: "abc123", Only: []string{install.Name},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Images) != 1 {
		t.Fatalf("images %+v, want the controller's", rep.Images)
	}
	im := rep.Images[0]
	if im.Ref != "ghcr.io/runnerfleet/runnerset-controller:v9.8.7-test" {
		t.Errorf("ref %s", im.Ref)
	}
	top, err := layout.ImageIndexFromPath(im.Layout)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil || len(tm.Manifests) != 1 || tm.Manifests[0].Digest.String() != im.Digest {
		t.Fatalf("layout index %v, %v; want the image index %s", tm, err, im.Digest)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 || m.Manifests[0].Platform == nil || m.Manifests[0].Platform.String() != "linux/"+runtime.GOARCH {
		t.Fatalf("image index %v, %v; want this machine's platform", m, err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if strings.Join(c.Entrypoint, " ") != "/runnerset-controller" || c.User != "65532:65532" {
		t.Errorf("entrypoint %v user %q, want /runnerset-controller as 65532:65532", c.Entrypoint, c.User)
	}
	for k, v := range map[string]string{"org.opencontainers.image.version": "v9.8.7-test", "org.opencontainers.image.revision": "abc123",
		"org.opencontainers.image.title": "runnerset-controller", "org.opencontainers.image.licenses": "Apache-2.0"} {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var files []string
	bin := filepath.Join(t.TempDir(), "runnerset-controller")
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			files = append(files, h.Name)
		}
		if h.Name == "runnerset-controller" {
			b, _ := io.ReadAll(tr)
			if err := os.WriteFile(bin, b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if strings.Join(files, " ") != "etc/ssl/certs/ca-certificates.crt runnerset-controller" && strings.Join(files, " ") != "runnerset-controller etc/ssl/certs/ca-certificates.crt" {
		t.Errorf("image files %v: want the binary and the CA bundle only (no shell, no package manager)", files)
	}
	outp, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(outp), "runnerset-controller v9.8.7-test (commit abc123") {
		t.Errorf("the image's binary --version: %v: %s", err, outp)
	}
	// A static binary: it needs no dynamic loader in the empty base.
	if b, _ := os.ReadFile(bin); strings.Contains(string(b[:min(len(b), 4096)]), "/lib64/ld-linux") {
		t.Error("the binary is dynamically linked")
	}
	p := im.Platforms[0]
	t.Logf("runnerset-controller image: %.1f MB compressed, %s", float64(p.Size)/1e6, im.Pinned)
	if p.Size > 80e6 {
		t.Errorf("the controller image is %.1f MB compressed; it was about 25 MB: what grew?", float64(p.Size)/1e6)
	}
	if p.Digest != m.Manifests[0].Digest.String() || p.Platform != "linux/"+runtime.GOARCH {
		t.Errorf("reported platform %+v, the index holds %+v", p, m.Manifests[0])
	}
	var digests release.Digests
	if b, err := os.ReadFile(filepath.Join(out, release.DigestsFile)); err != nil || json.Unmarshal(b, &digests) != nil ||
		len(digests.Images) != 1 || digests.Images[0].Pinned != "ghcr.io/runnerfleet/runnerset-controller@"+im.Digest ||
		len(digests.Images[0].Platforms) != 1 || digests.Images[0].Platforms[0] != p {
		t.Errorf("%s: %+v, %v; want the controller at %s", release.DigestsFile, digests, err, im.Digest)
	}
	// The manifests and the packaged chart run the image by its digest.
	pinned := `image: ` + im.Pinned
	if b, err := os.ReadFile(filepath.Join(out, "install.yaml")); err != nil || !strings.Contains(string(b), pinned) || strings.Contains(string(b), "runnerset-controller:v") {
		t.Errorf("install.yaml does not pin %s (%v)", im.Pinned, err)
	}
	ch, err := loader.Load(filepath.Join(out, charts.ChartName+"-"+version.Release+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := ch.Values["image"].(map[string]any)["digest"].(string); d != im.Digest {
		t.Errorf("the packaged chart's image.digest is %q, want %s", d, im.Digest)
	}
	arch, err := tarball.ImageFromPath(im.Archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The archive's manifest is docker's own format; the image is the same
	// when its config (entrypoint, user, labels, layer diff IDs) is.
	ac, err := arch.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if lc, _ := img.ConfigName(); ac != lc {
		t.Errorf("the docker archive holds config %s, the layout %s", ac, lc)
	}
}

// An architecture the release cannot build an image for, or one given
// twice, is refused naming --arch before anything is built.
func TestBadArchitecturesAreRefused(t *testing.T) {
	for arches, want := range map[string]string{"amd64,mips": `architecture "mips" (--arch): give GOARCH names from amd64, arm64`, "arm64,arm64": "architecture arm64 twice (--arch)"} {
		_, err := release.Build(context.Background(), release.Options{Root: "../..", Out: t.TempDir(), Version: "v9.8.7-test", Arches: strings.Split(arches, ",")})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--arch %s: %v, want %q", arches, err, want)
		}
	}
}

// The Windows drain agent is a plain binary in the release directory: a
// windows/amd64 executable (PE, x86-64, a console program: the service
// control manager and a shell both start it) with the stamped version, and
// SHA256SUMS names it with its hash.
func TestWindowsAgentDownload(t *testing.T) {
	root, _ := filepath.Abs("../..")
	out := t.TempDir()
	rep, err := release.Build(context.Background(), release.Options{
		Root: root, Out: out, Version: "v9.8.7-test", Commit: "abc123", Only: []string{"fleet-agent.exe"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Images) != 0 {
		t.Errorf("images %+v: Only names the download alone", rep.Images)
	}
	if !slices.Contains(rep.Files, "fleet-agent.exe") {
		t.Fatalf("release files %v: no fleet-agent.exe", rep.Files)
	}
	for _, f := range []string{"install.yaml", "admission-policies.yaml"} {
		if !slices.Contains(rep.Files, f) {
			t.Errorf("release files %v: no %s", rep.Files, f)
		}
	}
	exe := filepath.Join(out, "fleet-agent.exe")
	f, err := pe.Open(exe)
	if err != nil {
		t.Fatalf("fleet-agent.exe is not a PE executable: %v", err)
	}
	defer f.Close()
	if f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 {
		t.Errorf("machine %#x, want x86-64", f.Machine)
	}
	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok || oh.Subsystem != pe.IMAGE_SUBSYSTEM_WINDOWS_CUI {
		t.Errorf("optional header %T: want a 64-bit console program", f.OptionalHeader)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "v9.8.7-test") || !strings.Contains(string(b), "abc123") {
		t.Error("fleet-agent.exe does not carry the stamped version and commit")
	}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	if want := hex.EncodeToString(h[:]) + "  fleet-agent.exe\n"; !strings.Contains(string(sums), want) {
		t.Errorf("SHA256SUMS:\n%s\nwant the line %q", sums, want)
	}
	t.Logf("fleet-agent.exe: %.1f MB", float64(len(b))/1e6)
}
