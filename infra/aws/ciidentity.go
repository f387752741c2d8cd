package aws

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/iam"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
)

// CIIdentity is the deploy pipeline's AWS identity
// (ci/runnerfleet.gitlab-ci.yml): an IAM OIDC provider for the GitLab
// instance and a role that only the ID tokens of the stack's named
// projects' branch pipelines, with the template's audience, may assume;
// what a deploy may do is the managed policies the stack names.
type CIIdentity struct {
	pulumi.ResourceState

	RoleArn pulumi.StringOutput
}

func newCIIdentity(ctx *pulumi.Context, p *platform, name string, c *stackconfig.CIIdentity, opts ...pulumi.ResourceOption) (*CIIdentity, error) {
	ci := &CIIdentity{}
	if err := ctx.RegisterComponentResource("runnerfleet:aws:CIIdentity", name, ci, opts...); err != nil {
		return nil, err
	}
	subjects := c.Subjects()
	if len(subjects) == 0 {
		return nil, fmt.Errorf("%s: no project branch may deploy", stackconfig.Root.Child("ciIdentity", "projects"))
	}
	oidc, err := iam.NewOpenIdConnectProvider(ctx, name+"-oidc", &iam.OpenIdConnectProviderArgs{
		Url:           pulumi.String(c.Issuer),
		ClientIdLists: pulumi.StringArray{pulumi.String(c.Audience)},
		Tags:          p.tags(nil),
	}, p.child(ci)...)
	if err != nil {
		return nil, fmt.Errorf("creating the GitLab OIDC provider: %w", err)
	}
	host, audience := c.IssuerHost(), c.Audience
	trust := oidc.Arn.ApplyT(func(arn string) (string, error) {
		if arn == "" {
			return "", fmt.Errorf("the GitLab OIDC provider's ARN is not known yet")
		}
		return CITrust(arn, host, audience, subjects), nil
	}).(pulumi.StringOutput)
	role, err := iam.NewRole(ctx, name, &iam.RoleArgs{
		Name:             pulumi.String(c.AWS.RoleName),
		Description:      pulumi.String("runnerfleet deploys from GitLab CI (" + c.Issuer + ")"),
		AssumeRolePolicy: trust,
		Tags:             p.tags(nil),
	}, p.child(ci)...)
	if err != nil {
		return nil, fmt.Errorf("creating the deploy role: %w", err)
	}
	for i, arn := range c.AWS.PolicyARNs {
		if _, err := iam.NewRolePolicyAttachment(ctx, fmt.Sprintf("%s-policy-%d", name, i), &iam.RolePolicyAttachmentArgs{
			Role:      role.Name,
			PolicyArn: pulumi.String(arn),
		}, p.child(ci)...); err != nil {
			return nil, fmt.Errorf("attaching %s to the deploy role: %w", arn, err)
		}
	}
	ci.RoleArn = role.Arn
	err = ctx.RegisterResourceOutputs(ci, pulumi.Map{"roleArn": role.Arn})
	return ci, err
}

// CITrust is the trust policy of the deploy role: only
// sts:AssumeRoleWithWebIdentity through the GitLab OIDC provider, and
// StringEquals (never StringLike) on both the token's audience and its
// subject, one of GitLab's project_path:P:ref_type:branch:ref:B claims.
func CITrust(oidcProviderARN, issuerHost, audience string, subjects []string) string {
	return webIdentityTrust(oidcProviderARN, issuerHost, audience, subjects)
}
