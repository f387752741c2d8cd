// Package vmimage names a VM manager image from what goes into it and
// derives its runners' tags from it. It imports only the standard library,
// so the stack config's model can check a VM group with it and a pipeline's
// fleet image-name computes the same name as fleet rotate.
package vmimage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A manager VM image is named from what goes into it, so that the pipeline
// that builds it and the rotation that boots it agree on the name without
// passing it around: <family>-<digest>, the digest being the first
// DigestLength hex digits of the SHA-256 of Inputs.Canonical.
// The same inputs give the same name on any machine, and any change of an
// input gives another name.

// DigestLength is how many hex digits of the digest an image name
// carries: 64 bits, so two different inputs of one family do not share a
// name by chance.
const DigestLength = 16

// CanonicalVersion begins the canonical text: a change of what is hashed
// is a new version, never the same one with other names.
const CanonicalVersion = "runnerfleet-vm-image/v1"

// MaxFamilyLength keeps <family>-<digest> within the 63 characters
// GCE allows an image name.
const MaxFamilyLength = 63 - 1 - DigestLength

// Operating systems of manager images.
const (
	OSWindows = "windows"
	OSLinux   = "linux"
)

// The keys of the image inputs: the lines of the canonical text, and what
// an error about an input names (the CLI's flags are --image-<key>).
const (
	KeyFamily        = "family"
	KeyOS            = "os"
	KeyOSVersion     = "os-version"
	KeyRunnerVersion = "runner-version"
	KeyAgentVersion  = "agent-version"
	KeyRunnerConfig  = "runner-config"
	KeyFile          = "file"
)

// Inputs is what goes into a manager VM image.
type Inputs struct {
	// Family is the image family, and the name's prefix (wsrm).
	Family string
	// OS is OSWindows or OSLinux.
	OS string
	// OSVersion is the base system's version, lower case: the Windows
	// version the runners' windows-<version> tag names (2022, 21h2,
	// 1809), or a Linux base (debian-12).
	OSVersion string
	// RunnerVersion is the gitlab-runner version the image installs
	// (17.5.0; a leading v is dropped).
	RunnerVersion string
	// AgentVersion is the fleet-agent version the image installs (0.1.0;
	// a leading v is dropped).
	AgentVersion string
	// RunnerConfig is the config.toml the image installs, as it installs
	// it: the template whose token is filled in at boot, never a token.
	RunnerConfig []byte
	// Files are other files the build installs or runs (its install
	// script, say), by name.
	Files map[string][]byte
}

// InputError is an image input or a tag that cannot be used; Key names it
// (Key*, or TagsKey), so that each caller can name its own flag or
// stack key.
type InputError struct {
	Key     string
	Problem string
}

func (e *InputError) Error() string { return e.Key + ": " + e.Problem }

var (
	// gceName is GCE's rule for an image's and an image family's name
	// (RFC 1035): 1-63 characters, a lower-case letter first, then
	// lower-case letters, digits and hyphens, not ending with a hyphen.
	gceName = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// versionRE is a version as the canonical text and tags carry it.
	versionRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9._+-]{0,62}$`)
	fileNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

// ValidGCEName reports whether name is a valid GCE image (or family) name.
func ValidGCEName(name string) bool { return gceName.MatchString(name) }

func trimV(s string) string { return strings.TrimPrefix(strings.TrimSpace(s), "v") }

// normalized is in with the versions as they are hashed.
func (in Inputs) normalized() Inputs {
	in.RunnerVersion = trimV(in.RunnerVersion)
	in.AgentVersion = trimV(in.AgentVersion)
	in.OSVersion = strings.TrimSpace(in.OSVersion)
	return in
}

// Validate refuses inputs that name no image or an image GCE would refuse.
func (in Inputs) Validate() error {
	in = in.normalized()
	switch {
	case in.Family == "":
		return &InputError{KeyFamily, "required: the image family, the name's prefix (wsrm, say)"}
	case len(in.Family) > MaxFamilyLength || !gceName.MatchString(in.Family):
		return &InputError{KeyFamily, fmt.Sprintf("%q is not a family name an image named <family>-<%d hex digits> can have: a lower-case letter, then lower-case letters, digits and hyphens, not ending with a hyphen, at most %d characters", in.Family, DigestLength, MaxFamilyLength)}
	case in.OS != OSWindows && in.OS != OSLinux:
		return &InputError{KeyOS, fmt.Sprintf("%q is not %s or %s", in.OS, OSWindows, OSLinux)}
	}
	for _, v := range []struct{ key, val, example string }{
		{KeyOSVersion, in.OSVersion, "2022 or 21h2 for Windows, debian-12 for Linux"},
		{KeyRunnerVersion, in.RunnerVersion, "17.5.0"},
		{KeyAgentVersion, in.AgentVersion, "0.1.0"},
	} {
		if !versionRE.MatchString(v.val) {
			return &InputError{v.key, fmt.Sprintf("%q is not a version: lower-case letters, digits, '.', '_', '+' and '-', starting with a letter or digit (%s)", v.val, v.example)}
		}
	}
	if len(in.RunnerConfig) == 0 {
		return &InputError{KeyRunnerConfig, "required: the config.toml the image installs (its template, without a token)"}
	}
	for name := range in.Files {
		if !fileNameRE.MatchString(name) {
			return &InputError{KeyFile, fmt.Sprintf("file name %q: letters, digits, '.', '_' and '-' only", name)}
		}
	}
	return nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Canonical is the text an image's name is the digest of: one key=value
// line each, in this order, every line ending with a newline:
//
//	runnerfleet-vm-image/v1
//	family=<family>
//	os=<os>
//	os-version=<os version>
//	runner-version=<gitlab-runner version, without a leading v>
//	agent-version=<fleet-agent version, without a leading v>
//	runner-config=<SHA-256 of config.toml, lower-case hex>
//	file:<name>=<SHA-256 of the file>   (one per file, by name)
//
// A pipeline without fleet can compute the name from it with printf and
// sha256sum (docs/concepts/vm-managers.md shows how).
func (in Inputs) Canonical() string {
	in = in.normalized()
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", CanonicalVersion)
	fmt.Fprintf(&b, "%s=%s\n", KeyFamily, in.Family)
	fmt.Fprintf(&b, "%s=%s\n", KeyOS, in.OS)
	fmt.Fprintf(&b, "%s=%s\n", KeyOSVersion, in.OSVersion)
	fmt.Fprintf(&b, "%s=%s\n", KeyRunnerVersion, in.RunnerVersion)
	fmt.Fprintf(&b, "%s=%s\n", KeyAgentVersion, in.AgentVersion)
	fmt.Fprintf(&b, "%s=%s\n", KeyRunnerConfig, sha256Hex(in.RunnerConfig))
	names := make([]string, 0, len(in.Files))
	for n := range in.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s:%s=%s\n", KeyFile, n, sha256Hex(in.Files[n]))
	}
	return b.String()
}

// Name is the name of the image built from in: <family>-<digest>.
// It is valid for GCE (and EC2, whose AMI names allow more).
func Name(in Inputs) (string, error) {
	if err := in.Validate(); err != nil {
		return "", err
	}
	return in.Family + "-" + sha256Hex([]byte(in.Canonical()))[:DigestLength], nil
}

// TagsKey names a VM group's declared runner tags in errors (InputError).
const TagsKey = "tags"

// GroupTags are the tags of a VM group's runners: the group's declared
// tags when it declares some, else <os> and <os>-<osVersion> (windows,
// windows-2022). A version tag, <os>- followed by a digit (windows-1809),
// must name osVersion, the Windows version of the image the managers boot:
// a job that asks for windows-1809 must not land on Windows 2022. The
// result is sorted, without duplicates.
func GroupTags(os, osVersion string, declared []string) ([]string, error) {
	if os != OSWindows && os != OSLinux {
		return nil, &InputError{KeyOS, fmt.Sprintf("%q is not %s or %s", os, OSWindows, OSLinux)}
	}
	if !versionRE.MatchString(osVersion) {
		return nil, &InputError{KeyOSVersion, fmt.Sprintf("%q is not a version (2022, 21h2, debian-12)", osVersion)}
	}
	tags := []string{os, os + "-" + osVersion}
	if len(declared) > 0 {
		tags = nil
		for _, t := range declared {
			t = strings.TrimSpace(t)
			if t == "" || strings.Contains(t, ",") || len(t) > 255 {
				return nil, &InputError{TagsKey, fmt.Sprintf("%q is not a GitLab runner tag: not empty, no comma, at most 255 characters", t)}
			}
			if v, ok := VersionOfTag(os, t); ok && v != osVersion {
				return nil, &InputError{TagsKey, fmt.Sprintf("tag %s names %s %s, but the image's %s is %s: a job asking for %s would run on %s %s; tag %s-%s instead, or build the image for %s %s", t, os, v, KeyOSVersion, osVersion, t, os, osVersion, os, osVersion, os, v)}
			}
			tags = append(tags, t)
		}
	}
	slices.Sort(tags)
	return slices.Compact(tags), nil
}

// VersionOfTag is the version a version tag (<os>-<digit>…) names.
func VersionOfTag(os, tag string) (string, bool) {
	v, ok := strings.CutPrefix(tag, os+"-")
	if !ok || v == "" || v[0] < '0' || v[0] > '9' {
		return "", false
	}
	return v, true
}
