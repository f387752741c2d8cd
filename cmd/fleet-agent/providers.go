package main

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
)

// knownProviders are the values of --provider.
var knownProviders = []string{"gce", "ec2"}

func isKnownProvider(p string) bool { return slices.Contains(knownProviders, p) }

// selfOptions is what the Self constructors may use.
type selfOptions struct {
	log          *slog.Logger
	imdsEndpoint string        // EC2
	ec2Endpoint  string        // EC2
	ec2Poll      time.Duration // EC2
	// gceMetadataURL is the GCE metadata API root.
	gceMetadataURL string
}

// selfConstructors make the providers.Self of each --provider this agent is
// built with; a known provider missing here fails with "provider X is not
// built into this agent". Each cloud registers itself from its own file.
var selfConstructors = map[string]func(ctx context.Context, o selfOptions) (providers.Self, error){}
