// Package release builds a runnerfleet release into a local directory: an
// OCI image per binary (internal/ociimage: static, on an empty base,
// non-root, org.opencontainers.image.* labels) as an OCI layout that `crane
// push` publishes and a docker-archive tarball that `ctr images import` and
// `kind load image-archive` read; the Helm chart packaged by the Helm SDK;
// the plain manifests; the binaries that run outside a container
// (Downloads: the Windows drain agent fleet-agent.exe); and SHA256SUMS. hack/release.sh runs it after the
// checks a release needs (make image runs the images only).
package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/internal/ociimage"
	"github.com/runnerfleet/runnerfleet/internal/version"
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
	// Arch is the image's architecture (this machine's when empty).
	Arch string
	// Images only: no downloads, chart, manifests or checksums.
	ImagesOnly bool
	// Created stamps images (the Unix epoch when zero: reproducible).
	Created time.Time
	Log     io.Writer
}

// Image is one built image.
type Image struct {
	Binary  string
	Ref     string
	Layout  string // OCI layout directory
	Archive string // docker-archive tarball
	Digest  string
	// Size is the compressed size of its layers and config.
	Size int64
}

// Report is what a release built.
type Report struct {
	Images []Image
	Files  []string // every file of the release, relative to Out
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
		fmt.Fprintf(o.Log, "image %s %s (%s, %.1f MB)\n", img.Ref, img.Digest, img.Archive, float64(img.Size)/1e6)
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
	// The chart, packaged as helm package does.
	pkg := action.NewPackage()
	pkg.Destination = o.Out
	tgz, err := pkg.Run(filepath.Join(o.Root, "charts", charts.ChartName), nil)
	if err != nil {
		return nil, fmt.Errorf("packaging the chart: %w", err)
	}
	fmt.Fprintf(o.Log, "chart %s\n", tgz)
	if err := os.WriteFile(filepath.Join(o.Out, "install.yaml"), charts.InstallYAML(), 0o644); err != nil {
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

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func buildImage(ctx context.Context, o Options, bins, binary, pkg, desc string) (*Image, error) {
	bin := filepath.Join(bins, binary)
	fmt.Fprintf(o.Log, "go build %s (static, %s)\n", pkg, o.Version)
	if err := ociimage.GoBuild(ctx, o.Root, pkg, bin, o.Arch, version.LDFlags(o.Version, o.Commit)); err != nil {
		return nil, err
	}
	ref := o.Registry + "/" + binary + ":" + o.Version
	img, err := ociimage.Build(ociimage.Spec{
		Binary:  bin,
		Arch:    o.Arch,
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
		return nil, fmt.Errorf("the %s image: %w", binary, err)
	}
	dir := filepath.Join(o.Out, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out := &Image{Binary: binary, Ref: ref, Layout: filepath.Join(dir, binary), Archive: filepath.Join(dir, binary+".tar")}
	if err := os.RemoveAll(out.Layout); err != nil {
		return nil, err
	}
	if err := ociimage.WriteLayout(out.Layout, img, ref); err != nil {
		return nil, err
	}
	if err := ociimage.WriteArchive(out.Archive, img, ref); err != nil {
		return nil, err
	}
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	out.Digest = d.String()
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	out.Size = m.Config.Size
	for _, l := range m.Layers {
		out.Size += l.Size
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
