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

// tokenChecks remembers, per RunnerSet, when its token is next checked.
// It lives in memory only: after a restart every runner waits at least
// TokenCheckInterval, which is what keeps a restart free of GitLab calls.
type tokenChecks struct {
	mu    sync.Mutex
	nextA map[types.UID]time.Time
}

func (c *tokenChecks) schedule(uid types.UID, now time.Time) time.Time {
	if c.nextA == nil {
		c.nextA = map[types.UID]time.Time{}
	}
	t := now.Add(TokenCheckInterval + rand.N(TokenCheckInterval))
	c.nextA[uid] = t
	return t
}

// due reports whether uid's token is to be checked now; the first call for
// a RunnerSet only schedules its first check.
func (c *tokenChecks) due(uid types.UID, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.nextA[uid]
	if !ok {
		c.schedule(uid, now)
		return false
	}
	return !now.Before(t)
}

// checked records that uid's token was checked (or issued) at now.
func (c *tokenChecks) checked(uid types.UID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.schedule(uid, now)
}

// next is when uid's token is checked next.
func (c *tokenChecks) next(uid types.UID, now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.nextA[uid]; ok {
		return t
	}
	return c.schedule(uid, now)
}

// forget drops a RunnerSet that is gone.
func (c *tokenChecks) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nextA, uid)
}
