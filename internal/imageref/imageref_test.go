package imageref

import (
	"strings"
	"testing"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestFormatPinsByDigestWhenGiven(t *testing.T) {
	if got := Format("ghcr.io/runnerfleet/fleet", "v0.1.0", ""); got != "ghcr.io/runnerfleet/fleet:v0.1.0" {
		t.Errorf("by tag: %s", got)
	}
	if got := Format("ghcr.io/runnerfleet/fleet", "v0.1.0", digest); got != "ghcr.io/runnerfleet/fleet@"+digest {
		t.Errorf("by digest: %s", got)
	}
	for _, ref := range []string{Format("ghcr.io/runnerfleet/fleet", "v0.1.0", ""), Format("ghcr.io/runnerfleet/fleet", "", digest)} {
		if err := Check(ref, "x"); err != nil {
			t.Errorf("Check(%s): %v", ref, err)
		}
	}
}

func TestCheckRefusesWhatADefaultWouldComplete(t *testing.T) {
	for _, ref := range []string{
		"fleet:v0.1.0",                          // no registry: Docker Hub by default
		"ghcr.io/runnerfleet/fleet",             // no tag: latest by default
		"ghcr.io/runnerfleet/fleet@sha256:0123", // a short digest
		"ghcr.io/runnerfleet/fleet:v1;reboot",
		"",
	} {
		err := Check(ref, "ghcr.io/runnerfleet/fleet:v0.1.0")
		if err == nil || !strings.Contains(err.Error(), "is not an image reference") || !strings.Contains(err.Error(), "such as ghcr.io/runnerfleet/fleet:v0.1.0") {
			t.Errorf("Check(%q) = %v", ref, err)
		}
	}
}
