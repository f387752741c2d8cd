// Command infra is the runnerfleet Pulumi program's entry point
// (Pulumi.yaml: main: cmd/infra). The program itself is the infra package;
// fleet up runs the same program inline through the Automation API.
package main

import (
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra"
	"github.com/runnerfleet/runnerfleet/internal/version"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println(version.String("infra"))
		return
	}
	pulumi.Run(infra.Program)
}
