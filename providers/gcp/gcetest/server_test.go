package gcetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
)

const zone = "europe-west1-b"

type clients struct {
	inst  *compute.InstancesClient
	img   *compute.ImagesClient
	zops  *compute.ZoneOperationsClient
	gops  *compute.GlobalOperationsClient
	proj  string
	srv   *gcetest.Server
	ctx   context.Context
	close func()
}

func newClients(t *testing.T, opts ...gcetest.Option) *clients {
	t.Helper()
	srv := gcetest.New(opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	c := &clients{srv: srv, proj: srv.Project(), ctx: ctx}
	var err error
	if c.inst, err = compute.NewInstancesRESTClient(ctx, srv.ClientOptions()...); err != nil {
		t.Fatal(err)
	}
	if c.img, err = compute.NewImagesRESTClient(ctx, srv.ClientOptions()...); err != nil {
		t.Fatal(err)
	}
	if c.zops, err = compute.NewZoneOperationsRESTClient(ctx, srv.ClientOptions()...); err != nil {
		t.Fatal(err)
	}
	if c.gops, err = compute.NewGlobalOperationsRESTClient(ctx, srv.ClientOptions()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.inst.Close()
		c.img.Close()
		c.zops.Close()
		c.gops.Close()
		srv.Close()
		cancel()
	})
	return c
}

func (c *clients) insert(t *testing.T, name string, mutate func(*computepb.Instance)) (*compute.Operation, error) {
	t.Helper()
	res := &computepb.Instance{
		Name:        proto.String(name),
		MachineType: proto.String("zones/" + zone + "/machineTypes/e2-small"),
		Disks: []*computepb.AttachedDisk{{
			Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/debian-cloud/global/images/family/debian-12")},
		}},
		NetworkInterfaces: []*computepb.NetworkInterface{{}},
		Labels:            map[string]string{"role": "manager"},
		Metadata: &computepb.Metadata{Items: []*computepb.Items{
			{Key: proto.String("enable-guest-attributes"), Value: proto.String("TRUE")},
		}},
	}
	if mutate != nil {
		mutate(res)
	}
	return c.inst.Insert(c.ctx, &computepb.InsertInstanceRequest{Project: c.proj, Zone: zone, InstanceResource: res})
}

func httpCode(err error) int {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	return 0
}

func TestInsertStartsAnOperationThatBecomesDoneAndAnInstanceThatBecomesRunning(t *testing.T) {
	// Latency wide enough that a loaded machine reads each phase in time.
	const latency = 4 * time.Second
	c := newClients(t, gcetest.WithOperationLatency(latency))
	op, err := c.insert(t, "vm-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	inserted := time.Now() // the server's operation started before this
	if st := op.Proto().GetStatus(); st != computepb.Operation_PENDING {
		t.Errorf("operation starts %v, want PENDING", st)
	}
	if op.Proto().GetOperationType() != "insert" || !strings.HasSuffix(op.Proto().GetTargetLink(), "/zones/"+zone+"/instances/vm-1") {
		t.Errorf("operation = %v", op.Proto())
	}
	in, _ := c.srv.Instance(zone, "vm-1")
	if in.Status != gcetest.StatusProvisioning {
		t.Errorf("instance starts %s, want PROVISIONING", in.Status)
	}
	// Past half way: RUNNING operation, STAGING instance.
	time.Sleep(time.Until(inserted.Add(latency * 6 / 10)))
	got, err := c.zops.Get(c.ctx, &computepb.GetZoneOperationRequest{Project: c.proj, Zone: zone, Operation: op.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus() != computepb.Operation_RUNNING {
		t.Errorf("operation half way is %v, want RUNNING", got.GetStatus())
	}
	if in, _ := c.srv.Instance(zone, "vm-1"); in.Status != gcetest.StatusStaging {
		t.Errorf("instance half way is %s, want STAGING", in.Status)
	}
	// operations.wait blocks until DONE.
	done, err := c.zops.Wait(c.ctx, &computepb.WaitZoneOperationRequest{Project: c.proj, Zone: zone, Operation: op.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if done.GetStatus() != computepb.Operation_DONE || done.GetProgress() != 100 || done.GetEndTime() == "" {
		t.Errorf("after wait: %v", done)
	}
	inst, err := c.inst.Get(c.ctx, &computepb.GetInstanceRequest{Project: c.proj, Zone: zone, Instance: "vm-1"})
	if err != nil {
		t.Fatal(err)
	}
	if inst.GetStatus() != "RUNNING" || inst.GetId() == 0 || inst.GetMetadata().GetFingerprint() == "" {
		t.Errorf("instance = status %s id %d fingerprint %q", inst.GetStatus(), inst.GetId(), inst.GetMetadata().GetFingerprint())
	}
	if _, err := time.Parse(time.RFC3339, inst.GetCreationTimestamp()); err != nil {
		t.Errorf("creationTimestamp %q: %v", inst.GetCreationTimestamp(), err)
	}
	if nic := inst.GetNetworkInterfaces()[0]; nic.GetNetworkIP() == "" || len(nic.GetAccessConfigs()) != 0 || !strings.HasSuffix(nic.GetNetwork(), "/global/networks/default") {
		t.Errorf("nic = %v", nic)
	}
	// The SDK's own Operation.Wait helper (polling operations.get) works too.
	op2, err := c.insert(t, "vm-2", nil)
	if err != nil {
		t.Fatal(err)
	}
	c.srv.SetOperationLatency(0)
	if err := op2.Wait(c.ctx); err != nil || !op2.Done() {
		t.Errorf("Operation.Wait: %v done %v", err, op2.Done())
	}
}

func TestInsertWithTheSameRequestIDIsTheSameOperation(t *testing.T) {
	c := newClients(t)
	req := func() (*compute.Operation, error) {
		return c.inst.Insert(c.ctx, &computepb.InsertInstanceRequest{
			Project: c.proj, Zone: zone, RequestId: proto.String("8d5e7a2c-1f3b-4c6d-9e0f-112233445566"),
			InstanceResource: &computepb.Instance{
				Name:              proto.String("vm-1"),
				MachineType:       proto.String("zones/" + zone + "/machineTypes/e2-small"),
				Disks:             []*computepb.AttachedDisk{{Boot: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/debian-cloud/global/images/family/debian-12")}}},
				NetworkInterfaces: []*computepb.NetworkInterface{{}},
			},
		})
	}
	op1, err := req()
	if err != nil {
		t.Fatal(err)
	}
	op2, err := req()
	if err != nil {
		t.Fatalf("retried insert: %v, want the same operation, not a conflict", err)
	}
	if op1.Name() != op2.Name() {
		t.Errorf("operations %s and %s, want one", op1.Name(), op2.Name())
	}
}

func TestDeleteMakesTheInstanceStoppingThenGone(t *testing.T) {
	c := newClients(t, gcetest.WithOperationLatency(200*time.Millisecond))
	c.srv.AddInstance(gcetest.Instance{Name: "vm-1", Zone: zone})
	op, err := c.inst.Delete(c.ctx, &computepb.DeleteInstanceRequest{Project: c.proj, Zone: zone, Instance: "vm-1"})
	if err != nil {
		t.Fatal(err)
	}
	if in, ok := c.srv.Instance(zone, "vm-1"); !ok || in.Status != gcetest.StatusStopping {
		t.Errorf("during delete: %v %v, want STOPPING", in.Status, ok)
	}
	if _, err := c.zops.Wait(c.ctx, &computepb.WaitZoneOperationRequest{Project: c.proj, Zone: zone, Operation: op.Name()}); err != nil {
		t.Fatal(err)
	}
	_, err = c.inst.Get(c.ctx, &computepb.GetInstanceRequest{Project: c.proj, Zone: zone, Instance: "vm-1"})
	if httpCode(err) != http.StatusNotFound {
		t.Errorf("Get after delete: %v, want 404", err)
	}
}

func TestErrorsAreGoogleJSON(t *testing.T) {
	c := newClients(t)
	resp, err := http.Get(c.srv.URL() + "/compute/v1/projects/" + c.proj + "/zones/" + zone + "/instances/nope")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct {
			Code    int
			Message string
			Errors  []struct{ Domain, Reason, Message string }
		}
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if resp.StatusCode != 404 || body.Error.Code != 404 || len(body.Error.Errors) != 1 || body.Error.Errors[0].Reason != "notFound" ||
		!strings.Contains(body.Error.Message, "projects/"+c.proj+"/zones/"+zone+"/instances/nope") {
		t.Errorf("404 body = %s", b)
	}
	// And the SDK reads it as a *googleapi.Error.
	_, err = c.inst.Get(c.ctx, &computepb.GetInstanceRequest{Project: c.proj, Zone: zone, Instance: "nope"})
	var ge *googleapi.Error
	if !errors.As(err, &ge) || ge.Code != 404 || len(ge.Errors) != 1 || ge.Errors[0].Reason != "notFound" {
		t.Errorf("SDK error = %#v", err)
	}
}

func TestInsertValidation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*computepb.Instance)
		want   int
	}{
		{"a bare machine type name is not a URL", func(i *computepb.Instance) { i.MachineType = proto.String("e2-small") }, 400},
		{"a machine type of another zone", func(i *computepb.Instance) { i.MachineType = proto.String("zones/us-east1-b/machineTypes/e2-small") }, 400},
		{"a bad instance name", func(i *computepb.Instance) { i.Name = proto.String("Bad_Name") }, 400},
		{"an upper-case label", func(i *computepb.Instance) { i.Labels = map[string]string{"Role": "x"} }, 400},
		{"a Spot VM that restarts automatically", func(i *computepb.Instance) {
			i.Scheduling = &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), AutomaticRestart: proto.Bool(true)}
		}, 400},
		{"a termination action on a standard VM", func(i *computepb.Instance) {
			i.Scheduling = &computepb.Scheduling{InstanceTerminationAction: proto.String("DELETE")}
		}, 400},
		{"a missing image of the project", func(i *computepb.Instance) {
			i.Disks[0].InitializeParams.SourceImage = proto.String("global/images/missing")
		}, 404},
		{"duplicate metadata keys", func(i *computepb.Instance) {
			i.Metadata.Items = append(i.Metadata.Items, &computepb.Items{Key: proto.String("enable-guest-attributes"), Value: proto.String("x")})
		}, 400},
		{"a Spot VM deleted on termination is fine", func(i *computepb.Instance) {
			i.Scheduling = &computepb.Scheduling{ProvisioningModel: proto.String("SPOT"), InstanceTerminationAction: proto.String("DELETE")}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClients(t)
			_, err := c.insert(t, "vm-1", tt.mutate)
			if got := httpCode(err); got != tt.want {
				t.Errorf("insert: %v (code %d), want %d", err, got, tt.want)
			}
		})
	}
}

func TestSetMetadataEnforcesTheFingerprint(t *testing.T) {
	c := newClients(t, gcetest.WithOperationLatency(0))
	c.srv.AddInstance(gcetest.Instance{Name: "vm-1", Zone: zone, Metadata: map[string]string{"a": "1"}})
	in, err := c.inst.Get(c.ctx, &computepb.GetInstanceRequest{Project: c.proj, Zone: zone, Instance: "vm-1"})
	if err != nil {
		t.Fatal(err)
	}
	fp := in.GetMetadata().GetFingerprint()
	set := func(fp string, items ...*computepb.Items) error {
		_, err := c.inst.SetMetadata(c.ctx, &computepb.SetMetadataInstanceRequest{
			Project: c.proj, Zone: zone, Instance: "vm-1",
			MetadataResource: &computepb.Metadata{Fingerprint: proto.String(fp), Items: items},
		})
		return err
	}
	if err := set("stale+fp=", &computepb.Items{Key: proto.String("b"), Value: proto.String("2")}); httpCode(err) != http.StatusPreconditionFailed {
		t.Errorf("stale fingerprint: %v, want 412", err)
	}
	if err := set(fp, &computepb.Items{Key: proto.String("b"), Value: proto.String("2")}); err != nil {
		t.Fatalf("current fingerprint: %v", err)
	}
	got, _ := c.srv.Instance(zone, "vm-1")
	if len(got.Metadata) != 1 || got.Metadata["b"] != "2" || got.MetadataFingerprint == fp {
		t.Errorf("after setMetadata: %v fingerprint %q (was %q); want the list replaced and a new fingerprint", got.Metadata, got.MetadataFingerprint, fp)
	}
	// The fingerprint just used is stale now.
	if err := set(fp); httpCode(err) != http.StatusPreconditionFailed {
		t.Errorf("reused fingerprint: %v, want 412", err)
	}
}

func TestConcurrentSetMetadataWithOneFingerprintHasOneWinner(t *testing.T) {
	c := newClients(t, gcetest.WithOperationLatency(0))
	c.srv.AddInstance(gcetest.Instance{Name: "vm-1", Zone: zone})
	fp := c.srv.InstanceResource(zone, "vm-1").GetMetadata().GetFingerprint()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.inst.SetMetadata(c.ctx, &computepb.SetMetadataInstanceRequest{
				Project: c.proj, Zone: zone, Instance: "vm-1",
				MetadataResource: &computepb.Metadata{Fingerprint: proto.String(fp)},
			})
			mu.Lock()
			codes[httpCode(err)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[0] != 1 || codes[412] != 7 {
		t.Errorf("results by code = %v, want one success and seven 412", codes)
	}
}

func TestListFiltersPagesAndRefusesFilterWithOrderBy(t *testing.T) {
	c := newClients(t, gcetest.WithPageSize(2))
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		role := "runner"
		if n != "c" {
			role = "manager"
		}
		c.srv.AddInstance(gcetest.Instance{Name: "vm-" + n, Zone: zone, Labels: map[string]string{"role": role}})
	}
	c.srv.AddInstance(gcetest.Instance{Name: "vm-z", Zone: "us-east1-b", Labels: map[string]string{"role": "manager"}})

	it := c.inst.List(c.ctx, &computepb.ListInstancesRequest{Project: c.proj, Zone: zone, Filter: proto.String(`labels.role = "manager"`)})
	var got []string
	for {
		in, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, in.GetName())
	}
	if strings.Join(got, ",") != "vm-a,vm-b,vm-d,vm-e" {
		t.Errorf("list = %v", got)
	}
	if n := len(c.srv.Calls("GET", "/zones/*/instances")); n != 2 {
		t.Errorf("%d list pages, want 2 of at most 2", n)
	}

	agg := c.inst.AggregatedList(c.ctx, &computepb.AggregatedListInstancesRequest{Project: c.proj, Filter: proto.String(`(labels.role = "manager") (name != "vm-a")`)})
	var aggNames []string
	for {
		p, err := agg.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range p.Value.GetInstances() {
			aggNames = append(aggNames, p.Key+"/"+in.GetName())
		}
	}
	if strings.Join(aggNames, ",") != "zones/europe-west1-b/vm-b,zones/europe-west1-b/vm-d,zones/europe-west1-b/vm-e,zones/us-east1-b/vm-z" {
		t.Errorf("aggregated = %v", aggNames)
	}

	_, err := c.img.List(c.ctx, &computepb.ListImagesRequest{Project: c.proj, Filter: proto.String(`family = "x"`), OrderBy: proto.String("creationTimestamp desc")}).Next()
	if httpCode(err) != http.StatusBadRequest {
		t.Errorf("filter with orderBy: %v, want 400", err)
	}
	_, err = c.inst.List(c.ctx, &computepb.ListInstancesRequest{Project: c.proj, Zone: zone, Filter: proto.String(`labels.role = "a" OR labels.role = "b"`)}).Next()
	if httpCode(err) != http.StatusBadRequest {
		t.Errorf("OR filter: %v, want 400", err)
	}
}

func TestImagesListGetFromFamilyAndDelete(t *testing.T) {
	c := newClients(t)
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	c.srv.AddImage(gcetest.Image{Name: "img-1", Family: "runner", CreatedAt: t0})
	c.srv.AddImage(gcetest.Image{Name: "img-2", Family: "runner", CreatedAt: t0.Add(time.Hour)})
	c.srv.AddImage(gcetest.Image{Name: "img-3", Family: "runner", CreatedAt: t0.Add(2 * time.Hour), Deprecated: "DEPRECATED"})

	it := c.img.List(c.ctx, &computepb.ListImagesRequest{Project: c.proj, OrderBy: proto.String("creationTimestamp desc")})
	var got []string
	for {
		im, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, im.GetName())
	}
	if strings.Join(got, ",") != "img-3,img-2,img-1" {
		t.Errorf("orderBy creationTimestamp desc = %v", got)
	}
	fam, err := c.img.GetFromFamily(c.ctx, &computepb.GetFromFamilyImageRequest{Project: c.proj, Family: "runner"})
	if err != nil || fam.GetName() != "img-2" {
		t.Errorf("getFromFamily = %v, %v; want img-2 (img-3 is deprecated)", fam.GetName(), err)
	}
	op, err := c.img.Delete(c.ctx, &computepb.DeleteImageRequest{Project: c.proj, Image: "img-1"})
	if err != nil {
		t.Fatal(err)
	}
	if op.Proto().GetZone() != "" || !strings.Contains(op.Proto().GetSelfLink(), "/global/operations/") {
		t.Errorf("image delete operation is not global: %v", op.Proto())
	}
	if _, err := c.gops.Wait(c.ctx, &computepb.WaitGlobalOperationRequest{Project: c.proj, Operation: op.Name()}); err != nil {
		t.Fatal(err)
	}
	if n := len(c.srv.Images()); n != 2 {
		t.Errorf("%d images after delete, want 2", n)
	}
	// A global operation is not found as a zone operation.
	_, err = c.zops.Get(c.ctx, &computepb.GetZoneOperationRequest{Project: c.proj, Zone: zone, Operation: op.Name()})
	if httpCode(err) != http.StatusNotFound {
		t.Errorf("global op as zone op: %v, want 404", err)
	}
}

func TestGuestAttributesQuery(t *testing.T) {
	c := newClients(t)
	c.srv.AddInstance(gcetest.Instance{Name: "vm-1", Zone: zone})
	get := func(req *computepb.GetGuestAttributesInstanceRequest) (*computepb.GuestAttributes, error) {
		req.Project, req.Zone, req.Instance = c.proj, zone, "vm-1"
		return c.inst.GetGuestAttributes(c.ctx, req)
	}
	if _, err := get(&computepb.GetGuestAttributesInstanceRequest{QueryPath: proto.String("runnerfleet/")}); httpCode(err) != 404 {
		t.Errorf("nothing written: %v, want 404", err)
	}
	c.srv.SetGuestAttribute(zone, "vm-1", "runnerfleet/drain-phase", "draining")
	c.srv.SetGuestAttribute(zone, "vm-1", "runnerfleet/drain-jobs-left", "2")
	c.srv.SetGuestAttribute(zone, "vm-1", "hostkeys/ssh-rsa", "AAAA")
	ga, err := get(&computepb.GetGuestAttributesInstanceRequest{QueryPath: proto.String("runnerfleet/")})
	if err != nil {
		t.Fatal(err)
	}
	var items []string
	for _, e := range ga.GetQueryValue().GetItems() {
		items = append(items, e.GetNamespace()+"/"+e.GetKey()+"="+e.GetValue())
	}
	if strings.Join(items, ",") != "runnerfleet/drain-jobs-left=2,runnerfleet/drain-phase=draining" || ga.GetQueryPath() != "runnerfleet/" {
		t.Errorf("query runnerfleet/ = %v (path %q)", items, ga.GetQueryPath())
	}
	one, err := get(&computepb.GetGuestAttributesInstanceRequest{VariableKey: proto.String("runnerfleet/drain-phase")})
	if err != nil || one.GetVariableValue() != "draining" {
		t.Errorf("variableKey = %v, %v", one.GetVariableValue(), err)
	}
	if err := c.srv.SetGuestAttribute(zone, "nope", "a/b", "c"); err == nil {
		t.Error("SetGuestAttribute on a missing instance: want an error")
	}
}

func TestFaultInjection(t *testing.T) {
	c := newClients(t)
	c.srv.AddInstance(gcetest.Instance{Name: "vm-1", Zone: zone})
	get := func() error {
		_, err := c.inst.Get(c.ctx, &computepb.GetInstanceRequest{Project: c.proj, Zone: zone, Instance: "vm-1"})
		return err
	}
	t.Run("FailNext fails that many matching calls, other methods pass", func(t *testing.T) {
		c.srv.FailNext("DELETE", "/zones/*/instances/*", 500, 2)
		if err := get(); err != nil {
			t.Fatalf("a GET matched a DELETE fault: %v", err)
		}
		for i := 0; i < 2; i++ {
			_, err := c.inst.Delete(c.ctx, &computepb.DeleteInstanceRequest{Project: c.proj, Zone: zone, Instance: "vm-1"})
			if httpCode(err) != 500 {
				t.Errorf("delete %d: %v, want 500", i, err)
			}
		}
		if c.srv.PendingFaults() != 0 {
			t.Errorf("%d faults left", c.srv.PendingFaults())
		}
	})
	t.Run("the SDK retries a 503 on an idempotent GET by itself", func(t *testing.T) {
		before := len(c.srv.Calls("GET", "/zones/*/instances/vm-1"))
		c.srv.FailNext("GET", "/zones/*/instances/vm-1", 503, 1)
		if err := get(); err != nil {
			t.Fatal(err)
		}
		if n := len(c.srv.Calls("GET", "/zones/*/instances/vm-1")) - before; n != 2 {
			t.Errorf("%d calls, want the failed one and a retry", n)
		}
	})
	t.Run("DelayNext holds the call", func(t *testing.T) {
		c.srv.DelayNext("GET", "", 150*time.Millisecond, 1)
		start := time.Now()
		if err := get(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Errorf("took %v, want >= 150ms", d)
		}
	})
	t.Run("DropNext closes the connection", func(t *testing.T) {
		c.srv.DropNext("POST", "/zones/*/instances/*/setMetadata", 1)
		_, err := c.inst.SetMetadata(c.ctx, &computepb.SetMetadataInstanceRequest{
			Project: c.proj, Zone: zone, Instance: "vm-1", MetadataResource: &computepb.Metadata{},
		})
		if err == nil || httpCode(err) != 0 {
			t.Errorf("setMetadata: %v, want a connection error", err)
		}
	})
	t.Run("requests for another project are not found", func(t *testing.T) {
		_, err := c.inst.Get(c.ctx, &computepb.GetInstanceRequest{Project: "other", Zone: zone, Instance: "vm-1"})
		if httpCode(err) != 404 {
			t.Errorf("%v, want 404", err)
		}
	})
}
