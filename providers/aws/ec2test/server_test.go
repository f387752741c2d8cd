package ec2test_test

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
)

func setup(t *testing.T) (*ec2test.Server, *ec2.Client, context.Context) {
	t.Helper()
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return srv, ec2.NewFromConfig(srv.Config()), ctx
}

func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func TestErrorResponsesHaveEC2sShape(t *testing.T) {
	srv, _, _ := setup(t)
	const auth = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=00"
	for _, tc := range []struct {
		name       string
		form       string
		auth       string
		wantStatus int
		wantCode   string
	}{
		{"unsigned requests are refused", "Action=DescribeInstances&Version=2016-11-15", "", 401, "AuthFailure"},
		{"unknown actions are invalid", "Action=RebootInstances&Version=2016-11-15", auth, 400, "InvalidAction"},
		{"other API versions are refused", "Action=DescribeInstances&Version=2014-01-01", auth, 400, "NoSuchVersion"},
		{"unknown filters are invalid", "Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=colour&Filter.1.Value.1=red", auth, 400, "InvalidParameterValue"},
		{"DryRun answers DryRunOperation", "Action=DescribeInstances&Version=2016-11-15&DryRun=true", auth, 412, "DryRunOperation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL()+"/", strings.NewReader(tc.form))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				XMLName   xml.Name
				Code      string `xml:"Errors>Error>Code"`
				Message   string `xml:"Errors>Error>Message"`
				RequestID string `xml:"RequestID"`
			}
			if err := xml.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantStatus || body.XMLName.Local != "Response" || body.Code != tc.wantCode ||
				body.Message == "" || body.RequestID == "" {
				t.Errorf("HTTP %d %+v; want %d with <Response><Errors><Error><Code>%s", resp.StatusCode, body, tc.wantStatus, tc.wantCode)
			}
		})
	}
}

func TestInjectedFaultsThroughTheSDK(t *testing.T) {
	for _, tc := range []struct {
		name      string
		code      string
		status    int
		times     int
		wantErr   bool
		wantCalls int
	}{
		{"a 403 is not retried", "UnauthorizedOperation", 403, 1, true, 1},
		{"a 500 is retried by the SDK", "InternalError", 500, 1, false, 2},
		{"a 400 throttle is retried by its code", "RequestLimitExceeded", 400, 1, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, c, ctx := setup(t)
			srv.FailNext("DescribeImages", tc.code, tc.status, tc.times)
			_, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: []string{"self"}})
			if got := srv.Calls("DescribeImages"); got != tc.wantCalls {
				t.Errorf("%d calls; want %d", got, tc.wantCalls)
			}
			if !tc.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var re *smithyhttp.ResponseError
			if code(err) != tc.code || !errors.As(err, &re) || re.HTTPStatusCode() != tc.status {
				t.Errorf("err = %v; want %s with HTTP %d", err, tc.code, tc.status)
			}
		})
	}
}

func TestDelayNextOutlastsAClientDeadline(t *testing.T) {
	srv, c, ctx := setup(t)
	srv.DelayNext("DescribeInstances", 10*time.Second, 1)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.DescribeInstances(short, &ec2.DescribeInstancesInput{}); err == nil {
		t.Fatal("a delayed call beat the deadline")
	}
	start := time.Now()
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil || time.Since(start) > 5*time.Second { // not the 10 s delay
		t.Fatalf("the next call: %v after %v", err, time.Since(start))
	}
}

func TestDescribeInstances(t *testing.T) {
	srv, c, ctx := setup(t)
	a := srv.AddInstance(ec2test.Instance{Zone: "us-east-1a", Tags: map[string]string{"Name": "a", "fleet": "blue"}})
	b := srv.AddInstance(ec2test.Instance{Zone: "us-east-1b", Tags: map[string]string{"Name": "b", "fleet": "blue"}, State: ec2test.StateStopped})
	star := srv.AddInstance(ec2test.Instance{Zone: "us-east-1a", Tags: map[string]string{"Name": "*", "fleet": "green"}})
	dead := srv.AddInstance(ec2test.Instance{Zone: "us-east-1a", Tags: map[string]string{"Name": "dead", "fleet": "blue"}, State: ec2test.StateTerminated})

	f := func(name string, values ...string) types.Filter {
		return types.Filter{Name: aws.String(name), Values: values}
	}
	for _, tc := range []struct {
		name     string
		in       ec2.DescribeInstancesInput
		want     []string
		wantCode string
	}{
		{"lists everything without filters", ec2.DescribeInstancesInput{}, []string{a, b, star, dead}, ""},
		{"filters by tag", ec2.DescribeInstancesInput{Filters: []types.Filter{f("tag:fleet", "blue")}}, []string{a, b, dead}, ""},
		{"ANDs filters and ORs values", ec2.DescribeInstancesInput{Filters: []types.Filter{f("tag:fleet", "blue"), f("instance-state-name", "running", "stopped")}}, []string{a, b}, ""},
		{"filters by zone", ec2.DescribeInstancesInput{Filters: []types.Filter{f("availability-zone", "us-east-1b")}}, []string{b}, ""},
		{"filters by instance-id", ec2.DescribeInstancesInput{Filters: []types.Filter{f("instance-id", a, "i-0000000000000dead")}}, []string{a}, ""},
		{"treats * as a wildcard", ec2.DescribeInstancesInput{Filters: []types.Filter{f("tag:Name", "*")}}, []string{a, b, star, dead}, ""},
		{"treats \\* as a star", ec2.DescribeInstancesInput{Filters: []types.Filter{f("tag:Name", `\*`)}}, []string{star}, ""},
		{"filters by tag-key", ec2.DescribeInstancesInput{Filters: []types.Filter{f("tag-key", "fle?t")}}, []string{a, b, star, dead}, ""},
		{"selects by InstanceIds", ec2.DescribeInstancesInput{InstanceIds: []string{dead, a}}, []string{a, dead}, ""},
		{"refuses unknown InstanceIds", ec2.DescribeInstancesInput{InstanceIds: []string{a, "i-0000000000000dead"}}, nil, "InvalidInstanceID.NotFound"},
		{"refuses malformed InstanceIds", ec2.DescribeInstancesInput{InstanceIds: []string{"web-1"}}, nil, "InvalidInstanceID.Malformed"},
		{"refuses MaxResults below 5", ec2.DescribeInstancesInput{MaxResults: aws.Int32(4)}, nil, "InvalidParameterValue"},
		{"refuses MaxResults with InstanceIds", ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), InstanceIds: []string{a}}, nil, "InvalidParameterCombination"},
		{"refuses unknown filters", ec2.DescribeInstancesInput{Filters: []types.Filter{f("colour", "red")}}, nil, "InvalidParameterValue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.DescribeInstances(ctx, &tc.in)
			if tc.wantCode != "" {
				if code(err) != tc.wantCode {
					t.Fatalf("err = %v; want %s", err, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range out.Reservations {
				for _, in := range r.Instances {
					got = append(got, aws.ToString(in.InstanceId))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("decodes every field the SDK reads", func(t *testing.T) {
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{a}})
		if err != nil {
			t.Fatal(err)
		}
		in := out.Reservations[0].Instances[0]
		if aws.ToString(out.Reservations[0].OwnerId) != ec2test.DefaultAccountID || in.State.Name != types.InstanceStateNameRunning ||
			aws.ToInt32(in.State.Code) != 16 || aws.ToString(in.Placement.AvailabilityZone) != "us-east-1a" ||
			in.LaunchTime == nil || in.InstanceType != "t3.micro" || len(in.Tags) != 2 ||
			in.MetadataOptions.HttpTokens != types.HttpTokensStateRequired || aws.ToString(in.PrivateIpAddress) == "" {
			t.Errorf("instance %+v", in)
		}
	})
}

func TestDescribePaginatesWithNextToken(t *testing.T) {
	srv, c, ctx := setup(t)
	var want []string
	for range 5 {
		want = append(want, srv.AddInstance(ec2test.Instance{}))
	}
	srv.SetPageLimit(2)
	p := ec2.NewDescribeInstancesPaginator(c, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(1000)})
	var got []string
	pages := 0
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range out.Reservations {
			for _, in := range r.Instances {
				got = append(got, aws.ToString(in.InstanceId))
			}
		}
	}
	if !slices.Equal(got, want) || pages != 3 {
		t.Errorf("%d pages of %v; want 3 pages of %v", pages, got, want)
	}
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{NextToken: aws.String("garbage")}); code(err) != "InvalidParameterValue" {
		t.Errorf("a bad NextToken: %v", err)
	}
}

func TestInstancesMoveThroughTheirStates(t *testing.T) {
	srv, c, ctx := setup(t)
	srv.SetLatency(150*time.Millisecond, 150*time.Millisecond)
	ami := srv.AddImage(ec2test.Image{Name: "img"})
	out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(ami), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		InstanceMarketOptions: &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot}})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)
	if out.Instances[0].State.Name != types.InstanceStateNamePending || out.Instances[0].InstanceLifecycle != types.InstanceLifecycleTypeSpot {
		t.Errorf("RunInstances returned %+v", out.Instances[0])
	}
	in := &ec2.DescribeInstancesInput{InstanceIds: []string{id}}
	fast := func(min, max *time.Duration) { *min, *max = 10*time.Millisecond, 40*time.Millisecond }
	if err := ec2.NewInstanceRunningWaiter(c, func(o *ec2.InstanceRunningWaiterOptions) { fast(&o.MinDelay, &o.MaxDelay) }).Wait(ctx, in, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := srv.Calls("DescribeInstances"); n < 2 {
		t.Errorf("the running waiter polled %d times", n)
	}
	term, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if ch := term.TerminatingInstances[0]; ch.CurrentState.Name != types.InstanceStateNameShuttingDown || ch.PreviousState.Name != types.InstanceStateNameRunning {
		t.Errorf("TerminateInstances returned %+v → %+v", ch.PreviousState, ch.CurrentState)
	}
	if err := ec2.NewInstanceTerminatedWaiter(c, func(o *ec2.InstanceTerminatedWaiterOptions) { fast(&o.MinDelay, &o.MaxDelay) }).Wait(ctx, in, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	got, _ := srv.Instance(id)
	if r := srv.SpotRequests(); len(r) != 1 || r[0].InstanceID != id || r[0].State != "closed" {
		t.Errorf("spot requests %+v; want %s's closed", r, id)
	}
	if got.State != ec2test.StateTerminated {
		t.Errorf("state %s", got.State)
	}
}

func TestRunInstances(t *testing.T) {
	srv, c, ctx := setup(t)
	ami := srv.AddImage(ec2test.Image{Name: "img"})
	base := func(mod func(*ec2.RunInstancesInput)) *ec2.RunInstancesInput {
		in := &ec2.RunInstancesInput{ImageId: aws.String(ami), MinCount: aws.Int32(1), MaxCount: aws.Int32(1)}
		mod(in)
		return in
	}
	nic := []types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0), AssociatePublicIpAddress: aws.Bool(false)}}
	for _, tc := range []struct {
		name     string
		in       *ec2.RunInstancesInput
		wantCode string
		check    func(ec2test.Instance) bool
	}{
		{"maps a public IP by default", base(func(*ec2.RunInstancesInput) {}), "", func(in ec2test.Instance) bool { return in.PublicIP != "" }},
		{"leaves it out when the interface says so", base(func(in *ec2.RunInstancesInput) { in.NetworkInterfaces = nic }), "",
			func(in ec2test.Instance) bool { return in.PublicIP == "" }},
		{"decodes base64 user data", base(func(in *ec2.RunInstancesInput) { in.UserData = aws.String("aGk=") }), "",
			func(in ec2test.Instance) bool { return in.UserData == "hi" }},
		{"refuses user data that is not base64", base(func(in *ec2.RunInstancesInput) { in.UserData = aws.String("hi there") }), "InvalidParameterValue", nil},
		{"refuses a subnet beside network interfaces", base(func(in *ec2.RunInstancesInput) { in.NetworkInterfaces = nic; in.SubnetId = aws.String("subnet-1") }), "InvalidParameterCombination", nil},
		{"refuses unknown AMIs", base(func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("ami-00000000000000404") }), "InvalidAMIID.NotFound", nil},
		{"refuses aws: tags", base(func(in *ec2.RunInstancesInput) {
			in.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: []types.Tag{{Key: aws.String("aws:x"), Value: aws.String("1")}}}}
		}), "InvalidParameterValue", nil},
		{"tags instance and volumes separately", base(func(in *ec2.RunInstancesInput) {
			in.TagSpecifications = []types.TagSpecification{
				{ResourceType: types.ResourceTypeInstance, Tags: []types.Tag{{Key: aws.String("Name"), Value: aws.String("vm")}}},
				{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{{Key: aws.String("disk"), Value: aws.String("root")}}},
			}
		}), "", func(in ec2test.Instance) bool {
			return in.Tags["Name"] == "vm" && in.VolumeTags["disk"] == "root" && len(in.Tags) == 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.RunInstances(ctx, tc.in)
			if tc.wantCode != "" {
				if code(err) != tc.wantCode {
					t.Fatalf("err = %v; want %s", err, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			in, _ := srv.Instance(aws.ToString(out.Instances[0].InstanceId))
			if !tc.check(in) {
				t.Errorf("instance %+v", in)
			}
		})
	}

	t.Run("a repeated ClientToken returns the first launch", func(t *testing.T) {
		before := len(srv.Instances())
		in := base(func(in *ec2.RunInstancesInput) { in.ClientToken = aws.String("token-1") })
		first, err1 := c.RunInstances(ctx, in)
		second, err2 := c.RunInstances(ctx, in)
		if err1 != nil || err2 != nil || aws.ToString(first.Instances[0].InstanceId) != aws.ToString(second.Instances[0].InstanceId) {
			t.Fatalf("%v %v; want the same instance twice", err1, err2)
		}
		if n := len(srv.Instances()) - before; n != 1 {
			t.Errorf("%d instances launched", n)
		}
	})
}

func TestTags(t *testing.T) {
	srv, c, ctx := setup(t)
	id := srv.AddInstance(ec2test.Instance{MetadataTags: true, Tags: map[string]string{"Name": "vm", "a": "1", "b": "2"}})
	tag := func(k, v string) types.Tag { return types.Tag{Key: aws.String(k), Value: aws.String(v)} }
	for _, tc := range []struct {
		name     string
		call     func() error
		wantCode string
		want     map[string]string
	}{
		{"CreateTags adds and overwrites", func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{tag("a", "one"), tag("c", "3")}})
			return err
		}, "", map[string]string{"Name": "vm", "a": "one", "b": "2", "c": "3"}},
		{"CreateTags refuses keys IMDS cannot show", func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{tag("team/x", "y")}})
			return err
		}, "InvalidParameterValue", nil},
		{"CreateTags refuses unknown instances", func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{"i-00000000000000404"}, Tags: []types.Tag{tag("a", "1")}})
			return err
		}, "InvalidInstanceID.NotFound", nil},
		{"DeleteTags keeps a tag whose value differs", func() error {
			_, err := c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{id}, Tags: []types.Tag{tag("b", "nope")}})
			return err
		}, "", map[string]string{"Name": "vm", "a": "one", "b": "2", "c": "3"}},
		{"DeleteTags without a value deletes the key", func() error {
			_, err := c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{id}, Tags: []types.Tag{{Key: aws.String("b")}}})
			return err
		}, "", map[string]string{"Name": "vm", "a": "one", "c": "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if code(err) != tc.wantCode || (tc.wantCode == "" && err != nil) {
				t.Fatalf("err = %v; want %q", err, tc.wantCode)
			}
			if tc.want != nil {
				if in, _ := srv.Instance(id); !equal(in.Tags, tc.want) {
					t.Errorf("tags %v, want %v", in.Tags, tc.want)
				}
			}
		})
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			return false
		}
	}
	return true
}

func TestImagesAndSnapshots(t *testing.T) {
	srv, c, ctx := setup(t)
	old := srv.AddImage(ec2test.Image{Name: "old", CreationDate: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		Tags: map[string]string{"family": "f"}, SnapshotIDs: []string{"snap-0000000000000000a", "snap-0000000000000000b"}})
	srv.AddImage(ec2test.Image{Name: "theirs", OwnerID: "999999999999", Tags: map[string]string{"family": "f"}})

	out, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: []string{"self"},
		Filters: []types.Filter{{Name: aws.String("tag:family"), Values: []string{"f"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Images) != 1 || aws.ToString(out.Images[0].ImageId) != old || aws.ToString(out.Images[0].CreationDate) != "2025-01-01T00:00:00.000Z" ||
		len(out.Images[0].BlockDeviceMappings) != 2 || aws.ToString(out.Images[0].BlockDeviceMappings[1].Ebs.SnapshotId) != "snap-0000000000000000b" {
		t.Fatalf("DescribeImages = %+v", out.Images)
	}
	if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String("snap-0000000000000000a")}); code(err) != "InvalidSnapshot.InUse" {
		t.Errorf("deleting a registered image's snapshot: %v", err)
	}
	dr, err := c.DeregisterImage(ctx, &ec2.DeregisterImageInput{ImageId: aws.String(old), DeleteAssociatedSnapshots: aws.Bool(true)})
	if err != nil || len(dr.DeleteSnapshotResults) != 2 {
		t.Fatalf("DeregisterImage: %+v, %v", dr, err)
	}
	if snaps := srv.Snapshots(); len(snaps) != 1 { // theirs
		t.Errorf("snapshots left: %v", snaps)
	}
	if _, err := c.DeregisterImage(ctx, &ec2.DeregisterImageInput{ImageId: aws.String(old)}); code(err) != "InvalidAMIID.NotFound" {
		t.Errorf("deregistering twice: %v", err)
	}
	if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String("snap-0000000000000000a")}); code(err) != "InvalidSnapshot.NotFound" {
		t.Errorf("deleting a deleted snapshot: %v", err)
	}
}

func TestSpotInstanceRequests(t *testing.T) {
	srv, c, ctx := setup(t)
	open := srv.AddSpotRequest(ec2test.SpotRequest{})
	active := srv.AddSpotRequest(ec2test.SpotRequest{State: "active", InstanceID: "i-0000000000000000a"})
	srv.AddSpotRequest(ec2test.SpotRequest{State: "closed"})
	out, err := c.DescribeSpotInstanceRequests(ctx, &ec2.DescribeSpotInstanceRequestsInput{
		Filters: []types.Filter{{Name: aws.String("state"), Values: []string{"open", "active"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range out.SpotInstanceRequests {
		got = append(got, aws.ToString(r.SpotInstanceRequestId))
		if r.CreateTime == nil || r.Status == nil || aws.ToString(r.Status.Code) == "" {
			t.Errorf("request %+v", r)
		}
	}
	if want := []string{open, active}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	cout, err := c.CancelSpotInstanceRequests(ctx, &ec2.CancelSpotInstanceRequestsInput{SpotInstanceRequestIds: []string{open}})
	if err != nil || len(cout.CancelledSpotInstanceRequests) != 1 || cout.CancelledSpotInstanceRequests[0].State != types.CancelSpotInstanceRequestStateCancelled {
		t.Fatalf("CancelSpotInstanceRequests: %+v, %v", cout, err)
	}
	if _, err := c.CancelSpotInstanceRequests(ctx, &ec2.CancelSpotInstanceRequestsInput{SpotInstanceRequestIds: []string{"sir-00000404"}}); code(err) != "InvalidSpotInstanceRequestID.NotFound" {
		t.Errorf("cancelling an unknown request: %v", err)
	}
}

func TestIMDSv2Protocol(t *testing.T) {
	srv, _, _ := setup(t)
	id := srv.AddInstance(ec2test.Instance{Zone: "us-east-1d", MetadataTags: true, Tags: map[string]string{"Name": "vm", "runnerfleet:drain": "true"}})
	plain := srv.AddInstance(ec2test.Instance{})
	md := srv.IMDSFor(id)
	md.SetMaxTokenTTL(time.Minute)

	do := func(m *ec2test.IMDS, method, path string, hdr map[string]string) (int, string, http.Header) {
		req, _ := http.NewRequest(method, m.URL()+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	status, tok, h := do(md, http.MethodPut, "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
	if status != 200 || tok == "" || h.Get("X-aws-ec2-metadata-token-ttl-seconds") != "60" {
		t.Fatalf("token PUT: %d %q ttl %q; want a token with the TTL capped to 60", status, tok, h.Get("X-aws-ec2-metadata-token-ttl-seconds"))
	}
	withTok := map[string]string{"X-aws-ec2-metadata-token": tok}
	for _, tc := range []struct {
		name       string
		imds       *ec2test.IMDS
		method     string
		path       string
		hdr        map[string]string
		wantStatus int
		wantBody   string
	}{
		{"token PUT needs a TTL", md, "PUT", "/latest/api/token", nil, 400, ""},
		{"token TTL is at most 6 hours", md, "PUT", "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "21601"}, 400, ""},
		{"token PUT through a proxy is refused", md, "PUT", "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "10.0.0.1"}, 403, ""},
		{"GET without a token is unauthorized", md, "GET", "/latest/meta-data/instance-id", nil, 401, ""},
		{"GET with a bogus token is unauthorized", md, "GET", "/latest/meta-data/instance-id", map[string]string{"X-aws-ec2-metadata-token": "x"}, 401, ""},
		{"serves the instance ID", md, "GET", "/latest/meta-data/instance-id", withTok, 200, id},
		{"serves the region", md, "GET", "/latest/meta-data/placement/region", withTok, 200, "us-east-1"},
		{"serves the zone", md, "GET", "/latest/meta-data/placement/availability-zone", withTok, 200, "us-east-1d"},
		{"lists tag keys", md, "GET", "/latest/meta-data/tags/instance", withTok, 200, "Name\nrunnerfleet:drain"},
		{"serves a tag", md, "GET", "/latest/meta-data/tags/instance/runnerfleet:drain", withTok, 200, "true"},
		{"404s a missing tag", md, "GET", "/latest/meta-data/tags/instance/nope", withTok, 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := do(tc.imds, tc.method, tc.path, tc.hdr)
			if status != tc.wantStatus || (tc.wantBody != "" && body != tc.wantBody) {
				t.Errorf("%d %q; want %d %q", status, body, tc.wantStatus, tc.wantBody)
			}
		})
	}

	t.Run("404s tags when they are not enabled", func(t *testing.T) {
		other := srv.IMDSFor(plain)
		_, tok, _ := do(other, http.MethodPut, "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60"})
		if status, _, _ := do(other, "GET", "/latest/meta-data/tags/instance", map[string]string{"X-aws-ec2-metadata-token": tok}); status != 404 {
			t.Errorf("status %d", status)
		}
	})

	t.Run("expired tokens are unauthorized", func(t *testing.T) {
		md.ExpireTokens()
		if status, _, _ := do(md, "GET", "/latest/meta-data/instance-id", withTok); status != 401 {
			t.Errorf("status %d", status)
		}
	})
}

func TestIMDSShowsTagsSetThroughTheAPI(t *testing.T) {
	srv, c, ctx := setup(t)
	id := srv.AddInstance(ec2test.Instance{MetadataTags: true})
	md := imds.New(imds.Options{Endpoint: srv.IMDSFor(id).URL(), EnableFallback: aws.FalseTernary})
	get := func() (string, error) {
		out, err := md.GetMetadata(ctx, &imds.GetMetadataInput{Path: "tags/instance/runnerfleet:drain"})
		if err != nil {
			return "", err
		}
		defer out.Content.Close()
		b, err := io.ReadAll(out.Content)
		return string(b), err
	}
	if _, err := get(); err == nil {
		t.Fatal("the tag exists before CreateTags")
	}
	if _, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id},
		Tags: []types.Tag{{Key: aws.String("runnerfleet:drain"), Value: aws.String("true")}}}); err != nil {
		t.Fatal(err)
	}
	if v, err := get(); err != nil || v != "true" {
		t.Fatalf("after CreateTags: %q, %v", v, err)
	}
}

func TestConcurrentUse(t *testing.T) {
	srv, c, ctx := setup(t)
	srv.SetLatency(0, 0)
	ami := srv.AddImage(ec2test.Image{Name: "img"})
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 10 {
		wg.Go(func() {
			out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(ami), MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
			if err != nil {
				errs <- err
				return
			}
			id := aws.ToString(out.Instances[0].InstanceId)
			_, err = c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id},
				Tags: []types.Tag{{Key: aws.String("n"), Value: aws.String(url.QueryEscape(string(rune('a' + i))))}}})
			errs <- err
			_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
			errs <- err
			_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
			errs <- err
			_ = srv.Instances()
			_ = srv.IMDSFor(id)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for _, in := range srv.Instances() {
		if in.State != ec2test.StateTerminated || in.Tags["n"] == "" {
			t.Errorf("instance %s: %s %v", in.ID, in.State, in.Tags)
		}
	}
}
