package sharedfleet

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	gpulumix "github.com/pulumi/pulumi/sdk/v3/go/pulumix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	sdkcorev1 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/core/v1"
	helmv3 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/helm/v3"
	sdkmetav1 "github.com/runnerfleet/runnerfleet/infra/internal/sdk/kubernetes/meta/v1"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// declareGroup declares one group's objects and its managers' releases.
// repo is the chart repository: shared.ChartRepository, or on the local
// platform its loopback one (Local).
func declareGroup(ctx *pulumi.Context, component string, p *shared.FleetPlan, fl *SharedFleet, gp *shared.GroupPlan, repo string, bucket pulumi.StringOutput, hasBucket bool,
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
		// Each generation of the manager (shared.Release.ReleaseName) has
		// a config Secret, a state volume and a release of its own, all
		// named after it: a change of what the manager runs is a new
		// generation, which Pulumi creates before it deletes the old one,
		// and the old one's deletion returns at once while its managers
		// drain (docs/concepts/shared-fleet.md, Generations).
		gen := m.ReleaseName()
		cfgSecret := &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: shared.ConfigSecretName(gen), Namespace: p.Namespace, Labels: gp.ServiceAccount.Labels},
			Type:       corev1.SecretTypeOpaque,
		}
		cfg, err := kube.Declare(ctx, component+"-"+gen+"-config", cfgSecret, map[string]pulumi.Input{
			"stringData." + shared.ConfigSecretKey: pulumi.ToSecret(full).(pulumi.StringOutput),
		}, on(ns)...)
		if err != nil {
			return err
		}
		deps := []pulumi.Resource{ns, tok, sa, cfg}
		var claim any
		if m.State != nil {
			// Declared as StateClaimName(gen), without the component's
			// prefix: the provider's name for it adds a random suffix, and
			// the whole is the VMs' incarnation label (at most 63).
			st, name, err := declareState(ctx, shared.StateClaimName(gen), m.State, cfg, cfgSecret.Name, on(ns)...)
			if err != nil {
				return err
			}
			deps, claim = append(deps, st), name
		}
		values := m.Values(gp.Settings, configTOML, script, hash, claim)
		if bad := shared.CheckChartValues(values); len(bad) > 0 {
			return fmt.Errorf("the values of manager %s: %s", m.Name, strings.Join(bad, "; "))
		}
		rel, err := helmv3.NewRelease(ctx, component+"-"+gen, &helmv3.ReleaseArgs{
			Name:           pulumi.String(gen),
			Chart:          pulumi.String(shared.ChartName),
			Version:        pulumi.String(shared.ChartVersion),
			Namespace:      pulumi.String(p.Namespace),
			RepositoryOpts: &helmv3.RepositoryOptsArgs{Repo: pulumi.String(repo)},
			Values:         pulumix.ToInput(values).(pulumi.Map),
			// The provider's Delete uninstalls without waiting only when
			// the release was declared skipAwait and not atomic: an old
			// generation's managers drain for up to the job timeout after
			// their release is gone (their preStop hook holds them), and
			// pulumi up does not wait for them. The same setting makes the
			// install return once Kubernetes took the objects; fleet status
			// shows the managers coming up and draining. Measured on the
			// local stack's real node (TestSharedFleetChangeWhileAJobRuns):
			// the provider's uninstall returned at once with skipAwait false
			// and atomic true as well (Helm waits for the release's objects,
			// not for the pod's grace); what a drain would hold pulumi up on
			// is the state claim, which is why it is DeletedWith its config
			// Secret (declareState): without that, pulumi up took the whole
			// drain.
			SkipAwait:  pulumi.Bool(true),
			Atomic:     pulumi.Bool(false),
			Timeout:    pulumi.Int(900),
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

// declareState declares a generation's docker+machine state volume claim,
// which the provider names (shared.StateClaimName), and returns it and its
// name. It is owned by its config Secret (cfg), with which Pulumi deletes
// it: Pulumi never deletes the claim itself (pulumi.DeletedWith), which
// would wait until the old manager's pod is gone (the pvc-protection
// finalizer holds a mounted claim: hours of drain); it deletes the config
// Secret, and Kubernetes' garbage collector then deletes the claim (its
// owner reference), which goes once its pod has drained and gone, its
// volume with it (the storage class's reclaim policy). The owner reference
// does not hold up the Secret's deletion: blockOwnerDeletion is unset.
func declareState(ctx *pulumi.Context, name string, claim *corev1.PersistentVolumeClaim, cfg *kube.Object, cfgName string, opts ...pulumi.ResourceOption) (*kube.Object, pulumi.StringOutput, error) {
	secret, ok := cfg.CustomResource.(*sdkcorev1.Secret)
	if !ok {
		return nil, pulumi.StringOutput{}, fmt.Errorf("%s: the config Secret is a %T, not the provider's Secret", name, cfg.CustomResource)
	}
	uid := pulumi.StringOutput{OutputState: gpulumix.ApplyErr(secret.Metadata, func(m sdkmetav1.ObjectMeta) (string, error) {
		if m.Uid == nil || *m.Uid == "" {
			return "", fmt.Errorf("%s: the provider gave the config Secret no uid", name)
		}
		return *m.Uid, nil
	}).OutputState}
	claim = claim.DeepCopy()
	claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: cfgName}}
	st, err := kube.Declare(ctx, name, claim, map[string]pulumi.Input{"metadata.ownerReferences.0.uid": uid}, append(opts, pulumi.DeletedWith(cfg))...)
	if err != nil {
		return nil, pulumi.StringOutput{}, err
	}
	pvc, ok := st.CustomResource.(*sdkcorev1.PersistentVolumeClaim)
	if !ok {
		return nil, pulumi.StringOutput{}, fmt.Errorf("%s: the claim is a %T, not the provider's PersistentVolumeClaim", name, st.CustomResource)
	}
	claimName := pulumi.StringOutput{OutputState: gpulumix.ApplyErr(pvc.Metadata, func(m sdkmetav1.ObjectMeta) (string, error) {
		if m.Name == nil || !strings.HasPrefix(*m.Name, name) {
			return "", fmt.Errorf("%s: the provider named the claim %v, not after it", name, m.Name)
		}
		return *m.Name, nil
	}).OutputState}
	return st, claimName, nil
}
