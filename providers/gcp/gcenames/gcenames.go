// Package gcenames names what runnerfleet's Compute Engine code publishes
// for others to read: the VM metadata keys providers/gcp sets and the
// series, port and permission of fleet quota-exporter
// (providers/gcp/quotaexporter). It is a leaf (no cloud client), so that
// the pure builders that scrape, relabel and alert on them
// (provisioning/sharedfleet) read these names without linking the Compute
// Engine client.
package gcenames

import "github.com/runnerfleet/runnerfleet/providers"

// GuestAttributesKey is the instance metadata key that enables guest
// attributes on a VM, without which the drain agent's reports are refused
// by its metadata server.
const GuestAttributesKey = "enable-guest-attributes"

// ImageMetadataKey is the instance metadata key in which providers/gcp
// records the image an instance's boot disk was created from: an instance
// resource does not carry it (only the disk resource does). fleet gc keeps
// the images it names.
const ImageMetadataKey = "runnerfleet-image"

// NoteMetadataKey is the instance metadata key of note key.
func NoteMetadataKey(key string) string { return providers.GCENotePrefix + key }

// The quota exporter's series; their labels are project, region and (but
// for QuotaMetricUp) metric, the quota's name as the API spells it
// (INSTANCES, CPUS, N2D_CPUS, PREEMPTIBLE_CPUS, IN_USE_ADDRESSES,
// SSD_TOTAL_GB, …).
const (
	QuotaMetricLimit = "runnerfleet_gce_quota_limit"
	QuotaMetricUsage = "runnerfleet_gce_quota_usage"
	// QuotaMetricUp is 1 when the region's last regions.get succeeded, 0
	// when it failed (the limit and usage series are then absent).
	QuotaMetricUp = "runnerfleet_gce_quota_up"
)

// QuotaExporterPort is where fleet quota-exporter serves /metrics.
const QuotaExporterPort = 9465

// QuotaExporterRole is the one permission the quota exporter's identity
// needs; the predefined role roles/compute.viewer includes it.
const QuotaExporterRole = "compute.regions.get"
