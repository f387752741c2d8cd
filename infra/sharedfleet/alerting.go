package sharedfleet

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/kube"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// declareAlertmanager declares Alertmanager plan ap in the monitoring
// namespace, with the receiver's secret.
func declareAlertmanager(ctx *pulumi.Context, ap *shared.AlertmanagerPlan, prefix string, secret pulumi.StringOutput, on func(deps ...pulumi.Resource) []pulumi.ResourceOption, ns pulumi.Resource) error {
	cm, err := kube.Declare(ctx, prefix+"-alertmanager-config", ap.ConfigMap, nil, on(ns)...)
	if err != nil {
		return err
	}
	sec, err := kube.Declare(ctx, prefix+"-alertmanager-secret", ap.Secret, map[string]pulumi.Input{
		"stringData." + shared.AlertmanagerSecretKey: secret,
	}, on(ns)...)
	if err != nil {
		return err
	}
	for i, o := range ap.Objects {
		suffix := []string{"", "-svc"}[i]
		if _, err := kube.Declare(ctx, prefix+"-alertmanager"+suffix, o, nil, on(ns, cm, sec)...); err != nil {
			return err
		}
	}
	return nil
}
