package gcp

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
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

func newCache(ctx *pulumi.Context, name string, e *env, ids *Identities, opts ...pulumi.ResourceOption) (*Cache, error) {
	c := &Cache{}
	if err := ctx.RegisterComponentResource("runnerfleet:gcp:Cache", name, c, opts...); err != nil {
		return nil, err
	}
	g := e.gcp
	bucket, err := pulumix.New(ctx, "gcp:storage/bucket:Bucket", name+"-bucket", pulumi.Map{
		"name":                     pulumi.String(BucketName(g.Project, e.fleet.ClusterName)),
		"location":                 pulumi.String(g.Region),
		"storageClass":             pulumi.String("STANDARD"),
		"uniformBucketLevelAccess": pulumi.Bool(true),
		"publicAccessPrevention":   pulumi.String("enforced"),
		"versioning":               pulumi.Map{"enabled": pulumi.Bool(false)},
		"softDeletePolicy":         pulumi.Map{"retentionDurationSeconds": pulumi.Int(0)},
		"lifecycleRules": pulumi.Array{pulumi.Map{
			"action":    pulumi.Map{"type": pulumi.String("Delete")},
			"condition": pulumi.Map{"age": pulumi.Int(e.fleet.Cache.ExpireDays)},
		}},
		// Never delete a bucket that still holds objects: a stack torn
		// down by mistake should not take data with it.
		"forceDestroy": pulumi.Bool(false),
		"labels":       pulumix.StringMap(e.labels),
	}, e.opts(c)...)
	if err != nil {
		return nil, err
	}
	for _, t := range ids.Teams {
		// Each team reaches only its own namespace's part of the bucket,
		// where its runner's cache.toml Path puts its objects.
		_, err := pulumix.New(ctx, "gcp:storage/bucketIAMMember:BucketIAMMember", name+"-"+t.AccountID, pulumi.Map{
			"bucket": bucket.Name,
			"role":   pulumi.String(CacheRole),
			"member": t.Member,
			"condition": pulumi.Map{
				"title":       pulumi.String("runnerfleet cache of namespace " + t.Namespace),
				"description": pulumi.String("Only the objects under the team's namespace prefix"),
				"expression":  pulumi.Sprintf(`resource.name.startsWith("projects/_/buckets/%s/objects/%s/")`, bucket.Name, t.Namespace),
			},
		}, e.opts(c)...)
		if err != nil {
			return nil, err
		}
	}
	c.Bucket = bucket.Name
	return c, ctx.RegisterResourceOutputs(c, pulumi.Map{"bucket": c.Bucket})
}
