// Command gen writes the Helm chart and the plain manifests (make
// manifests): go run ./charts/gen [repository root].
package main

import (
	"fmt"
	"os"

	"github.com/runnerfleet/runnerfleet/charts"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	if err := charts.Generate(root); err != nil {
		fmt.Fprintln(os.Stderr, "charts/gen:", err)
		os.Exit(1)
	}
}
