package token

import (
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TokenCheckInterval is the shortest time between two checks of one
// runner's token with GitLab when nothing changed. Each check is scheduled
// at a random point between one and two intervals after the last, so that a
// fleet's checks spread over time instead of arriving together, and a
// controller that restarts makes none until an interval has passed.
const TokenCheckInterval = time.Hour

// RunnerViewInterval is how often, on average, the controller reads
// GitLab's record of a RunnerSet's runner (its managers' last contact, its
// tags), and RunnerViewJitter how far each read strays from it either way:
// reads are 4 to 6 minutes apart, so a fleet's reads spread over time. The
// controller's RunnerOnline and TagsMatch conditions (runnerset/controller's
// gitlabview.go) read GitLab on this schedule only.
const (
	RunnerViewInterval = 5 * time.Minute
	RunnerViewJitter   = RunnerViewInterval / 5
)

// Schedule remembers, per RunnerSet, when a periodic GitLab call is next
// due: at a random point of [Min, Max) after the last. It lives in memory
// only: the first time it hears of a RunnerSet it only schedules, so a
// controller that restarts makes no call until Min has passed. The token
// checks and the reads of GitLab's view of a runner share it.
type Schedule struct {
	Min, Max time.Duration

	mu    sync.Mutex
	nextA map[types.UID]time.Time
}

// NewTokenChecks is the schedule of token checks: one to two
// TokenCheckIntervals apart.
func NewTokenChecks() *Schedule {
	return &Schedule{Min: TokenCheckInterval, Max: 2 * TokenCheckInterval}
}

// NewRunnerViews is the schedule of reads of GitLab's view of a runner:
// RunnerViewInterval ± RunnerViewJitter apart.
func NewRunnerViews() *Schedule {
	return &Schedule{Min: RunnerViewInterval - RunnerViewJitter, Max: RunnerViewInterval + RunnerViewJitter}
}

func (c *Schedule) schedule(uid types.UID, now time.Time) time.Time {
	if c.nextA == nil {
		c.nextA = map[types.UID]time.Time{}
	}
	t := now.Add(c.Min)
	if c.Max > c.Min {
		t = t.Add(rand.N(c.Max - c.Min))
	}
	c.nextA[uid] = t
	return t
}

// Due reports whether uid's call is due now; the first call for a
// RunnerSet only schedules its first call.
func (c *Schedule) Due(uid types.UID, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.nextA[uid]
	if !ok {
		c.schedule(uid, now)
		return false
	}
	return !now.Before(t)
}

// Done records that uid's call was made at now, and schedules the next.
func (c *Schedule) Done(uid types.UID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.schedule(uid, now)
}

// Next is when uid's call is due next.
func (c *Schedule) Next(uid types.UID, now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.nextA[uid]; ok {
		return t
	}
	return c.schedule(uid, now)
}

// Forget drops a RunnerSet that is gone.
func (c *Schedule) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nextA, uid)
}
