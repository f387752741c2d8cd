package aws

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// ConfigOptions adjust LoadConfig.
type ConfigOptions struct {
	// Region overrides the region of the environment and shared config.
	Region string
	// Profile selects a shared config profile (else $AWS_PROFILE, else default).
	Profile string
	// Endpoint is the EC2 API endpoint instead of the region's (a test server).
	Endpoint string
	// IMDSEndpoint is the instance metadata service instead of
	// http://169.254.169.254 (a test server).
	IMDSEndpoint string
}

// LoadConfig loads AWS configuration and credentials the way the AWS CLI
// does, with config.LoadDefaultConfig: the environment ($AWS_ACCESS_KEY_ID,
// …), the shared config and credentials files and their profiles (SSO,
// assumed roles, credential_process), web identity ($AWS_ROLE_ARN and
// $AWS_WEB_IDENTITY_TOKEN_FILE: IRSA and EKS Pod Identity's token file),
// the ECS container endpoint, and last the EC2 instance role through
// IMDSv2. Credentials are resolved lazily and refreshed before they expire.
func LoadConfig(ctx context.Context, o ConfigOptions) (aws.Config, error) {
	var opts []func(*config.LoadOptions) error
	if o.Region != "" {
		opts = append(opts, config.WithRegion(o.Region))
	}
	if o.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(o.Profile))
	}
	if o.IMDSEndpoint != "" {
		opts = append(opts, config.WithEC2IMDSEndpoint(o.IMDSEndpoint))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("aws: loading the shared config and credentials: %w", err)
	}
	if o.Endpoint != "" {
		cfg.BaseEndpoint = aws.String(o.Endpoint)
	}
	return cfg, nil
}

// CheckCredentials resolves cfg's credentials once, so that missing ones
// fail with the chain's own explanation before any call.
func CheckCredentials(ctx context.Context, cfg aws.Config) error {
	if cfg.Credentials == nil {
		return fmt.Errorf("aws: no credentials: set AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_ROLE_ARN with AWS_WEB_IDENTITY_TOKEN_FILE, or run on an instance with a role")
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return fmt.Errorf("aws: no usable credentials (looked at the environment, shared config profiles, SSO, web identity, the container and the instance role): %w", err)
	}
	return nil
}
