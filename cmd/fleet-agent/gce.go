package main

import (
	"context"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/gcp"
)

func init() { selfConstructors["gce"] = newGCESelf }

// newGCESelf is the GCE drain handshake: the drain request long-polled on the
// metadata server, reports written as guest attributes.
func newGCESelf(_ context.Context, o selfOptions) (providers.Self, error) {
	return &gcp.Self{BaseURL: o.gceMetadataURL}, nil
}
