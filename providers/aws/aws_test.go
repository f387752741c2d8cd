package aws_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"

	"github.com/runnerfleet/runnerfleet/providers"
	rfaws "github.com/runnerfleet/runnerfleet/providers/aws"
	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
)

// newCompute makes a Compute on srv that polls quickly.
func newCompute(t *testing.T, srv *ec2test.Server, opts ...func(*ec2.Options)) *rfaws.Compute {
	t.Helper()
	c := rfaws.New(srv.Config(), opts...)
	c.WaitMinDelay, c.WaitMaxDelay = 10*time.Millisecond, 50*time.Millisecond
	c.CreateTimeout, c.DeleteTimeout = 10*time.Second, 10*time.Second
	return c
}

func newServer(t *testing.T) (*ec2test.Server, string) {
	t.Helper()
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	ami := srv.AddImage(ec2test.Image{Name: "runner-manager-1", Tags: map[string]string{"family": "runner-manager"}})
	return srv, ami
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestFleetLifecycleThroughTheDrainHandshake(t *testing.T) {
	srv, ami := newServer(t)
	ctx := ctxT(t)
	c := newCompute(t, srv)
	srv.SetLatency(150*time.Millisecond, 150*time.Millisecond) // several waiter polls

	labels := map[string]string{"runnerfleet:fleet": "blue", "runnerfleet:role": "manager"}
	got, err := c.CreateInstance(ctx, providers.InstanceSpec{
		Name:        "manager-blue-1",
		Zone:        "us-east-1b",
		MachineType: "c7i.xlarge",
		Image:       ami,
		Labels:      labels,
		Metadata:    map[string]string{"user-data": "#!/bin/sh\necho hello\n", "startup-script": "ignored"},
		Spot:        true,
	})
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	if got.Name != "manager-blue-1" || got.Zone != "us-east-1b" || got.State != providers.StateRunning ||
		got.Image != ami || !strings.HasPrefix(got.ID, "i-") || got.CreatedAt.IsZero() {
		t.Errorf("CreateInstance returned %+v", got)
	}
	if polls := srv.Calls("DescribeInstances"); polls < 3 { // name check + ≥2 waiter polls
		t.Errorf("DescribeInstances called %d times; want the waiter to poll pending→running", polls)
	}

	// What EC2 got.
	in, _ := srv.Instance(got.ID)
	wantTags := map[string]string{"Name": "manager-blue-1", "runnerfleet:fleet": "blue", "runnerfleet:role": "manager"}
	for name, check := range map[string]bool{
		"no public IP":                   in.PublicIP == "",
		"spot":                           in.Spot && in.SpotRequestID != "",
		"instance tags incl. Name":       mapsEqual(in.Tags, wantTags),
		"volume tags incl. Name":         mapsEqual(in.VolumeTags, wantTags),
		"user data":                      in.UserData == "#!/bin/sh\necho hello\n",
		"instance type":                  in.InstanceType == "c7i.xlarge",
		"IMDSv2 required, tags in IMDS":  in.HTTPTokens == "required" && in.MetadataTags,
		"hop limit 2 for containers":     in.HopLimit == 2,
		"one-time spot request, tagged":  spotRequest(srv, in.SpotRequestID).Type == "one-time" && spotRequest(srv, in.SpotRequestID).Tags["Name"] == "manager-blue-1",
		"user data base64 on the wire":   srv.Requests("RunInstances")[0].Get("UserData") == "IyEvYmluL3NoCmVjaG8gaGVsbG8K",
		"AssociatePublicIpAddress=false": srv.Requests("RunInstances")[0].Get("NetworkInterface.1.AssociatePublicIpAddress") == "false",
	} {
		if !check {
			t.Errorf("created instance: %s: not so (%+v)", name, in)
		}
	}

	// List by tag.
	list, err := c.ListInstances(ctx, map[string]string{"runnerfleet:fleet": "blue"})
	if err != nil || len(list) != 1 || list[0].ID != got.ID || list[0].Labels["runnerfleet:role"] != "manager" {
		t.Fatalf("ListInstances = %+v, %v; want the new instance", list, err)
	}

	// The agent on the VM.
	self, err := rfaws.NewSelf(ctx, srv.Config(), rfaws.SelfOptions{
		IMDSEndpoint: srv.IMDSFor(got.ID).URL(),
		PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("NewSelf: %v", err)
	}
	if self.InstanceID() != got.ID || self.Region() != "us-east-1" {
		t.Errorf("Self sees %s in %s; want %s in us-east-1", self.InstanceID(), self.Region(), got.ID)
	}
	waited := make(chan error, 1)
	go func() { waited <- self.WaitDrainRequest(ctx) }()
	select {
	case err := <-waited:
		t.Fatalf("WaitDrainRequest returned %v before any drain was requested", err)
	case <-time.After(100 * time.Millisecond):
	}
	if st, err := c.DrainState(ctx, "us-east-1b", "manager-blue-1"); err != nil || st.Phase != providers.DrainNone {
		t.Errorf("DrainState before the agent reported = %+v, %v; want no phase", st, err)
	}

	if err := c.RequestDrain(ctx, "us-east-1b", "manager-blue-1"); err != nil {
		t.Fatalf("RequestDrain: %v", err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("WaitDrainRequest: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the agent did not notice the drain request")
	}

	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	if err := self.Report(ctx, providers.DrainState{Phase: providers.DrainDraining, JobsLeft: 2, UpdatedAt: at}); err != nil {
		t.Fatalf("Report draining: %v", err)
	}
	st, err := c.DrainState(ctx, "us-east-1b", "manager-blue-1")
	if err != nil || st.Phase != providers.DrainDraining || st.JobsLeft != 2 || !st.UpdatedAt.Equal(at) {
		t.Fatalf("DrainState = %+v, %v; want draining, 2 jobs, %v", st, err, at)
	}
	if err := self.Report(ctx, providers.DrainState{Phase: providers.DrainDone}); err != nil {
		t.Fatalf("Report done: %v", err)
	}
	st, err = c.DrainState(ctx, "us-east-1b", "manager-blue-1")
	if err != nil || st.Phase != providers.DrainDone || st.JobsLeft != 0 || time.Since(st.UpdatedAt) > time.Minute {
		t.Fatalf("DrainState = %+v, %v; want done, 0 jobs, updated now", st, err)
	}

	before := srv.Calls("DescribeInstances")
	if err := c.DeleteInstance(ctx, "us-east-1b", "manager-blue-1"); err != nil {
		t.Fatalf("DeleteInstance: %v", err)
	}
	if polls := srv.Calls("DescribeInstances") - before; polls < 3 { // lookup + ≥2 waiter polls
		t.Errorf("DescribeInstances called %d times by DeleteInstance; want the waiter to poll shutting-down→terminated", polls)
	}
	if in, _ := srv.Instance(got.ID); in.State != ec2test.StateTerminated {
		t.Errorf("after DeleteInstance the instance is %s", in.State)
	}
	if r := spotRequest(srv, in.SpotRequestID); r.State != "closed" {
		t.Errorf("the one-time spot request is %s after its instance terminated; want closed", r.State)
	}
	if list, err := c.ListInstances(ctx, labels); err != nil || len(list) != 0 {
		t.Errorf("ListInstances after delete = %+v, %v; want none", list, err)
	}
	if err := c.DeleteInstance(ctx, "us-east-1b", "manager-blue-1"); err != nil {
		t.Errorf("deleting a deleted instance: %v", err)
	}
}

func spotRequest(srv *ec2test.Server, id string) ec2test.SpotRequest {
	for _, r := range srv.SpotRequests() {
		if r.ID == id {
			return r
		}
	}
	return ec2test.SpotRequest{}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestListInstances(t *testing.T) {
	srv, ami := newServer(t)
	add := func(name, fleet, state string) {
		srv.AddInstance(ec2test.Instance{ImageID: ami, State: state,
			Tags: map[string]string{"Name": name, "runnerfleet:fleet": fleet}})
	}
	add("blue-1", "blue", ec2test.StateRunning)
	add("blue-2", "blue", ec2test.StatePending)
	add("blue-3", "blue", ec2test.StateStopped)
	add("blue-old", "blue", ec2test.StateTerminated)
	add("green-1", "green", ec2test.StateRunning)
	add("star-1", "blu*", ec2test.StateRunning)
	for i := range 7 {
		add("many-"+string(rune('a'+i)), "many", ec2test.StateRunning)
	}

	for _, tc := range []struct {
		name      string
		labels    map[string]string
		pageLimit int
		want      []string
	}{
		{"filters by every label and skips terminated", map[string]string{"runnerfleet:fleet": "blue"}, 0, []string{"blue-1", "blue-2", "blue-3"}},
		{"matches wildcards in label values literally", map[string]string{"runnerfleet:fleet": "blu*"}, 0, []string{"star-1"}},
		{"needs every label", map[string]string{"runnerfleet:fleet": "blue", "Name": "blue-2"}, 0, []string{"blue-2"}},
		{"finds nothing for an unknown label", map[string]string{"nope": "x"}, 0, nil},
		{"follows NextToken across pages", map[string]string{"runnerfleet:fleet": "many"}, 2, []string{"many-a", "many-b", "many-c", "many-d", "many-e", "many-f", "many-g"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.SetPageLimit(tc.pageLimit)
			before := srv.Calls("DescribeInstances")
			got, err := newCompute(t, srv).ListInstances(ctxT(t), tc.labels)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, in := range got {
				names = append(names, in.Name)
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("got %v, want %v", names, tc.want)
			}
			if tc.pageLimit > 0 {
				if pages, want := srv.Calls("DescribeInstances")-before, (len(tc.want)+tc.pageLimit-1)/tc.pageLimit; pages < want {
					t.Errorf("%d DescribeInstances calls; want %d pages", pages, want)
				}
			}
		})
	}
}

func TestCreateInstanceRefusesADuplicateName(t *testing.T) {
	srv, ami := newServer(t)
	srv.AddInstance(ec2test.Instance{ImageID: ami, Zone: "us-east-1c", Tags: map[string]string{"Name": "dup"}})
	_, err := newCompute(t, srv).CreateInstance(ctxT(t), providers.InstanceSpec{Name: "dup", Zone: "us-east-1a", MachineType: "t3.small", Image: ami})
	if err == nil || !strings.Contains(err.Error(), "dup") {
		t.Fatalf("CreateInstance of a second %q: %v; want an error naming it", "dup", err)
	}
	if n := srv.Calls("RunInstances"); n != 0 {
		t.Errorf("RunInstances called %d times", n)
	}
}

func TestCreateInstanceErrorsNameTheInstance(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec providers.InstanceSpec
		code string
	}{
		{"unknown AMI", providers.InstanceSpec{Name: "m1", Zone: "us-east-1a", MachineType: "t3.small", Image: "ami-0000000000000dead"}, "InvalidAMIID.NotFound"},
		{"zone of another region", providers.InstanceSpec{Name: "m1", Zone: "eu-west-1a", MachineType: "t3.small", Image: "AMI"}, "InvalidParameterValue"},
		{"tag key IMDS cannot expose", providers.InstanceSpec{Name: "m1", Zone: "us-east-1a", MachineType: "t3.small", Image: "AMI", Labels: map[string]string{"has space": "x"}}, "InvalidParameterValue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, ami := newServer(t)
			if tc.spec.Image == "AMI" {
				tc.spec.Image = ami
			}
			_, err := newCompute(t, srv).CreateInstance(ctxT(t), tc.spec)
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != tc.code {
				t.Fatalf("err = %v; want API error %s", err, tc.code)
			}
			if !strings.Contains(err.Error(), "create instance m1") {
				t.Errorf("error %q does not name the instance", err)
			}
		})
	}
}

func TestRequestLimitExceededOnRunInstances(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failures  int
		wantErr   bool
		wantCalls int
	}{
		// The SDK's standard retryer treats RequestLimitExceeded as a
		// throttle (and 503 as retryable): up to 3 attempts with
		// exponential jittered backoff, and the same ClientToken.
		{"one throttle is retried away by the SDK", 1, false, 2},
		{"three throttles exhaust the SDK's 3 attempts", 3, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, ami := newServer(t)
			srv.FailNext("RunInstances", "RequestLimitExceeded", 503, tc.failures)
			c := newCompute(t, srv) // default retryer
			start := time.Now()
			_, err := c.CreateInstance(ctxT(t), providers.InstanceSpec{Name: "throttled-1", Zone: "us-east-1a", MachineType: "t3.small", Image: ami})
			t.Logf("CreateInstance took %v with the default retryer: %v", time.Since(start).Round(time.Millisecond), err)
			if got := srv.Calls("RunInstances"); got != tc.wantCalls {
				t.Errorf("RunInstances called %d times; want %d", got, tc.wantCalls)
			}
			reqs := srv.Requests("RunInstances")
			for _, r := range reqs[1:] {
				if tok := r.Get("ClientToken"); tok == "" || tok != reqs[0].Get("ClientToken") {
					t.Errorf("retry ClientToken %q; want the first attempt's %q", tok, reqs[0].Get("ClientToken"))
				}
			}
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("CreateInstance: %v", err)
				}
				if n := len(srv.Instances()); n != 1 {
					t.Errorf("%d instances; want 1", n)
				}
				return
			}
			var ae smithy.APIError
			var max *retry.MaxAttemptsError
			switch {
			case err == nil:
				t.Fatal("CreateInstance succeeded")
			case !errors.As(err, &ae) || ae.ErrorCode() != "RequestLimitExceeded":
				t.Errorf("err = %v; want RequestLimitExceeded", err)
			case !errors.As(err, &max):
				t.Errorf("err = %v; want the retryer's MaxAttemptsError", err)
			case !strings.Contains(err.Error(), "throttled-1 in us-east-1a"):
				t.Errorf("err = %v; want it to name the instance and zone", err)
			}
		})
	}
}

func TestCreateInstanceGivesUpWhenWaitingTimesOut(t *testing.T) {
	srv, ami := newServer(t)
	srv.SetLatency(time.Hour, 0)
	c := newCompute(t, srv)
	c.CreateTimeout = 200 * time.Millisecond
	_, err := c.CreateInstance(ctxT(t), providers.InstanceSpec{Name: "slow-1", Zone: "us-east-1a", MachineType: "t3.small", Image: ami})
	if err == nil || !strings.Contains(err.Error(), "slow-1") || !strings.Contains(err.Error(), "running") {
		t.Fatalf("err = %v; want a timeout naming the instance", err)
	}
	// The instance is left behind and DeleteInstance cleans it up.
	if err := c.DeleteInstance(ctxT(t), "us-east-1a", "slow-1"); err != nil {
		t.Fatal(err)
	}
}

func TestMissingInstances(t *testing.T) {
	srv, ami := newServer(t)
	srv.AddInstance(ec2test.Instance{ImageID: ami, Zone: "us-east-1a", Tags: map[string]string{"Name": "elsewhere"}})
	srv.AddInstance(ec2test.Instance{ImageID: ami, Zone: "us-east-1a", State: ec2test.StateTerminated, Tags: map[string]string{"Name": "gone"}})
	c := newCompute(t, srv)
	ctx := ctxT(t)
	for _, tc := range []struct{ zone, name string }{
		{"us-east-1a", "never-was"},
		{"us-east-1b", "elsewhere"}, // wrong zone
		{"us-east-1a", "gone"},      // terminated
	} {
		t.Run(tc.name+" in "+tc.zone, func(t *testing.T) {
			if err := c.DeleteInstance(ctx, tc.zone, tc.name); err != nil {
				t.Errorf("DeleteInstance: %v; want nil", err)
			}
			if err := c.RequestDrain(ctx, tc.zone, tc.name); !errors.Is(err, providers.ErrNotFound) || !strings.Contains(err.Error(), tc.name) {
				t.Errorf("RequestDrain: %v; want ErrNotFound naming it", err)
			}
			if _, err := c.DrainState(ctx, tc.zone, tc.name); !errors.Is(err, providers.ErrNotFound) {
				t.Errorf("DrainState: %v; want ErrNotFound", err)
			}
		})
	}
	if n := srv.Calls("TerminateInstances"); n != 0 {
		t.Errorf("TerminateInstances called %d times", n)
	}
}

func TestDrainStateRejectsMalformedTags(t *testing.T) {
	srv, ami := newServer(t)
	srv.AddInstance(ec2test.Instance{ImageID: ami, Zone: "us-east-1a", Tags: map[string]string{
		"Name": "m", providers.EC2PhaseTag: "draining", providers.EC2JobsLeftTag: "two"}})
	_, err := newCompute(t, srv).DrainState(ctxT(t), "us-east-1a", "m")
	if err == nil || !strings.Contains(err.Error(), providers.EC2JobsLeftTag) {
		t.Fatalf("err = %v; want one about %s", err, providers.EC2JobsLeftTag)
	}
}

func TestImages(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
	fam := map[string]string{"family": "runner-manager"}
	srv.AddImage(ec2test.Image{Name: "rm-2", CreationDate: day(2), Tags: fam})
	srv.AddImage(ec2test.Image{Name: "rm-3", CreationDate: day(3), Tags: fam, SnapshotIDs: []string{"snap-0000000000000003a", "snap-0000000000000003b"}})
	srv.AddImage(ec2test.Image{Name: "rm-1", CreationDate: day(1), Tags: fam})
	srv.AddImage(ec2test.Image{Name: "other-9", CreationDate: day(9), Tags: map[string]string{"family": "other"}})
	srv.AddImage(ec2test.Image{Name: "public-rm", CreationDate: day(8), Tags: fam, OwnerID: "137112412989"})
	srv.SetPageLimit(2)
	c := newCompute(t, srv)
	ctx := ctxT(t)

	t.Run("lists own images of the family newest first", func(t *testing.T) {
		ims, err := c.ListImages(ctx, "runner-manager")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, im := range ims {
			names = append(names, im.Name)
			if im.Family != "runner-manager" || !strings.HasPrefix(im.ID, "ami-") || im.CreatedAt.IsZero() {
				t.Errorf("image %+v", im)
			}
		}
		if want := []string{"rm-3", "rm-2", "rm-1"}; !slices.Equal(names, want) {
			t.Errorf("got %v, want %v", names, want)
		}
	})

	t.Run("deregisters an image and deletes its snapshots", func(t *testing.T) {
		if err := c.DeleteImage(ctx, "rm-3"); err != nil {
			t.Fatal(err)
		}
		for _, im := range srv.Images() {
			if im.Name == "rm-3" {
				t.Error("rm-3 still registered")
			}
		}
		if snaps := srv.Snapshots(); slices.Contains(snaps, "snap-0000000000000003a") || slices.Contains(snaps, "snap-0000000000000003b") {
			t.Errorf("snapshots left: %v", snaps)
		}
		if n := srv.Calls("DeleteSnapshot"); n != 2 {
			t.Errorf("DeleteSnapshot called %d times; want 2", n)
		}
	})

	t.Run("deleting a missing image is fine", func(t *testing.T) {
		if err := c.DeleteImage(ctx, "rm-3"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a snapshot another image uses stops the deletion", func(t *testing.T) {
		srv.AddImage(ec2test.Image{Name: "a", SnapshotIDs: []string{"snap-00000000000000abc"}})
		srv.AddImage(ec2test.Image{Name: "b", SnapshotIDs: []string{"snap-00000000000000abc"}})
		err := c.DeleteImage(ctx, "a")
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "InvalidSnapshot.InUse" || !strings.Contains(err.Error(), "snap-00000000000000abc") {
			t.Fatalf("err = %v; want InvalidSnapshot.InUse naming the snapshot", err)
		}
	})
}

func TestOrphanSpotRequests(t *testing.T) {
	srv, ami := newServer(t)
	srv.SetLatency(time.Hour, time.Hour)
	running := srv.AddInstance(ec2test.Instance{ImageID: ami, Spot: true})
	pending := srv.AddInstance(ec2test.Instance{ImageID: ami, Spot: true, State: ec2test.StatePending})
	dead := srv.AddInstance(ec2test.Instance{ImageID: ami, Spot: true, State: ec2test.StateTerminated})
	stopped := srv.AddInstance(ec2test.Instance{ImageID: ami, Spot: true, State: ec2test.StateStopped})

	want := []string{
		srv.AddSpotRequest(ec2test.SpotRequest{State: "open"}),                                       // never fulfilled
		srv.AddSpotRequest(ec2test.SpotRequest{State: "active", InstanceID: dead}),                   // instance terminated
		srv.AddSpotRequest(ec2test.SpotRequest{State: "open", Type: "persistent", InstanceID: dead}), // persistent, instance gone
		srv.AddSpotRequest(ec2test.SpotRequest{State: "active", InstanceID: stopped}),                // instance stopped
		srv.AddSpotRequest(ec2test.SpotRequest{State: "active", InstanceID: "i-00000000000000404"}),  // instance unknown to EC2
	}
	keep := []string{
		srv.AddSpotRequest(ec2test.SpotRequest{State: "active", InstanceID: running}),
		srv.AddSpotRequest(ec2test.SpotRequest{State: "active", InstanceID: pending}),
		srv.AddSpotRequest(ec2test.SpotRequest{State: "closed", InstanceID: dead}),
		srv.AddSpotRequest(ec2test.SpotRequest{State: "cancelled"}),
	}
	srv.SetPageLimit(2)
	c := newCompute(t, srv)
	ctx := ctxT(t)

	got, err := c.ListOrphanSpotRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("orphans %v, want %v", got, want)
	}

	if err := c.CancelSpotRequests(ctx, got); err != nil {
		t.Fatal(err)
	}
	for _, r := range srv.SpotRequests() {
		if slices.Contains(want, r.ID) && r.State != "cancelled" {
			t.Errorf("%s is %s after cancelling", r.ID, r.State)
		}
		if r.ID == keep[0] && r.State != "active" {
			t.Errorf("live request %s is %s", r.ID, r.State)
		}
	}
	if again, err := c.ListOrphanSpotRequests(ctx); err != nil || len(again) != 0 {
		t.Errorf("orphans after cancelling: %v, %v", again, err)
	}
	if err := c.CancelSpotRequests(ctx, nil); err != nil {
		t.Errorf("cancelling nothing: %v", err)
	}
	if err := c.CancelSpotRequests(ctx, []string{"sir-00000404"}); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("cancelling an unknown request: %v; want ErrNotFound", err)
	}
}

func TestBaseEndpointOptionReachesTheFake(t *testing.T) {
	srv, _ := newServer(t)
	cfg := srv.Config()
	cfg.BaseEndpoint = aws.String("http://127.0.0.1:1") // nothing listens there
	c := rfaws.New(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(srv.URL()) })
	if _, err := c.ListInstances(ctxT(t), nil); err != nil {
		t.Fatal(err)
	}
}
