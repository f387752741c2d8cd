package aws

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerfleet/runnerfleet/providers"
)

var _ providers.Self = (*Self)(nil)

// DefaultPollInterval is how often Self.WaitDrainRequest reads the drain tag.
const DefaultPollInterval = 5 * time.Second

// SelfOptions configure NewSelf.
type SelfOptions struct {
	// IMDSEndpoint is the instance metadata service's base URL. Empty: the
	// SDK's default (AWS_EC2_METADATA_SERVICE_ENDPOINT, else
	// http://169.254.169.254).
	IMDSEndpoint string
	// PollInterval between reads of the drain tag (default 5s).
	PollInterval time.Duration
	// IMDSOptions and EC2Options adjust the two clients.
	IMDSOptions []func(*imds.Options)
	EC2Options  []func(*ec2.Options)
	// Logf, if set, is told about errors WaitDrainRequest rides out.
	Logf func(format string, args ...any)
}

// Self is providers.Self for the drain agent on an EC2 instance.
//
// It reads the instance's runnerfleet:drain tag from instance metadata
// (IMDSv2 only, no IMDSv1 fallback), so the instance must have instance
// metadata tags enabled (CreateInstance does that).
//
// It reports with ec2:CreateTags on its own instance, so the instance's IAM
// role (Compute.InstanceProfile) must allow that, e.g.
//
//	{"Effect": "Allow", "Action": "ec2:CreateTags",
//	 "Resource": "arn:aws:ec2:*:*:instance/*",
//	 "Condition": {"ForAllValues:StringEquals": {"aws:TagKeys": [
//	   "runnerfleet:drain-phase", "runnerfleet:drain-jobs-left",
//	   "runnerfleet:drain-updated-at"]}}}
//
// The tag-key condition keeps the agent from setting runnerfleet:drain or
// any other tag; narrowing the resource to the caller's own instance needs a
// per-instance condition (commonly "aws:ARN" equal to
// "${ec2:SourceInstanceARN}", which AWS does not document) or a fleet tag
// condition (ec2:ResourceTag/…).
type Self struct {
	md           *imds.Client
	ec2          *ec2.Client
	instanceID   string
	region       string
	pollInterval time.Duration
	logf         func(string, ...any)
}

// NewSelf reads the instance's ID and region from instance metadata and
// makes the EC2 client Report uses from cfg, in that region. cfg must carry
// credentials (on EC2, config.LoadDefaultConfig finds the instance role's).
// It fails if the instance does not expose its tags in metadata.
func NewSelf(ctx context.Context, cfg aws.Config, o SelfOptions) (*Self, error) {
	imdsOpts := append([]func(*imds.Options){func(io *imds.Options) {
		if o.IMDSEndpoint != "" {
			io.Endpoint = o.IMDSEndpoint
		}
		io.EnableFallback = aws.FalseTernary // IMDSv2 or nothing
	}}, o.IMDSOptions...)
	s := &Self{
		md:           imds.NewFromConfig(cfg, imdsOpts...),
		pollInterval: o.PollInterval,
		logf:         o.Logf,
	}
	if s.pollInterval <= 0 {
		s.pollInterval = DefaultPollInterval
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	var err error
	if s.instanceID, err = s.get(ctx, "instance-id"); err != nil {
		return nil, fmt.Errorf("aws: drain agent: instance ID from instance metadata: %w", err)
	}
	if s.region, err = s.get(ctx, "placement/region"); err != nil {
		return nil, fmt.Errorf("aws: drain agent on %s: region from instance metadata: %w", s.instanceID, err)
	}
	if _, err := s.get(ctx, "tags/instance"); err != nil {
		if isStatus(err, http.StatusNotFound) {
			return nil, fmt.Errorf("aws: drain agent on %s: instance metadata tags are disabled (enable InstanceMetadataTags): %w", s.instanceID, err)
		}
		return nil, fmt.Errorf("aws: drain agent on %s: instance tags from instance metadata: %w", s.instanceID, err)
	}
	cfg = cfg.Copy()
	cfg.Region = s.region
	s.ec2 = ec2.NewFromConfig(cfg, o.EC2Options...)
	return s, nil
}

// InstanceID is the instance the agent runs on.
func (s *Self) InstanceID() string { return s.instanceID }

// Region is the instance's region.
func (s *Self) Region() string { return s.region }

// get reads meta-data/<path>.
func (s *Self) get(ctx context.Context, path string) (string, error) {
	out, err := s.md.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", err
	}
	defer out.Content.Close()
	b, err := io.ReadAll(out.Content)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// isStatus reports whether err carries HTTP status code.
func isStatus(err error, code int) bool {
	var se interface{ HTTPStatusCode() int }
	return errors.As(err, &se) && se.HTTPStatusCode() == code
}

// WaitDrainRequest polls meta-data/tags/instance/runnerfleet:drain every
// PollInterval until it is "true" (a 404 means no drain requested) or ctx
// ends. Other errors are logged and polling goes on. The SDK's IMDS client
// keeps the session token: it fetches one (TTL 5 minutes) before it
// expires, and on a 401 fetches a new one and retries.
func (s *Self) WaitDrainRequest(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		v, err := s.get(ctx, "tags/instance/"+providers.EC2DrainTag)
		switch {
		case err == nil && strings.EqualFold(v, "true"):
			return nil
		case err == nil, isStatus(err, http.StatusNotFound):
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			s.logf("aws: drain agent on %s: reading %s from instance metadata: %v", s.instanceID, providers.EC2DrainTag, err)
		}
		t.Reset(s.pollInterval)
	}
}

// Report writes st as the instance's runnerfleet:drain-phase,
// runnerfleet:drain-jobs-left and runnerfleet:drain-updated-at tags (zero
// UpdatedAt: now), with one CreateTags call on the instance itself.
func (s *Self) Report(ctx context.Context, st providers.DrainState) error {
	at := st.UpdatedAt
	if at.IsZero() {
		at = time.Now()
	}
	_, err := s.ec2.CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: []string{s.instanceID},
		Tags: []types.Tag{
			{Key: aws.String(providers.EC2PhaseTag), Value: aws.String(string(st.Phase))},
			{Key: aws.String(providers.EC2JobsLeftTag), Value: aws.String(strconv.Itoa(st.JobsLeft))},
			{Key: aws.String(providers.EC2UpdatedAtTag), Value: aws.String(at.UTC().Format(time.RFC3339Nano))},
		},
	})
	if err != nil {
		return fmt.Errorf("aws: drain agent on %s: report %s/%d: %w", s.instanceID, st.Phase, st.JobsLeft, err)
	}
	return nil
}

// ReportJobs writes r as the instance's runnerfleet:jobs and
// runnerfleet:jobs-updated-at tags (zero UpdatedAt: now).
func (s *Self) ReportJobs(ctx context.Context, r providers.JobReport) error {
	at := r.UpdatedAt
	if at.IsZero() {
		at = time.Now()
	}
	_, err := s.ec2.CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: []string{s.instanceID},
		Tags: []types.Tag{
			{Key: aws.String(providers.EC2JobsTag), Value: aws.String(strconv.Itoa(r.Jobs))},
			{Key: aws.String(providers.EC2JobsUpdatedAtTag), Value: aws.String(at.UTC().Format(time.RFC3339Nano))},
		},
	})
	if err != nil {
		return fmt.Errorf("aws: job reporter on %s: report %d jobs: %w", s.instanceID, r.Jobs, err)
	}
	return nil
}
