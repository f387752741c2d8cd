// Command sdkgen writes the typed provider resources of infra/internal/sdk
// from the pinned provider SDKs' source (see infra/sdkschema). It runs
// through go generate (make generate); make verify fails on drift.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/runnerfleet/runnerfleet/infra/sdkschema"
)

func main() {
	out := flag.String("out", ".", "directory to write the packages under")
	importBase := flag.String("import", "github.com/runnerfleet/runnerfleet/infra/internal/sdk", "import path of -out")
	flag.Parse()
	if err := sdkschema.Generate(context.Background(), *out, *importBase); err != nil {
		fmt.Fprintln(os.Stderr, "sdkgen:", err)
		os.Exit(1)
	}
}
