#!/usr/bin/env bash
# The release procedure, end to end, into a local directory:
#
#   hack/release.sh v0.1.0 [--out DIR] [--tag] [--allow-dirty]
#
#   1. checks: the version is internal/version.Release, CHANGELOG.md has its
#      section, the generated CRDs, ClusterRole, chart and manifests are what
#      make manifests writes, the tree is clean (unless --allow-dirty);
#   2. tag: with --tag, an annotated git tag vX.Y.Z at HEAD (refused if the
#      tag exists elsewhere); without, the release is built from HEAD untagged;
#   3. images: runnerset-controller, fleet and fleet-agent, static and
#      version-stamped, each an OCI image index for linux/amd64 and
#      linux/arm64 (hack/release's --arch) as an OCI layout
#      (DIR/images/<binary>/), this machine's platform of it as a docker
#      archive (DIR/images/<binary>.tar), and DIR/digests.json: every
#      image's index digest and per-platform manifest digests and sizes;
#   4. the Windows drain agent: DIR/fleet-agent.exe (windows/amd64, static,
#      version-stamped; a plain binary for the manager VM, not an image);
#   5. chart: DIR/runnerfleet-X.Y.Z.tgz (the Helm SDK's helm package), its
#      image.digest the controller's index digest;
#   6. manifests: DIR/install.yaml, the controller pinned by that digest,
#      DIR/admission-policies.yaml; and DIR/SHA256SUMS.
#
# Publishing is then (not run here: no registry is reachable from CI):
#   crane push DIR/images/runnerset-controller ghcr.io/runnerfleet/runnerset-controller:vX.Y.Z   (same for fleet, fleet-agent;
#     the registry then holds the index at the digest digests.json names)
#   helm push DIR/runnerfleet-X.Y.Z.tgz oci://ghcr.io/runnerfleet/charts
#   git push origin vX.Y.Z, and a GitHub release with DIR/install.yaml, DIR/admission-policies.yaml, the chart and SHA256SUMS
#
# To start the next release: bump Release in internal/version/version.go, run
# make manifests (chart version, image tags, install.yaml follow), and add an
# [Unreleased] section to CHANGELOG.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3} GOFLAGS=${GOFLAGS:--buildvcs=false}

die() { echo "release: $*" >&2; exit 1; }
[ $# -ge 1 ] || die "usage: hack/release.sh vX.Y.Z [--out DIR] [--tag] [--allow-dirty]"
version=$1; shift
out="" tag=0 dirty=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --tag) tag=1; shift ;;
    --allow-dirty) dirty=1; shift ;;
    *) die "unknown argument $1" ;;
  esac
done
out=${out:-dist/$version}

release=$(sed -n 's/^const Release = "\(.*\)"/\1/p' internal/version/version.go)
[ "$version" = "v$release" ] || die "$version is not the tree's release v$release (internal/version.Release): bump it, run make manifests, commit"
grep -q "^## \[$release\]" CHANGELOG.md || die "CHANGELOG.md has no '## [$release]' section"

start=$SECONDS
echo "release: regenerating the CRDs, the ClusterRole, the chart and the manifests" >&2
make -s manifests
git diff --quiet -- runnerset/crds runnerset/rbac charts ||
  die "make manifests changed generated files (git diff -- runnerset/crds runnerset/rbac charts): commit them first"
if [ $dirty = 0 ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  die "the tree has uncommitted changes (git status); commit them or pass --allow-dirty"
fi
commit=$(git rev-parse HEAD)
if [ $tag = 1 ]; then
  if existing=$(git rev-parse -q --verify "refs/tags/$version^{commit}"); then
    [ "$existing" = "$commit" ] || die "tag $version exists at $existing, not HEAD $commit"
  else
    git tag -a "$version" -m "runnerfleet $version" && echo "release: tagged $version at $commit" >&2
  fi
fi

rm -rf "$out"
mkdir -p "$out"
go run ./hack/release --version "$version" --commit "$commit" --out "$out"
echo "release: $version in $out ($((SECONDS - start))s)" >&2
