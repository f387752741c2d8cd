# runnerfleet — see README.md. Every target installs what it needs.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

# Karpenter v1.15 needs Go >= 1.26.9; the module proxy serves this toolchain.
export GOTOOLCHAIN := go1.27.3
export GOFLAGS := -buildvcs=false

CACHE ?= $(shell hack/tools.sh path)
BIN := bin

.PHONY: all
all: generate build test

## Code generation ----------------------------------------------------------

.PHONY: generate
generate: manifests ## deepcopy functions and CRDs
	go tool controller-gen object paths=./runnerset/api/...

.PHONY: manifests
manifests: ## CRDs into runnerset/crds (embedded by the controller, Pulumi and tests)
	go tool controller-gen crd paths=./runnerset/api/... output:crd:artifacts:config=runnerset/crds

.PHONY: verify
verify: generate ## regenerate and fail on drift; gofmt, go vet, tool go.mods
	KUBE_VERSION=$$(awk '$$1=="k8s.io/kubernetes"{print $$2}' hack/kube/go.mod) hack/kube/gen-gomod.sh >/dev/null
	cd hack/kube && go mod tidy
	cd hack/etcd && go mod tidy
	cd hack/karpenter && go mod tidy -e
	# -e: a test-only dependency of karpenter-provider-aws is refused by the module proxy
	go mod tidy -e
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: run gofmt -w on the files above"; exit 1; }
	go vet ./...
	@# In CI (a clean clone) any difference is drift; locally it may be your own work.
	@if [ "$$CI" = true ]; then git diff --exit-code || { echo "verify: generated files or go.mod drifted; run make verify and commit"; exit 1; }; \
	else git diff --stat; fi

## Build ---------------------------------------------------------------------

.PHONY: build
build: ## the controller and the fleet CLI into bin/
	go build -o $(BIN)/ ./cmd/...

.PHONY: tools
tools: ## etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (cached by version)
	hack/tools.sh envtest

## Tests ---------------------------------------------------------------------

.PHONY: test
test: tools verify ## every test: unit, oracle, envtest on a real kube-apiserver, end-to-end
	KUBEBUILDER_ASSETS=$$(hack/tools.sh envtest) go test -count=1 ./...

.PHONY: bench
bench: tools ## benchmarks; results go to BENCHMARKS.md by hand, raw output to BENCHMARKS.raw.txt
	KUBEBUILDER_ASSETS=$$(hack/tools.sh envtest) go test -run '^$$' -bench . -benchtime 1x -timeout 60m ./runnerset/... | tee BENCHMARKS.raw.txt

## The main job --------------------------------------------------------------

.PHONY: up
up: tools build ## local control plane + controller + example RunnerSet
	$(BIN)/fleet up --stack local

.PHONY: down
down: build
	$(BIN)/fleet down --stack local

.PHONY: help
help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "%-10s %s\n", $$1, $$2}'
