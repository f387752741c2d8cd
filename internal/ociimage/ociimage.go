// Package ociimage builds OCI images of static Go binaries without a container
// engine: one layer holding the binary (and, optionally, the build host's CA
// bundle and an empty /tmp), on an empty base, with a non-root user and the
// org.opencontainers.image.* labels. The result is written as an OCI image
// layout (what `crane push` and `skopeo copy oci:` publish) or as a
// docker-archive tarball (what `ctr images import` and `docker load` read).
//
// Images are reproducible: every file and the image itself carry the Created
// time given (the Unix epoch by default), so the same binary gives the same
// digest.
package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user images run as unless told otherwise: the uid and gid
// distroless calls "nonroot". Numeric, so no /etc/passwd is needed, and
// Kubernetes' runAsNonRoot can verify it.
const NonRoot = "65532:65532"

// HostCABundle is where Debian (and the Go standard library on Linux) keeps the
// system's trusted CA certificates; Spec.CACerts copies it into the image at
// the same path.
const HostCABundle = "/etc/ssl/certs/ca-certificates.crt"

// Spec describes an image of one binary.
type Spec struct {
	// Binary is the path of the (static) binary on this machine.
	Binary string
	// Path is where the binary lives in the image; "/<base name of Binary>"
	// when empty.
	Path string
	// Entrypoint defaults to [Path].
	Entrypoint []string
	Cmd        []string
	Env        []string
	// User defaults to NonRoot; "0:0" runs as root.
	User string
	// WorkingDir defaults to "/".
	WorkingDir string
	// StopSignal is the image's STOPSIGNAL (for example "SIGQUIT"); the
	// runtime's default (SIGTERM) when empty.
	StopSignal string
	// Labels become the image config's labels (org.opencontainers.image.*).
	Labels map[string]string
	// CACerts copies HostCABundle into the image, for binaries that speak TLS.
	CACerts bool
	// Files are extra files (path in the image → content, mode 0644).
	Files map[string][]byte
	// Created stamps the image and every file; the Unix epoch when zero.
	Created time.Time
	// OS and Arch default to linux and this machine's architecture.
	OS, Arch string
}

// Build returns the image described by s.
func Build(s Spec) (v1.Image, error) {
	if s.Binary == "" {
		return nil, fmt.Errorf("ociimage: Spec.Binary is empty: give the path of a built binary")
	}
	bin, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, fmt.Errorf("reading the image's binary: %w", err)
	}
	if s.Path == "" {
		s.Path = "/" + path.Base(s.Binary)
	}
	if !path.IsAbs(s.Path) {
		return nil, fmt.Errorf("ociimage: Spec.Path %q must be absolute", s.Path)
	}
	if len(s.Entrypoint) == 0 {
		s.Entrypoint = []string{s.Path}
	}
	if s.User == "" {
		s.User = NonRoot
	}
	if s.WorkingDir == "" {
		s.WorkingDir = "/"
	}
	if s.OS == "" {
		s.OS = "linux"
	}
	if s.Arch == "" {
		s.Arch = runtime.GOARCH
	}
	files := map[string]file{s.Path: {data: bin, mode: 0o755}}
	for p, data := range s.Files {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("ociimage: Spec.Files path %q must be absolute", p)
		}
		files[p] = file{data: data, mode: 0o644}
	}
	if s.CACerts {
		ca, err := os.ReadFile(HostCABundle)
		if err != nil {
			return nil, fmt.Errorf("reading the CA bundle for the image (install Debian's ca-certificates): %w", err)
		}
		files[HostCABundle] = file{data: ca, mode: 0o644}
	}
	layerTar, err := tarOf(files, s.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("making the image layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: s.Created},
		CreatedBy: "ociimage: " + path.Base(s.Binary),
	}})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = s.OS, s.Arch
	cf.Created = v1.Time{Time: s.Created}
	cf.Config = v1.Config{
		Entrypoint: s.Entrypoint,
		Cmd:        s.Cmd,
		Env:        s.Env,
		User:       s.User,
		WorkingDir: s.WorkingDir,
		Labels:     s.Labels,
		StopSignal: s.StopSignal,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("writing the image config: %w", err)
	}
	return img, nil
}

type file struct {
	data []byte
	mode int64
}

// tarOf writes files, and every directory above them, into a tar stream owned
// by root, with /tmp world-writable and sticky as programs expect.
func tarOf(files map[string]file, mtime time.Time) ([]byte, error) {
	dirs := map[string]bool{"/tmp": true}
	for p := range files {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names) // parents sort before their children
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: strings.TrimPrefix(n, "/"), ModTime: mtime, Format: tar.FormatPAX}
		if f, ok := files[n]; ok {
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, f.mode, int64(len(f.data))
		} else {
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, h.Name+"/"
			if n == "/tmp" {
				h.Mode = 0o1777
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("writing %s into the layer: %w", n, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(files[n].data); err != nil {
				return nil, fmt.Errorf("writing %s into the layer: %w", n, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img into an OCI image layout at dir (created, or appended
// to when it exists), with ref as its org.opencontainers.image.ref.name.
func WriteLayout(dir string, img v1.Image, ref string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return fmt.Errorf("creating the OCI layout %s: %w", dir, err)
		}
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": r.Name(),
	}))
}

// WriteArchive writes img, tagged ref, as a docker-archive tarball at file.
func WriteArchive(file string, img v1.Image, ref string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := tarball.WriteToFile(file, r, img); err != nil {
		return fmt.Errorf("writing the image archive %s: %w", file, err)
	}
	return nil
}

// GoBuild compiles the Go package pkg (as `go build` names it, resolved from
// dir) into a static binary at out: CGO off, paths trimmed, for linux and arch
// (this machine's when empty), with ldflags (for example the version stamp).
// An image's binary is a Linux one.
func GoBuild(ctx context.Context, dir, pkg, out, arch, ldflags string) error {
	return GoBuildFor(ctx, dir, pkg, out, "linux", arch, ldflags)
}

// GoBuildFor is GoBuild for another OS (goos as GOOS spells it: windows for
// the Windows drain agent, which ships as a plain binary, not an image).
func GoBuildFor(ctx context.Context, dir, pkg, out, goos, arch, ldflags string) error {
	if goos == "" {
		return fmt.Errorf("go build %s: no GOOS", pkg)
	}
	if arch == "" {
		arch = runtime.GOARCH
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w "+ldflags, "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w\n%s", pkg, goos, arch, err, b)
	}
	return nil
}

// Index combines images of one program built for several platforms into an
// OCI image index (a multi-arch image): each manifest's descriptor carries
// the platform its config says (os, architecture), so a runtime pulls the
// one for its node. Two images of the same platform are refused.
func Index(imgs ...v1.Image) (v1.ImageIndex, error) {
	if len(imgs) == 0 {
		return nil, fmt.Errorf("ociimage: an index of no images")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
		if seen[p.String()] {
			return nil, fmt.Errorf("ociimage: two images for %s in one index", p.String())
		}
		seen[p.String()] = true
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &p,
		}})
	}
	return idx, nil
}

// WriteIndexLayout writes idx into a new OCI image layout at dir (replacing
// what is there), with ref as its org.opencontainers.image.ref.name: the
// layout's index.json names the one image index, as `crane push DIR ref`
// publishes it.
func WriteIndexLayout(dir string, idx v1.ImageIndex, ref string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("creating the OCI layout %s: %w", dir, err)
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": r.Name(),
	}))
}
