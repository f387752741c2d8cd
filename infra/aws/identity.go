package aws

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/iam"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Identity is a team's job identity: an IAM role that only two
// ServiceAccounts of one RunnerSet may assume, through the cluster's OIDC
// provider: its jobs' (in the RunnerSet's jobs namespace,
// naming.Runner.ServiceAccountSubject), and its managers' (in the team's
// namespace), since gitlab-runner's manager
// signs the S3 cache URLs the jobs use with its own credentials (the
// controller binds the managers to the role only when the RunnerSet has an
// S3 cache). What it may do is granted where the resource is (the cache
// bucket's policy) or by the team.
type Identity struct {
	pulumi.ResourceState

	RoleName string
	RoleArn  pulumi.StringOutput
}

func newIdentity(ctx *pulumi.Context, p *platform, namespace, runnerSet string, c *Cluster, opts ...pulumi.ResourceOption) (*Identity, error) {
	n := naming.For(namespace, runnerSet)
	id := &Identity{RoleName: roleName(p.cluster, namespace, runnerSet)}
	name := id.RoleName
	if err := ctx.RegisterComponentResource("runnerfleet:aws:Identity", name, id, opts...); err != nil {
		return nil, err
	}
	jobs, managers := n.ServiceAccountSubject(), n.ManagerServiceAccountSubject()
	role, err := iam.NewRole(ctx, name, &iam.RoleArgs{
		Name:             pulumi.String(id.RoleName),
		Path:             pulumi.String(RolePath(p.cluster, namespace)),
		Description:      pulumi.String("CI jobs of RunnerSet " + namespace + "/" + runnerSet + " (IRSA: " + jobs + ", and " + managers + " to sign cache URLs)"),
		AssumeRolePolicy: irsaTrust(c, jobs, managers),
		Tags:             p.tags(map[string]string{"runnerfleet:runnerset": namespace + "/" + runnerSet}),
	}, p.child(id)...)
	if err != nil {
		return nil, fmt.Errorf("creating the role: %w", err)
	}
	id.RoleArn = role.Arn
	err = ctx.RegisterResourceOutputs(id, pulumi.Map{"roleName": pulumi.String(id.RoleName), "roleArn": id.RoleArn})
	return id, err
}
