package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// readyWait waits until RunnerSets are Ready, printing each change of their
// Ready condition, and a summary every minute when nothing changed. It
// stops, naming what is not Ready and the next commands, when a RunnerSet
// is being deleted (it cannot become Ready before it is gone), when the
// controller has not run for controllerGone, or after timeout.
type readyWait struct {
	c       client.Client
	keys    []client.ObjectKey
	timeout time.Duration
	log     io.Writer

	now   func() time.Time
	sleep func(context.Context, time.Duration) error
	poll  time.Duration

	// hint says where to look when the RunnerSets are not Ready in time.
	hint func() string
	// controllerDown says why the controller does not run, "" while it runs.
	controllerDown func(context.Context) string
	// status, again and down show, retry and take down the stack.
	status, again, down string
}

func newReadyWait(c client.Client, keys []client.ObjectKey, timeout time.Duration, log io.Writer) *readyWait {
	return &readyWait{c: c, keys: keys, timeout: timeout, log: log, now: time.Now, sleep: sleepCtx, poll: 500 * time.Millisecond,
		hint: func() string { return "; see kubectl describe runnerset" }}
}

func (w *readyWait) wait(ctx context.Context) error {
	if len(w.keys) == 0 {
		return nil
	}
	start := w.now()
	seen := map[client.ObjectKey]string{}
	lastPrint := start
	var downSince time.Time
	for {
		var waiting, deleting []string
		for _, k := range w.keys {
			rs := &v1alpha1.RunnerSet{}
			if err := w.c.Get(ctx, k, rs); err != nil {
				if ctx.Err() != nil {
					return w.stopped(start, "interrupted", waiting, "")
				}
				return fmt.Errorf("getting RunnerSet %s: %w", k, err)
			}
			line := readyOf(rs)
			if seen[k] != line {
				fmt.Fprintf(w.log, "RunnerSet %s: %s\n", k, line)
				seen[k] = line
			}
			if rs.DeletionTimestamp != nil {
				deleting = append(deleting, fmt.Sprintf("RunnerSet %s is being deleted (since %s, finalizers %s)",
					k, rs.DeletionTimestamp.UTC().Format(time.RFC3339), strings.Join(rs.Finalizers, ", ")))
			}
			if !rs.IsReady() {
				waiting = append(waiting, fmt.Sprintf("RunnerSet %s: %s", k, line))
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		now := w.now()
		ctrl := ""
		if w.controllerDown != nil {
			ctrl = w.controllerDown(ctx)
		}
		if ctrl == "" {
			downSince = time.Time{}
		} else if downSince.IsZero() {
			downSince = now
		}
		if now.Sub(lastPrint) >= drainRepeat {
			lastPrint = now
			fmt.Fprintf(w.log, "Still waiting for %d RunnerSet%s to be Ready (%s of %s):\n  %s\n", len(waiting), plural(len(waiting)),
				dur(now.Sub(start)), dur(w.timeout), strings.Join(waiting, "\n  "))
			if ctrl != "" {
				fmt.Fprintf(w.log, "  The controller does not run: %s\n", ctrl)
			}
		}
		switch {
		case len(deleting) > 0:
			return w.stopped(start, strings.Join(deleting, "; ")+": it cannot become Ready until its deletion ends (an earlier fleet down did not finish)", waiting,
				fmt.Sprintf("  %s\n      finishes the deletion (it says what it waits for), then\n  %s\n      brings the stack up again", w.down, w.again))
		case !downSince.IsZero() && now.Sub(downSince) >= controllerGone:
			return w.stopped(start, fmt.Sprintf("the controller has not run for %s: %s", dur(now.Sub(downSince)), ctrl), waiting, "")
		case now.Sub(start) >= w.timeout:
			return w.stopped(start, fmt.Sprintf("not Ready after %s%s", dur(w.timeout), w.hint()), waiting, "")
		}
		if err := w.sleep(ctx, w.poll); err != nil {
			return w.stopped(start, "interrupted", waiting, "")
		}
	}
}

// stopped says why fleet up stopped, what is not Ready, and what to run
// next (next, or the default: look, wait longer, or take it down).
func (w *readyWait) stopped(start time.Time, why string, waiting []string, next string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "fleet up stopped after %s: %s.", dur(w.now().Sub(start)), why)
	if len(waiting) > 0 {
		fmt.Fprintf(&b, " Not Ready:\n  %s", strings.Join(waiting, "\n  "))
	}
	if next == "" {
		next = fmt.Sprintf("  %s\n      shows the stack\n  %s\n      applies it again and waits longer\n  %s\n      takes it down", w.status, w.again, w.down)
	}
	fmt.Fprintf(&b, "\nNext, either:\n%s", next)
	return &stoppedError{msg: b.String()}
}
