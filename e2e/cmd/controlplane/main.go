// Command controlplane starts and stops a local control plane with
// Karpenter's kwok provider and no real node, as a process of its own, so
// that make e2e can point the end-to-end suite at it through
// RUNNERFLEET_E2E_KUBECONFIG exactly as a user points it at kind: the proof,
// in CI, that the suite's existing-cluster mode works. It is used only by
// the Makefile (target e2e-kubeconfig-mode).
//
//	go run ./e2e/cmd/controlplane up <dir>     # prints the kubeconfig's path
//	go run ./e2e/cmd/controlplane down <dir>
package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"

	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
)

func main() {
	if len(os.Args) != 3 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: controlplane up|down <state directory>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run(verb, dir string) error {
	ctx := context.Background()
	if verb == "down" {
		return localcluster.DownWithTimeout(ctx, dir, 20*time.Second, os.Stderr)
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, c := range slices.Concat(karpenterapis.CRDs, kwokapis.CRDs) {
		crds = append(crds, c.DeepCopy())
	}
	cl, err := localcluster.Up(ctx, localcluster.Options{Dir: dir, Name: "e2e-kubeconfig", RepoRoot: root, CRDs: crds, Karpenter: true, Log: os.Stderr})
	if err != nil {
		return fmt.Errorf("%w (run from the repository's root)", err)
	}
	fmt.Println(cl.Kubeconfig)
	return nil
}
