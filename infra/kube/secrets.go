package kube

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"

	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
)

// ReadSecrets reads every config secret the stack names, each key once and
// all of them before the program declares anything
// (stackconfig.Fleet.ReadSecrets checks them), and returns them as secret
// outputs by key: the teams' Secrets (NewFleet), the shared fleets' token
// Secrets and their Alertmanager's receiver are declared from them.
func ReadSecrets(ctx *pulumi.Context, f *stackconfig.Fleet) (map[string]pulumi.StringOutput, error) {
	values, err := f.ReadSecrets(ctx.Stack(), func(key string) (string, bool) {
		v, err := config.Try(ctx, key)
		return v, err == nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]pulumi.StringOutput, len(values))
	for k, v := range values {
		out[k] = pulumi.ToSecret(pulumi.String(v)).(pulumi.StringOutput)
	}
	return out, nil
}
