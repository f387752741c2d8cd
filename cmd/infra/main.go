// Command infra is the runnerfleet Pulumi program's entry point
// (Pulumi.yaml: main: cmd/infra). The program itself is the infra package;
// fleet up runs the same program inline through the Automation API.
package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra"
)

func main() { pulumi.Run(infra.Program) }
