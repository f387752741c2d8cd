package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// A request as the service API would send it, with the status an
// interrogation answers.
type testRequest struct {
	kind    serviceRequest
	current string
}

// serveTest runs serveService in a goroutine and returns its code, the
// states it reported and the interrogations it answered, failing after 10 s
// (a stop that does not stop the agent hangs).
func serveTest(t *testing.T, run func(context.Context) error, reqs ...testRequest) (int, []serviceState, []string) {
	t.Helper()
	req := make(chan testRequest)
	var states []serviceState
	var answers []string
	code := make(chan int, 1)
	go func() {
		code <- serveService(run, req, func(r testRequest) serviceRequest { return r.kind },
			func(r testRequest) { answers = append(answers, r.current) },
			func(s serviceState) { states = append(states, s) })
	}()
	timeout := time.After(10 * time.Second)
	for _, r := range reqs {
		select {
		case req <- r:
		case c := <-code:
			t.Fatalf("the service returned %d before taking request %+v", c, r)
		case <-timeout:
			t.Fatal("the service does not take requests")
		}
	}
	select {
	case c := <-code:
		return c, states, answers
	case <-timeout:
		t.Fatal("the service did not stop")
		return 0, nil, nil
	}
}

// The agent's own end: done is exit code 0, a failure 1, a usage error 2;
// each reports start pending, running, stop pending.
func TestServiceEndsWithTheAgent(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
	}{{nil, 0}, {errors.New("the drain failed"), 1}, {fmt.Errorf("bad flag: %w", errUsage), 2}} {
		code, states, _ := serveTest(t, func(context.Context) error { return c.err })
		if code != c.code {
			t.Errorf("agent returned %v: code %d, want %d", c.err, code, c.code)
		}
		if want := []serviceState{serviceStartPending, serviceRunning, serviceStopPending}; !slices.Equal(states, want) {
			t.Errorf("agent returned %v: states %v, want %v", c.err, states, want)
		}
	}
}

// A service stop (or a shutdown) reports stop pending at once and stops the
// agent, whose stop is exit code 0; interrogations are answered with the
// current status, other requests ignored, all while the agent runs.
func TestServiceStopCancelsTheAgent(t *testing.T) {
	stopped := make(chan struct{})
	run := func(ctx context.Context) error {
		<-ctx.Done()
		close(stopped)
		return fmt.Errorf("waiting for a drain request: %w", ctx.Err())
	}
	code, states, answers := serveTest(t, run,
		testRequest{kind: requestInterrogate, current: "running"},
		testRequest{kind: requestIgnored},
		testRequest{kind: requestStop})
	select {
	case <-stopped:
	default:
		t.Error("the agent was not cancelled")
	}
	if code != 0 {
		t.Errorf("code %d after a service stop, want 0", code)
	}
	if want := []serviceState{serviceStartPending, serviceRunning, serviceStopPending, serviceStopPending}; !slices.Equal(states, want) {
		t.Errorf("states %v, want %v", states, want)
	}
	if !slices.Equal(answers, []string{"running"}) {
		t.Errorf("interrogations answered %v, want [running]", answers)
	}
}
