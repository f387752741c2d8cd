package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/runnerfleet/runnerfleet/providers"
	rfaws "github.com/runnerfleet/runnerfleet/providers/aws"
)

func init() { selfConstructors["ec2"] = newEC2Self }

// newEC2Self is the EC2 drain handshake: the drain tag read through IMDSv2,
// reports written as tags with the instance role's credentials.
func newEC2Self(ctx context.Context, o selfOptions) (providers.Self, error) {
	md := imds.New(imds.Options{Endpoint: o.imdsEndpoint, EnableFallback: aws.FalseTernary})
	cfg := aws.Config{
		Credentials: aws.NewCredentialsCache(ec2Credentials(md), func(co *aws.CredentialsCacheOptions) {
			co.ExpiryWindow = 5 * time.Minute
		}),
	}
	if o.ec2Endpoint != "" {
		cfg.BaseEndpoint = aws.String(o.ec2Endpoint)
	}
	return rfaws.NewSelf(ctx, cfg, rfaws.SelfOptions{
		IMDSEndpoint: o.imdsEndpoint,
		PollInterval: o.ec2Poll,
		Logf: func(format string, args ...any) {
			o.log.Warn(fmt.Sprintf(format, args...), "provider", "ec2")
		},
	})
}

// ec2Credentials are the static ones of $AWS_ACCESS_KEY_ID and
// $AWS_SECRET_ACCESS_KEY ($AWS_SESSION_TOKEN) when set, else the instance
// role's, from instance metadata.
func ec2Credentials(md *imds.Client) aws.CredentialsProvider {
	if id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"); id != "" && secret != "" {
		creds := aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: os.Getenv("AWS_SESSION_TOKEN"), Source: "environment"}
		return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds, nil })
	}
	return instanceRoleCredentials{md: md}
}

// instanceRoleCredentials reads the instance role's temporary credentials
// from instance metadata (iam/security-credentials/<role>).
type instanceRoleCredentials struct{ md *imds.Client }

func (p instanceRoleCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	roles, err := p.get(ctx, "iam/security-credentials/")
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("instance role: %w", err)
	}
	role := ""
	if sc := bufio.NewScanner(strings.NewReader(roles)); sc.Scan() {
		role = strings.TrimSpace(sc.Text())
	}
	if role == "" {
		return aws.Credentials{}, errors.New("instance role: the instance has no instance profile")
	}
	doc, err := p.get(ctx, "iam/security-credentials/"+role)
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("instance role %s: %w", role, err)
	}
	var c struct {
		Code            string
		Message         string
		AccessKeyID     string `json:"AccessKeyId"`
		SecretAccessKey string
		Token           string
		Expiration      time.Time
	}
	if err := json.Unmarshal([]byte(doc), &c); err != nil {
		return aws.Credentials{}, fmt.Errorf("instance role %s: %w", role, err)
	}
	if c.Code != "Success" || c.AccessKeyID == "" {
		return aws.Credentials{}, fmt.Errorf("instance role %s: %s %s", role, c.Code, c.Message)
	}
	return aws.Credentials{
		AccessKeyID:     c.AccessKeyID,
		SecretAccessKey: c.SecretAccessKey,
		SessionToken:    c.Token,
		Source:          "instance role " + role,
		CanExpire:       !c.Expiration.IsZero(),
		Expires:         c.Expiration,
	}, nil
}

func (p instanceRoleCredentials) get(ctx context.Context, path string) (string, error) {
	out, err := p.md.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", err
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 1<<20))
	return string(b), err
}
