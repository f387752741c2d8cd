package gcp

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/iam"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/serviceaccount"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
)

// CIIdentity is the deploy pipeline's GCP identity
// (ci/runnerfleet.gitlab-ci.yml): a Workload Identity pool with an OIDC
// provider for the GitLab instance whose attribute condition admits only
// the ID tokens of the stack's named projects' branch pipelines, and the
// binding that lets those projects impersonate the deploy service account.
type CIIdentity struct {
	pulumi.ResourceState

	// Provider is the pool provider's full name
	// (RUNNERFLEET_GCP_WORKLOAD_IDENTITY_PROVIDER).
	Provider pulumi.StringOutput
}

// CIAttributeMapping maps GitLab's ID token claims to the attributes the
// condition and the principalSet use.
var CIAttributeMapping = map[string]string{
	"google.subject":         "assertion.sub",
	"attribute.project_path": "assertion.project_path",
	"attribute.ref":          "assertion.ref",
	"attribute.ref_type":     "assertion.ref_type",
}

// CICondition is the provider's attribute condition (CEL): a token is
// exchanged only when its project and branch are one of the stack's.
func CICondition(projects []stackconfig.CIProject) string {
	var or []string
	for _, p := range projects {
		refs := make([]string, len(p.Branches))
		for i, b := range p.Branches {
			refs[i] = strconv.Quote(b)
		}
		or = append(or, fmt.Sprintf(`(assertion.project_path == %s && assertion.ref_type == "branch" && assertion.ref in [%s])`,
			strconv.Quote(p.Path), strings.Join(refs, ", ")))
	}
	return strings.Join(or, " || ")
}

func newCIIdentity(ctx *pulumi.Context, name string, e *platform, c *stackconfig.CIIdentity, opts ...pulumi.ResourceOption) (*CIIdentity, error) {
	ci := &CIIdentity{}
	if err := ctx.RegisterComponentResource("runnerfleet:gcp:CIIdentity", name, ci, opts...); err != nil {
		return nil, err
	}
	if len(c.Subjects()) == 0 {
		return nil, fmt.Errorf("%s: no project branch may deploy", stackconfig.Root.Child("ciIdentity", "projects"))
	}
	g := c.GCP
	pool, err := iam.NewWorkloadIdentityPool(ctx, name+"-pool", &iam.WorkloadIdentityPoolArgs{
		WorkloadIdentityPoolId: pulumi.String(g.PoolID),
		DisplayName:            pulumi.String("GitLab CI deploys"),
		Description:            pulumi.String("runnerfleet deploys from GitLab CI (" + c.Issuer + ")"),
	}, e.opts(ci)...)
	if err != nil {
		return nil, fmt.Errorf("declaring the Workload Identity pool: %w", err)
	}
	mapping := pulumi.StringMap{}
	for k, v := range CIAttributeMapping {
		mapping[k] = pulumi.String(v)
	}
	// No allowedAudiences: the provider's default audience is its own full
	// name, which is what the template's GCP ID token carries.
	prov, err := iam.NewWorkloadIdentityPoolProvider(ctx, name+"-provider", &iam.WorkloadIdentityPoolProviderArgs{
		WorkloadIdentityPoolId:         pool.WorkloadIdentityPoolId,
		WorkloadIdentityPoolProviderId: pulumi.String(g.ProviderID),
		DisplayName:                    pulumi.String("GitLab"),
		AttributeMapping:               mapping,
		AttributeCondition:             pulumi.String(CICondition(c.Projects)),
		Oidc:                           &iam.WorkloadIdentityPoolProviderOidcArgs{IssuerUri: pulumi.String(c.Issuer)},
	}, e.opts(ci)...)
	if err != nil {
		return nil, fmt.Errorf("declaring the Workload Identity pool's GitLab provider: %w", err)
	}
	seen := map[string]bool{}
	for _, p := range c.Projects {
		if seen[p.Path] {
			continue
		}
		seen[p.Path] = true
		path := p.Path
		member := pool.Name.ApplyT(func(n string) (string, error) {
			if n == "" {
				return "", fmt.Errorf("the Workload Identity pool's name is not known yet")
			}
			return "principalSet://iam.googleapis.com/" + n + "/attribute.project_path/" + path, nil
		}).(pulumi.StringOutput)
		if _, err := serviceaccount.NewIAMMember(ctx, name+"-"+strings.ReplaceAll(path, "/", "-"), &serviceaccount.IAMMemberArgs{
			ServiceAccountId: pulumi.String("projects/" + e.gcp.Project + "/serviceAccounts/" + g.ServiceAccount),
			Role:             pulumi.String(WorkloadIdentityRole),
			Member:           member,
		}, e.opts(ci)...); err != nil {
			return nil, fmt.Errorf("letting %s impersonate %s: %w", path, g.ServiceAccount, err)
		}
	}
	ci.Provider = prov.Name
	err = ctx.RegisterResourceOutputs(ci, pulumi.Map{"provider": prov.Name})
	return ci, err
}
