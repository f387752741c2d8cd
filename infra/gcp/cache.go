package gcp

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/gcp/storage"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// CacheRole is what each team's service account may do in the cache bucket:
// read, write, list and delete objects, and nothing else (no bucket IAM, no
// bucket settings, which roles/storage.objectAdmin and admin would add).
const CacheRole = "roles/storage.objectUser"

// Cache is the job cache bucket: private (uniform bucket-level access,
// public access prevention enforced), in the cluster's region, objects
// expiring after the stack's cache.expireDays, no versions or soft-deleted
// copies kept (a cache is rebuilt, never restored).
type Cache struct {
	pulumi.ResourceState

	Bucket pulumi.StringOutput
}

// BucketName is the cache bucket's name: bucket names are global, so the
// project ID (itself globally unique) leads.
func BucketName(project, cluster string) string { return naming.Join(project, cluster, "cache") }

func newCache(ctx *pulumi.Context, name string, e *platform, ids *Identities, opts ...pulumi.ResourceOption) (*Cache, error) {
	c := &Cache{}
	if err := ctx.RegisterComponentResource("runnerfleet:gcp:Cache", name, c, opts...); err != nil {
		return nil, err
	}
	g := e.gcp
	bucket, err := storage.NewBucket(ctx, name+"-bucket", &storage.BucketArgs{
		Name:                     pulumi.String(BucketName(g.Project, e.args.Cluster)),
		Location:                 pulumi.String(g.Region),
		StorageClass:             pulumi.String("STANDARD"),
		UniformBucketLevelAccess: pulumi.Bool(true),
		PublicAccessPrevention:   pulumi.String("enforced"),
		Versioning:               &storage.BucketVersioningArgs{Enabled: pulumi.Bool(false)},
		SoftDeletePolicy:         &storage.BucketSoftDeletePolicyArgs{RetentionDurationSeconds: pulumi.Int(0)},
		LifecycleRules: []storage.BucketLifecycleRuleArgs{{
			Action:    &storage.BucketLifecycleRuleActionArgs{Type: pulumi.String("Delete")},
			Condition: &storage.BucketLifecycleRuleConditionArgs{Age: pulumi.Int(e.args.CacheExpireDays)},
		}},
		// Never delete a bucket that still holds objects: a stack torn
		// down by mistake should not take data with it.
		ForceDestroy: pulumi.Bool(false),
		Labels:       pulumix.StringMap(e.labels),
	}, e.opts(c)...)
	if err != nil {
		return nil, fmt.Errorf("creating the bucket: %w", err)
	}
	for _, t := range ids.Teams {
		// Each team reaches only its own namespace's part of the bucket,
		// where its runner's cache.toml Path puts its objects.
		_, err := storage.NewBucketIAMMember(ctx, name+"-"+t.AccountID, &storage.BucketIAMMemberArgs{
			Bucket: bucket.Name,
			Role:   pulumi.String(CacheRole),
			Member: t.Member,
			Condition: &storage.BucketIAMMemberConditionArgs{
				Title:       pulumi.String("runnerfleet cache of namespace " + t.Namespace),
				Description: pulumi.String("Only the objects under the team's namespace prefix"),
				Expression:  pulumi.Sprintf(`resource.name.startsWith("projects/_/buckets/%s/objects/%s/")`, bucket.Name, t.Namespace),
			},
		}, e.opts(c)...)
		if err != nil {
			return nil, fmt.Errorf("granting %s/%s the cache: %w", t.Namespace, t.Name, err)
		}
	}
	c.Bucket = bucket.Name
	return c, ctx.RegisterResourceOutputs(c, pulumi.Map{"bucket": c.Bucket})
}
