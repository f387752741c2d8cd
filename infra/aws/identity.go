package aws

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Identity is a team's job identity: an IAM role that only two
// ServiceAccounts of one RunnerSet may assume, through the cluster's OIDC
// provider: its jobs', and its managers', since gitlab-runner's manager
// signs the S3 cache URLs the jobs use with its own credentials (the
// controller binds the managers to the role only when the RunnerSet has an
// S3 cache). What it may do is granted where the resource is (the cache
// bucket's policy) or by the team.
type Identity struct {
	pulumi.ResourceState

	RoleName string
	RoleArn  pulumi.StringOutput
}

func newIdentity(p *platform, namespace, runnerSet string, c *Cluster, opts ...pulumi.ResourceOption) (*Identity, error) {
	n := naming.For(namespace, runnerSet)
	id := &Identity{RoleName: roleName(p.cluster, namespace, runnerSet)}
	name := id.RoleName
	if err := p.ctx.RegisterComponentResource("runnerfleet:aws:Identity", name, id, opts...); err != nil {
		return nil, err
	}
	jobs, managers := n.ServiceAccountSubject(), n.ManagerServiceAccountSubject()
	role, err := pulumix.New(p.ctx, "aws:iam/role:Role", name, pulumi.Map{
		"name":             pulumi.String(id.RoleName),
		"path":             pulumi.String(RolePath(p.cluster, namespace)),
		"description":      pulumi.String("CI jobs of RunnerSet " + namespace + "/" + runnerSet + " (IRSA: " + jobs + ", and " + managers + " to sign cache URLs)"),
		"assumeRolePolicy": irsaTrust(c, jobs, managers),
		"tags":             p.tags(map[string]string{"runnerfleet:runnerset": namespace + "/" + runnerSet}),
	}, p.child(id)...)
	if err != nil {
		return nil, err
	}
	id.RoleArn = role.Arn
	err = p.ctx.RegisterResourceOutputs(id, pulumi.Map{"roleName": pulumi.String(id.RoleName), "roleArn": id.RoleArn})
	return id, err
}
