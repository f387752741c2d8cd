package oracle

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// FlagKind is the shape of a docker-machine driver flag's value.
type FlagKind uint8

const (
	FlagString FlagKind = iota
	FlagBool
	FlagInt
	// FlagStringSlice may be given more than once.
	FlagStringSlice
)

// GoogleDriverFlags are the create flags of docker-machine's google driver
// in GitLab's fork (gitlab-org/ci-cd/docker-machine), the docker-machine
// that gitlab-runner's docker+machine executor runs; gitlab-runner hands
// every MachineOptions entry to `docker-machine create` as --<entry>.
//
// Where they were read: the fork is not a served Go module, so the oracle
// cannot read them at test time as it reads gitlab-runner's structs. They
// are the mcnflag definitions of the fork's drivers/google/google.go
// (GetCreateFlags), read on 2026-12-01 through the search tool's index of
// public source (the fork adds google-label, google-metadata, -accelerator,
// -maintenance-policy, -min-cpu-platform, -skip-firewall-create, the
// operation backoff and the bulk-insert flags to docker/machine's
// drivers/google/google.go at b170508, v0.16.2, whose flags they all are).
var GoogleDriverFlags = map[string]FlagKind{
	"google-zone":                                   FlagString,
	"google-machine-type":                           FlagString,
	"google-min-cpu-platform":                       FlagString,
	"google-machine-image":                          FlagString,
	"google-username":                               FlagString,
	"google-project":                                FlagString,
	"google-service-account":                        FlagString,
	"google-scopes":                                 FlagString,
	"google-disk-size":                              FlagInt,
	"google-disk-type":                              FlagString,
	"google-provisioned-iops":                       FlagInt,
	"google-provisioned-throughput":                 FlagInt,
	"google-network":                                FlagString,
	"google-subnetwork":                             FlagString,
	"google-address":                                FlagString,
	"google-preemptible":                            FlagBool,
	"google-tags":                                   FlagString,
	"google-use-internal-ip":                        FlagBool,
	"google-use-internal-ip-only":                   FlagBool,
	"google-use-existing":                           FlagBool,
	"google-open-port":                              FlagStringSlice,
	"google-operation-backoff-initial-interval":     FlagInt,
	"google-operation-backoff-randomization-factor": FlagString,
	"google-operation-backoff-multipler":            FlagString,
	"google-operation-backoff-max-interval":         FlagInt,
	"google-operation-backoff-max-elapsed-time":     FlagInt,
	"google-label":                                  FlagStringSlice,
	"google-metadata":                               FlagStringSlice,
	"google-metadata-from-file":                     FlagStringSlice,
	"google-accelerator":                            FlagString,
	"google-maintenance-policy":                     FlagString,
	"google-skip-firewall-create":                   FlagBool,
	"google-bulk-insert":                            FlagBool,
	"google-region":                                 FlagString,
	"google-flex-machine-type":                      FlagStringSlice,
	"google-location-zone":                          FlagStringSlice,
}

var (
	gceZoneRE       = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+-[a-z]$`)
	gceLabelKeyRE   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	gceLabelValueRE = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
	gceTagRE        = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// A network or subnetwork: a name, or a (partial) resource path.
	gceNetworkRE    = regexp.MustCompile(`^([a-z]([-a-z0-9]{0,61}[a-z0-9])?|(https://www\.googleapis\.com/compute/v1/)?projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/global/networks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?)$`)
	gceSubnetworkRE = regexp.MustCompile(`^([a-z]([-a-z0-9]{0,61}[a-z0-9])?|(https://www\.googleapis\.com/compute/v1/)?projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/regions/[a-z]+-[a-z]+[0-9]+/subnetworks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?)$`)
	openPortRE      = regexp.MustCompile(`^[0-9]{1,5}(/(tcp|udp))?$`)
)

// OptionProblem is a MachineOptions entry the google driver would refuse or
// misread.
type OptionProblem struct {
	Index   int
	Message string
}

// CheckGoogleMachineOptions checks docker+machine MachineOptions for the
// google driver: every flag one of GoogleDriverFlags, given once unless it
// may repeat, with a value of its shape, and the values GCE itself would
// refuse (zone, labels, tags, network paths, ports) refused here.
func CheckGoogleMachineOptions(opts []string) []OptionProblem {
	var out []OptionProblem
	bad := func(i int, format string, args ...any) {
		out = append(out, OptionProblem{Index: i, Message: fmt.Sprintf(format, args...)})
	}
	seen := map[string]int{}
	for i, o := range opts {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(o, "--"), "=")
		kind, ok := GoogleDriverFlags[name]
		if !ok {
			bad(i, "%q: docker-machine's google driver has no flag %s; docker-machine create would fail", o, name)
			continue
		}
		if j, dup := seen[name]; dup && kind != FlagStringSlice {
			bad(i, "%q: %s is given again (MachineOptions[%d]); only the last would count", o, name, j)
		}
		seen[name] = i
		switch kind {
		case FlagBool:
			if hasValue {
				if _, err := strconv.ParseBool(value); err != nil {
					bad(i, "%q: %s is a boolean flag (true or false)", o, name)
				}
			}
			continue
		case FlagInt:
			if _, err := strconv.Atoi(value); err != nil {
				bad(i, "%q: %s takes an integer", o, name)
				continue
			}
		}
		if !hasValue || value == "" {
			bad(i, "%q: %s needs a value (%s=…)", o, name, name)
			continue
		}
		switch name {
		case "google-zone":
			if !gceZoneRE.MatchString(value) {
				bad(i, "%q: not a GCE zone such as europe-west1-b", o)
			}
		case "google-disk-size":
			if n, _ := strconv.Atoi(value); n < 10 {
				bad(i, "%q: GCE boot disks are at least 10 GB", o)
			}
		case "google-label":
			k, v, found := strings.Cut(value, ":")
			switch {
			case !found:
				bad(i, "%q: the google driver takes labels as key:value", o)
			case !gceLabelKeyRE.MatchString(k):
				bad(i, "%q: %q is not a GCE label key (lower-case letter first, then letters, digits, - and _, at most 63)", o, k)
			case !gceLabelValueRE.MatchString(v):
				bad(i, "%q: %q is not a GCE label value (lower-case letters, digits, - and _, at most 63)", o, v)
			}
		case "google-tags":
			for _, t := range strings.Split(value, ",") {
				if !gceTagRE.MatchString(t) {
					bad(i, "%q: %q is not a GCE network tag (RFC 1035: lower-case letters, digits and -, at most 63)", o, t)
				}
			}
		case "google-network":
			if !gceNetworkRE.MatchString(value) {
				bad(i, "%q: not a network name or projects/<project>/global/networks/<name>", o)
			}
		case "google-subnetwork":
			if !gceSubnetworkRE.MatchString(value) {
				bad(i, "%q: not a subnetwork name or projects/<project>/regions/<region>/subnetworks/<name>", o)
			}
		case "google-open-port":
			if !openPortRE.MatchString(value) {
				bad(i, "%q: a port as 2376 or 8080/tcp", o)
			}
		case "google-maintenance-policy":
			if value != "MIGRATE" && value != "TERMINATE" {
				bad(i, "%q: MIGRATE or TERMINATE", o)
			}
		case "google-metadata":
			if k, _, found := strings.Cut(value, "="); !found || k == "" {
				bad(i, "%q: metadata as key=value", o)
			}
		}
	}
	return out
}
