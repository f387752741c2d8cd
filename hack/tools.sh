#!/usr/bin/env bash
# Builds the control-plane binaries runnerfleet tests and runs against, from the
# Go module proxy, once per version, into a cache outside the repository:
#
#   ${RUNNERFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runnerfleet}/<component>-<version>/bin
#
# Usage: hack/tools.sh <target>...
#   etcd        etcd (go.etcd.io/etcd/server/v3, via hack/etcd)
#   kube        kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (via hack/kube),
#               and the kubelet with them (one go build; see kubelet)
#   kubelet     the kubelet (via hack/kube, same version), in a cache directory of its own;
#               it runs the local cluster's one real node (containerd, runc and the CNI
#               plugins come from Debian: see .ci/run and make tools); the same as kube
#   kwok        kwok (sigs.k8s.io/kwok/cmd/kwok, a tool of the project's own go.mod) and
#               stages.yaml, the node and pod lifecycle stages it needs, taken from the same module
#   karpenter   Karpenter's kwok cloud provider (sigs.k8s.io/karpenter/kwok, a tool of the
#               project's own go.mod, the Karpenter the controller is built against) as
#               karpenter-kwok: real Karpenter, fake instances
#   keda        KEDA's operator and its metrics adapter (github.com/kedacore/keda/v2/cmd/operator
#               and cmd/adapter, via hack/keda, one go build) as keda-operator and keda-adapter,
#               and KEDA's CRDs as its module ships them (config/crd/bases) in crds/ beside them
#   envtest     etcd + kube; prints the KUBEBUILDER_ASSETS directory on stdout
#   local       etcd + kube + kubelet + kwok + karpenter + prometheus + kube-router, and links to keda's files
#               (built by the keda target, which the local cluster calls when it runs KEDA); prints the directory
#               the local control plane (localstack/localcluster, fleet up --stack local) runs from
#   pulumi      the Pulumi CLI (github.com/pulumi/pulumi/pkg/v3/cmd/pulumi, via hack/pulumi)
#               and the Kubernetes resource provider plugin (pulumi-resource-kubernetes,
#               github.com/pulumi/pulumi-kubernetes/provider/v4, via hack/pulumi-kubernetes);
#               prints a directory holding bin/pulumi, bin/pulumi-resource-kubernetes and
#               home/, a PULUMI_HOME with that plugin installed
#   node        the local cluster's real node from Debian: containerd, runc, the CNI plugins
#               (containernetworking-plugins), umoci, a static busybox (the stand-in
#               runner image's shell), iptables and ipset (what kube-router drives);
#               installed with apt-get when missing (root only)
#   kube-router kube-router (github.com/cloudnativelabs/kube-router/v2, via hack/kube-router,
#               on the project's k8s.io versions): its network policy controller
#               enforces NetworkPolicy on the real node
#   promtool    promtool and the Prometheus server (github.com/prometheus/prometheus/cmd/...,
#               via hack/prometheus; the server watches the local stack) and amtool
#               (github.com/prometheus/alertmanager/cmd/amtool, via hack/alertmanager);
#               prints a directory holding promtool and amtool: every Prometheus and Alertmanager check
#               (provisioning/prometheus) runs them from there (RUNNERFLEET_PROMTOOLS)
#   gitlab-ci-local  gitlab-ci-local (npm, pinned below) installed with npm into the cache,
#               and rsync (Debian) when missing; prints the path of its executable: the e2e
#               test runs the deploy pipeline template (ci/runnerfleet.gitlab-ci.yml) with it
#   path        prints the cache root
#
# A cached build is reused as long as its directory holds every binary; builds
# go to a temporary directory and are moved into place only when complete, and
# a lock keeps two concurrent callers from building the same thing twice.
#
# A binary already installed at the pinned version is used instead of built:
# etcd and the Kubernetes binaries from $KUBEBUILDER_ASSETS or PATH, pulumi,
# promtool, prometheus, amtool and kwok from PATH, each only when its own
# --version names the pinned version (RUNNERFLEET_NO_INSTALLED=1 turns this
# off). Each build prints one line with what a cold build of it took on two
# idle cores (COLD_SECONDS below) and the time this call has spent so far;
# go's own output ("go: downloading ...") goes to $cache/logs/<tool>.log,
# whose tail is printed if the build fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${RUNNERFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runnerfleet}
mkdir -p "$cache"
# The project's Go toolchain (the Makefile's export, the one place it is
# named): a caller with GOTOOLCHAIN=local (a test's go test, a shell) would
# otherwise build the tools with whatever go is installed, compiling every
# package again under another toolchain's cache keys.
case ${GOTOOLCHAIN:-local} in
  local|auto|path) GOTOOLCHAIN=$(awk '$1=="export" && $2=="GOTOOLCHAIN" {print $4; exit}' "$root/Makefile"); export GOTOOLCHAIN ;;
esac

# modversion <dir> <module>: the version hack/<dir>/go.mod (or, for dir ".",
# the project's own go.mod) requires of <module>.
modversion() {
  local f="$root/hack/$1/go.mod"; [ "$1" = . ] && f="$root/go.mod"
  awk -v m="$2" '$1==m && $2 ~ /^v/ {print $2; exit} $1=="require" && $2==m {print $3; exit}' "$f"
}
KUBE_VERSION=$(modversion kube k8s.io/kubernetes)
ETCD_VERSION=$(modversion etcd go.etcd.io/etcd/server/v3)
# kwok and Karpenter's kwok provider are tools of the project's own module
# (go.mod's tool block): they link the client-go, controller-runtime and
# Karpenter packages the project's tests compile anyway, which a module of
# their own compiled a second time at other versions (about 300 s of a cold
# build, 185 s + 115 s, against ~45 s of their own packages). Their cache
# directories name the project's client-go too, since that is part of what
# they are built from.
KWOK_VERSION=$(modversion . sigs.k8s.io/kwok)
KARPENTER_VERSION=$(modversion . sigs.k8s.io/karpenter)
CLIENT_GO_VERSION=$(modversion . k8s.io/client-go)
KUBE_ROUTER_VERSION=$(modversion kube-router github.com/cloudnativelabs/kube-router/v2)
PULUMI_VERSION=$(modversion pulumi github.com/pulumi/pulumi/pkg/v3)
PULUMI_KUBERNETES_VERSION=$(modversion pulumi-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4)
PROMETHEUS_VERSION=$(modversion prometheus github.com/prometheus/prometheus)
ALERTMANAGER_VERSION=$(modversion alertmanager github.com/prometheus/alertmanager)
KEDA_VERSION=$(modversion keda github.com/kedacore/keda/v2)
[ -n "$KUBE_VERSION" ] && [ -n "$ETCD_VERSION" ] && [ -n "$KWOK_VERSION" ] && [ -n "$KARPENTER_VERSION" ] && [ -n "$CLIENT_GO_VERSION" ] && [ -n "$KUBE_ROUTER_VERSION" ] &&
  [ -n "$PULUMI_VERSION" ] && [ -n "$PULUMI_KUBERNETES_VERSION" ] && [ -n "$PROMETHEUS_VERSION" ] &&
  [ -n "$ALERTMANAGER_VERSION" ] && [ -n "$KEDA_VERSION" ] || { echo "tools: cannot read versions from go.mod and hack/*/go.mod" >&2; exit 1; }

log() { echo "tools: $*" >&2; }

# What a cold build of each tool took on two idle cores, in seconds, in the
# order `make up` builds them: measured by a cold `make up` on 5 December 2026
# (empty Go module, build and tool caches; nothing else compiling), the
# figures README.md quotes. Each builds on the packages the ones before it
# compiled: kube first (the Kubernetes packages), then kwok and Karpenter on
# the client-go and controller-runtime they share with it, kube-router on the
# Kubernetes packages (137 of its 785 packages are its own: 960 s from an
# empty cache alone), Prometheus and the Pulumi CLI and plugin on their own.
# amtool's and gitlab-ci-local's are from the cold .ci/run. KEDA's is an
# estimate from its measured CPU time (BENCHMARKS.md, "KEDA's build cost":
# the operator 616 CPU s, the adapter 84 more, from empty caches: it shares
# almost nothing with the others), until a cold run measures it.
declare -A COLD_SECONDS=(
  [etcd]=42 [kube]=336 [kwok]=60 [karpenter]=52 [prometheus]=115 [amtool]=25
  [pulumi]=167 [pulumi-kubernetes]=346 [kube-router]=27 [gitlab-ci-local]=7
  [keda]=420
)
started=$SECONDS
mins() { local s=$1; if [ "$s" -ge 90 ]; then echo "$(( (s + 30) / 60 )) min"; else echo "${s} s"; fi; }
# announce <tool> <what>: one line per build, with what a cold one takes.
announce() {
  log "building $2: a cold build took about $(mins "${COLD_SECONDS[$1]}") on 2 idle cores (this call: $(mins $((SECONDS - started))) so far; log: $cache/logs/$1.log)"
}
# quietly <tool> <command...>: runs a build step with go's chatter in the
# tool's log; on failure prints the log's tail and fails.
quietly() {
  local tool=$1; shift
  mkdir -p "$cache/logs"
  if ! "$@" >>"$cache/logs/$tool.log" 2>&1; then
    tail -40 "$cache/logs/$tool.log" >&2
    echo "tools: building $tool failed; the whole log is $cache/logs/$tool.log" >&2
    exit 1
  fi
}

# installed <name> <version>: the path of an installed <name> whose own
# --version output names <version> (v1.36.2, 3.16.0, ...), from
# $KUBEBUILDER_ASSETS (etcd and the Kubernetes binaries) or PATH, never from
# this cache; nothing when none is, or when RUNNERFLEET_NO_INSTALLED is set.
installed() {
  local name=$1 want=$2 dir p out
  [ -z "${RUNNERFLEET_NO_INSTALLED:-}" ] || return 0
  local dirs=()
  case $name in etcd|kube-*|kubectl|kubelet) [ -n "${KUBEBUILDER_ASSETS:-}" ] && dirs+=("$KUBEBUILDER_ASSETS") ;; esac
  IFS=: read -ra path_dirs <<<"${PATH:-}"
  dirs+=("${path_dirs[@]}")
  for dir in "${dirs[@]}"; do
    p="$dir/$name"
    [ -x "$p" ] && [ ! -d "$p" ] || continue
    case $(readlink -f "$p") in "$(readlink -f "$cache")"/*) continue ;; esac
    case $name in
      kubectl) out=$("$p" version --client 2>/dev/null) ;;
      pulumi) out=$("$p" version 2>/dev/null) ;;
      *) out=$("$p" --version 2>&1 | head -3) ;;
    esac
    # The version must stand as a whole word: v1.36.2 is not v1.36.20.
    local re=${want#v}; re=${re//./\\.}
    if grep -Eq "(^|[^0-9.])v?${re}([^0-9.]|\$)" <<<"$out"; then echo "$p"; return 0; fi
  done
}

# build <tool> <version> <module dir> <ldflags> <dir>:<pkg>=<name>...
#
# Builds the binaries of every listed cache directory that lacks one, with a
# single go build (go build -o tmp/ pkg...): the packages they share are
# compiled once and the links run beside the remaining compiles, where one go
# build per binary left a core idle during each link. Each directory's bin/ is
# replaced whole, under its lock (taken in the order given, so two callers
# never deadlock). A binary installed at <version> (see installed; an empty
# <version> never looks) is linked instead of built.
build() {
  local tool=$1 version=$2 mod=$3 ldflags=$4; shift 4
  local spec dirs=() d
  for spec in "$@"; do
    d=${spec%%:*}
    [[ " ${dirs[*]} " == *" $d "* ]] || dirs+=("$d")
  done
  complete_() { local s; for s in "$@"; do [ -x "${s%%:*}/bin/${s##*=}" ] || return 1; done; }
  complete_ "$@" && return 0
  local fds=() fd
  for d in "${dirs[@]}"; do exec {fd}>"$d.lock"; flock "$fd"; fds+=("$fd"); done
  # What is missing once the locks are held (another caller may have built it).
  local todo=() pkgs=() names=() found=()
  for d in "${dirs[@]}"; do
    local mine=()
    for spec in "$@"; do [ "${spec%%:*}" = "$d" ] && mine+=("$spec"); done
    complete_ "${mine[@]}" || todo+=("${mine[@]}")
  done
  if [ ${#todo[@]} -gt 0 ] && [ -n "$version" ]; then
    local left=() p
    for spec in "${todo[@]}"; do
      p=$(installed "${spec##*=}" "$version")
      if [ -n "$p" ]; then found+=("$spec=$p"); else left+=("$spec"); fi
    done
    todo=("${left[@]}")
  fi
  local tmp; tmp=$(mktemp -d "${dirs[0]}.tmp.XXXX")
  for spec in "${found[@]}"; do
    # <dir>:<pkg>=<name>=<path>
    local path=${spec##*=} rest=${spec%=*}
    d=${rest%%:*}; local name=${rest##*=}
    mkdir -p "$tmp/$(basename "$d")"
    ln -s "$path" "$tmp/$(basename "$d")/$name"
    log "using the installed $name $version: $path"
  done
  if [ ${#todo[@]} -gt 0 ]; then
    local start=$SECONDS pkg name out
    for spec in "${todo[@]}"; do pkg=${spec#*:}; pkgs+=("${pkg%=*}"); names+=("${spec##*=}"); done
    announce "$tool" "${names[*]}"
    quietly "$tool" bash -c 'cd "$1" && shift && CGO_ENABLED=0 go build -trimpath "$@"' _ "$root/$mod" -ldflags "$ldflags" -o "$tmp/out/" "${pkgs[@]}"
    for spec in "${todo[@]}"; do
      d=${spec%%:*}; pkg=${spec#*:}; pkg=${pkg%=*}; name=${spec##*=}
      # go build names a binary after the last element of its package path
      # that is not a major version suffix (go.etcd.io/etcd/server/v3: server).
      out=${pkg##*/}
      [[ $out =~ ^v[0-9]+$ ]] && { out=${pkg%/*}; out=${out##*/}; }
      [ -x "$tmp/out/$out" ] || { echo "tools: go build wrote no $out for $pkg" >&2; exit 1; }
      mkdir -p "$tmp/$(basename "$d")"
      cp "$tmp/out/$out" "$tmp/$(basename "$d")/$name"
    done
    log "built ${names[*]} in $((SECONDS - start))s (cold on 2 idle cores: ${COLD_SECONDS[$tool]}s)"
  fi
  for d in "${dirs[@]}"; do
    [ -d "$tmp/$(basename "$d")" ] || continue
    # Keep what another run already put there (a directory is complete only
    # with every binary: the ones built and the ones found).
    if [ -d "$d/bin" ]; then cp -a "$d/bin/." "$tmp/$(basename "$d")/" 2>/dev/null || true; fi
    chmod 755 "$tmp/$(basename "$d")"; rm -rf "$d/bin"; mkdir -p "$d"; mv "$tmp/$(basename "$d")" "$d/bin"
  done
  rm -rf "$tmp"
  for fd in "${fds[@]}"; do exec {fd}>&-; done
}

etcd() {
  build etcd "$ETCD_VERSION" hack/etcd "-s -w" \
    "$cache/etcd-$ETCD_VERSION:go.etcd.io/etcd/server/v3=etcd"
}

kube_ldflags() {
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local v=k8s.io/component-base/version
  echo "-s -w -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
}

# The control plane (kube-<version>) and the kubelet (kubelet-<version>, a
# directory of its own, so that adding it did not make the control plane's
# cached binaries incomplete) come from one go build of the same module: the
# kubelet shares most of its packages with them.
kube_all() {
  local k="$cache/kube-$KUBE_VERSION" c=k8s.io/kubernetes/cmd
  build kube "$KUBE_VERSION" hack/kube "$(kube_ldflags)" \
    "$k:$c/kube-apiserver=kube-apiserver" \
    "$k:$c/kubectl=kubectl" \
    "$k:$c/kube-controller-manager=kube-controller-manager" \
    "$k:$c/kube-scheduler=kube-scheduler" \
    "$cache/kubelet-$KUBE_VERSION:$c/kubelet=kubelet"
}
kube() { kube_all; }
kubelet() { kube_all; }

# kwok's stages (fast node initialization, node heartbeat with a lease, the
# general pod lifecycle) come from the kwok module itself, concatenated in the
# order of their kustomization.yaml files; kwok exits with "no stages found"
# without them.
KWOK_STAGES="node/fast node/heartbeat-with-lease pod/general"

kwok() {
  local dest="$cache/kwok-$KWOK_VERSION-client-go-$CLIENT_GO_VERSION"
  build kwok "$KWOK_VERSION" . "-s -w" \
    "$dest:sigs.k8s.io/kwok/cmd/kwok=kwok"
  [ -s "$dest/stages.yaml" ] && return 0
  exec 9>"$dest.lock"
  flock 9
  if [ ! -s "$dest/stages.yaml" ]; then
    quietly kwok bash -c 'cd "$1" && go mod download sigs.k8s.io/kwok' _ "$root"
    local moddir; moddir=$(cd "$root" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
    [ -d "$moddir/kustomize/stage" ] || { echo "tools: no kustomize/stage in sigs.k8s.io/kwok@$KWOK_VERSION ($moddir)" >&2; exit 1; }
    local tmp; tmp=$(mktemp "$dest/stages.yaml.XXXX")
    echo "# Generated by hack/tools.sh from sigs.k8s.io/kwok@$KWOK_VERSION kustomize/stage/{${KWOK_STAGES// /,}}; DO NOT EDIT." >"$tmp"
    local st f
    for st in $KWOK_STAGES; do
      for f in $(awk '/^resources:/{r=1; next} r && /^- /{print $2; next} r && !/^- /{r=0}' "$moddir/kustomize/stage/$st/kustomization.yaml"); do
        { echo "---"; echo "# kustomize/stage/$st/$f"; sed '/^---$/d' "$moddir/kustomize/stage/$st/$f"; } >>"$tmp"
      done
    done
    grep -q '^kind: Stage$' "$tmp" || { echo "tools: no Stage found in sigs.k8s.io/kwok@$KWOK_VERSION kustomize/stage" >&2; rm -f "$tmp"; exit 1; }
    chmod 644 "$tmp"; mv "$tmp" "$dest/stages.yaml"
  fi
  exec 9>&-
}

karpenter() {
  # The main package is called kwok; it is built as karpenter-kwok so that
  # it is not mistaken for sigs.k8s.io/kwok's kwok.
  build karpenter "" . "-s -w" \
    "$cache/karpenter-$KARPENTER_VERSION-client-go-$CLIENT_GO_VERSION:sigs.k8s.io/karpenter/kwok=karpenter-kwok"
}

# kube-router's network policy controller (the local cluster runs it alone:
# --run-router=false --run-service-proxy=false). Built from a module that
# requires the project's versions of every module the two share (k8s.io
# v0.37.2, grpc, protobuf, x/net, ...; docker/go-connections stays at
# kube-router's, which its docker client needs), so that 648 of its 785
# packages come from the build cache the project already filled.
kube_router() {
  build kube-router "" hack/kube-router \
    "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" \
    "$cache/kube-router-$KUBE_ROUTER_VERSION:github.com/cloudnativelabs/kube-router/v2/cmd/kube-router=kube-router"
}

# KEDA's operator and its metrics adapter (keda-metrics-apiserver), from
# hack/keda: a module of their own, on KEDA's own dependency versions (2.1 GB
# of modules; the project's go.mod would pull every scaler's SDK into its
# graph). One go build, so that the adapter links the packages the operator
# compiled. KEDA's CRDs come from the same module version, copied beside the
# binaries (crds/), so that the local cluster installs the schema of the
# operator it runs.
keda() {
  local dest="$cache/keda-$KEDA_VERSION" mod=github.com/kedacore/keda/v2
  build keda "" hack/keda "-s -w -X $mod/version.Version=$KEDA_VERSION" \
    "$dest:$mod/cmd/operator=keda-operator" \
    "$dest:$mod/cmd/adapter=keda-adapter"
  [ -s "$dest/crds/keda.sh_scaledobjects.yaml" ] && return 0
  exec 9>"$dest.lock"
  flock 9
  if [ ! -s "$dest/crds/keda.sh_scaledobjects.yaml" ]; then
    local moddir; moddir=$(cd "$root/hack/keda" && go list -m -f '{{.Dir}}' "$mod")
    ls "$moddir"/config/crd/bases/*.yaml >/dev/null 2>&1 || { echo "tools: no config/crd/bases/*.yaml in $mod@$KEDA_VERSION ($moddir)" >&2; exit 1; }
    local tmp; tmp=$(mktemp -d "$dest/crds.tmp.XXXX")
    cp "$moddir"/config/crd/bases/*.yaml "$tmp/"
    chmod 755 "$tmp"; chmod 644 "$tmp"/*.yaml; rm -rf "$dest/crds"; mv "$tmp" "$dest/crds"
  fi
  exec 9>&-
}

pulumi_cli() {
  build pulumi "$PULUMI_VERSION" hack/pulumi \
    "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION" \
    "$cache/pulumi-$PULUMI_VERSION:github.com/pulumi/pulumi/pkg/v3/cmd/pulumi=pulumi"
}

# The plugin's version is the provider module's own (pseudo-)version without
# the v, as upstream stamps its releases; a pseudo-version is not passed off as
# a release.
pulumi_kubernetes_plugin_version() { echo "${PULUMI_KUBERNETES_VERSION#v}"; }

# Upstream's cmd/pulumi-resource-kubernetes embeds schema-embed.json and
# terraform-mapping-embed.json, which its generate.go writes (go generate) from
# schema.json and terraform-mapping.json and which the module zip lacks. So the
# plugin is built from a temporary copy of hack/pulumi-kubernetes (the same main
# package) after running that generate.go in it with VERSION set to the
# plugin's version, which it writes into the schema. Nothing is
# generated into the repository (the schema is 7 MB).
pulumi_kubernetes() {
  local dest="$cache/pulumi-kubernetes-$PULUMI_KUBERNETES_VERSION" bin=pulumi-resource-kubernetes
  [ -x "$dest/bin/$bin" ] && return 0
  exec 9>"$dest.lock"
  flock 9
  if [ ! -x "$dest/bin/$bin" ]; then
    local version; version=$(pulumi_kubernetes_plugin_version)
    local mod=github.com/pulumi/pulumi-kubernetes/provider/v4
    quietly pulumi-kubernetes bash -c 'cd "$1" && go mod download "$2"' _ "$root/hack/pulumi-kubernetes" "$mod"
    local moddir; moddir=$(cd "$root/hack/pulumi-kubernetes" && go list -m -f '{{.Dir}}' "$mod")
    local up="$moddir/cmd/$bin" f
    for f in generate.go schema.json terraform-mapping.json; do
      [ -f "$up/$f" ] || { echo "tools: no cmd/$bin/$f in $mod@$PULUMI_KUBERNETES_VERSION ($moddir)" >&2; exit 1; }
    done
    local tmp; tmp=$(mktemp -d "$dest.tmp.XXXX")
    local start=$SECONDS
    announce pulumi-kubernetes "$bin (5 GB of build cache)"
    cp -R "$root/hack/pulumi-kubernetes" "$tmp/src"
    local pkg="$tmp/src/cmd/$bin"
    cp "$up/generate.go" "$up/schema.json" "$up/terraform-mapping.json" "$pkg/"
    chmod -R u+w "$tmp/src"
    quietly pulumi-kubernetes bash -c 'cd "$1" && VERSION=$2 go run generate.go' _ "$pkg" "$version"
    mkdir "$tmp/bin"
    quietly pulumi-kubernetes bash -c 'cd "$1" && CGO_ENABLED=0 go build -trimpath -ldflags "$2" -o "$3" "$4"' _ \
      "$tmp/src" "-s -w -X $mod/pkg/version.Version=$version" "$tmp/bin/$bin" "./cmd/$bin"
    chmod 755 "$tmp/bin"; rm -rf "$dest/bin"; mkdir -p "$dest"; mv "$tmp/bin" "$dest/bin"; rm -rf "$tmp"
    log "built $(basename "$dest") in $((SECONDS - start))s (cold on 2 idle cores: ${COLD_SECONDS[pulumi-kubernetes]}s)"
  fi
  exec 9>&-
}

# pulumi: the CLI, the plugin, and a PULUMI_HOME with the plugin installed
# (pulumi plugin install --file copies it into home/plugins), so that pulumi
# finds it without downloading anything.
pulumi() {
  pulumi_cli; pulumi_kubernetes
  local version; version=$(pulumi_kubernetes_plugin_version)
  local dir="$cache/pulumi-$PULUMI_VERSION-kubernetes-$version"
  local cli="$cache/pulumi-$PULUMI_VERSION/bin/pulumi"
  local plugin="$cache/pulumi-kubernetes-$PULUMI_KUBERNETES_VERSION/bin/pulumi-resource-kubernetes"
  mkdir -p "$dir/bin"
  ln -sf "$cli" "$dir/bin/pulumi"
  ln -sf "$plugin" "$dir/bin/pulumi-resource-kubernetes"
  if [ ! -d "$dir/home" ]; then
    exec 9>"$dir.lock"
    flock 9
    if [ ! -d "$dir/home" ]; then
      local tmp; tmp=$(mktemp -d "$dir/home.tmp.XXXX")
      log "installing resource plugin kubernetes $version into $dir/home"
      PULUMI_HOME=$tmp PULUMI_SKIP_UPDATE_CHECK=true "$cli" plugin install resource kubernetes "$version" --file "$plugin" >&2
      PULUMI_HOME=$tmp PULUMI_SKIP_UPDATE_CHECK=true "$cli" plugin ls | awk -v v="$version" '$1=="kubernetes" && $2=="resource" && $3==v {ok=1} END {exit !ok}' ||
        { echo "tools: pulumi plugin ls does not list resource plugin kubernetes $version in $tmp" >&2; exit 1; }
      chmod 755 "$tmp"; mv "$tmp" "$dir/home"
    fi
    exec 9>&-
  fi
  echo "$dir"
}

# Prometheus tags its Go module v0.MMm.p for release M.Mm.p (v0.316.0 is
# Prometheus 3.16.0); promtool --version shows the release, as upstream's do.
prometheus_release() { local v=${PROMETHEUS_VERSION#v0.}; local mm=${v%%.*}; echo "${mm:0:1}.${mm:1}.${v#*.}"; }

# promtool is built with only the service discoveries the project's
# configurations use (Prometheus's plugins/ build tags): linking every
# cloud's SDK tripled its cold build for nothing.
PROMETHEUS_SD_TAGS=remove_all_sd,enable_kubernetes_sd,enable_gce_sd,enable_dns_sd

# The Prometheus server and promtool (one go build): the local stack runs
# the server; the checks run promtool.
prometheus() {
  local cv=github.com/prometheus/common/version
  local p="$cache/prometheus-$PROMETHEUS_VERSION-sd"
  GOFLAGS="${GOFLAGS:-} -tags=$PROMETHEUS_SD_TAGS" build prometheus "$(prometheus_release)" hack/prometheus \
    "-s -w -X $cv.Version=$(prometheus_release) -X $cv.Branch=HEAD -X $cv.Revision=$PROMETHEUS_VERSION" \
    "$p:github.com/prometheus/prometheus/cmd/promtool=promtool" \
    "$p:github.com/prometheus/prometheus/cmd/prometheus=prometheus"
}

promtool() {
  local cv=github.com/prometheus/common/version
  prometheus
  build amtool "${ALERTMANAGER_VERSION#v}" hack/alertmanager \
    "-s -w -X $cv.Version=${ALERTMANAGER_VERSION#v} -X $cv.Branch=HEAD -X $cv.Revision=$ALERTMANAGER_VERSION" \
    "$cache/alertmanager-$ALERTMANAGER_VERSION:github.com/prometheus/alertmanager/cmd/amtool=amtool"
  local dir="$cache/promtools-$PROMETHEUS_VERSION-alertmanager-$ALERTMANAGER_VERSION"
  mkdir -p "$dir"
  ln -sf "$cache/prometheus-$PROMETHEUS_VERSION-sd/bin/promtool" "$dir/promtool"
  ln -sf "$cache/alertmanager-$ALERTMANAGER_VERSION/bin/amtool" "$dir/amtool"
  echo "$dir"
}

# What the real node of the local cluster runs, by the file that shows it is
# installed → the Debian package that ships it.
NODE_PACKAGES="/usr/bin/containerd=containerd /usr/sbin/runc=runc /usr/lib/cni/bridge=containernetworking-plugins /usr/bin/umoci=umoci /bin/busybox=busybox-static /usr/sbin/iptables=iptables /usr/sbin/ipset=ipset"

node() {
  local pkgs=() spec
  for spec in $NODE_PACKAGES; do [ -e "${spec%=*}" ] || pkgs+=("${spec#*=}"); done
  [ ${#pkgs[@]} -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "tools: the local cluster's node needs the Debian packages ${pkgs[*]}: install them as root (apt-get install ${pkgs[*]})" >&2
    exit 1
  fi
  log "installing ${pkgs[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2
}

# gitlab-ci-local runs a .gitlab-ci.yml on this machine (jobs without image:
# run in a shell). 4.72.0 is the newest release that runs on Node 20; later ones
# need a newer Node. Installed with npm (package name and version only), into
# a directory of its own, with npm's own cache inside the tool cache.
GITLAB_CI_LOCAL_VERSION=4.72.0

gitlab_ci_local() {
  # It copies the repository for a job with rsync (Debian's).
  if ! command -v rsync >/dev/null; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
      echo "tools: gitlab-ci-local needs rsync: install it as root (apt-get install rsync)" >&2
      exit 1
    fi
    log "installing rsync with apt-get (gitlab-ci-local copies the repository with it)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rsync >&2
  fi
  local dest="$cache/gitlab-ci-local-$GITLAB_CI_LOCAL_VERSION"
  local bin="$dest/node_modules/.bin/gitlab-ci-local"
  if [ ! -x "$bin" ]; then
    command -v npm >/dev/null || { echo "tools: gitlab-ci-local needs node and npm (Debian: apt-get install nodejs npm)" >&2; exit 1; }
    exec 9>"$dest.lock"
    flock 9
    if [ ! -x "$bin" ]; then
      local tmp; tmp=$(mktemp -d "$dest.tmp.XXXX")
      local start=$SECONDS
      log "installing gitlab-ci-local $GITLAB_CI_LOCAL_VERSION with npm: a cold install took about $(mins "${COLD_SECONDS[gitlab-ci-local]}") (this call: $(mins $((SECONDS - started))) so far; log: $cache/logs/gitlab-ci-local.log)"
      quietly gitlab-ci-local npm install --prefix "$tmp" --cache "$cache/npm" --no-audit --no-fund --no-save \
        "gitlab-ci-local@$GITLAB_CI_LOCAL_VERSION"
      "$tmp/node_modules/.bin/gitlab-ci-local" --version 2>/dev/null | grep -qx "$GITLAB_CI_LOCAL_VERSION" ||
        { echo "tools: $tmp/node_modules/.bin/gitlab-ci-local --version is not $GITLAB_CI_LOCAL_VERSION" >&2; exit 1; }
      rm -rf "$dest"; mv "$tmp" "$dest"
      log "installed gitlab-ci-local $GITLAB_CI_LOCAL_VERSION in $((SECONDS - start))s (cold: ${COLD_SECONDS[gitlab-ci-local]}s)"
    fi
    exec 9>&-
  fi
  echo "$bin"
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

local_() {
  # Not amtool: only the tests check Alertmanager's configuration.
  # Not KEDA either: its links below point where `hack/tools.sh keda`
  # builds it, which the local cluster runs only for a stack or test that
  # scales with it (localcluster.Options.KEDA builds it then), so that a
  # make up of the default stack never waits ~7 minutes for it.
  etcd; kube; kubelet; kwok; karpenter; prometheus; kube_router
  local dir="$cache/local-$KUBE_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-karpenter-$KARPENTER_VERSION-client-go-$CLIENT_GO_VERSION-keda-$KEDA_VERSION"
  mkdir -p "$dir"
  ln -sf "$cache/etcd-$ETCD_VERSION/bin/etcd" "$dir/etcd"
  local b; for b in kube-apiserver kubectl kube-controller-manager kube-scheduler; do
    ln -sf "$cache/kube-$KUBE_VERSION/bin/$b" "$dir/$b"
  done
  ln -sf "$cache/kubelet-$KUBE_VERSION/bin/kubelet" "$dir/kubelet"
  ln -sf "$cache/kwok-$KWOK_VERSION-client-go-$CLIENT_GO_VERSION/bin/kwok" "$dir/kwok"
  ln -sf "$cache/kwok-$KWOK_VERSION-client-go-$CLIENT_GO_VERSION/stages.yaml" "$dir/kwok-stages.yaml"
  ln -sf "$cache/karpenter-$KARPENTER_VERSION-client-go-$CLIENT_GO_VERSION/bin/karpenter-kwok" "$dir/karpenter-kwok"
  ln -sf "$cache/prometheus-$PROMETHEUS_VERSION-sd/bin/prometheus" "$dir/prometheus"
  ln -sf "$cache/kube-router-$KUBE_ROUTER_VERSION/bin/kube-router" "$dir/kube-router"
  ln -sf "$cache/keda-$KEDA_VERSION/bin/keda-operator" "$dir/keda-operator"
  ln -sf "$cache/keda-$KEDA_VERSION/bin/keda-adapter" "$dir/keda-adapter"
  ln -sfn "$cache/keda-$KEDA_VERSION/crds" "$dir/keda-crds"
  echo "$dir"
}

[ $# -gt 0 ] || { sed -n '2,46p' "$0" >&2; exit 2; }
for t in "$@"; do
  case $t in
    etcd|kube|kubelet|kwok|karpenter|keda|envtest|pulumi|node|promtool) $t ;;
    kube-router) kube_router ;;
    local) local_ ;;
    gitlab-ci-local) gitlab_ci_local ;;
    path) echo "$cache" ;;
    *) echo "tools: unknown target $t (want etcd, kube, kubelet, kwok, karpenter, keda, kube-router, envtest, local, pulumi, node, promtool, gitlab-ci-local, path)" >&2; exit 2 ;;
  esac
done
