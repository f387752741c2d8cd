package aws

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
)

// Cache is the job cache: a private, encrypted S3 bucket whose objects
// expire, readable and writable only by the team roles, each under its
// namespace's prefix (gitlab-runner's cache Path, which defaults to the
// RunnerSet's namespace).
type Cache struct {
	pulumi.ResourceState

	Bucket pulumi.StringOutput
	Arn    pulumi.StringOutput
}

// s3Bucket is aws:s3/bucketV2:BucketV2 with the outputs read.
type s3Bucket struct {
	pulumi.CustomResourceState

	Arn    pulumi.StringOutput `pulumi:"arn"`
	Bucket pulumi.StringOutput `pulumi:"bucket"`
}

// ObjectActions are what a team role may do with cache objects.
var ObjectActions = []string{"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"}

func newCache(p *platform, name string, roles []teamRole, opts ...pulumi.ResourceOption) (*Cache, error) {
	c := &Cache{}
	if err := p.ctx.RegisterComponentResource("runnerfleet:aws:Cache", name, c, opts...); err != nil {
		return nil, err
	}
	ctx := p.ctx
	// Named by Pulumi (name-cache plus a random suffix): bucket names are
	// global. It is a cache, so pulumi destroy may empty it.
	var b s3Bucket
	err := pulumix.Register(ctx, "aws:s3/bucketV2:BucketV2", name+"-cache", pulumi.Map{
		"forceDestroy": pulumi.Bool(true),
		"tags":         p.tags(nil),
	}, &b, p.child(c)...)
	if err != nil {
		return nil, err
	}
	c.Bucket, c.Arn = b.Bucket, b.Arn

	block, err := pulumix.New(ctx, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", name+"-cache", pulumi.Map{
		"bucket":                b.ID(),
		"blockPublicAcls":       pulumi.Bool(true),
		"blockPublicPolicy":     pulumi.Bool(true),
		"ignorePublicAcls":      pulumi.Bool(true),
		"restrictPublicBuckets": pulumi.Bool(true),
	}, p.child(c)...)
	if err != nil {
		return nil, err
	}
	if _, err := pulumix.New(ctx, "aws:s3/bucketOwnershipControls:BucketOwnershipControls", name+"-cache", pulumi.Map{
		"bucket": b.ID(),
		"rule":   pulumi.Map{"objectOwnership": pulumi.String("BucketOwnerEnforced")},
	}, p.child(c)...); err != nil {
		return nil, err
	}
	if _, err := pulumix.New(ctx, "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2", name+"-cache", pulumi.Map{
		"bucket": b.ID(),
		"rules": pulumi.Array{pulumi.Map{
			"applyServerSideEncryptionByDefault": pulumi.Map{"sseAlgorithm": pulumi.String("AES256")},
		}},
	}, p.child(c)...); err != nil {
		return nil, err
	}
	if _, err := pulumix.New(ctx, "aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2", name+"-cache", pulumi.Map{
		"bucket": b.ID(),
		"rules": pulumi.Array{pulumi.Map{
			"id":                             pulumi.String("expire-cache"),
			"status":                         pulumi.String("Enabled"),
			"filter":                         pulumi.Map{},
			"expiration":                     pulumi.Map{"days": pulumi.Int(p.f.Cache.ExpireDays)},
			"abortIncompleteMultipartUpload": pulumi.Map{"daysAfterInitiation": pulumi.Int(1)},
		}},
	}, p.child(c)...); err != nil {
		return nil, err
	}

	args := []any{b.Arn}
	for _, r := range roles {
		args = append(args, r.arn)
	}
	doc := pulumi.All(args...).ApplyT(func(v []any) string {
		grants := make([]Grant, len(roles))
		for i, r := range roles {
			grants[i] = Grant{Namespace: r.namespace, RoleARN: v[i+1].(string)}
		}
		return CachePolicy(v[0].(string), grants).String()
	}).(pulumi.StringOutput)
	if _, err := pulumix.New(ctx, "aws:s3/bucketPolicy:BucketPolicy", name+"-cache", pulumi.Map{
		"bucket": b.ID(),
		"policy": doc,
	}, p.child(c, pulumi.DependsOn([]pulumi.Resource{block}))...); err != nil {
		return nil, err
	}

	err = ctx.RegisterResourceOutputs(c, pulumi.Map{"bucket": c.Bucket, "arn": c.Arn})
	return c, err
}

// Grant is a team role's access to the cache: the objects under its
// namespace's prefix.
type Grant struct {
	Namespace string
	RoleARN   string
}

// CachePolicy denies any request without TLS and grants each team role
// (by its exact ARN) the cache objects under its namespace's prefix.
func CachePolicy(bucketARN string, grants []Grant) PolicyDocument {
	d := policy(Statement{
		Sid:       "DenyInsecureTransport",
		Effect:    "Deny",
		Principal: map[string]any{"AWS": "*"},
		Action:    []string{"s3:*"},
		Resource:  []string{bucketARN, bucketARN + "/*"},
		Condition: map[string]map[string]any{"Bool": {"aws:SecureTransport": "false"}},
	})
	for _, g := range grants {
		prefix := g.Namespace + "/"
		d.Statement = append(d.Statement,
			Statement{
				Effect:    "Allow",
				Principal: map[string]any{"AWS": g.RoleARN},
				Action:    ObjectActions,
				Resource:  []string{bucketARN + "/" + prefix + "*"},
			},
			Statement{
				Effect:    "Allow",
				Principal: map[string]any{"AWS": g.RoleARN},
				Action:    []string{"s3:ListBucket"},
				Resource:  []string{bucketARN},
				Condition: map[string]map[string]any{"StringLike": {"s3:prefix": prefix + "*"}},
			},
		)
	}
	return d
}
