package localcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/runnerfleet/runnerfleet/internal/ociimage"
)

// The images the real node runs, built on this machine from this checkout
// (no registry): the sandbox image and the stand-in gitlab-runner that the
// local stack's RunnerClass names as its manager image
// (stacks/Pulumi.local.yaml). Every start of the node builds and imports
// them again under the same names; a pod started later runs the new build.
const (
	PauseImage   = "runnerfleet.local/pause:local"
	StandinImage = "runnerfleet.local/gitlab-runner-standin:local"
	// standinPath is where the stand-in sits in its image: on PATH as
	// gitlab-runner, so the manager Deployment's command starts it.
	standinPath = "/usr/bin/gitlab-runner"
	// busyboxPath is Debian's static busybox (busybox-static): the stand-in
	// image's /bin/sh, cp, kill and sleep, which the manager pod's init
	// container and preStop hook run.
	busyboxPath = "/bin/busybox"
)

// busyboxApplets are the commands the manager pod runs besides
// gitlab-runner, and a few for a newcomer's kubectl exec.
var busyboxApplets = []string{"sh", "cp", "mv", "sed", "tr", "chown", "kill", "sleep", "cat", "ls", "ps", "env"}

// builtImage is an image archive ready to import.
type builtImage struct {
	Ref     string
	Archive string
}

// buildImages builds the pause and stand-in images from the checkout at
// root into dir, as docker archives.
func buildImages(ctx context.Context, root, dir string, log io.Writer) (pause, standin builtImage, err error) {
	if root == "" {
		return pause, standin, fmt.Errorf("the real node's images are built from a runnerfleet checkout: run from one (Options.RepoRoot)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return pause, standin, err
	}
	start := time.Now()
	pauseBin := filepath.Join(dir, "pause")
	if err := ociimage.GoBuild(ctx, root, "./localstack/localcluster/internal/pause", pauseBin, "", ""); err != nil {
		return pause, standin, fmt.Errorf("building the pause image's binary: %w", err)
	}
	img, err := ociimage.Build(ociimage.Spec{Binary: pauseBin, Path: "/pause", User: "65535:65535"})
	if err != nil {
		return pause, standin, err
	}
	if pause, err = writeImage(dir, PauseImage, img); err != nil {
		return pause, standin, err
	}

	standinBin := filepath.Join(dir, "gitlab-runner")
	if err := ociimage.GoBuild(ctx, root, "./cmd/standin-runner", standinBin, "", ""); err != nil {
		return pause, standin, fmt.Errorf("building the stand-in runner: %w", err)
	}
	img, err = ociimage.Build(ociimage.Spec{
		Binary: standinBin,
		Path:   standinPath,
		Env:    []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		Labels: map[string]string{"org.opencontainers.image.title": "gitlab-runner stand-in (runnerfleet local cluster)"},
	})
	if err != nil {
		return pause, standin, err
	}
	if img, err = withBusybox(img); err != nil {
		return pause, standin, err
	}
	if standin, err = writeImage(dir, StandinImage, img); err != nil {
		return pause, standin, err
	}
	fmt.Fprintf(log, "Built images %s and %s %.1fs\n", pause.Ref, standin.Ref, time.Since(start).Seconds())
	return pause, standin, nil
}

// writeImage writes img, tagged ref, as a docker archive.
func writeImage(dir, ref string, img v1.Image) (builtImage, error) {
	name, _, _ := strings.Cut(filepath.Base(ref), ":")
	file := filepath.Join(dir, name+".tar")
	if err := ociimage.WriteArchive(file, img, ref); err != nil {
		return builtImage{}, err
	}
	return builtImage{Ref: ref, Archive: file}, nil
}

// withBusybox adds a layer with this machine's static busybox and the
// applets the manager pod runs.
func withBusybox(img v1.Image) (v1.Image, error) {
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("reading %s for the stand-in image (install Debian's busybox-static: hack/tools.sh node): %w", busyboxPath, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	hdrs := []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb)), ModTime: epoch},
	}
	for _, a := range busyboxApplets {
		hdrs = append(hdrs, &tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777, ModTime: epoch})
	}
	for _, h := range hdrs {
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(bb); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "localcluster: busybox"}})
}
