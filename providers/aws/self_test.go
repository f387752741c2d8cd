package aws_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerfleet/runnerfleet/providers"
	rfaws "github.com/runnerfleet/runnerfleet/providers/aws"
	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
)

const drainPath = "/latest/meta-data/tags/instance/" + providers.EC2DrainTag

// logs collects what Self logs.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// newSelf starts an instance on srv and the agent's view of it.
func newSelf(t *testing.T, srv *ec2test.Server, in ec2test.Instance) (*rfaws.Self, *ec2test.IMDS, string, *logs) {
	t.Helper()
	id := srv.AddInstance(in)
	md := srv.IMDSFor(id)
	l := &logs{}
	s, err := rfaws.NewSelf(ctxT(t), srv.Config(), rfaws.SelfOptions{
		IMDSEndpoint: md.URL(),
		PollInterval: 20 * time.Millisecond,
		Logf:         l.logf,
		// Keep the IMDS client's retries quick: by default it wraps its
		// retryer in AddWithMaxBackoffDelay(1s), which makes every retry
		// wait exactly 1s.
		IMDSOptions: []func(*imds.Options){func(o *imds.Options) {
			o.Retryer = retry.AddWithMaxBackoffDelay(retry.NewStandard(), 5*time.Millisecond)
			o.DisableDefaultMaxBackoff = true
		}},
	})
	if err != nil {
		t.Fatalf("NewSelf: %v", err)
	}
	return s, md, id, l
}

func TestNewSelfReadsIdentityFromIMDS(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	s, md, id, _ := newSelf(t, srv, ec2test.Instance{Zone: "us-east-1c", MetadataTags: true, Tags: map[string]string{"Name": "m"}})
	if s.InstanceID() != id || s.Region() != "us-east-1" {
		t.Errorf("Self is %s in %s; want %s in us-east-1", s.InstanceID(), s.Region(), id)
	}
	if n := md.Calls("/latest/api/token"); n != 1 {
		t.Errorf("%d token requests; want 1 reused for every read", n)
	}
}

func TestNewSelfFailsWithoutInstanceMetadataTags(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	id := srv.AddInstance(ec2test.Instance{MetadataTags: false})
	_, err := rfaws.NewSelf(ctxT(t), srv.Config(), rfaws.SelfOptions{IMDSEndpoint: srv.IMDSFor(id).URL()})
	if err == nil || !strings.Contains(err.Error(), "instance metadata tags are disabled") || !strings.Contains(err.Error(), id) {
		t.Fatalf("err = %v; want one saying tags are disabled on %s", err, id)
	}
}

func TestWaitDrainRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		// disturb runs while the agent polls, before the drain is requested.
		disturb func(t *testing.T, srv *ec2test.Server, md *ec2test.IMDS, id string)
		// check runs after WaitDrainRequest returned.
		check func(t *testing.T, md *ec2test.IMDS, l *logs)
	}{
		{
			name: "returns once the drain tag appears",
			disturb: func(t *testing.T, _ *ec2test.Server, md *ec2test.IMDS, _ string) {
				waitCalls(t, md, drainPath, 3)
			},
			check: func(t *testing.T, md *ec2test.IMDS, _ *logs) {
				if n := md.Calls(drainPath); n < 3 {
					t.Errorf("drain tag read %d times; want polling", n)
				}
			},
		},
		{
			name: "ignores a drain tag that is not true",
			disturb: func(t *testing.T, srv *ec2test.Server, _ *ec2test.IMDS, id string) {
				tagInstance(t, srv, id, providers.EC2DrainTag, "false")
				time.Sleep(100 * time.Millisecond)
			},
			check: func(*testing.T, *ec2test.IMDS, *logs) {},
		},
		{
			name: "survives IMDS errors",
			disturb: func(t *testing.T, _ *ec2test.Server, md *ec2test.IMDS, _ string) {
				md.FailNext(drainPath, 500, 7) // more than the SDK's 3 attempts, twice
				time.Sleep(300 * time.Millisecond)
			},
			check: func(t *testing.T, _ *ec2test.IMDS, l *logs) {
				if !strings.Contains(l.String(), "500") {
					t.Errorf("logged %q; want the 500s", l)
				}
			},
		},
		{
			name: "fetches a new token when IMDS rejects an expired one",
			disturb: func(t *testing.T, _ *ec2test.Server, md *ec2test.IMDS, _ string) {
				time.Sleep(60 * time.Millisecond)
				md.ExpireTokens()
				time.Sleep(100 * time.Millisecond)
			},
			check: func(t *testing.T, md *ec2test.IMDS, l *logs) {
				if n := md.Calls("/latest/api/token"); n < 2 {
					t.Errorf("%d token requests; want a new token after the 401", n)
				}
				if l.String() != "" {
					t.Errorf("the 401 surfaced: %s", l)
				}
			},
		},
		{
			name: "renews a token before its granted TTL runs out",
			disturb: func(t *testing.T, _ *ec2test.Server, md *ec2test.IMDS, _ string) {
				md.ExpireTokens() // the one NewSelf got lasts 5 minutes; start over with 1s ones
				md.SetMaxTokenTTL(time.Second)
				time.Sleep(1500 * time.Millisecond)
			},
			check: func(t *testing.T, md *ec2test.IMDS, _ *logs) {
				if n := md.Calls("/latest/api/token"); n < 3 {
					t.Errorf("%d token requests; want renewals of the 1s tokens", n)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := ec2test.New()
			t.Cleanup(srv.Close)
			self, md, id, l := newSelf(t, srv, ec2test.Instance{MetadataTags: true, Tags: map[string]string{"Name": "m"}})
			done := make(chan error, 1)
			go func() { done <- self.WaitDrainRequest(ctxT(t)) }()

			tc.disturb(t, srv, md, id)
			select {
			case err := <-done:
				t.Fatalf("WaitDrainRequest returned %v before the drain request", err)
			default:
			}
			tagInstance(t, srv, id, providers.EC2DrainTag, "true")
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("WaitDrainRequest: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("WaitDrainRequest did not return after the drain request")
			}
			tc.check(t, md, l)
		})
	}
}

// tagInstance tags an instance through the EC2 API, as RequestDrain would.
func tagInstance(t *testing.T, srv *ec2test.Server, id, k, v string) {
	t.Helper()
	in, _ := srv.Instance(id)
	c := newCompute(t, srv)
	if k == providers.EC2DrainTag && v == "true" {
		if err := c.RequestDrain(ctxT(t), in.Zone, in.Tags["Name"]); err != nil {
			t.Fatal(err)
		}
		return
	}
	_, err := c.Client().CreateTags(ctxT(t), &ec2.CreateTagsInput{
		Resources: []string{id},
		Tags:      []types.Tag{{Key: aws.String(k), Value: aws.String(v)}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestWaitDrainRequestHonoursContext(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	self, md, _, _ := newSelf(t, srv, ec2test.Instance{MetadataTags: true})
	md.FailNext(drainPath, 500, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := self.WaitDrainRequest(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v; want the context's", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned %v after the deadline", d)
	}
}

func TestReportWritesDrainTagsOnItsOwnInstance(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	other := srv.AddInstance(ec2test.Instance{Tags: map[string]string{"Name": "other"}})
	self, _, id, _ := newSelf(t, srv, ec2test.Instance{MetadataTags: true, Tags: map[string]string{"Name": "m"}})
	at := time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := self.Report(ctxT(t), providers.DrainState{Phase: providers.DrainDraining, JobsLeft: 7, UpdatedAt: at}); err != nil {
		t.Fatal(err)
	}
	in, _ := srv.Instance(id)
	want := map[string]string{
		"Name":                    "m",
		providers.EC2PhaseTag:     "draining",
		providers.EC2JobsLeftTag:  "7",
		providers.EC2UpdatedAtTag: "2026-02-03T04:05:06Z",
	}
	if !mapsEqual(in.Tags, want) {
		t.Errorf("tags %v, want %v", in.Tags, want)
	}
	if o, _ := srv.Instance(other); len(o.Tags) != 1 {
		t.Errorf("the other instance got tags %v", o.Tags)
	}
	if n := srv.Calls("CreateTags"); n != 1 {
		t.Errorf("%d CreateTags calls; want 1", n)
	}
}

// waitCalls waits until IMDS has answered path n times, polls not a
// sleep's worth of them on a loaded machine.
func waitCalls(t *testing.T, md *ec2test.IMDS, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for md.Calls(path) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s read %d times in 20s, want %d", path, md.Calls(path), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
