// Command pulumi-resource-kubernetes is the Pulumi Kubernetes resource
// provider plugin, built by hack/tools.sh (target pulumi) from
// github.com/pulumi/pulumi-kubernetes/provider/v4. It is the upstream
// cmd/pulumi-resource-kubernetes main: that package embeds schema-embed.json
// and terraform-mapping-embed.json, which its go:generate step writes and the
// module zip lacks, so it cannot be built from the module cache. hack/tools.sh
// builds this package from a temporary copy of this module after running the
// upstream generate.go there; the two files are never committed (the schema
// is 7 MB).
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var pulumiSchema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
