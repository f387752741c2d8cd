package token

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestRunnerViewsAt1000RunnerSetsOverSimulatedHours drives the schedule of
// GitLab's view as the controller does, for 1000 RunnerSets over 10
// simulated hours in 10 s ticks: a pass at each RunnerSet's requeue time
// (Next), plus passes for no reason (watch events, other steps' requeues)
// on a fifth of the ticks, and a controller restart after 5 hours. It
// counts the reads (Due, then Done) and reports them per hour: each read
// is one GitLab call for a runner runnerfleet created (its managers) and
// two for a token a team brought (its managers and its tags), which the
// controller's envtest TestGitLabViewCallsPerReadAgainstTheLoopbackGitLab
// counts against the loopback GitLab.
func TestRunnerViewsAt1000RunnerSetsOverSimulatedHours(t *testing.T) {
	const (
		sets  = 1000
		hours = 10
		tick  = 10 * time.Second
	)
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	views := NewRunnerViews()
	uids := make([]types.UID, sets)
	for i := range uids {
		uids[i] = types.UID(fmt.Sprintf("uid-%04d", i))
	}
	lastRead := map[types.UID]time.Time{}
	reads := make([]int, hours)
	restartAt := start.Add(hours / 2 * time.Hour)
	restarted := false
	for now := start; now.Before(start.Add(hours * time.Hour)); now = now.Add(tick) {
		if !restarted && !now.Before(restartAt) {
			views, restarted = NewRunnerViews(), true // memory only: a new controller
		}
		for _, uid := range uids {
			requeued := !now.Before(views.Next(uid, now))
			if !requeued && rng.IntN(5) != 0 {
				continue // no pass of this RunnerSet in this tick
			}
			if !views.Due(uid, now) {
				continue
			}
			views.Done(uid, now)
			if last, ok := lastRead[uid]; ok && now.Sub(last) < RunnerViewInterval-RunnerViewJitter {
				t.Fatalf("%s read %v after its last read, less than %v", uid, now.Sub(last), RunnerViewInterval-RunnerViewJitter)
			}
			if restarted && now.Sub(restartAt) < RunnerViewInterval-RunnerViewJitter {
				t.Fatalf("%s read %v after a restart", uid, now.Sub(restartAt))
			}
			lastRead[uid] = now
			reads[int(now.Sub(start)/time.Hour)]++
		}
	}
	ceiling := sets * int(time.Hour/(RunnerViewInterval-RunnerViewJitter)) // every read at the shortest gap
	for h, n := range reads {
		t.Logf("hour %d: %d reads of GitLab's view for %d RunnerSets (%d GitLab calls with created runners, %d with teams' tokens)", h, n, sets, n, 2*n)
		if n > ceiling {
			t.Errorf("hour %d: %d reads, more than %d: some RunnerSet was read more than once per %v", h, n, ceiling, RunnerViewInterval-RunnerViewJitter)
		}
		// Each RunnerSet is read about every RunnerViewInterval, plus the
		// tick; the first hour and the restart's start late.
		if h != 0 && h != hours/2 && (n < sets*50/6 || n > sets*60/4) {
			t.Errorf("hour %d: %d reads, want about %d (one per RunnerSet every %v)", h, n, sets*int(time.Hour/RunnerViewInterval), RunnerViewInterval)
		}
	}
}
