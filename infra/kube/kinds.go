package kube

// The generated constructors of the kinds Declare declares register
// themselves (pulumix.AddSchema) when their packages are linked in.
import (
	_ "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/apiextensions/v1"
	_ "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/apps/v1"
	_ "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/batch/v1"
	_ "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/core/v1"
	_ "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/networking/v1"
	_ "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/policy/v1"
	_ "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/rbac/v1"
)
