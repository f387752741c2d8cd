package sharedfleet

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/gcp"
	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/compute"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/projects"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/secretmanager"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/serviceaccount"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// VMGroup is one VM manager group of a shared fleet (the stack config's
// sharedFleets[].vmGroups[]): the runnerfleet:sharedfleet:VMGroup
// component, a child of its fleet's, holding
//
//   - the Google service account the group's managers run as (fleet
//     rotate --stack creates them so), with the project roles
//     fleetspec.VMGroupRoles and nothing else;
//   - the group's runner token (its tokenConfigKey) as a Secret Manager
//     secret, fleetspec.VMGroupTokenSecretID, which that account alone
//     may read (fleetspec.RunnerTokenSecretRole on the secret): fleet
//     rotate names it to the new VMs, never the token;
//   - its firewall rules, each targeting that account, so that they admit
//     to the group's managers and to no other VM of the VPC: the fleet's
//     Prometheus (from the cluster's pods range, vmSourceRanges) to
//     gitlab-runner's metrics and the host exporter; the group's
//     adminSourceRanges, when listed, to WinRM (or SSH) and the same
//     metrics; its rdpSourceRanges, when listed, to Remote Desktop.
//
// The VMs are not declared: fleet rotate makes and replaces them
// blue/green, in the fleet's VM subnetwork (whose Cloud NAT, when the
// program declares it, is their way out). The fleet's Prometheus scrapes
// them (provisioning/sharedfleet's VMGroupMonitoring, in the fleet's
// configuration and rules).
type VMGroup struct {
	pulumi.ResourceState

	// Email is the managers' service account.
	Email pulumi.StringOutput
}

// declareVMGroup declares the VM group of plan vp, whose runner token is
// token, under its fleet's component parent.
func declareVMGroup(ctx *pulumi.Context, name string, e *cloud, vp shared.VMGroupPlan, token pulumi.StringOutput, parent pulumi.Resource) (*VMGroup, error) {
	c := &VMGroup{}
	if err := ctx.RegisterComponentResource("runnerfleet:sharedfleet:VMGroup", name, c, pulumi.Parent(parent)); err != nil {
		return nil, err
	}
	g := vp.Group
	acct, err := serviceaccount.NewAccount(ctx, name+"-sa", &serviceaccount.AccountArgs{
		Project:     pulumi.String(g.Project),
		AccountId:   pulumi.String(vp.AccountID),
		DisplayName: pulumi.String(vp.DisplayName),
		Description: pulumi.String(vp.Description),
	}, e.opts(c)...)
	if err != nil {
		return nil, fmt.Errorf("creating the service account of VM group %s: %w", g.Name, err)
	}
	c.Email = acct.Email
	member := pulumi.Sprintf("serviceAccount:%s", acct.Email)
	for _, role := range vp.Roles {
		if _, err := projects.NewIAMMember(ctx, name+"-"+gcp.RoleSuffix(role), &projects.IAMMemberArgs{
			Project: pulumi.String(g.Project),
			Role:    pulumi.String(role),
			Member:  member,
		}, e.opts(c)...); err != nil {
			return nil, fmt.Errorf("granting VM group %s %s: %w", g.Name, role, err)
		}
	}
	secret, err := secretmanager.NewSecret(ctx, name+"-token", &secretmanager.SecretArgs{
		Project:     pulumi.String(g.Project),
		SecretId:    pulumi.String(vp.TokenSecretID),
		Replication: &secretmanager.SecretReplicationArgs{Auto: &secretmanager.SecretReplicationAutoArgs{}},
	}, e.opts(c)...)
	if err != nil {
		return nil, fmt.Errorf("creating the runner token secret of VM group %s: %w", g.Name, err)
	}
	if _, err := secretmanager.NewSecretVersion(ctx, name+"-token-version", &secretmanager.SecretVersionArgs{
		Secret:     secret.ID().ToStringOutput(),
		SecretData: pulumi.ToSecret(token).(pulumi.StringOutput),
	}, e.opts(c)...); err != nil {
		return nil, fmt.Errorf("storing the runner token of VM group %s: %w", g.Name, err)
	}
	if _, err := secretmanager.NewSecretIamMember(ctx, name+"-token-reader", &secretmanager.SecretIamMemberArgs{
		Project:  pulumi.String(g.Project),
		SecretId: secret.SecretId,
		Role:     pulumi.String(fleetspec.RunnerTokenSecretRole),
		Member:   member,
	}, e.opts(c)...); err != nil {
		return nil, fmt.Errorf("letting VM group %s read its runner token: %w", g.Name, err)
	}
	for _, fw := range vp.Firewalls {
		sources := fw.Sources
		if fw.Consumer == fleetspec.VMConsumerPrometheus {
			sources = vmSourceRanges(e.p.Args.GCP, fleetspec.ConsumerPrometheus)
		}
		if _, err := compute.NewFirewall(ctx, name+"-"+fw.Consumer, &compute.FirewallArgs{
			Name:                  pulumi.String(fw.Name),
			Description:           pulumi.String(fw.Description),
			Network:               e.p.Network,
			Direction:             pulumi.String("INGRESS"),
			Priority:              pulumi.Int(1000),
			SourceRanges:          pulumix.Strings(sources),
			TargetServiceAccounts: pulumi.StringArray{acct.Email},
			Allows:                []compute.FirewallAllowArgs{{Protocol: pulumi.String("tcp"), Ports: pulumix.Strings(fw.Ports)}},
		}, e.opts(c)...); err != nil {
			return nil, fmt.Errorf("creating the firewall rule %s of VM group %s: %w", fw.Name, g.Name, err)
		}
	}
	return c, ctx.RegisterResourceOutputs(c, pulumi.Map{"serviceAccount": acct.Email, "runnerTokenSecret": secret.Name})
}
