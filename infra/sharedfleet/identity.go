package sharedfleet

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/gcp"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/projects"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/serviceaccount"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/storage"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// Roles of the shared fleets' Google service accounts.
const (
	// ManagerComputeRole is the managers' role in each project their groups
	// run VMs in: docker+machine creates and deletes instances (and their
	// disks), docker-autoscaler's fleeting plugin resizes its managed
	// instance group, reads its instances and sets their SSH metadata.
	ManagerComputeRole = "roles/compute.instanceAdmin.v1"
	// VMUserRole is granted on a fleet's vmServiceAccount, and only there,
	// to its managers' account and its gc's account: iam.serviceAccounts.actAs,
	// which creating a VM that runs as the account and setting its
	// metadata (gc's orphan note) need.
	VMUserRole = "roles/iam.serviceAccountUser"
	// PrometheusComputeRole is the fleet Prometheus's role in each project
	// its GCE service discovery lists instances of.
	PrometheusComputeRole = "roles/compute.viewer"
)

// roles/iam.serviceAccountUser is deliberately not granted. docker+machine's
// Google driver attaches a service account to every VM it creates (by
// default the project's Compute Engine default account), which needs
// iam.serviceAccounts.actAs on that one account. Granted at the project, as
// this program could (the default account's email holds the project number,
// which it does not know), it would let the managers act as every account of
// the project, the teams' job accounts and the nodes' included. Grant it on
// the VMs' own account only, where that account is managed.

// SharedFleetIdentity is the Google side of the shared fleets' identities
// (infra/sharedfleet). The fleets' Google service accounts are the stack
// config's (gcpServiceAccount, monitoring.gcpServiceAccount), made outside
// this stack; for each fleet this lets exactly the Kubernetes ServiceAccounts
// annotated with them act as them, and grants them what the managers and the
// fleet's Prometheus do:
//
//   - each manager group's ServiceAccount, <namespace>/<namespace>-<group>, may
//     act as the fleet's gcpServiceAccount, and the fleet's Prometheus's,
//     <namespace>/prometheus, as monitoring.gcpServiceAccount;
//   - the managers' account gets ManagerComputeRole in every project the
//     fleet's groups run VMs in, roles/storage.objectUser (gcp.CacheRole) on the
//     bucket its cache uses (the platform's cache bucket unless the fleet
//     names its own) and gcp.ManagerSignerRole on itself;
//   - the Prometheus account gets PrometheusComputeRole in those projects.
//
// Every grant is one IAMMember (never an IAMBinding or IAMPolicy, which
// would remove the members others granted) for one exact member. A grant two
// fleets need, such as production's and staging's managers sharing an
// account, is declared once and named after what it grants rather than after
// a fleet, so that removing one fleet never revokes the other's.
type SharedFleetIdentity struct {
	pulumi.ResourceState
}

// sharedGrants declares the grants of a SharedFleetIdentity, each once.
type sharedGrants struct {
	name   string
	e      *cloud
	parent pulumi.Resource
	seen   map[string]bool
	// roles are the custom roles declared, by resource name.
	roles map[string]pulumi.StringOutput
}

// grant declares one grant under the name <component>-<suffix>, once; new
// is the typed constructor that declares it.
func (g *sharedGrants) grant(suffix string, declare func(name string, opts ...pulumi.ResourceOption) error, more ...pulumi.ResourceOption) error {
	name := g.name + "-" + suffix
	if g.seen[name] {
		return nil
	}
	g.seen[name] = true
	if err := declare(name, g.e.opts(g.parent, more...)...); err != nil {
		return fmt.Errorf("granting %s: %w", suffix, err)
	}
	return nil
}

// declare declares grant gr of a fleet's plan, once for every fleet that
// needs it: named after what it grants, never after a fleet.
func (g *sharedGrants) declare(ctx *pulumi.Context, gr shared.GrantPlan, afterCluster pulumi.ResourceOption, bindings pulumi.StringMap) error {
	project := g.e.project()
	member := pulumi.String("serviceAccount:" + gr.Account)
	switch gr.What {
	case shared.GrantWorkloadIdentity:
		bindings[gr.Namespace+"/"+gr.ServiceAccount] = pulumi.String(gr.Account)
		return g.grant("wi-"+gr.Namespace+"/"+gr.ServiceAccount, func(name string, opts ...pulumi.ResourceOption) error {
			_, err := serviceaccount.NewIAMMember(ctx, name, &serviceaccount.IAMMemberArgs{
				ServiceAccountId: pulumi.String(serviceAccountID(gr.Account)),
				Role:             pulumi.String(gcp.WorkloadIdentityRole),
				Member:           pulumi.String(gcp.WorkloadIdentityMember(project, gr.Namespace, gr.ServiceAccount)),
			}, opts...)
			return err
		}, afterCluster)
	case shared.GrantManagerCompute, shared.GrantPrometheusCompute:
		role := ManagerComputeRole
		if gr.What == shared.GrantPrometheusCompute {
			role = PrometheusComputeRole
		}
		return g.grant(gcp.RoleSuffix(role)+"-"+gr.On+"/"+gr.Account, func(name string, opts ...pulumi.ResourceOption) error {
			_, err := projects.NewIAMMember(ctx, name, &projects.IAMMemberArgs{
				Project: pulumi.String(gr.On),
				Role:    pulumi.String(role),
				Member:  member,
			}, opts...)
			return err
		})
	case shared.GrantCache:
		bucket, key := pulumi.StringInput(g.e.p.CacheBucket), "cache"
		if gr.On != "" {
			bucket, key = pulumi.String(gr.On), "bucket-"+gr.On
		}
		return g.grant(key+"/"+gr.Account, func(name string, opts ...pulumi.ResourceOption) error {
			_, err := storage.NewBucketIAMMember(ctx, name, &storage.BucketIAMMemberArgs{
				Bucket: bucket,
				Role:   pulumi.String(gcp.CacheRole),
				Member: member,
			}, opts...)
			return err
		})
	case shared.GrantSigner, shared.GrantVMUser:
		role, suffix := gcp.ManagerSignerRole, gcp.RoleSuffix(gcp.ManagerSignerRole)+"/"+gr.Account
		if gr.What == shared.GrantVMUser {
			role, suffix = VMUserRole, gcp.RoleSuffix(VMUserRole)+"/"+gr.On+"/"+gr.Account
		}
		return g.grant(suffix, func(name string, opts ...pulumi.ResourceOption) error {
			_, err := serviceaccount.NewIAMMember(ctx, name, &serviceaccount.IAMMemberArgs{
				ServiceAccountId: pulumi.String(serviceAccountID(gr.On)),
				Role:             pulumi.String(role),
				Member:           member,
			}, opts...)
			return err
		})
	}
	return fmt.Errorf("sharedfleet: no declaration of grant %q", gr.What)
}

// serviceAccountID is the IAM resource name of the Google service account
// email, in the project the email names (which may not be the platform's).
func serviceAccountID(email string) string {
	_, domain, _ := strings.Cut(email, "@")
	return "projects/" + strings.TrimSuffix(domain, ".iam.gserviceaccount.com") + "/serviceAccounts/" + email
}

// newSharedFleetIdentity declares the SharedFleetIdentity of every fleet
// of the stack: one component for all of them, at the stack's top level,
// because a grant two fleets need is declared once (it was the gke
// platform's child, whose URNs its alias keeps).
func newSharedFleetIdentity(ctx *pulumi.Context, name string, e *cloud, opts ...pulumi.ResourceOption) (*SharedFleetIdentity, error) {
	c := &SharedFleetIdentity{}
	opts = append(opts, pulumi.Aliases([]pulumi.Alias{{Type: pulumi.String("runnerfleet:gcp:SharedFleetIdentity"), Parent: e.p}}))
	if err := ctx.RegisterComponentResource("runnerfleet:sharedfleet:Identity", name, c, opts...); err != nil {
		return nil, err
	}
	g := &sharedGrants{name: name, e: e, parent: c, seen: map[string]bool{}, roles: map[string]pulumi.StringOutput{}}
	// The project's identity pool exists once a cluster uses it.
	afterCluster := pulumi.DependsOn([]pulumi.Resource{e.p.GKE})
	bindings := pulumi.StringMap{}

	for _, plan := range e.plans {
		for _, gr := range plan.Cloud.Grants {
			if err := g.declare(ctx, gr, afterCluster, bindings); err != nil {
				return nil, err
			}
		}
		if err := g.gcIdentity(ctx, plan.Namespace, plan.Cloud.GC, afterCluster, bindings); err != nil {
			return nil, err
		}
	}
	return c, ctx.RegisterResourceOutputs(c, pulumi.Map{"workloadIdentity": bindings})
}

// gcIdentity declares fleet gc's account of a fleet as its plan says
// (shared.CloudPlan.GC: in the platform's project), lets only the fleet's
// gc ServiceAccount act as it, and grants it shared.GCListPermissions and,
// under its condition, shared.GCInstancePermissions in the project its
// groups run VMs in. Nothing else: not the managers' account or roles
// (which create VMs), no iam.serviceAccounts.actAs.
func (g *sharedGrants) gcIdentity(ctx *pulumi.Context, ns string, gc shared.GCIdentityPlan, afterCluster pulumi.ResourceOption, bindings pulumi.StringMap) error {
	e, platform, vmProject := g.e, g.e.project(), gc.Project
	acct, err := serviceaccount.NewAccount(ctx, g.name+"-gc-"+ns, &serviceaccount.AccountArgs{
		Project:     pulumi.String(platform),
		AccountId:   pulumi.String(gc.AccountID),
		DisplayName: pulumi.String(gc.DisplayName),
		Description: pulumi.String(gc.Description),
	}, e.opts(g.parent)...)
	if err != nil {
		return fmt.Errorf("creating fleet gc's service account of %s: %w", ns, err)
	}
	ksa := gc.ServiceAccount
	bindings[ns+"/"+ksa] = acct.Email
	if _, err := serviceaccount.NewIAMMember(ctx, g.name+"-gc-"+ns+"-wi", &serviceaccount.IAMMemberArgs{
		ServiceAccountId: acct.Name,
		Role:             pulumi.String(gcp.WorkloadIdentityRole),
		Member:           pulumi.String(gcp.WorkloadIdentityMember(platform, ns, ksa)),
	}, e.opts(g.parent, afterCluster)...); err != nil {
		return fmt.Errorf("binding %s/%s to %s: %w", ns, ksa, gc.AccountID, err)
	}
	roles := map[string]pulumi.StringOutput{}
	for _, r := range []struct {
		kind, id, title string
		perms           []string
	}{
		{"List", gc.ListRoleID, "runnerfleet gc: list instances", shared.GCListPermissions},
		{"Instance", gc.InstanceRoleID, "runnerfleet gc: delete orphaned instances", shared.GCInstancePermissions},
	} {
		name := g.name + "-gc-role-" + strings.ToLower(r.kind) + "-" + vmProject
		if role, ok := g.roles[name]; ok {
			roles[r.kind] = role
			continue
		}
		role, err := projects.NewIAMCustomRole(ctx, name, &projects.IAMCustomRoleArgs{
			Project:     pulumi.String(vmProject),
			RoleId:      pulumi.String(r.id),
			Title:       pulumi.String(r.title),
			Description: pulumi.String("fleet gc of the shared fleets of GKE cluster " + g.e.cluster() + " (runnerfleet)"),
			Permissions: pulumi.ToStringArray(r.perms),
			Stage:       pulumi.String("GA"),
		}, e.opts(g.parent)...)
		if err != nil {
			return fmt.Errorf("declaring fleet gc's role in %s: %w", vmProject, err)
		}
		g.roles[name] = role.Name
		roles[r.kind] = role.Name
	}
	member := pulumi.Sprintf("serviceAccount:%s", acct.Email)
	if _, err := projects.NewIAMMember(ctx, g.name+"-gc-"+ns+"-list", &projects.IAMMemberArgs{
		Project: pulumi.String(vmProject),
		Role:    roles["List"],
		Member:  member,
	}, e.opts(g.parent)...); err != nil {
		return fmt.Errorf("granting fleet gc of %s its list role: %w", ns, err)
	}
	if _, err := projects.NewIAMMember(ctx, g.name+"-gc-"+ns+"-instances", &projects.IAMMemberArgs{
		Project: pulumi.String(vmProject),
		Role:    roles["Instance"],
		Member:  member,
		Condition: &projects.IAMMemberConditionArgs{
			Title:       pulumi.String("fleet " + ns + "'s docker+machine VMs"),
			Description: pulumi.String("instances named " + vmfleet.MachineVMNamePrefix + "* in the zones of shared fleet " + ns),
			Expression:  pulumi.String(gc.Condition),
		},
	}, e.opts(g.parent)...); err != nil {
		return fmt.Errorf("granting fleet gc of %s its instance role: %w", ns, err)
	}
	return nil
}
