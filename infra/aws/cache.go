package aws

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/infra/internal/sdk/aws/s3"
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

// ObjectActions are what a team role may do with cache objects.
var ObjectActions = []string{"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"}

func newCache(ctx *pulumi.Context, p *platform, name string, roles []teamRole, opts ...pulumi.ResourceOption) (*Cache, error) {
	c := &Cache{}
	if err := ctx.RegisterComponentResource("runnerfleet:aws:Cache", name, c, opts...); err != nil {
		return nil, err
	}
	// Named by Pulumi (name-cache plus a random suffix): bucket names are
	// global. It is a cache, so pulumi destroy may empty it.
	b, err := s3.NewBucketV2(ctx, name+"-cache", &s3.BucketV2Args{
		ForceDestroy: pulumi.Bool(true),
		Tags:         p.tags(nil),
	}, p.child(c)...)
	if err != nil {
		return nil, fmt.Errorf("creating the bucket: %w", err)
	}
	c.Bucket, c.Arn = b.Bucket, b.Arn

	block, err := s3.NewBucketPublicAccessBlock(ctx, name+"-cache", &s3.BucketPublicAccessBlockArgs{
		Bucket:                b.ID(),
		BlockPublicAcls:       pulumi.Bool(true),
		BlockPublicPolicy:     pulumi.Bool(true),
		IgnorePublicAcls:      pulumi.Bool(true),
		RestrictPublicBuckets: pulumi.Bool(true),
	}, p.child(c)...)
	if err != nil {
		return nil, fmt.Errorf("blocking public access: %w", err)
	}
	if _, err := s3.NewBucketOwnershipControls(ctx, name+"-cache", &s3.BucketOwnershipControlsArgs{
		Bucket: b.ID(),
		Rule:   &s3.BucketOwnershipControlsRuleArgs{ObjectOwnership: pulumi.String("BucketOwnerEnforced")},
	}, p.child(c)...); err != nil {
		return nil, fmt.Errorf("enforcing bucket ownership: %w", err)
	}
	if _, err := s3.NewBucketServerSideEncryptionConfigurationV2(ctx, name+"-cache", &s3.BucketServerSideEncryptionConfigurationV2Args{
		Bucket: b.ID(),
		Rules: []s3.BucketServerSideEncryptionConfigurationV2RuleArgs{{
			ApplyServerSideEncryptionByDefault: &s3.BucketServerSideEncryptionConfigurationV2RuleApplyServerSideEncryptionByDefaultArgs{
				SseAlgorithm: pulumi.String("AES256"),
			},
		}},
	}, p.child(c)...); err != nil {
		return nil, fmt.Errorf("encrypting the bucket: %w", err)
	}
	if _, err := s3.NewBucketLifecycleConfigurationV2(ctx, name+"-cache", &s3.BucketLifecycleConfigurationV2Args{
		Bucket: b.ID(),
		Rules: []s3.BucketLifecycleConfigurationV2RuleArgs{{
			Id:                             pulumi.String("expire-cache"),
			Status:                         pulumi.String("Enabled"),
			Filter:                         &s3.BucketLifecycleConfigurationV2RuleFilterArgs{},
			Expiration:                     &s3.BucketLifecycleConfigurationV2RuleExpirationArgs{Days: pulumi.Int(p.args.CacheExpireDays)},
			AbortIncompleteMultipartUpload: &s3.BucketLifecycleConfigurationV2RuleAbortIncompleteMultipartUploadArgs{DaysAfterInitiation: pulumi.Int(1)},
		}},
	}, p.child(c)...); err != nil {
		return nil, fmt.Errorf("expiring cache objects: %w", err)
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
	if _, err := s3.NewBucketPolicy(ctx, name+"-cache", &s3.BucketPolicyArgs{
		Bucket: b.ID(),
		Policy: doc,
	}, p.child(c, pulumi.DependsOn([]pulumi.Resource{block}))...); err != nil {
		return nil, fmt.Errorf("granting the team roles: %w", err)
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
