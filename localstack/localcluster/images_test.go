package localcluster

import (
	"archive/tar"
	"context"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The stand-in image carries what the manager pod runs: gitlab-runner on
// PATH for the container's command, and sh, cp, kill and sleep for the
// init container's copy of config.toml and the preStop drain.
func TestImagesCarryWhatTheManagerPodRuns(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pause, standin, err := buildImages(context.Background(), root, t.TempDir(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if pause.Ref != PauseImage || standin.Ref != StandinImage {
		t.Errorf("refs %s, %s; want %s, %s", pause.Ref, standin.Ref, PauseImage, StandinImage)
	}
	tag, err := name.NewTag(StandinImage)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(standin.Archive, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cf.Config.Env, "PATH=/usr/local/bin:/usr/bin:/bin") || cf.Config.User == "" || strings.HasPrefix(cf.Config.User, "0") {
		t.Errorf("config: env %v user %q; want PATH with /usr/bin and a non-root user", cf.Config.Env, cf.Config.User)
	}
	if cf.Config.StopSignal != "" {
		t.Errorf("STOPSIGNAL %q: the image keeps the runtime's default, so only the preStop hook drains", cf.Config.StopSignal)
	}
	files := map[string]*tar.Header{}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files["/"+strings.TrimSuffix(h.Name, "/")] = h
		}
		rc.Close()
	}
	if h := files[standinPath]; h == nil || h.Mode&0o111 == 0 {
		t.Errorf("%s missing or not executable: %+v", standinPath, h)
	}
	if h := files[busyboxPath]; h == nil || h.Mode&0o111 == 0 {
		t.Errorf("%s missing or not executable", busyboxPath)
	}
	for _, a := range []string{"sh", "cp", "kill", "sleep"} {
		if h := files["/bin/"+a]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
			t.Errorf("/bin/%s is not a link to busybox: %+v", a, h)
		}
	}
}
