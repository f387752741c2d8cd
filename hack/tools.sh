#!/usr/bin/env bash
# Builds the control-plane binaries runnerfleet tests and runs against, from the
# Go module proxy, once per version, into a cache outside the repository:
#
#   ${RUNNERFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runnerfleet}/<component>-<version>/bin
#
# Usage: hack/tools.sh <target>...
#   etcd        etcd (go.etcd.io/etcd/server/v3, via hack/etcd)
#   kube        kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (via hack/kube)
#   envtest     etcd + kube; prints the KUBEBUILDER_ASSETS directory on stdout
#   path        prints the cache root
#
# A cached build is reused as long as its directory holds every binary; builds
# go to a temporary directory and are moved into place only when complete, and
# a lock keeps two concurrent callers from building the same thing twice.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${RUNNERFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runnerfleet}
mkdir -p "$cache"

modversion() { awk -v m="$2" '$1==m && $2 ~ /^v/ {print $2; exit} $1=="require" && $2==m {print $3; exit}' "$root/hack/$1/go.mod"; }
KUBE_VERSION=$(modversion kube k8s.io/kubernetes)
ETCD_VERSION=$(modversion etcd go.etcd.io/etcd/server/v3)
[ -n "$KUBE_VERSION" ] && [ -n "$ETCD_VERSION" ] || { echo "tools: cannot read versions from hack/*/go.mod" >&2; exit 1; }

log() { echo "tools: $*" >&2; }

# build <dir> <module dir> <ldflags> <pkg=name>...
build() {
  local dest=$1 mod=$2 ldflags=$3; shift 3
  local missing=0 spec
  for spec in "$@"; do [ -x "$dest/bin/${spec#*=}" ] || missing=1; done
  [ $missing = 1 ] || return 0
  exec 9>"$dest.lock"
  flock 9
  missing=0
  for spec in "$@"; do [ -x "$dest/bin/${spec#*=}" ] || missing=1; done
  if [ $missing = 1 ]; then
    local tmp; tmp=$(mktemp -d "$dest.tmp.XXXX")
    local start=$SECONDS
    for spec in "$@"; do
      log "building ${spec#*=} into $dest/bin (cold builds take minutes, see README)"
      (cd "$root/$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/${spec#*=}" "${spec%=*}")
    done
    chmod 755 "$tmp"; rm -rf "$dest/bin"; mkdir -p "$dest"; mv "$tmp" "$dest/bin"
    log "built $(basename "$dest") in $((SECONDS - start))s"
  fi
  exec 9>&-
}

etcd() {
  build "$cache/etcd-$ETCD_VERSION" hack/etcd "-s -w" \
    "go.etcd.io/etcd/server/v3=etcd"
}

kube() {
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local v=k8s.io/component-base/version
  build "$cache/kube-$KUBE_VERSION" hack/kube \
    "-s -w -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z" \
    "k8s.io/kubernetes/cmd/kube-apiserver=kube-apiserver" \
    "k8s.io/kubernetes/cmd/kubectl=kubectl" \
    "k8s.io/kubernetes/cmd/kube-controller-manager=kube-controller-manager" \
    "k8s.io/kubernetes/cmd/kube-scheduler=kube-scheduler"
}

envtest() {
  etcd; kube
  local dir="$cache/envtest-$KUBE_VERSION-etcd-$ETCD_VERSION"
  mkdir -p "$dir"
  ln -sf "$cache/etcd-$ETCD_VERSION/bin/etcd" "$dir/etcd"
  local b; for b in kube-apiserver kubectl kube-controller-manager kube-scheduler; do
    ln -sf "$cache/kube-$KUBE_VERSION/bin/$b" "$dir/$b"
  done
  echo "$dir"
}

[ $# -gt 0 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
for t in "$@"; do
  case $t in
    etcd|kube|envtest) $t ;;
    path) echo "$cache" ;;
    *) echo "tools: unknown target $t (want etcd, kube, envtest, path)" >&2; exit 2 ;;
  esac
done
