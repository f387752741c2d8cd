# runnerfleet — see README.md. Every target installs what it needs.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

# Karpenter v1.15 needs Go >= 1.26.9; the module proxy serves this toolchain.
export GOTOOLCHAIN := go1.27.3
# The project compiles as hack/tools.sh compiles the tools (static,
# -trimpath), so a package both need (k8s.io/* with the Kubernetes binaries,
# the Pulumi SDK and gRPC with the Pulumi CLI) is compiled once, and the
# release test's static build reuses the tests' packages (BENCHMARKS.md,
# "CI").
export GOFLAGS := -buildvcs=false -trimpath
export CGO_ENABLED := 0

CACHE ?= $(shell hack/tools.sh path)
BIN := bin

# The version stamped into every binary (--version): the tag at HEAD, else
# the next release (internal/version.Release) with -dev.
VERSION ?= $(shell git describe --tags --exact-match 2>/dev/null || echo v$$(sed -n 's/^const Release = "\(.*\)"/\1/p' internal/version/version.go)-dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/runnerfleet/runnerfleet/internal/version.Version=$(VERSION) -X github.com/runnerfleet/runnerfleet/internal/version.Commit=$(COMMIT)

.PHONY: all
all: generate build test

## Code generation ----------------------------------------------------------

.PHONY: generate
generate: manifests ## deepcopy functions, CRDs, the typed Pulumi provider resources, gitlab-runner's schema and feature flags for the controller
	go tool controller-gen object paths=./runnerset/api/...
	go run ./runnerset/runnerconfig/oracle/gensnapshot runnerset/runnerconfig/oracle/snapshot.json
	go generate ./infra/internal/sdk/

.PHONY: manifests
manifests: ## CRDs into runnerset/crds, the controller's ClusterRole into runnerset/rbac (both embedded), the Helm chart and charts/manifests
	go tool controller-gen crd paths=./runnerset/api/... output:crd:artifacts:config=runnerset/crds
	go tool controller-gen rbac:roleName=runnerset-controller paths=./runnerset/controller/... output:rbac:artifacts:config=runnerset/rbac
	go run ./charts/gen .

.PHONY: verify
verify: ## regenerate and fail on drift: make tidy, generate, check
	$(MAKE) --no-print-directory tidy
	$(MAKE) --no-print-directory generate
	$(MAKE) --no-print-directory check

# What rewrites module files, apart: make test runs it before the tools
# build from hack/*/go.mod (gen-gomod.sh rewrites hack/kube's whole).
.PHONY: tidy
tidy: ## hack/kube's go.mod from its Kubernetes version, then every tool module's and the project's go mod tidy
	KUBE_VERSION=$$(awk '$$1=="k8s.io/kubernetes"{print $$2}' hack/kube/go.mod) hack/kube/gen-gomod.sh >/dev/null
	cd hack/kube && go mod tidy
	cd hack/etcd && go mod tidy
	cd hack/prometheus && go mod tidy
	cd hack/alertmanager && go mod tidy
	cd hack/pulumi && go mod tidy
	cd hack/pulumi-kubernetes && go mod tidy
	cd hack/keda && go mod tidy
	# -e: a test-only dependency of karpenter-provider-aws is refused by the module proxy
	go mod tidy -e

.PHONY: check
check: ## gofmt, go vet (and fleet-agent's for Windows); in CI, any difference from the commit (what make tidy and generate rewrote) is drift
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: run gofmt -w on the files above"; exit 1; }
	go vet ./...
	go vet -tags e2e ./e2e/
	@# The drain agent also runs on Windows manager VMs (its service code is windows-only).
	GOOS=windows GOARCH=amd64 go vet ./cmd/fleet-agent/ ./provisioning/drainagent/
	@# In CI (a clean clone) any difference is drift; locally it may be your own work.
	@if [ "$$CI" = true ]; then git diff --exit-code || { echo "verify: generated files or go.mod drifted; run make verify and commit"; exit 1; }; \
	else git diff --stat; fi

## Build ---------------------------------------------------------------------

# The module download's chatter goes to a log; an error shows its tail.
.PHONY: build
build: ## the controller and the fleet CLI into bin/, version-stamped
	@mkdir -p "$(CACHE)/logs"; go mod download >"$(CACHE)/logs/go-mod-download.log" 2>&1 || { tail -20 "$(CACHE)/logs/go-mod-download.log"; exit 1; }
	go build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

.PHONY: image
image: ## OCI images of runnerset-controller, fleet and fleet-agent, no container engine: dist/images/<binary>/ (OCI layout) and <binary>.tar
	go run ./hack/release --images-only --arch $$(go env GOARCH) --version $(VERSION) --commit $(COMMIT) --out dist

.PHONY: release
release: ## a release into dist/<version>: images, chart, manifests (hack/release.sh; VERSION=vX.Y.Z)
	hack/release.sh $(VERSION)

# What the unit suites need (etcd and Kubernetes, with the kubelet: one go
# build; promtool, amtool and the Prometheus server), and what only the
# end-to-end suite needs on top (kwok, Karpenter, the Pulumi CLI and plugin).
UNIT_TOOLS := envtest promtool
E2E_TOOLS := pulumi kwok karpenter

.PHONY: tools
tools: ## etcd, Kubernetes, kwok, Karpenter's kwok provider, kube-router, Pulumi, Prometheus, promtool and amtool, built once per version into the cache; the real node's Debian packages (KEDA: built by the first test or stack that runs it)
	hack/tools.sh node $(UNIT_TOOLS) $(E2E_TOOLS) local >/dev/null

# What make up runs: the real node's Debian packages, the local control
# plane with Karpenter, Prometheus and the real node's NetworkPolicy
# enforcer (kube-router), the Pulumi CLI and its Kubernetes
# plugin (not the tests' promtool and amtool checks).
.PHONY: up-tools
up-tools:
	hack/tools.sh node local pulumi >/dev/null

.PHONY: unit-tools
unit-tools: ## the tools of the unit suites only
	hack/tools.sh $(UNIT_TOOLS) >/dev/null

## Tests ---------------------------------------------------------------------

# The end-to-end suite mostly waits (jobs, drains, Karpenter): it used 4
# CPU minutes of its 22. So make test builds every tool first, at full
# priority, and starts the suite as soon as they are built and make generate
# has run, in the background; make check (gofmt, vet, drift) and the unit
# suites run beside it, niced, in the CPU it leaves, and so does KEDA's
# build (~7 minutes cold, over 30 beside a cold suite), which only the
# suite's KEDA tests wait for (the overflow test before it takes the real
# node's lane, so that lane's other tests run meanwhile). make tidy runs first,
# alone: it rewrites the tool modules' go.mod files the tools build from.
# The suite's output (e2e-run.out) is printed when it ends; a failure of
# check or the unit suites stops it.
.PHONY: test
test: ## every test: unit, oracle, envtest on a real kube-apiserver, end-to-end (beside them)
	$(MAKE) --no-print-directory tidy
	@rm -f .test-generated e2e-run.out
	set -m; { hack/tools.sh node $(UNIT_TOOLS) $(E2E_TOOLS) local >/dev/null || exit 1; \
		{ nice -n 10 hack/tools.sh keda >/dev/null 2>&1 & }; \
		until [ -e .test-generated ]; do sleep 2; done; \
		$(MAKE) --no-print-directory e2e >e2e-run.out 2>&1; } & bg=$$!; \
	trap 'kill -- -$$bg 2>/dev/null || true; rm -f .test-generated' EXIT; \
	echo "test: the tools build, then the end-to-end suite runs in the background (log: e2e-run.out, e2e.log)"; \
	$(MAKE) --no-print-directory generate; touch .test-generated; \
	nice -n 10 $(MAKE) --no-print-directory check unit; \
	echo "test: waiting for the end-to-end suite (log: e2e-run.out, e2e.log)"; \
	rc=0; wait $$bg || rc=$$?; trap - EXIT; rm -f .test-generated; \
	cat e2e-run.out 2>/dev/null || true; \
	[ $$rc = 0 ] || echo "test: the end-to-end suite (or the tools it waited for) failed with exit $$rc"; \
	exit $$rc

# The controller's suite is the longest (688 of the unit suites' seconds on
# CI, mostly waiting on its kube-apiserver): listed first, go test starts it
# first and runs the other packages beside it instead of after them. The 44
# test binaries are linked without debug information (-s -w; stack traces
# keep their names and lines): the controller's link takes 7.5 CPU seconds
# instead of 9.8.
.PHONY: unit
unit: unit-tools ## unit, oracle and envtest suites (a real kube-apiserver and etcd)
	KUBEBUILDER_ASSETS=$$(hack/tools.sh envtest) RUNNERFLEET_PROMTOOLS=$$(hack/tools.sh promtool) go test -count=1 -ldflags='-s -w' -timeout 20m ./runnerset/controller/ ./...

# make e2e KUBECONFIG=<path> runs the suite on a cluster you have (kind,
# minikube, a cloud cluster; docs/tasks/run-the-tests.md): only a KUBECONFIG
# given on make's command line counts, never one exported for daily work;
# RUNNERFLEET_E2E_KUBECONFIG=<path> in the environment does the same. The
# tests that need this machine's real node skip, and no tool is built.
ifeq ($(origin KUBECONFIG),command line)
RUNNERFLEET_E2E_KUBECONFIG := $(KUBECONFIG)
endif
E2E_KUBECONFIG := $(if $(RUNNERFLEET_E2E_KUBECONFIG),$(abspath $(RUNNERFLEET_E2E_KUBECONFIG)))

# One end-to-end run on the local cluster at a time on a machine: it takes
# the machine's one real node (kubelet, containerd, the CNI bridge); a second
# run waits for the first (flock, from util-linux, which .ci/run installs).
# flock -o: the suite's processes (a local cluster's etcd, kubelet, …)
# never inherit the lock, so a suite killed before its cleanups never
# leaves them holding it (which once kept the next run waiting).
E2E_LOCK := /tmp/runnerfleet-e2e.lock

.PHONY: e2e
e2e: $(if $(E2E_KUBECONFIG),,tools) ## end to end on the local control plane with the real Karpenter (kwok provider), and beside it e2e-kubeconfig-mode; KUBECONFIG=<path>: on that cluster
	@# The full log (fleet's output, Karpenter's timings) goes to e2e.log.
	@# The suite's tests run in two lanes at once (e2e/cluster_test.go):
	@# -parallel lets every test wait for its lane. The existing-cluster
	@# mode needs no real node: it runs beside, its output shown after.
	rc=0; lock="$(if $(E2E_KUBECONFIG),,flock -o $(E2E_LOCK))"; w=$$SECONDS; \
	[ -z "$$lock" ] || flock -n $(E2E_LOCK) true || { echo "e2e: another end-to-end run on this machine holds $(E2E_LOCK); waiting for it"; \
		flock $(E2E_LOCK) true; echo "e2e: waited $$((SECONDS - w)) s"; }; \
	$(if $(E2E_KUBECONFIG),,hack/e2e-kubeconfig-mode.sh $(E2E_KUBECONFIG_PROOF) >e2e-kubeconfig-mode.out 2>&1 & km=$$!; km_rc=0;) \
	(cd e2e && $$lock env RUNNERFLEET_E2E_KUBECONFIG=$(E2E_KUBECONFIG) go test -tags e2e -count=1 -v -parallel 16 -timeout 45m . >../e2e.log 2>&1) || rc=$$?; \
	grep -E '^(--- |PASS|FAIL|ok )|^    --- SKIP|capacity timings|^ +\||waited .* lane' e2e.log; \
	$(if $(E2E_KUBECONFIG),,wait $$km || km_rc=$$?; cat e2e-kubeconfig-mode.out;) \
	[ $$rc = 0 ] || { tail -150 e2e.log; exit $$rc; }; \
	$(if $(E2E_KUBECONFIG),,exit $$km_rc)

# The proof, in CI, that the suite runs on a cluster it did not start
# (hack/e2e-kubeconfig-mode.sh; two minutes, 129 s measured, of which
# ~85 s the uninstall waiting for the example manager's drain, beside
# the default mode's suite): a local control plane with Karpenter's kwok
# provider and no real node, started by a process of its own
# (e2e/cmd/controlplane). Of the suite it runs only the install paths'
# manifests path: it goes through every part of the mode (finding what
# the cluster has, refusing one that holds runnerfleet, installing
# charts/manifests/install.yaml, the controller on the installed
# ServiceAccount, the example RunnerSet Ready, one job pod on a node
# Karpenter brings up from the team's NodePool, and the uninstall that
# leaves the cluster as it was); the other tests run in the default mode,
# where they would only repeat these paths at minutes each.
E2E_KUBECONFIG_PROOF := TestInstallPathsIntoACluster/manifests

.PHONY: e2e-kubeconfig-mode
e2e-kubeconfig-mode: tools ## the suite's existing-cluster mode on a control plane another process started (part of make e2e; log: e2e-kubeconfig-mode.log)
	hack/e2e-kubeconfig-mode.sh $(E2E_KUBECONFIG_PROOF)

.PHONY: bench
bench: tools ## benchmarks; results go to BENCHMARKS.md by hand, raw output to BENCHMARKS.raw.txt and BENCHMARKS.capacity.txt
	KUBEBUILDER_ASSETS=$$(hack/tools.sh envtest) RUNNERFLEET_PROMTOOLS=$$(hack/tools.sh promtool) go test -run '^$$' -bench . -benchtime 1x -timeout 60m ./runnerset/... ./infra/... ./charts/... ./provisioning/vmfleet/ | tee BENCHMARKS.raw.txt
	$(MAKE) bench-capacity

.PHONY: bench-fleet
bench-fleet: ## BenchmarkFleet alone (100 and 1000 RunnerSets, RUNNERFLEET_BENCH_STEADY=10s); BEFORE=<commit> runs the same benchmark on that commit first, for BENCHMARKS.md's side-by-side
	@if [ -n "$(BEFORE)" ]; then \
		rm -rf .bench-before && mkdir .bench-before && git archive $(BEFORE) | tar -x -C .bench-before && \
		cd .bench-before && uptime && KUBEBUILDER_ASSETS=$$(../hack/tools.sh envtest) RUNNERFLEET_BENCH_STEADY=10s \
			go test -run '^$$' -bench BenchmarkFleet -benchtime 1x -timeout 60m ./runnerset/controller/ | grep -v '^{' | tee ../BENCHMARKS.fleet-before.txt; \
		cd .. && rm -rf .bench-before; \
	fi
	uptime; KUBEBUILDER_ASSETS=$$(hack/tools.sh envtest) RUNNERFLEET_BENCH_STEADY=10s go test -run '^$$' -bench BenchmarkFleet -benchtime 1x -timeout 60m ./runnerset/controller/ | grep -v '^{' | tee BENCHMARKS.fleet.txt; uptime

# CAPACITY_BENCH=KarpenterCapacity runs the design comparison without the
# controller (10, 100 and 500 tags, the capacity objects built by the benchmark).
CAPACITY_BENCH ?= ControllerCapacity

.PHONY: bench-capacity
bench-capacity: tools ## the controller and the real Karpenter (kwok) at 10, 100 and 1000 RunnerSets of one class, spec.nodePools.mode perTag and shared (RUNNERFLEET_BENCH_TAGS, _MODES, _JOBS, _IDLE; CAPACITY_BENCH=KarpenterCapacity: the designs without the controller)
	cd e2e/capacityscale && uptime && go test -run '^$$' -bench '$(CAPACITY_BENCH)' -benchtime 1x -timeout 240m -v . | tee ../../BENCHMARKS.capacity.txt; uptime

## The main job --------------------------------------------------------------

.PHONY: up
up: up-tools build ## local control plane, the Pulumi program inline (stacks/Pulumi.local.yaml), the controller, status
	$(BIN)/fleet up --stack local

.PHONY: down
down: build
	$(BIN)/fleet down --stack local

.PHONY: help
help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "%-10s %s\n", $$1, $$2}'
