package sharedfleet

import (
	"fmt"
	"time"
)

// Fleet gc of a shared fleet: a CronJob in the fleet's namespace (built by
// planGC, declared by infra/sharedfleet) that runs `fleet gc --apply`
// every GCInterval. Its name, schedule and grace are defined here, where
// the fleet's alerts on it are, so that the CronJob and the alerts cannot
// disagree.
const (
	// GCInterval is how often gc runs.
	GCInterval = 15 * time.Minute
	// GCGraceMargin is added to the longest IdleTime of the fleet's
	// managers for the grace: fleet gc refuses less than the IdleTime.
	GCGraceMargin = 30 * time.Minute
	// GCMinGrace is the least grace.
	GCMinGrace = time.Hour
	// GCMissedRuns is how many runs in a row gc may miss or fail before
	// GCFailing fires.
	GCMissedRuns = 4
)

// GCName names fleet gc's CronJob (and its ServiceAccount, Role and
// RoleBinding) in the fleet in namespace.
func GCName(namespace string) string { return namespace + "-gc" }

// GCSchedule is gc's CronJob schedule: every GCInterval.
func GCSchedule() string { return fmt.Sprintf("*/%d * * * *", int(GCInterval.Minutes())) }

// GCGrace is how long gc waits, after it first found a VM's manager
// absent, before it may delete the VM: the longest IdleTime of the fleet's
// managers plus GCGraceMargin, and at least GCMinGrace.
func (f Fleet) GCGrace() time.Duration {
	grace := GCMinGrace
	for _, g := range f.Groups {
		grace = max(grace, g.LongestIdleTime()+GCGraceMargin)
	}
	return grace
}

// orphanedFor is how long a VM may stay noted orphaned before the
// OrphanedVMs alert: the grace, then two runs of gc, the first of which
// deletes it if it can.
func (f Fleet) orphanedFor() time.Duration { return f.GCGrace() + 2*GCInterval }
