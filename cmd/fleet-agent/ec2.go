package main

import (
	"context"
	"fmt"

	"github.com/runnerfleet/runnerfleet/providers"
	rfaws "github.com/runnerfleet/runnerfleet/providers/aws"
)

func init() { selfConstructors["ec2"] = newEC2Self }

// newEC2Self is the EC2 drain handshake: the drain tag read through IMDSv2,
// reports written as tags with the credentials the SDK's default chain
// finds (on a manager VM: the instance role, through the same IMDS).
func newEC2Self(ctx context.Context, o selfOptions) (providers.Self, error) {
	cfg, err := rfaws.LoadConfig(ctx, rfaws.ConfigOptions{IMDSEndpoint: o.imdsEndpoint, Endpoint: o.ec2Endpoint})
	if err != nil {
		return nil, err
	}
	return rfaws.NewSelf(ctx, cfg, rfaws.SelfOptions{
		IMDSEndpoint: o.imdsEndpoint,
		PollInterval: o.ec2Poll,
		Logf: func(format string, args ...any) {
			o.log.Warn(fmt.Sprintf(format, args...), "provider", "ec2")
		},
	})
}
