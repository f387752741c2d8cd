// Package release builds a runnerfleet release into a local directory: a
// multi-arch image per binary (internal/ociimage: static, on an empty base,
// non-root, org.opencontainers.image.* labels; an OCI image index of one
// manifest per linux/<arch>) as an OCI layout that `crane push` publishes,
// and this machine's platform of it as a docker-archive tarball that `ctr
// images import` and `kind load image-archive` read; digests.json, the
// images' index and per-platform digests and sizes; the Helm chart packaged
// by the Helm SDK and the plain manifests, both pinning the controller by
// its index digest; the binaries that run outside a container (Downloads:
// the Windows drain agent fleet-agent.exe); and SHA256SUMS. hack/release.sh
// runs it after the checks a release needs (make image runs the images
// only, for this machine's architecture).
package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"helm.sh/helm/v3/pkg/action"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/internal/imageref"
	"github.com/runnerfleet/runnerfleet/internal/ociimage"
	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
)

// Binaries are the images of a release: the binary, its Go package, and
// what it is.
var Binaries = []struct{ Name, Package, Description string }{
	{"runnerset-controller", "./cmd/runnerset-controller", "runnerfleet's controller: GitLab runner fleets from RunnerSets"},
	{"fleet", "./cmd/fleet", "runnerfleet's operator CLI: stacks up and down, VM rotation and gc"},
	{"fleet-agent", "./cmd/fleet-agent", "runnerfleet's drain agent for manager VMs"},
}

// Downloads are the release's plain binaries, for what runs no container:
// the drain agent on Windows manager VMs (a service beside gitlab-runner's).
// File is its name in the release directory.
var Downloads = []struct{ File, Package, GOOS, GOARCH string }{
	{"fleet-agent.exe", "./cmd/fleet-agent", "windows", "amd64"},
}

// Options say what to build where.
type Options struct {
	// Root is the repository checkout.
	Root string
	// Out is the release directory; images go to Out/images.
	Out string
	// Version is stamped into the binaries and tags the images (v0.1.0).
	Version string
	// Commit is stamped into the binaries and labels the images.
	Commit string
	// Registry prefixes the image names (default version.Registry).
	Registry string
	// Only limits the images and downloads to these (their Name or File;
	// all when empty).
	Only []string
	// Arches are the architectures of the images (GOARCH names), each
	// image an OCI image index of one manifest per linux/<arch>; this
	// machine's alone when empty (make image), Arches by default for a
	// release (hack/release's --arch).
	Arches []string
	// Images only: no downloads, chart, manifests or checksums.
	ImagesOnly bool
	// Created stamps images (the Unix epoch when zero: reproducible).
	Created time.Time
	Log     io.Writer
}

// Arches are the architectures a release's images are built for.
var Arches = []string{"amd64", "arm64"}

// buildable are the architectures an image may be built for: Go's linux
// ports whose OCI platform needs no variant.
var buildable = []string{"amd64", "arm64", "ppc64le", "s390x", "riscv64"}

// DigestsFile is the release directory's record of its images' digests
// (Digests as JSON), which release notes and pinned installs cite.
const DigestsFile = "digests.json"

// Image is one built image: an OCI image index with a manifest per
// platform.
type Image struct {
	Binary string `json:"binary"`
	// Ref is the image at the release's tag; Pinned the same image by
	// its index digest (repository@sha256:…).
	Ref    string `json:"ref"`
	Pinned string `json:"pinned"`
	// Digest is the image index's digest.
	Digest    string     `json:"digest"`
	Platforms []Platform `json:"platforms"`
	Layout    string     `json:"-"` // OCI layout directory (the index)
	Archive   string     `json:"-"` // docker-archive tarball (ArchiveArch's image)
	// ArchiveArch is the architecture of the docker archive's image:
	// this machine's when built, else the first (ctr import and docker
	// load read one platform).
	ArchiveArch string `json:"-"`
}

// Platform is one manifest of an image's index.
type Platform struct {
	Platform string `json:"platform"` // linux/amd64
	Digest   string `json:"digest"`
	// Size is the compressed size of the manifest's layers and config:
	// what a node pulls.
	Size int64 `json:"size"`
}

// Digests is DigestsFile.
type Digests struct {
	Version string  `json:"version"`
	Commit  string  `json:"commit,omitempty"`
	Images  []Image `json:"images"`
}

// Report is what a release built.
type Report struct {
	Images []Image
	Files  []string // every file of the release, relative to Out
}

// Image is the report's image of binary, if it was built.
func (r *Report) Image(binary string) (Image, bool) {
	for _, im := range r.Images {
		if im.Binary == binary {
			return im, true
		}
	}
	return Image{}, false
}

// Build builds the release.
func Build(ctx context.Context, o Options) (*Report, error) {
	if o.Registry == "" {
		o.Registry = version.Registry
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Version == "" {
		return nil, fmt.Errorf("release: no version")
	}
	if len(o.Arches) == 0 {
		o.Arches = []string{runtime.GOARCH}
	}
	seen := map[string]bool{}
	for _, a := range o.Arches {
		if !slices.Contains(buildable, a) {
			return nil, fmt.Errorf("release: architecture %q (--arch): give GOARCH names from %s, comma-separated", a, strings.Join(buildable, ", "))
		}
		if seen[a] {
			return nil, fmt.Errorf("release: architecture %s twice (--arch)", a)
		}
		seen[a] = true
	}
	rep := &Report{}
	bins, err := os.MkdirTemp("", "runnerfleet-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(bins)
	for _, b := range Binaries {
		if len(o.Only) > 0 && !contains(o.Only, b.Name) {
			continue
		}
		img, err := buildImage(ctx, o, bins, b.Name, b.Package, b.Description)
		if err != nil {
			return nil, err
		}
		rep.Images = append(rep.Images, *img)
		fmt.Fprintf(o.Log, "image %s\n", img.Pinned)
		for _, p := range img.Platforms {
			fmt.Fprintf(o.Log, "  %s %s %.1f MB\n", p.Platform, p.Digest, float64(p.Size)/1e6)
		}
	}
	if len(rep.Images) > 0 {
		j, err := json.MarshalIndent(Digests{Version: o.Version, Commit: o.Commit, Images: rep.Images}, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(o.Out, DigestsFile), append(j, '\n'), 0o644); err != nil {
			return nil, err
		}
	}
	if o.ImagesOnly {
		return rep, nil
	}
	for _, d := range Downloads {
		if len(o.Only) > 0 && !contains(o.Only, d.File) {
			continue
		}
		fmt.Fprintf(o.Log, "go build %s (static, %s/%s, %s)\n", d.Package, d.GOOS, d.GOARCH, o.Version)
		if err := ociimage.GoBuildFor(ctx, o.Root, d.Package, filepath.Join(o.Out, d.File), d.GOOS, d.GOARCH,
			version.LDFlags(o.Version, o.Commit)); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Log, "download %s\n", filepath.Join(o.Out, d.File))
	}
	// The chart, packaged as helm package does, and the manifests: the
	// controller pinned by its image index's digest when this release
	// built it, so what is installed is what was built.
	chartDir := filepath.Join(o.Root, "charts", charts.ChartName)
	manifests := charts.InstallYAML()
	if im, ok := rep.Image(install.Name); ok {
		if chartDir, err = pinnedChart(chartDir, bins, im.Digest); err != nil {
			return nil, err
		}
		if manifests, err = charts.InstallYAMLFor(im.Pinned); err != nil {
			return nil, err
		}
	}
	pkg := action.NewPackage()
	pkg.Destination = o.Out
	tgz, err := pkg.Run(chartDir, nil)
	if err != nil {
		return nil, fmt.Errorf("packaging the chart: %w", err)
	}
	fmt.Fprintf(o.Log, "chart %s\n", tgz)
	if err := os.WriteFile(filepath.Join(o.Out, "install.yaml"), manifests, 0o644); err != nil {
		return nil, err
	}
	// For Kubernetes 1.36 and later, beside install.yaml.
	if err := os.WriteFile(filepath.Join(o.Out, charts.AdmissionPoliciesManifest), charts.AdmissionPoliciesYAML(), 0o644); err != nil {
		return nil, err
	}
	sums, err := checksums(o.Out)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "SHA256SUMS"), []byte(sums), 0o644); err != nil {
		return nil, err
	}
	return rep, filepath.WalkDir(o.Out, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(o.Out, p)
			if !strings.Contains(rel, string(filepath.Separator)+"blobs"+string(filepath.Separator)) {
				rep.Files = append(rep.Files, rel)
			}
		}
		return err
	})
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

// pinnedChart copies the chart into dir/chart with its values' image.digest
// set, and returns the copy's path.
func pinnedChart(chart, dir, digest string) (string, error) {
	out := filepath.Join(dir, "chart", charts.ChartName)
	if err := os.CopyFS(out, os.DirFS(chart)); err != nil {
		return "", fmt.Errorf("copying the chart: %w", err)
	}
	v := charts.DefaultValues()
	v.Image.Digest = digest
	y, err := charts.ValuesYAML(v)
	if err != nil {
		return "", err
	}
	return out, os.WriteFile(filepath.Join(out, "values.yaml"), y, 0o644)
}

func buildImage(ctx context.Context, o Options, bins, binary, pkg, desc string) (*Image, error) {
	repo := o.Registry + "/" + binary
	out := &Image{Binary: binary, Ref: imageref.Format(repo, o.Version, "")}
	var imgs []v1.Image
	for _, arch := range o.Arches {
		bin := filepath.Join(bins, arch, binary)
		fmt.Fprintf(o.Log, "go build %s (static, linux/%s, %s)\n", pkg, arch, o.Version)
		if err := ociimage.GoBuild(ctx, o.Root, pkg, bin, arch, version.LDFlags(o.Version, o.Commit)); err != nil {
			return nil, err
		}
		img, err := ociimage.Build(ociimage.Spec{
			Binary:  bin,
			Arch:    arch,
			CACerts: true, // GitLab, cloud APIs
			Created: o.Created,
			Labels: map[string]string{
				"org.opencontainers.image.title":       binary,
				"org.opencontainers.image.description": desc,
				"org.opencontainers.image.version":     o.Version,
				"org.opencontainers.image.revision":    o.Commit,
				"org.opencontainers.image.source":      "https://github.com/runnerfleet/runnerfleet",
				"org.opencontainers.image.url":         "https://github.com/runnerfleet/runnerfleet",
				"org.opencontainers.image.licenses":    "Apache-2.0",
				"org.opencontainers.image.vendor":      "runnerfleet",
			},
		})
		if err != nil {
			return nil, fmt.Errorf("the %s image for %s: %w", binary, arch, err)
		}
		imgs = append(imgs, img)
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		m, err := img.Manifest()
		if err != nil {
			return nil, err
		}
		p := Platform{Platform: "linux/" + arch, Digest: d.String(), Size: m.Config.Size}
		for _, l := range m.Layers {
			p.Size += l.Size
		}
		out.Platforms = append(out.Platforms, p)
	}
	idx, err := ociimage.Index(imgs...)
	if err != nil {
		return nil, fmt.Errorf("the %s image index: %w", binary, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	out.Digest = d.String()
	out.Pinned = imageref.Format(repo, "", out.Digest)
	dir := filepath.Join(o.Out, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out.Layout, out.Archive = filepath.Join(dir, binary), filepath.Join(dir, binary+".tar")
	if err := ociimage.WriteIndexLayout(out.Layout, idx, out.Ref); err != nil {
		return nil, err
	}
	// The docker archive holds one platform: this machine's if built.
	arch := 0
	if i := slices.Index(o.Arches, runtime.GOARCH); i >= 0 {
		arch = i
	}
	out.ArchiveArch = o.Arches[arch]
	if err := ociimage.WriteArchive(out.Archive, imgs[arch], out.Ref); err != nil {
		return nil, err
	}
	return out, nil
}

// checksums are sha256sum's lines for the release's top-level files.
func checksums(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && e.Name() != "SHA256SUMS" {
			files = append(files, e.Name())
		}
	}
	img, _ := os.ReadDir(filepath.Join(dir, "images"))
	for _, e := range img {
		if !e.IsDir() {
			files = append(files, filepath.Join("images", e.Name()))
		}
	}
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		h := sha256.New()
		fh, err := os.Open(filepath.Join(dir, f))
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), f)
	}
	return b.String(), nil
}
