package gcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
)

var (
	_ providers.Compute = (*gcp.Compute)(nil)
	_ providers.Self    = (*gcp.Self)(nil)
)

const (
	zoneB = "us-east1-b"
	zoneC = "us-east1-c"
	zoneD = "us-east1-d" // not covered by the Compute under test
)

func newCompute(t *testing.T, opts ...gcetest.Option) (*gcp.Compute, *gcetest.Server) {
	t.Helper()
	srv := gcetest.New(opts...)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := gcp.New(ctx, srv.Project(), []string{zoneB, zoneC}, srv.ClientOptions()...)
	if err != nil {
		t.Fatalf("gcp.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, srv
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func managerSpec(name, zone string) providers.InstanceSpec {
	return providers.InstanceSpec{
		Name:        name,
		Zone:        zone,
		MachineType: "n2d-standard-4",
		Image:       "runner-2024-06-01",
		Labels:      map[string]string{"role": "manager", "fleet": "blue"},
		Metadata:    map[string]string{"startup-script": "#!/bin/sh\necho hi\n"},
		Spot:        true,
	}
}

// The whole life of a manager VM: created as an internal-only Spot VM,
// found by label, asked to drain, its agent wakes and reports, the report
// is read back, and it is deleted (twice: the second finds nothing).
func TestManagerVMLifecycleFromCreateThroughDrainToDelete(t *testing.T) {
	ctx := testCtx(t)
	c, srv := newCompute(t)
	srv.AddImage(gcetest.Image{Name: "runner-2024-06-01", Family: "runner"})

	created, err := c.CreateInstance(ctx, managerSpec("wsrm-3", zoneB))
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	if created.Name != "wsrm-3" || created.Zone != zoneB || created.ID == "" || created.ID == "0" {
		t.Errorf("created = %+v, want wsrm-3 in %s with an ID", created, zoneB)
	}
	if created.State != providers.StateRunning {
		t.Errorf("created.State = %q, want running once the operation is DONE", created.State)
	}
	if created.Image != "runner-2024-06-01" {
		t.Errorf("created.Image = %q, want runner-2024-06-01", created.Image)
	}
	if created.CreatedAt.IsZero() || time.Since(created.CreatedAt) > time.Minute {
		t.Errorf("created.CreatedAt = %v, want about now", created.CreatedAt)
	}

	got, ok := srv.Instance(zoneB, "wsrm-3")
	if !ok {
		t.Fatal("the fake has no instance wsrm-3")
	}
	if got.ExternalIP || got.InternalIP == "" {
		t.Errorf("external IP %v, internal IP %q: want an internal IP only", got.ExternalIP, got.InternalIP)
	}
	if !strings.HasSuffix(got.Network, "/global/networks/default") {
		t.Errorf("network = %q, want the default network", got.Network)
	}
	if got.ProvisioningModel != "SPOT" || got.TerminationAction != "DELETE" {
		t.Errorf("scheduling = %s/%s, want SPOT/DELETE", got.ProvisioningModel, got.TerminationAction)
	}
	if got.MachineType != "n2d-standard-4" {
		t.Errorf("machine type = %q", got.MachineType)
	}
	if got.SourceImage != "projects/"+srv.Project()+"/global/images/runner-2024-06-01" {
		t.Errorf("source image = %q", got.SourceImage)
	}
	if !reflect.DeepEqual(got.Labels, map[string]string{"role": "manager", "fleet": "blue"}) {
		t.Errorf("labels = %v", got.Labels)
	}
	if got.Metadata["startup-script"] != "#!/bin/sh\necho hi\n" || got.Metadata[gcp.GuestAttributesKey] != "TRUE" {
		t.Errorf("metadata = %v, want the startup-script and enable-guest-attributes=TRUE", got.Metadata)
	}

	// The insert request on the wire: a machine type URL, no access config.
	inserts := srv.Calls("POST", "/zones/*/instances")
	if len(inserts) != 1 {
		t.Fatalf("%d insert calls, want 1", len(inserts))
	}
	var body struct {
		MachineType       string `json:"machineType"`
		NetworkInterfaces []map[string]any
		Scheduling        map[string]any
	}
	if err := json.Unmarshal(inserts[0].Body, &body); err != nil {
		t.Fatalf("insert body: %v", err)
	}
	if body.MachineType != "zones/us-east1-b/machineTypes/n2d-standard-4" {
		t.Errorf("insert machineType = %q", body.MachineType)
	}
	if len(body.NetworkInterfaces) != 1 || body.NetworkInterfaces[0]["accessConfigs"] != nil {
		t.Errorf("insert networkInterfaces = %v, want one without accessConfigs", body.NetworkInterfaces)
	}
	if body.Scheduling["automaticRestart"] != false || body.Scheduling["onHostMaintenance"] != "TERMINATE" {
		t.Errorf("insert scheduling = %v, want automaticRestart false and TERMINATE for Spot", body.Scheduling)
	}
	if inserts[0].Query.Get("requestId") == "" {
		t.Error("insert without requestId")
	}

	// Neighbours: another role, and a manager in a zone not covered.
	srv.AddInstance(gcetest.Instance{Name: "runner-1", Zone: zoneB, Labels: map[string]string{"role": "runner", "fleet": "blue"}})
	srv.AddInstance(gcetest.Instance{Name: "wsrm-9", Zone: zoneD, Labels: map[string]string{"role": "manager", "fleet": "blue"}})

	list, err := c.ListInstances(ctx, map[string]string{"role": "manager"})
	if err != nil {
		t.Fatalf("ListInstances: %v", err)
	}
	if len(list) != 1 || list[0].Name != "wsrm-3" || list[0].ID != created.ID {
		t.Fatalf("ListInstances(role=manager) = %+v, want just wsrm-3", list)
	}

	// The drain agent on wsrm-3.
	md := srv.MetadataServerFor(zoneB, "wsrm-3")
	self := &gcp.Self{BaseURL: md.BaseURL(), HTTPClient: md.Client(), WaitTimeout: 5 * time.Second}
	woke := make(chan error, 1)
	go func() { woke <- self.WaitDrainRequest(ctx) }()
	waitFor(t, "the agent to long-poll", func() bool { return md.Waiters() == 1 })
	select {
	case err := <-woke:
		t.Fatalf("WaitDrainRequest returned %v before any drain request", err)
	default:
	}

	st, err := c.DrainState(ctx, zoneB, "wsrm-3")
	if err != nil || st.Phase != providers.DrainNone {
		t.Fatalf("DrainState before any report = %+v, %v; want DrainNone", st, err)
	}

	if err := c.RequestDrain(ctx, zoneB, "wsrm-3"); err != nil {
		t.Fatalf("RequestDrain: %v", err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("WaitDrainRequest: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the agent did not wake up after RequestDrain")
	}
	got, _ = srv.Instance(zoneB, "wsrm-3")
	if got.Metadata[providers.GCEDrainKey] != "true" || got.Metadata["startup-script"] == "" {
		t.Errorf("metadata after RequestDrain = %v, want drain=true and the other items kept", got.Metadata)
	}

	reportedAt := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	if err := self.Report(ctx, providers.DrainState{Phase: providers.DrainDraining, JobsLeft: 3, UpdatedAt: reportedAt}); err != nil {
		t.Fatalf("Report(draining): %v", err)
	}
	st, err = c.DrainState(ctx, zoneB, "wsrm-3")
	if err != nil {
		t.Fatalf("DrainState: %v", err)
	}
	if want := (providers.DrainState{Phase: providers.DrainDraining, JobsLeft: 3, UpdatedAt: reportedAt}); !st.UpdatedAt.Equal(want.UpdatedAt) || st.Phase != want.Phase || st.JobsLeft != want.JobsLeft {
		t.Errorf("DrainState = %+v, want %+v", st, want)
	}

	if err := self.Report(ctx, providers.DrainState{Phase: providers.DrainDone}); err != nil {
		t.Fatalf("Report(done): %v", err)
	}
	st, err = c.DrainState(ctx, zoneB, "wsrm-3")
	if err != nil || st.Phase != providers.DrainDone || st.JobsLeft != 0 || st.UpdatedAt.Before(reportedAt) {
		t.Errorf("DrainState after done = %+v, %v", st, err)
	}

	if err := c.DeleteInstance(ctx, zoneB, "wsrm-3"); err != nil {
		t.Fatalf("DeleteInstance: %v", err)
	}
	if _, ok := srv.Instance(zoneB, "wsrm-3"); ok {
		t.Error("wsrm-3 still exists after DeleteInstance returned")
	}
	if err := c.DeleteInstance(ctx, zoneB, "wsrm-3"); err != nil {
		t.Errorf("DeleteInstance of a deleted instance: %v, want nil", err)
	}
	if _, err := c.DrainState(ctx, zoneB, "wsrm-3"); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("DrainState of a deleted instance: %v, want ErrNotFound", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func names(in []providers.Instance) []string {
	var out []string
	for _, i := range in {
		out = append(out, i.Zone+"/"+i.Name)
	}
	return out
}

func TestListInstances(t *testing.T) {
	seed := func(srv *gcetest.Server) {
		srv.AddInstance(gcetest.Instance{Name: "wsrm-1", Zone: zoneB, Labels: map[string]string{"role": "manager", "fleet": "blue"}})
		srv.AddInstance(gcetest.Instance{Name: "wsrm-2", Zone: zoneC, Labels: map[string]string{"role": "manager", "fleet": "green"}, Status: gcetest.StatusStopping})
		srv.AddInstance(gcetest.Instance{Name: "wsrm-3", Zone: zoneD, Labels: map[string]string{"role": "manager", "fleet": "blue"}})
		srv.AddInstance(gcetest.Instance{Name: "runner-1", Zone: zoneB, Labels: map[string]string{"role": "runner", "fleet": "blue"}})
		srv.AddInstance(gcetest.Instance{Name: "bare", Zone: zoneC})
	}
	tests := []struct {
		name       string
		opts       []gcetest.Option
		labels     map[string]string
		want       []string
		wantFilter string
	}{
		{
			name:       "one label matches across covered zones only",
			labels:     map[string]string{"role": "manager"},
			want:       []string{"us-east1-b/wsrm-1", "us-east1-c/wsrm-2"},
			wantFilter: `(labels.role = "manager")`,
		},
		{
			name:       "all labels must match",
			labels:     map[string]string{"role": "manager", "fleet": "blue"},
			want:       []string{"us-east1-b/wsrm-1"},
			wantFilter: `(labels.fleet = "blue") (labels.role = "manager")`,
		},
		{
			name:   "no labels lists every instance in the covered zones",
			labels: nil,
			want:   []string{"us-east1-b/runner-1", "us-east1-b/wsrm-1", "us-east1-c/bare", "us-east1-c/wsrm-2"},
		},
		{
			name:   "a label nobody has matches nothing",
			labels: map[string]string{"role": "ghost"},
			want:   nil,
		},
		{
			name:   "pages of one are all read",
			opts:   []gcetest.Option{gcetest.WithPageSize(1)},
			labels: map[string]string{"fleet": "blue"},
			want:   []string{"us-east1-b/runner-1", "us-east1-b/wsrm-1"},
		},
		{
			name:   "labels are checked again when the server ignores the filter",
			opts:   []gcetest.Option{gcetest.WithFiltersIgnored()},
			labels: map[string]string{"role": "manager", "fleet": "green"},
			want:   []string{"us-east1-c/wsrm-2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, srv := newCompute(t, tt.opts...)
			seed(srv)
			got, err := c.ListInstances(ctx, tt.labels)
			if err != nil {
				t.Fatalf("ListInstances: %v", err)
			}
			if !reflect.DeepEqual(names(got), tt.want) {
				t.Errorf("ListInstances(%v) = %v, want %v", tt.labels, names(got), tt.want)
			}
			calls := srv.Calls("GET", "/aggregated/instances")
			if len(calls) == 0 {
				t.Fatal("no aggregatedList call")
			}
			if f := calls[0].Query.Get("filter"); tt.wantFilter != "" && f != tt.wantFilter {
				t.Errorf("filter = %q, want %q", f, tt.wantFilter)
			}
		})
	}
}

func TestListInstancesMapsStatusesAndFields(t *testing.T) {
	ctx := testCtx(t)
	c, srv := newCompute(t)
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	for i, st := range []struct{ status string }{{"PROVISIONING"}, {"STAGING"}, {"RUNNING"}, {"STOPPING"}, {"TERMINATED"}, {"SUSPENDED"}} {
		srv.AddInstance(gcetest.Instance{
			Name: "vm-" + strings.ToLower(st.status), Zone: zoneB, Status: st.status, ID: "4242" + string(rune('0'+i)),
			CreatedAt: at, Labels: map[string]string{"k": "v"},
			Metadata: map[string]string{gcp.ImageKey: "projects/other/global/images/img-7"},
		})
	}
	got, err := c.ListInstances(ctx, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]providers.State{
		"vm-provisioning": providers.StateProvisioning, "vm-staging": providers.StateProvisioning,
		"vm-running": providers.StateRunning, "vm-stopping": providers.StateStopping,
		"vm-terminated": providers.StateStopped, "vm-suspended": providers.StateStopped,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d instances, want %d", len(got), len(want))
	}
	for _, in := range got {
		if in.State != want[in.Name] {
			t.Errorf("%s: State = %q, want %q", in.Name, in.State, want[in.Name])
		}
		if !in.CreatedAt.Equal(at) {
			t.Errorf("%s: CreatedAt = %v, want %v", in.Name, in.CreatedAt, at)
		}
		if in.Image != "img-7" || !strings.HasPrefix(in.ID, "4242") || in.Zone != zoneB {
			t.Errorf("%s: Image %q ID %q Zone %q", in.Name, in.Image, in.ID, in.Zone)
		}
	}
}

func TestCreateInstance(t *testing.T) {
	tests := []struct {
		name      string
		spec      func(providers.InstanceSpec) providers.InstanceSpec
		fault     func(srv *gcetest.Server)
		wantErr   []string // substrings
		notFound  bool
		wantExist bool
		check     func(t *testing.T, srv *gcetest.Server)
	}{
		{
			name:      "a standard VM has no Spot scheduling",
			spec:      func(s providers.InstanceSpec) providers.InstanceSpec { s.Spot = false; return s },
			wantExist: true,
			check: func(t *testing.T, srv *gcetest.Server) {
				in, _ := srv.Instance(zoneB, "wsrm-3")
				if in.ProvisioningModel != "STANDARD" || in.TerminationAction != "" {
					t.Errorf("scheduling = %s/%s, want STANDARD and no termination action", in.ProvisioningModel, in.TerminationAction)
				}
			},
		},
		{
			name: "an image family of another project is passed as it is",
			spec: func(s providers.InstanceSpec) providers.InstanceSpec {
				s.Image = "projects/debian-cloud/global/images/family/debian-12"
				return s
			},
			wantExist: true,
			check: func(t *testing.T, srv *gcetest.Server) {
				in, _ := srv.Instance(zoneB, "wsrm-3")
				if in.SourceImage != "projects/debian-cloud/global/images/family/debian-12" {
					t.Errorf("source image = %q", in.SourceImage)
				}
			},
		},
		{
			name: "a 503 on insert is an error naming the instance and zone",
			fault: func(srv *gcetest.Server) {
				srv.FailNext("POST", "/zones/*/instances", http.StatusServiceUnavailable, 1)
			},
			wantErr:  []string{"creating instance wsrm-3 in us-east1-b", "503"},
			notFound: false,
		},
		{
			name: "an operation that ends in an error is an error and leaves no instance",
			fault: func(srv *gcetest.Server) {
				srv.FailNextOperation("POST", "/zones/*/instances", http.StatusServiceUnavailable, 1)
			},
			wantErr: []string{"creating instance wsrm-3 in us-east1-b", "ZONE_RESOURCE_POOL_EXHAUSTED"},
		},
		{
			name:     "an image that does not exist is not found",
			spec:     func(s providers.InstanceSpec) providers.InstanceSpec { s.Image = "no-such-image"; return s },
			wantErr:  []string{"creating instance wsrm-3 in us-east1-b", "no-such-image"},
			notFound: true,
		},
		{
			name: "a name taken is a conflict",
			fault: func(srv *gcetest.Server) {
				srv.AddInstance(gcetest.Instance{Name: "wsrm-3", Zone: zoneB})
			},
			wantErr:   []string{"creating instance wsrm-3 in us-east1-b", "already exists"},
			wantExist: true,
		},
		{
			name:    "a spec without a machine type is refused before any call",
			spec:    func(s providers.InstanceSpec) providers.InstanceSpec { s.MachineType = ""; return s },
			wantErr: []string{"machine type is required"},
		},
		{
			name: "a transient error while waiting for the operation is retried",
			fault: func(srv *gcetest.Server) {
				srv.SetOperationLatency(100 * time.Millisecond)
				srv.FailNext("POST", "/zones/*/operations/*/wait", http.StatusServiceUnavailable, 1)
			},
			wantExist: true,
			check: func(t *testing.T, srv *gcetest.Server) {
				if n := len(srv.Calls("POST", "/zones/*/operations/*/wait")); n < 2 {
					t.Errorf("%d operations.wait calls, want a retry", n)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, srv := newCompute(t)
			srv.AddImage(gcetest.Image{Name: "runner-2024-06-01", Family: "runner"})
			if tt.fault != nil {
				tt.fault(srv)
			}
			spec := managerSpec("wsrm-3", zoneB)
			if tt.spec != nil {
				spec = tt.spec(spec)
			}
			_, err := c.CreateInstance(ctx, spec)
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("CreateInstance: %v", err)
			}
			for _, sub := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), sub) {
					t.Errorf("CreateInstance error = %v, want it to contain %q", err, sub)
				}
			}
			if got := errors.Is(err, providers.ErrNotFound); got != tt.notFound {
				t.Errorf("errors.Is(err, ErrNotFound) = %v, want %v (err %v)", got, tt.notFound, err)
			}
			if _, ok := srv.Instance(zoneB, "wsrm-3"); ok != tt.wantExist {
				t.Errorf("instance exists = %v, want %v", ok, tt.wantExist)
			}
			if tt.check != nil {
				tt.check(t, srv)
			}
		})
	}
}

func TestDeleteInstance(t *testing.T) {
	tests := []struct {
		name      string
		exists    bool
		fault     func(srv *gcetest.Server)
		wantErr   []string
		wantExist bool
	}{
		{name: "an existing instance is gone when it returns", exists: true},
		{name: "an instance that does not exist counts as deleted", exists: false},
		{
			name:      "a 503 is an error naming the instance and zone",
			exists:    true,
			fault:     func(srv *gcetest.Server) { srv.FailNext("DELETE", "/zones/*/instances/*", 503, 1) },
			wantErr:   []string{"deleting instance wsrm-3 in us-east1-b", "503"},
			wantExist: true,
		},
		{
			name:      "a failed operation is an error",
			exists:    true,
			fault:     func(srv *gcetest.Server) { srv.FailNextOperation("DELETE", "/zones/*/instances/*", 500, 1) },
			wantErr:   []string{"deleting instance wsrm-3 in us-east1-b"},
			wantExist: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, srv := newCompute(t)
			if tt.exists {
				srv.AddInstance(gcetest.Instance{Name: "wsrm-3", Zone: zoneB})
			}
			if tt.fault != nil {
				tt.fault(srv)
			}
			err := c.DeleteInstance(ctx, zoneB, "wsrm-3")
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("DeleteInstance: %v", err)
			}
			for _, sub := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), sub) {
					t.Errorf("DeleteInstance error = %v, want it to contain %q", err, sub)
				}
			}
			if _, ok := srv.Instance(zoneB, "wsrm-3"); ok != tt.wantExist {
				t.Errorf("instance exists = %v, want %v", ok, tt.wantExist)
			}
		})
	}
}

func TestDeleteInstanceWaitsWhileTheVMIsStopping(t *testing.T) {
	ctx := testCtx(t)
	c, srv := newCompute(t, gcetest.WithOperationLatency(500*time.Millisecond))
	srv.AddInstance(gcetest.Instance{Name: "wsrm-3", Zone: zoneB})
	done := make(chan error, 1)
	go func() { done <- c.DeleteInstance(ctx, zoneB, "wsrm-3") }()
	waitFor(t, "STOPPING", func() bool {
		in, ok := srv.Instance(zoneB, "wsrm-3")
		return ok && in.Status == gcetest.StatusStopping
	})
	select {
	case err := <-done:
		t.Fatalf("DeleteInstance returned (%v) while the instance was still STOPPING", err)
	default:
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.Instance(zoneB, "wsrm-3"); ok {
		t.Error("instance still there")
	}
}

func TestRequestDrain(t *testing.T) {
	const other = "other-writer"
	tests := []struct {
		name         string
		metadata     map[string]string
		missing      bool
		fault        func(srv *gcetest.Server)
		wantErr      []string
		notFound     bool
		wantSets     int
		wantMetadata map[string]string
	}{
		{
			name:         "the drain key is added and the other items kept",
			metadata:     map[string]string{"startup-script": "x", "a": "1"},
			wantSets:     1,
			wantMetadata: map[string]string{"startup-script": "x", "a": "1", providers.GCEDrainKey: "true"},
		},
		{
			name:         "a drain key set to false is turned true",
			metadata:     map[string]string{providers.GCEDrainKey: "false"},
			wantSets:     1,
			wantMetadata: map[string]string{providers.GCEDrainKey: "true"},
		},
		{
			name:         "an instance already asked to drain is left alone",
			metadata:     map[string]string{providers.GCEDrainKey: "true"},
			wantSets:     0,
			wantMetadata: map[string]string{providers.GCEDrainKey: "true"},
		},
		{
			name:     "a concurrent writer's fingerprint conflict is retried once and its item kept",
			metadata: map[string]string{"a": "1"},
			fault: func(srv *gcetest.Server) {
				srv.BeforeNext("POST", "/zones/*/instances/*/setMetadata", 1, func() {
					srv.SetMetadataItem(zoneB, "wsrm-3", other, "was-here")
				})
			},
			wantSets:     2,
			wantMetadata: map[string]string{"a": "1", other: "was-here", providers.GCEDrainKey: "true"},
		},
		{
			name:     "an injected 412 is retried once",
			metadata: map[string]string{"a": "1"},
			fault: func(srv *gcetest.Server) {
				srv.FailNext("POST", "/zones/*/instances/*/setMetadata", http.StatusPreconditionFailed, 1)
			},
			wantSets:     2,
			wantMetadata: map[string]string{"a": "1", providers.GCEDrainKey: "true"},
		},
		{
			name:     "two conflicts in a row are an error",
			metadata: map[string]string{"a": "1"},
			fault: func(srv *gcetest.Server) {
				srv.FailNext("POST", "/zones/*/instances/*/setMetadata", http.StatusPreconditionFailed, 2)
			},
			wantErr:      []string{"requesting drain of instance wsrm-3 in us-east1-b", "412"},
			wantSets:     2,
			wantMetadata: map[string]string{"a": "1"},
		},
		{
			name:     "an instance that does not exist is not found",
			missing:  true,
			wantErr:  []string{"requesting drain of instance wsrm-3 in us-east1-b"},
			notFound: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, srv := newCompute(t)
			if !tt.missing {
				srv.AddInstance(gcetest.Instance{Name: "wsrm-3", Zone: zoneB, Metadata: tt.metadata})
			}
			if tt.fault != nil {
				tt.fault(srv)
			}
			err := c.RequestDrain(ctx, zoneB, "wsrm-3")
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("RequestDrain: %v", err)
			}
			for _, sub := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), sub) {
					t.Errorf("RequestDrain error = %v, want it to contain %q", err, sub)
				}
			}
			if got := errors.Is(err, providers.ErrNotFound); got != tt.notFound {
				t.Errorf("errors.Is(err, ErrNotFound) = %v, want %v", got, tt.notFound)
			}
			if n := len(srv.Calls("POST", "/zones/*/instances/*/setMetadata")); n != tt.wantSets {
				t.Errorf("%d setMetadata calls, want %d", n, tt.wantSets)
			}
			if tt.missing {
				return
			}
			in, _ := srv.Instance(zoneB, "wsrm-3")
			if !reflect.DeepEqual(in.Metadata, tt.wantMetadata) {
				t.Errorf("metadata = %v, want %v", in.Metadata, tt.wantMetadata)
			}
		})
	}
}

func TestDrainState(t *testing.T) {
	updated := time.Date(2024, 6, 1, 12, 30, 0, 0, time.UTC)
	tests := []struct {
		name     string
		missing  bool
		guest    map[string]string
		want     providers.DrainState
		notFound bool
	}{
		{name: "no report yet is DrainNone", want: providers.DrainState{Phase: providers.DrainNone}},
		{
			name: "a draining report with jobs left",
			guest: map[string]string{
				"runnerfleet/drain-phase": "draining", "runnerfleet/drain-jobs-left": "3",
				"runnerfleet/drain-updated-at": updated.Format(time.RFC3339),
			},
			want: providers.DrainState{Phase: providers.DrainDraining, JobsLeft: 3, UpdatedAt: updated},
		},
		{
			name:  "a done report",
			guest: map[string]string{"runnerfleet/drain-phase": "done", "runnerfleet/drain-jobs-left": "0"},
			want:  providers.DrainState{Phase: providers.DrainDone},
		},
		{
			name:  "attributes of other namespaces are not the drain state",
			guest: map[string]string{"hostkeys/ssh-ed25519": "AAAA", "other/drain-phase": "done"},
			want:  providers.DrainState{Phase: providers.DrainNone},
		},
		{
			name:  "a malformed count reads as zero and keeps the phase",
			guest: map[string]string{"runnerfleet/drain-phase": "draining", "runnerfleet/drain-jobs-left": "many"},
			want:  providers.DrainState{Phase: providers.DrainDraining},
		},
		{name: "an instance that does not exist is not found", missing: true, notFound: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, srv := newCompute(t)
			if !tt.missing {
				srv.AddInstance(gcetest.Instance{Name: "wsrm-3", Zone: zoneB, Metadata: map[string]string{"enable-guest-attributes": "TRUE"}})
			}
			for k, v := range tt.guest {
				if err := srv.SetGuestAttribute(zoneB, "wsrm-3", k, v); err != nil {
					t.Fatal(err)
				}
			}
			got, err := c.DrainState(ctx, zoneB, "wsrm-3")
			if tt.notFound {
				if !errors.Is(err, providers.ErrNotFound) || !strings.Contains(err.Error(), "wsrm-3 in us-east1-b") {
					t.Errorf("DrainState error = %v, want ErrNotFound naming the instance", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DrainState: %v", err)
			}
			if got.Phase != tt.want.Phase || got.JobsLeft != tt.want.JobsLeft || !got.UpdatedAt.Equal(tt.want.UpdatedAt) {
				t.Errorf("DrainState = %+v, want %+v", got, tt.want)
			}
			if calls := srv.Calls("GET", "/zones/*/instances/*/getGuestAttributes"); len(calls) == 0 || calls[0].Query.Get("queryPath") != "runnerfleet/" {
				t.Errorf("getGuestAttributes calls %v, want queryPath runnerfleet/", calls)
			}
		})
	}
}

func TestListImages(t *testing.T) {
	base := time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)
	seed := func(srv *gcetest.Server) {
		// Names sort opposite to age, so name order is not newest first.
		srv.AddImage(gcetest.Image{Name: "runner-a", Family: "runner", CreatedAt: base.Add(3 * time.Hour)})
		srv.AddImage(gcetest.Image{Name: "runner-b", Family: "runner", CreatedAt: base.Add(1 * time.Hour), Deprecated: "DEPRECATED"})
		srv.AddImage(gcetest.Image{Name: "runner-c", Family: "runner", CreatedAt: base.Add(2 * time.Hour), Labels: map[string]string{"git": "abc123"}})
		srv.AddImage(gcetest.Image{Name: "builder-z", Family: "builder", CreatedAt: base.Add(5 * time.Hour)})
	}
	tests := []struct {
		name   string
		opts   []gcetest.Option
		family string
		want   []string
	}{
		{name: "a family newest first", family: "runner", want: []string{"runner-a", "runner-c", "runner-b"}},
		{name: "another family", family: "builder", want: []string{"builder-z"}},
		{name: "an unknown family is empty", family: "nope", want: nil},
		{name: "pages of one are all read", opts: []gcetest.Option{gcetest.WithPageSize(1)}, family: "runner", want: []string{"runner-a", "runner-c", "runner-b"}},
		{name: "the family is checked again when the server ignores the filter", opts: []gcetest.Option{gcetest.WithFiltersIgnored()}, family: "builder", want: []string{"builder-z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, srv := newCompute(t, tt.opts...)
			seed(srv)
			got, err := c.ListImages(ctx, tt.family)
			if err != nil {
				t.Fatalf("ListImages: %v", err)
			}
			var gotNames []string
			for _, im := range got {
				gotNames = append(gotNames, im.Name)
				if im.Family != tt.family || im.ID == "" || im.CreatedAt.IsZero() {
					t.Errorf("image %+v: want family %s, an ID and a creation time", im, tt.family)
				}
			}
			if !reflect.DeepEqual(gotNames, tt.want) {
				t.Errorf("ListImages(%s) = %v, want %v", tt.family, gotNames, tt.want)
			}
			call := srv.Calls("GET", "/global/images")[0]
			if f := call.Query.Get("filter"); f != `family = "`+tt.family+`"` {
				t.Errorf("filter = %q", f)
			}
			if o := call.Query.Get("orderBy"); o != "" {
				t.Errorf("orderBy = %q sent with a filter; the API refuses both", o)
			}
		})
	}
	t.Run("labels come back", func(t *testing.T) {
		c, srv := newCompute(t)
		seed(srv)
		got, err := c.ListImages(testCtx(t), "runner")
		if err != nil {
			t.Fatal(err)
		}
		if got[1].Labels["git"] != "abc123" {
			t.Errorf("labels = %v", got[1].Labels)
		}
	})
}

func TestDeleteImage(t *testing.T) {
	tests := []struct {
		name      string
		exists    bool
		fault     func(srv *gcetest.Server)
		wantErr   []string
		wantExist bool
	}{
		{name: "an existing image is gone when it returns", exists: true},
		{name: "an image that does not exist counts as deleted"},
		{
			name:      "a 503 is an error naming the image",
			exists:    true,
			fault:     func(srv *gcetest.Server) { srv.FailNext("DELETE", "/global/images/*", 503, 1) },
			wantErr:   []string{"deleting image runner-old", "503"},
			wantExist: true,
		},
		{
			name:      "a failed global operation is an error",
			exists:    true,
			fault:     func(srv *gcetest.Server) { srv.FailNextOperation("DELETE", "/global/images/*", 400, 1) },
			wantErr:   []string{"deleting image runner-old"},
			wantExist: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, srv := newCompute(t, gcetest.WithOperationLatency(60*time.Millisecond))
			if tt.exists {
				srv.AddImage(gcetest.Image{Name: "runner-old", Family: "runner"})
			}
			if tt.fault != nil {
				tt.fault(srv)
			}
			err := c.DeleteImage(ctx, "runner-old")
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("DeleteImage: %v", err)
			}
			for _, sub := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), sub) {
					t.Errorf("DeleteImage error = %v, want it to contain %q", err, sub)
				}
			}
			exists := len(srv.Images()) == 1
			if exists != tt.wantExist {
				t.Errorf("image exists = %v, want %v", exists, tt.wantExist)
			}
			if tt.exists && len(tt.wantErr) == 0 && len(srv.Calls("POST", "/global/operations/*/wait")) == 0 {
				t.Error("DeleteImage did not wait for the global operation")
			}
		})
	}
}

func TestNewRequiresAProject(t *testing.T) {
	if _, err := gcp.New(context.Background(), "", nil); err == nil {
		t.Fatal("New with no project: want an error")
	}
}

// The SDK's paged list calls do not put the context on their HTTP
// requests; the lists still return when the context ends.
func TestListsReturnWhenTheContextEndsDuringAHungPage(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		list    func(ctx context.Context, c *gcp.Compute) error
	}{
		{"ListInstances", "/aggregated/instances", func(ctx context.Context, c *gcp.Compute) error {
			_, err := c.ListInstances(ctx, map[string]string{"role": "manager"})
			return err
		}},
		{"ListImages", "/global/images", func(ctx context.Context, c *gcp.Compute) error {
			_, err := c.ListImages(ctx, "runner")
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newCompute(t)
			srv.DelayNext("GET", tt.pattern, 1500*time.Millisecond, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := tt.list(ctx, c)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want context.DeadlineExceeded", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("returned after %v, want about 200ms", d)
			}
			// Close waits for the abandoned page rather than close the
			// client under it.
			start = time.Now()
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if d := time.Since(start); d < 500*time.Millisecond {
				t.Errorf("Close returned after %v, before the abandoned page", d)
			}
		})
	}
}
