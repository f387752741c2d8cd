// Package version is the one place that says which release this tree is and
// which build a binary is. Release is the version the tree releases next: the
// chart's version and appVersion, the image tags the chart, the manifests and
// the Pulumi program default to. Version is stamped into a binary at build
// time (make build, make image, hack/release.sh):
//
//	go build -ldflags "-X github.com/runnerfleet/runnerfleet/internal/version.Version=v0.1.0 \
//	  -X github.com/runnerfleet/runnerfleet/internal/version.Commit=$(git rev-parse HEAD)"
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/runnerfleet/runnerfleet/internal/imageref"
)

// Release is the release this tree builds, without the leading v. The
// release script refuses a tag that differs from it.
const Release = "0.1.0"

// Tag is the git tag and image tag of Release.
const Tag = "v" + Release

// Registry is where the release's images are published.
const Registry = "ghcr.io/runnerfleet"

// Image is the image of binary (runnerset-controller, fleet, fleet-agent)
// at the release's tag.
func Image(binary string) string { return imageref.Format(Repository(binary), Tag, "") }

// Repository is the image repository of binary, without a tag.
func Repository(binary string) string { return Registry + "/" + binary }

// Stamped by -ldflags -X at build time; empty in an unstamped build.
var (
	Version string
	Commit  string
)

// Get returns the build's version: the stamped one, else Release with a
// -dev suffix (go build and go run without ldflags).
func Get() string {
	if Version != "" {
		return Version
	}
	return Tag + "-dev"
}

// String is what --version prints: binary, version, commit, Go version and
// platform.
func String(binary string) string {
	commit := Commit
	if commit == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					commit = s.Value
				}
			}
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", binary, Get(), strings.TrimSpace(commit), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// LDFlags are the linker flags that stamp version and commit.
func LDFlags(version, commit string) string {
	const pkg = "github.com/runnerfleet/runnerfleet/internal/version"
	return fmt.Sprintf("-X %s.Version=%s -X %s.Commit=%s", pkg, version, pkg, commit)
}
