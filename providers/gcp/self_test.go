package gcp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
)

func newSelf(t *testing.T) (*gcp.Self, *gcetest.MetadataServer) {
	t.Helper()
	md := gcetest.NewMetadataServer()
	t.Cleanup(md.Close)
	return &gcp.Self{
		BaseURL:       md.BaseURL(),
		HTTPClient:    md.Client(),
		WaitTimeout:   2 * time.Second,
		ResponseGrace: 300 * time.Millisecond,
		MinBackoff:    20 * time.Millisecond,
		MaxBackoff:    100 * time.Millisecond,
	}, md
}

func TestWaitDrainRequest(t *testing.T) {
	drainPath := "/instance/attributes/" + providers.GCEDrainKey
	tests := []struct {
		name string
		// setup runs before WaitDrainRequest; act while it waits (after the
		// first long poll is open, unless noWaiter).
		setup    func(md *gcetest.MetadataServer)
		self     func(*gcp.Self)
		act      func(t *testing.T, md *gcetest.MetadataServer)
		noWaiter bool
		cancel   bool // cancel the context instead of expecting a wake-up
		wantErr  string
		check    func(t *testing.T, md *gcetest.MetadataServer)
	}{
		{
			name:  "returns at once when the drain was requested before it started",
			setup: func(md *gcetest.MetadataServer) { md.SetAttribute(providers.GCEDrainKey, "true") },
			check: func(t *testing.T, md *gcetest.MetadataServer) {
				if n := len(md.Calls("GET", drainPath)); n != 1 {
					t.Errorf("%d requests, want 1", n)
				}
			},
		},
		{
			name: "wakes when the absent key is set",
			act:  func(t *testing.T, md *gcetest.MetadataServer) { md.SetAttribute(providers.GCEDrainKey, "true") },
			check: func(t *testing.T, md *gcetest.MetadataServer) {
				calls := md.Calls("GET", drainPath)
				last := calls[len(calls)-1]
				if last.Query.Get("wait_for_change") != "true" || last.Query.Get("last_etag") == "" || last.Query.Get("timeout_sec") != "2" {
					t.Errorf("long poll query = %v, want wait_for_change, last_etag and timeout_sec", last.Query)
				}
				for _, c := range calls {
					if c.Header.Get("Metadata-Flavor") != "Google" {
						t.Errorf("request without Metadata-Flavor: Google: %v", c.Header)
					}
				}
			},
		},
		{
			name: "keeps waiting through values other than true",
			act: func(t *testing.T, md *gcetest.MetadataServer) {
				md.SetAttribute(providers.GCEDrainKey, "false")
				waitFor(t, "the next long poll", func() bool { return md.Waiters() == 1 && len(md.Calls("GET", drainPath)) >= 3 })
				md.SetAttribute(providers.GCEDrainKey, "TRUE")
			},
		},
		{
			name:     "survives metadata server errors",
			setup:    func(md *gcetest.MetadataServer) { md.FailNext("GET", drainPath, http.StatusServiceUnavailable, 3) },
			noWaiter: true,
			act: func(t *testing.T, md *gcetest.MetadataServer) {
				waitFor(t, "a long poll after the errors", func() bool { return md.Waiters() == 1 })
				md.SetAttribute(providers.GCEDrainKey, "true")
			},
			check: func(t *testing.T, md *gcetest.MetadataServer) {
				if n := len(md.Calls("GET", drainPath)); n < 5 {
					t.Errorf("%d requests, want the 3 failures retried", n)
				}
			},
		},
		{
			name: "survives a dropped long poll and sees a change made meanwhile",
			self: func(s *gcp.Self) { s.MinBackoff, s.MaxBackoff = 300*time.Millisecond, time.Second },
			act: func(t *testing.T, md *gcetest.MetadataServer) {
				// Drop the open long poll and the next request too (net/http
				// replays a GET whose reused connection closed before any
				// answer; the replay is dropped, so the agent's own retry
				// is what recovers).
				md.DropNext("GET", drainPath, 0, 1)
				md.DropWaiters()
				waitFor(t, "the dropped poll to end", func() bool { return md.Waiters() == 0 })
				// The agent backs off 150-300ms before it asks again, with
				// the ETag it had: the change is news at once.
				md.SetAttribute(providers.GCEDrainKey, "true")
			},
			check: func(t *testing.T, md *gcetest.MetadataServer) {
				calls := md.Calls("GET", drainPath)
				if len(calls) < 4 {
					t.Fatalf("%d requests, want read, dropped poll, dropped retry, poll", len(calls))
				}
				first, last := calls[1], calls[len(calls)-1]
				if last.Query.Get("last_etag") == "" || last.Query.Get("last_etag") != first.Query.Get("last_etag") {
					t.Errorf("the poll after the drop did not carry the last ETag: %v", last.Query)
				}
				if gap := last.At.Sub(calls[len(calls)-2].At); gap < 100*time.Millisecond {
					t.Errorf("asked again %v after a dropped connection, want a backoff", gap)
				}
			},
		},
		{
			name:     "survives a hung long poll",
			noWaiter: true,
			setup: func(md *gcetest.MetadataServer) {
				// The first request (the plain read) is answered; the
				// first long poll hangs far past timeout_sec + grace.
				md.DelayNext("GET", drainPath, time.Hour, 1)
			},
			act: func(t *testing.T, md *gcetest.MetadataServer) {
				// Wait for the hung poll to be abandoned and a new one open.
				waitFor(t, "a new long poll", func() bool { return md.Waiters() == 1 })
				md.SetAttribute(providers.GCEDrainKey, "true")
			},
		},
		{
			name:     "paces its polls when the server does not wait on an absent key",
			noWaiter: true,
			setup:    func(md *gcetest.MetadataServer) { md.SetNoWaitOnMissing(true) },
			act: func(t *testing.T, md *gcetest.MetadataServer) {
				time.Sleep(300 * time.Millisecond)
				md.SetAttribute(providers.GCEDrainKey, "true")
			},
			check: func(t *testing.T, md *gcetest.MetadataServer) {
				// MaxBackoff 100ms over ~300ms: a handful, not a busy loop.
				if n := len(md.Calls("GET", drainPath)); n > 20 {
					t.Errorf("%d requests in 300ms: not paced", n)
				}
			},
		},
		{
			name:   "returns the context's error when cancelled",
			cancel: true,
		},
		{
			name:     "gives up on 403, which retrying cannot fix",
			noWaiter: true,
			setup:    func(md *gcetest.MetadataServer) { md.FailNext("GET", drainPath, http.StatusForbidden, 1) },
			wantErr:  "403",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			self, md := newSelf(t)
			if tt.self != nil {
				tt.self(self)
			}
			if tt.setup != nil {
				tt.setup(md)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- self.WaitDrainRequest(ctx) }()

			if !tt.noWaiter && !tt.cancel && tt.act != nil {
				waitFor(t, "the first long poll", func() bool { return md.Waiters() == 1 })
			}
			if tt.cancel {
				waitFor(t, "the first long poll", func() bool { return md.Waiters() == 1 })
				cancel()
			}
			if tt.act != nil {
				tt.act(t, md)
			}
			select {
			case err := <-done:
				switch {
				case tt.cancel:
					if !errors.Is(err, context.Canceled) {
						t.Errorf("WaitDrainRequest = %v, want context.Canceled", err)
					}
				case tt.wantErr != "":
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Errorf("WaitDrainRequest = %v, want an error containing %q", err, tt.wantErr)
					}
				default:
					if err != nil {
						t.Errorf("WaitDrainRequest = %v, want nil", err)
					}
				}
			case <-time.After(10 * time.Second):
				t.Fatal("WaitDrainRequest did not return")
			}
			if tt.check != nil {
				tt.check(t, md)
			}
		})
	}
}

func TestWaitDrainRequestOutlivesServerTimeouts(t *testing.T) {
	self, md := newSelf(t)
	self.WaitTimeout = time.Second // the server answers "unchanged" every second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- self.WaitDrainRequest(ctx) }()
	time.Sleep(2500 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("returned %v without a drain request", err)
	default:
	}
	if n := len(md.Calls("GET", "/instance/attributes/*")); n < 3 || n > 6 {
		t.Errorf("%d requests in 2.5s with 1s long polls, want 3-4", n)
	}
	md.SetAttribute(providers.GCEDrainKey, "true")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestReport(t *testing.T) {
	at := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		setup   func(md *gcetest.MetadataServer)
		state   providers.DrainState
		want    map[string]string
		wantErr string
	}{
		{
			name:  "writes phase, jobs left and time as guest attributes",
			state: providers.DrainState{Phase: providers.DrainDraining, JobsLeft: 3, UpdatedAt: at},
			want: map[string]string{
				"runnerfleet/drain-phase": "draining", "runnerfleet/drain-jobs-left": "3",
				"runnerfleet/drain-updated-at": "2024-06-01T12:00:00Z",
			},
		},
		{
			name:  "stamps the time when the report has none",
			state: providers.DrainState{Phase: providers.DrainDone},
			want: map[string]string{
				"runnerfleet/drain-phase": "done", "runnerfleet/drain-jobs-left": "0",
				"runnerfleet/drain-updated-at": "2030-01-02T03:04:05Z",
			},
		},
		{
			name:  "retries a server error",
			setup: func(md *gcetest.MetadataServer) { md.FailNext("PUT", "/instance/guest-attributes/*/*", 503, 2) },
			state: providers.DrainState{Phase: providers.DrainDraining, JobsLeft: 1, UpdatedAt: at},
			want: map[string]string{
				"runnerfleet/drain-phase": "draining", "runnerfleet/drain-jobs-left": "1",
				"runnerfleet/drain-updated-at": "2024-06-01T12:00:00Z",
			},
		},
		{
			name:    "fails when guest attributes are not enabled on the VM",
			setup:   func(md *gcetest.MetadataServer) { md.DeleteAttribute("enable-guest-attributes") },
			state:   providers.DrainState{Phase: providers.DrainDraining},
			want:    map[string]string{},
			wantErr: "403",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			self, md := newSelf(t)
			self.Now = func() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) }
			if tt.setup != nil {
				tt.setup(md)
			}
			err := self.Report(testCtx(t), tt.state)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Report: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Report = %v, want an error containing %q", err, tt.wantErr)
			}
			got := md.GuestAttributes()
			if len(got) != len(tt.want) {
				t.Errorf("guest attributes = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("guest attribute %s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestSelfFindsTheMetadataServerFromGCEMetadataHost(t *testing.T) {
	md := gcetest.NewMetadataServer()
	defer md.Close()
	t.Setenv("GCE_METADATA_HOST", strings.TrimPrefix(md.URL(), "http://"))
	md.SetAttribute(providers.GCEDrainKey, "true")
	self := &gcp.Self{}
	if err := self.WaitDrainRequest(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := self.Report(testCtx(t), providers.DrainState{Phase: providers.DrainDone}); err != nil {
		t.Fatal(err)
	}
	if md.GuestAttributes()["runnerfleet/drain-phase"] != "done" {
		t.Errorf("guest attributes = %v", md.GuestAttributes())
	}
}
