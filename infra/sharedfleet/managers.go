package sharedfleet

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	helmv3 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/helm/v3"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// declareGroup declares one group's objects and its managers' releases.
func declareGroup(ctx *pulumi.Context, component string, p *shared.FleetPlan, fl *SharedFleet, gp *shared.GroupPlan, bucket pulumi.StringOutput, hasBucket bool,
	token pulumi.StringOutput, ns pulumi.Resource, on func(deps ...pulumi.Resource) []pulumi.ResourceOption) error {
	prefix := component + "-" + gp.Manager
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: gp.TokenSecret, Namespace: p.Namespace, Labels: gp.ServiceAccount.Labels},
		Type:       corev1.SecretTypeOpaque,
	}
	tok, err := kube.Declare(ctx, prefix+"-token", secret, map[string]pulumi.Input{
		"stringData." + shared.SecretKeyRunnerToken: token,
		// The chart mounts both keys; registration tokens are gone.
		"stringData." + shared.SecretKeyRegistrationToken: pulumi.String(""),
	}, on(ns)...)
	if err != nil {
		return err
	}
	sa, err := kube.Declare(ctx, prefix+"-sa", gp.ServiceAccount, nil, on(ns)...)
	if err != nil {
		return err
	}
	if _, err := kube.Declare(ctx, prefix+"-metrics", gp.Metrics, nil, on(ns)...); err != nil {
		return err
	}
	if _, err := kube.Declare(ctx, prefix+"-pdb", gp.PDB, nil, on(ns)...); err != nil {
		return err
	}
	if _, err := kube.Declare(ctx, prefix+"-netpol", gp.NetworkPolicy, nil, on(ns)...); err != nil {
		return err
	}
	for _, m := range gp.Managers {
		b := pulumi.String("").ToStringOutput()
		if hasBucket {
			b = bucket
		}
		// The config with the placeholder token, for the chart's
		// registration step, and the one the manager runs.
		configTOML := b.ApplyT(func(b string) (string, error) {
			return m.ConfigTOML(b, runnerconfig.TokenPlaceholder)
		}).(pulumi.StringOutput)
		full := pulumi.All(b, token).ApplyT(func(v []any) (string, error) {
			return m.ConfigTOML(v[0].(string), v[1].(string))
		}).(pulumi.StringOutput)
		// A new token or config rolls the manager: the hash of what it runs.
		hash := pulumi.All(full, token).ApplyT(func(v []any) string {
			return m.ConfigHash(v[0].(string), v[1].(string))
		}).(pulumi.StringOutput)
		fleeting := gp.Group.Executor == fleetspec.ExecutorDockerAutoscaler
		script := pulumi.String(shared.StartScript(fleeting)).ToStringOutput()
		cfgSecret := &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: shared.ConfigSecretName(m.Name), Namespace: p.Namespace, Labels: gp.ServiceAccount.Labels},
			Type:       corev1.SecretTypeOpaque,
		}
		cfg, err := kube.Declare(ctx, component+"-"+m.Name+"-config", cfgSecret, map[string]pulumi.Input{
			"stringData." + shared.ConfigSecretKey: pulumi.ToSecret(full).(pulumi.StringOutput),
		}, on(ns)...)
		if err != nil {
			return err
		}
		deps := []pulumi.Resource{ns, tok, sa, cfg}
		if m.State != nil {
			// The docker+machine state: the release mounts it; Kubernetes
			// keeps it (pvc-protection) until its last pod is gone.
			st, err := kube.Declare(ctx, component+"-"+m.Name+"-state", m.State, nil, on(ns)...)
			if err != nil {
				return err
			}
			deps = append(deps, st)
		}
		values := m.Values(gp.Settings, configTOML, script, hash)
		if bad := shared.CheckChartValues(values); len(bad) > 0 {
			return fmt.Errorf("the values of manager %s: %s", m.Name, strings.Join(bad, "; "))
		}
		rel, err := helmv3.NewRelease(ctx, component+"-"+m.Name, &helmv3.ReleaseArgs{
			Name:           pulumi.String(m.Name),
			Chart:          pulumi.String(shared.ChartName),
			Version:        pulumi.String(shared.ChartVersion),
			Namespace:      pulumi.String(p.Namespace),
			RepositoryOpts: &helmv3.RepositoryOptsArgs{Repo: pulumi.String(shared.ChartRepository)},
			Values:         pulumix.ToInput(values).(pulumi.Map),
			// A rollout waits for the new manager, not for the old one's
			// drain; a failed one is not rolled back (that would be
			// another rollout).
			Timeout:    pulumi.Int(900),
			Atomic:     pulumi.Bool(false),
			MaxHistory: pulumi.Int(10),
		}, on(deps...)...)
		if err != nil {
			return fmt.Errorf("creating the release of manager %s: %w", m.Name, err)
		}
		fl.Releases[m.Name] = rel
		fl.Managers[gp.Group.Name] = append(fl.Managers[gp.Group.Name], m.Name)
		if m.Session != nil {
			if _, err := kube.Declare(ctx, component+"-"+m.Name+"-session", m.Session, nil, on(ns)...); err != nil {
				return err
			}
			fl.TerminalHosts = append(fl.TerminalHosts, m.Host)
		}
		if m.Scaler != nil {
			if _, err := kube.Declare(ctx, component+"-"+m.Name+"-scaler", m.Scaler, nil, on(rel)...); err != nil {
				return err
			}
		}
	}
	return nil
}
