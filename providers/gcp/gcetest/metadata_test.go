package gcetest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
)

type mdResp struct {
	code  int
	etag  string
	body  string
	took  time.Duration
	err   error
	token string
}

func mdDo(t *testing.T, md *gcetest.MetadataServer, method, path string, body string, flavor bool) mdResp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, md.BaseURL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if flavor {
		req.Header.Set("Metadata-Flavor", "Google")
	}
	start := time.Now()
	resp, err := md.Client().Do(req)
	if err != nil {
		return mdResp{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Metadata-Flavor") != "Google" {
		t.Errorf("%s %s: answer without Metadata-Flavor: Google", method, path)
	}
	return mdResp{code: resp.StatusCode, etag: resp.Header.Get("ETag"), body: string(b), took: time.Since(start)}
}

func or(p *string, def string) *string {
	if p == nil {
		return &def
	}
	return p
}

func TestMetadataServerNeedsTheFlavorHeader(t *testing.T) {
	md := gcetest.NewMetadataServer()
	defer md.Close()
	if r := mdDo(t, md, "GET", "/instance/attributes/enable-guest-attributes", "", false); r.code != http.StatusForbidden {
		t.Errorf("without the header: %d, want 403", r.code)
	}
	if r := mdDo(t, md, "GET", "/instance/attributes/enable-guest-attributes", "", true); r.code != 200 || r.body != "TRUE" {
		t.Errorf("with the header: %d %q", r.code, r.body)
	}
}

func TestMetadataServerWaitForChange(t *testing.T) {
	const path = "/instance/attributes/drain"
	tests := []struct {
		name    string
		initial *string
		query   func(etag string) string
		change  func(md *gcetest.MetadataServer)
		want    int
		wantVal string
		minTook time.Duration
		maxTook time.Duration
	}{
		{
			name:    "blocks until the value changes",
			initial: proto.String("false"),
			query:   func(e string) string { return "?wait_for_change=true&last_etag=" + e },
			change:  func(md *gcetest.MetadataServer) { md.SetAttribute("drain", "true") },
			want:    200, wantVal: "true", minTook: 100 * time.Millisecond,
		},
		{
			name:   "blocks on an absent key until it appears",
			query:  func(e string) string { return "?wait_for_change=true&last_etag=" + e },
			change: func(md *gcetest.MetadataServer) { md.SetAttribute("drain", "true") },
			want:   200, wantVal: "true", minTook: 100 * time.Millisecond,
		},
		{
			name:    "answers 404 when the key it waits on goes away",
			initial: proto.String("x"),
			query:   func(e string) string { return "?wait_for_change=true&last_etag=" + e },
			change:  func(md *gcetest.MetadataServer) { md.DeleteAttribute("drain") },
			want:    404, minTook: 100 * time.Millisecond,
		},
		{
			name:    "ignores changes to other keys",
			initial: proto.String("false"),
			query:   func(e string) string { return "?wait_for_change=true&timeout_sec=1&last_etag=" + e },
			change:  func(md *gcetest.MetadataServer) { md.SetAttribute("other", "1") },
			want:    200, wantVal: "false", minTook: 900 * time.Millisecond,
		},
		{
			name:    "answers at once when last_etag is not the current one",
			initial: proto.String("true"),
			query:   func(string) string { return "?wait_for_change=true&last_etag=0123456789abcdef" },
			want:    200, wantVal: "true", maxTook: 500 * time.Millisecond,
		},
		{
			name:    "answers the unchanged value after timeout_sec",
			initial: proto.String("false"),
			query:   func(e string) string { return "?wait_for_change=true&timeout_sec=1&last_etag=" + e },
			want:    200, wantVal: "false", minTook: 900 * time.Millisecond,
		},
		{
			name:    "without last_etag waits for the next change",
			initial: proto.String("false"),
			query:   func(string) string { return "?wait_for_change=true" },
			change:  func(md *gcetest.MetadataServer) { md.SetAttribute("drain", "true") },
			want:    200, wantVal: "true", minTook: 100 * time.Millisecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := gcetest.NewMetadataServer()
			defer md.Close()
			if tt.initial != nil {
				md.SetAttribute("drain", *tt.initial)
			}
			first := mdDo(t, md, "GET", path, "", true)
			if first.etag == "" {
				t.Fatalf("no ETag on %d", first.code)
			}
			if tt.change != nil {
				// Changed only once the request waits: a change before it
				// arrives would make the no-last_etag case wait for the
				// next one.
				go func() {
					for md.Waiters() == 0 {
						time.Sleep(5 * time.Millisecond)
					}
					time.Sleep(150 * time.Millisecond)
					tt.change(md)
				}()
			}
			r := mdDo(t, md, "GET", path+tt.query(first.etag), "", true)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.code != tt.want || (tt.want == 200 && r.body != tt.wantVal) {
				t.Errorf("got %d %q, want %d %q", r.code, r.body, tt.want, tt.wantVal)
			}
			if r.took < tt.minTook || (tt.maxTook > 0 && r.took > tt.maxTook) {
				t.Errorf("took %v, want between %v and %v", r.took, tt.minTook, tt.maxTook)
			}
			if tt.change != nil && tt.wantVal != *or(tt.initial, "") && r.etag == first.etag {
				t.Errorf("ETag unchanged after a change: %s", r.etag)
			}
		})
	}
}

func TestMetadataServerGuestAttributes(t *testing.T) {
	md := gcetest.NewMetadataServer()
	defer md.Close()
	if r := mdDo(t, md, "PUT", "/instance/guest-attributes/runnerfleet/drain-phase", "draining", true); r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	if r := mdDo(t, md, "GET", "/instance/guest-attributes/runnerfleet/drain-phase", "", true); r.code != 200 || r.body != "draining" {
		t.Errorf("GET: %d %q", r.code, r.body)
	}
	if got := md.GuestAttributes(); got["runnerfleet/drain-phase"] != "draining" || len(got) != 1 {
		t.Errorf("GuestAttributes() = %v", got)
	}
	if r := mdDo(t, md, "PUT", "/instance/guest-attributes/no-key", "x", true); r.code != 400 {
		t.Errorf("PUT without a key: %d, want 400", r.code)
	}
	md.DeleteAttribute("enable-guest-attributes")
	if r := mdDo(t, md, "PUT", "/instance/guest-attributes/runnerfleet/drain-phase", "done", true); r.code != http.StatusForbidden {
		t.Errorf("PUT with guest attributes disabled: %d, want 403", r.code)
	}
}

func TestMetadataServerFaults(t *testing.T) {
	md := gcetest.NewMetadataServer()
	defer md.Close()
	md.FailNext("GET", "/instance/attributes/*", 503, 1)
	if r := mdDo(t, md, "GET", "/instance/attributes/x", "", true); r.code != 503 {
		t.Errorf("FailNext: %d, want 503", r.code)
	}
	// Twice: net/http replays a GET whose reused connection closed
	// before any answer.
	md.DropNext("GET", "/instance/attributes/*", 50*time.Millisecond, 2)
	if r := mdDo(t, md, "GET", "/instance/attributes/x", "", true); r.err == nil {
		t.Errorf("DropNext: got %d, want a connection error", r.code)
	}
	if n := len(md.Calls("GET", "/instance/attributes/x")); n < 2 {
		t.Errorf("Calls = %d", n)
	}
}

// A VM's metadata server linked to an instance of the Compute fake: the
// Compute API's setMetadata wakes the VM's long poll, and the guest
// attributes the VM writes are what getGuestAttributes returns.
func TestMetadataServerForLinksTheVMToItsInstance(t *testing.T) {
	c := newClients(t, gcetest.WithOperationLatency(0))
	if _, err := c.insert(t, "vm-1", nil); err != nil {
		t.Fatal(err)
	}
	if c.srv.MetadataServerFor(zone, "nope") != nil {
		t.Error("a metadata server for a missing instance")
	}
	md := c.srv.MetadataServerFor(zone, "vm-1")
	if md != c.srv.MetadataServerFor(zone, "vm-1") {
		t.Error("MetadataServerFor made a second server for the same VM")
	}
	if r := mdDo(t, md, "GET", "/instance/name", "", true); r.body != "vm-1" {
		t.Errorf("instance/name = %q", r.body)
	}
	first := mdDo(t, md, "GET", "/instance/attributes/runnerfleet-drain", "", true)
	if first.code != 404 {
		t.Fatalf("drain key before: %d", first.code)
	}
	woke := make(chan mdResp, 1)
	go func() {
		woke <- mdDo(t, md, "GET", "/instance/attributes/runnerfleet-drain?wait_for_change=true&last_etag="+first.etag, "", true)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for md.Waiters() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}

	in, err := c.inst.Get(c.ctx, &computepb.GetInstanceRequest{Project: c.proj, Zone: zone, Instance: "vm-1"})
	if err != nil {
		t.Fatal(err)
	}
	items := append(in.GetMetadata().GetItems(), &computepb.Items{Key: proto.String("runnerfleet-drain"), Value: proto.String("true")})
	if _, err := c.inst.SetMetadata(c.ctx, &computepb.SetMetadataInstanceRequest{
		Project: c.proj, Zone: zone, Instance: "vm-1",
		MetadataResource: &computepb.Metadata{Fingerprint: in.GetMetadata().Fingerprint, Items: items},
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-woke:
		if r.code != 200 || r.body != "true" {
			t.Errorf("woke with %d %q", r.code, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("setMetadata did not wake the VM's long poll")
	}

	if r := mdDo(t, md, "PUT", "/instance/guest-attributes/runnerfleet/drain-phase", "done", true); r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	ga, err := c.inst.GetGuestAttributes(c.ctx, &computepb.GetGuestAttributesInstanceRequest{
		Project: c.proj, Zone: zone, Instance: "vm-1", QueryPath: proto.String("runnerfleet/"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if items := ga.GetQueryValue().GetItems(); len(items) != 1 || items[0].GetValue() != "done" {
		t.Errorf("guest attributes via the API = %v", items)
	}

	// And the other way: an attribute set on the VM's side is instance
	// metadata, with a new fingerprint.
	md.SetAttribute("from-vm", "1")
	after := c.srv.InstanceResource(zone, "vm-1").GetMetadata()
	if after.GetFingerprint() == in.GetMetadata().GetFingerprint() {
		t.Error("fingerprint unchanged")
	}
	found := false
	for _, it := range after.GetItems() {
		found = found || (it.GetKey() == "from-vm" && it.GetValue() == "1")
	}
	if !found {
		t.Errorf("metadata = %v, want from-vm=1", after.GetItems())
	}
}
