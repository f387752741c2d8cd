package gcp

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/serviceaccount"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Roles of the Google service accounts the platform and the shared fleets
// (infra/sharedfleet) grant.
const (
	// WorkloadIdentityRole lets one Kubernetes ServiceAccount act as a
	// Google service account.
	WorkloadIdentityRole = "roles/iam.workloadIdentityUser"
	// ManagerSignerRole is granted to a managers' account on itself, and
	// only there: the managers' config.toml gives the GCS cache a bucket and
	// no credentials, so gitlab-runner signs the cache URLs it hands to the
	// jobs through the IAM signBlob API as the account the metadata server
	// names, which needs iam.serviceAccounts.signBlob on that account. It
	// lets the account sign as, or mint tokens for, nothing but itself.
	ManagerSignerRole = "roles/iam.serviceAccountTokenCreator"
)

// RoleSuffix is the part of a resource name that names role.
func RoleSuffix(role string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(role, "roles/"), ".", "-"))
}

// Identities are the teams' Google service accounts. Each one trusts exactly
// two Kubernetes ServiceAccounts of its team's RunnerSet through Workload
// Identity, its jobs' (in the RunnerSet's jobs namespace) and its managers'
// (in the team's namespace): gitlab-runner's manager, not the
// job, signs the GCS cache URLs the jobs use, as the account the metadata
// server names (the controller binds the managers to the account only when
// the RunnerSet has a GCS cache). One IAMMember per member (not IAMBinding,
// which would remove every other member of the role, nor a wildcard
// principal set).
//
// Signing without a key goes through the IAM signBlob API, so each account
// also holds ManagerSignerRole on itself, and only there: it lets the
// account sign as, or mint tokens for, nothing but itself.
type Identities struct {
	pulumi.ResourceState

	Teams []TeamIdentity
}

// TeamIdentity is one team's service account.
type TeamIdentity struct {
	Namespace, Name string
	// AccountID is naming.GCPServiceAccountID.
	AccountID string
	Email     pulumi.StringOutput
	// Member is serviceAccount:<email>, for grants to the account.
	Member pulumi.StringOutput
}

func newIdentities(ctx *pulumi.Context, name string, e *platform, cl *Cluster, opts ...pulumi.ResourceOption) (*Identities, error) {
	ids := &Identities{}
	if err := ctx.RegisterComponentResource("runnerfleet:gcp:Identities", name, ids, opts...); err != nil {
		return nil, err
	}
	g, cluster := e.gcp, e.args.Cluster
	for _, t := range e.args.Teams {
		r := naming.For(t.Namespace, t.Name)
		id := r.GCPServiceAccountID(cluster)
		// The account ID is unique per team (the stack config refuses
		// clashes) where "<namespace>-<name>" is not: a-b/c and a/b-c.
		child := name + "-" + id
		sa, err := serviceaccount.NewAccount(ctx, child, &serviceaccount.AccountArgs{
			Project:     pulumi.String(g.Project),
			AccountId:   pulumi.String(id),
			DisplayName: pulumi.String("runnerfleet jobs " + t.Namespace + "/" + t.Name),
			Description: pulumi.String("Job pods of RunnerSet " + t.Namespace + "/" + t.Name + " on GKE cluster " + cluster + " act as this account through Workload Identity."),
		}, e.opts(ids)...)
		if err != nil {
			return nil, fmt.Errorf("creating the service account of %s/%s: %w", t.Namespace, t.Name, err)
		}
		// The project's identity pool exists once a cluster uses it.
		afterCluster := pulumi.DependsOn([]pulumi.Resource{cl.Resource})
		// The job ServiceAccount lives in the RunnerSet's jobs namespace,
		// the managers' in the team's namespace.
		for _, wi := range []struct{ suffix, ns, ksa string }{
			{"-workload-identity", r.JobsNamespace(), r.JobServiceAccount()},
			{"-workload-identity-manager", t.Namespace, r.ManagerServiceAccount()},
		} {
			_, err = serviceaccount.NewIAMMember(ctx, child+wi.suffix, &serviceaccount.IAMMemberArgs{
				ServiceAccountId: sa.Name,
				Role:             pulumi.String(WorkloadIdentityRole),
				Member:           pulumi.String(WorkloadIdentityMember(g.Project, wi.ns, wi.ksa)),
			}, e.opts(ids, afterCluster)...)
			if err != nil {
				return nil, fmt.Errorf("binding %s to %s: %w", wi.ksa, id, err)
			}
		}
		_, err = serviceaccount.NewIAMMember(ctx, child+"-signer", &serviceaccount.IAMMemberArgs{
			ServiceAccountId: sa.Name,
			Role:             pulumi.String(ManagerSignerRole),
			Member:           sa.Member,
		}, e.opts(ids)...)
		if err != nil {
			return nil, fmt.Errorf("letting %s sign as itself: %w", id, err)
		}
		ids.Teams = append(ids.Teams, TeamIdentity{Namespace: t.Namespace, Name: t.Name, AccountID: id, Email: sa.Email, Member: sa.Member})
	}
	emails := pulumi.StringMap{}
	for _, t := range ids.Teams {
		emails[t.Namespace+"/"+t.Name] = t.Email
	}
	return ids, ctx.RegisterResourceOutputs(ids, pulumi.Map{"serviceAccounts": emails})
}
