#!/usr/bin/env bash
# The proof, in CI, that the end-to-end suite runs on a cluster it did not
# start: a local control plane with Karpenter's kwok provider and no real
# node, started by a process of its own (e2e/cmd/controlplane), and the
# suite pointed at it through RUNNERFLEET_E2E_KUBECONFIG as a user points
# it at kind. It runs one test of the suite, $1 (the Makefile's
# E2E_KUBECONFIG_PROOF), and fails when that test skips or does not run:
# the mode must run, not merely pass. make e2e runs it beside the default
# mode's suite (it needs no real node); make e2e-kubeconfig-mode alone.
#
#   hack/e2e-kubeconfig-mode.sh TestInstallPathsIntoACluster/manifests [log]
set -u
cd "$(dirname "$0")/.."
p=$1
log=${2:-e2e-kubeconfig-mode.log}
dir=$(mktemp -d)
start=$SECONDS
trap 'go run ./e2e/cmd/controlplane down "$dir" >>"$log" 2>&1; rm -rf "$dir"' EXIT
kc=$(go run ./e2e/cmd/controlplane up "$dir" 2>"$log") || { tail -30 "$log"; exit 1; }
echo "e2e-kubeconfig-mode: a control plane started by e2e/cmd/controlplane, RUNNERFLEET_E2E_KUBECONFIG=$kc"
rc=0
(cd e2e && RUNNERFLEET_E2E_KUBECONFIG="$kc" go test -tags e2e -count=1 -v -timeout 10m -run "^${p%%/*}\$/^${p#*/}\$" .) >>"$log" 2>&1 || rc=$?
grep -E '^ *(--- |PASS|FAIL|ok )' "$log" || true
if [ $rc = 0 ] && grep -q -- '--- SKIP' "$log"; then echo "e2e-kubeconfig-mode: a test skipped instead of running on the cluster"; rc=1; fi
if [ $rc = 0 ] && ! grep -q -- "--- PASS: $p " "$log"; then echo "e2e-kubeconfig-mode: $p did not run"; rc=1; fi
[ $rc = 0 ] || { tail -100 "$log"; exit $rc; }
echo "e2e-kubeconfig-mode: passed in $((SECONDS - start))s (log: $log)"
