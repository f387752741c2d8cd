// Package imageref is the one place that says how an image reference is
// written and which references runnerfleet accepts: a repository with a tag
// (repo:v0.1.0) or pinned by digest (repo@sha256:…), read by
// go-containerregistry's parser, strictly: a registry, a repository and a
// tag or digest, nothing left to a default ("latest", Docker Hub). The
// chart's image values, the release's pinned manifests, the stack config's
// image keys and fleet up's --image go through it.
package imageref

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
)

// Format is the reference of repository at digest when digest is set
// (repo@sha256:…, what a release pins), else at tag (repo:tag).
func Format(repository, tag, digest string) string {
	if digest != "" {
		return repository + "@" + digest
	}
	return repository + ":" + tag
}

// Check refuses a reference that is not registry/repository:tag or
// registry/repository@sha256:<digest>; the error says what was wrong and
// what a good one looks like (example).
func Check(ref, example string) error {
	if _, err := name.ParseReference(ref, name.StrictValidation); err != nil {
		return fmt.Errorf("is not an image reference (%v): give registry/repository:tag or registry/repository@sha256:<digest>, such as %s", err, example)
	}
	return nil
}
