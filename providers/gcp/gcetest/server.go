// Package gcetest has loopback fakes of what runnerfleet's gcp provider
// talks to: Server, the Compute Engine REST API v1 (instances, images,
// zone and global operations) as cloud.google.com/go/compute/apiv1 calls it,
// and MetadataServer, the metadata server a VM's drain agent long-polls and
// writes guest attributes to. Both keep state, inject faults and are safe for
// concurrent use; Server.MetadataServerFor links a VM's metadata server to an
// instance of the Server, so instances.setMetadata wakes the VM's
// wait-for-change and the guest attributes it writes are what
// instances.getGuestAttributes returns.
package gcetest

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Instance statuses of the Compute API.
const (
	StatusProvisioning = "PROVISIONING"
	StatusStaging      = "STAGING"
	StatusRunning      = "RUNNING"
	StatusStopping     = "STOPPING"
	StatusTerminated   = "TERMINATED"
)

// Instance is an instance of the fake, as tests seed and inspect it.
type Instance struct {
	Name string
	Zone string
	// ID is GCE's numeric id; AddInstance makes one up when empty.
	ID string
	// Status is the Compute API status (RUNNING, PROVISIONING, …);
	// AddInstance defaults it to RUNNING.
	Status string
	// MachineType is the machine type's name (e2-small), not its URL.
	MachineType string
	// SourceImage is the boot disk's initializeParams.sourceImage as sent.
	SourceImage string
	Labels      map[string]string
	// Metadata is the instance metadata (items); MetadataFingerprint its
	// current fingerprint.
	Metadata            map[string]string
	MetadataFingerprint string
	// ProvisioningModel is scheduling.provisioningModel (SPOT, STANDARD);
	// TerminationAction scheduling.instanceTerminationAction.
	ProvisioningModel string
	TerminationAction string
	// Network is the first interface's network URL; InternalIP its
	// networkIP; ExternalIP whether it has any access config.
	Network    string
	InternalIP string
	ExternalIP bool
	CreatedAt  time.Time
}

// Image is an image of the fake.
type Image struct {
	Name   string
	ID     string
	Family string
	Labels map[string]string
	// Status defaults to READY.
	Status string
	// Deprecated is deprecated.state (DEPRECATED, OBSOLETE, DELETED) or "".
	Deprecated string
	CreatedAt  time.Time
}

type instance struct {
	p      *computepb.Instance // everything but status and metadata
	status string
	image  string
	vm     *vm
}

type image struct {
	p *computepb.Image
}

type operation struct {
	p        *computepb.Operation
	zone     string // "" for a global operation
	done     chan struct{}
	effect   func(failed bool)
	failCode int
}

// Option configures a Server.
type Option func(*Server)

// WithProject sets the project the fake serves (default "test-project");
// requests for any other project get 404.
func WithProject(p string) Option { return func(s *Server) { s.project = p } }

// WithOperationLatency sets how long an operation takes from PENDING to
// DONE (RUNNING half way); default 30ms. Zero makes operations DONE in
// the response that starts them.
func WithOperationLatency(d time.Duration) Option { return func(s *Server) { s.opLatency = d } }

// WithPageSize caps list pages (default 500, the API's maximum), to make
// the clients page.
func WithPageSize(n int) Option { return func(s *Server) { s.pageSize = n } }

// WithFiltersIgnored makes list calls ignore their filter parameter and
// return everything, to check that clients verify what they get.
func WithFiltersIgnored() Option { return func(s *Server) { s.ignoreFilters = true } }

// WithWaitTimeout caps operations.wait (default 2 minutes, like the API);
// past it the operation is returned as it is, not DONE.
func WithWaitTimeout(d time.Duration) Option { return func(s *Server) { s.waitTimeout = d } }

// Server is a fake Compute Engine API v1 on 127.0.0.1.
type Server struct {
	srv *httptest.Server
	rec recorder

	mu          sync.Mutex
	project     string
	opLatency   time.Duration
	pageSize    int
	waitTimeout time.Duration
	instances   map[string]*instance // zone/name
	images      map[string]*image
	ops         map[string]*operation
	requestIDs  map[string]*operation
	zones       map[string]bool // zones that ever held an instance
	timers      []*time.Timer
	metadata    map[string]*MetadataServer // zone/name
	nextIP      int
	closed      bool
	regions     map[string][]Quota // regions.get (regions.go)

	ignoreFilters bool
}

// New starts a fake Compute API server.
func New(opts ...Option) *Server {
	s := &Server{
		project:     "test-project",
		opLatency:   30 * time.Millisecond,
		pageSize:    500,
		waitTimeout: 2 * time.Minute,
		instances:   map[string]*instance{},
		images:      map[string]*image{},
		ops:         map[string]*operation{},
		requestIDs:  map[string]*operation{},
		zones:       map[string]bool{},
		metadata:    map[string]*MetadataServer{},
		nextIP:      2,
	}
	for _, o := range opts {
		o(s)
	}
	s.rec.prefix = "/compute/v1/projects/" + s.project
	mux := http.NewServeMux()
	const p = "/compute/v1/projects/{project}"
	mux.HandleFunc("GET "+p+"/aggregated/instances", s.aggregatedInstances)
	mux.HandleFunc("GET "+p+"/zones/{zone}/instances", s.listInstances)
	mux.HandleFunc("POST "+p+"/zones/{zone}/instances", s.insertInstance)
	mux.HandleFunc("GET "+p+"/zones/{zone}/instances/{instance}", s.getInstance)
	mux.HandleFunc("DELETE "+p+"/zones/{zone}/instances/{instance}", s.deleteInstance)
	mux.HandleFunc("POST "+p+"/zones/{zone}/instances/{instance}/setMetadata", s.setMetadata)
	mux.HandleFunc("GET "+p+"/zones/{zone}/instances/{instance}/getGuestAttributes", s.getGuestAttributes)
	mux.HandleFunc("GET "+p+"/zones/{zone}/operations/{operation}", s.getOperation)
	mux.HandleFunc("POST "+p+"/zones/{zone}/operations/{operation}/wait", s.waitOperation)
	mux.HandleFunc("GET "+p+"/global/operations/{operation}", s.getOperation)
	mux.HandleFunc("POST "+p+"/global/operations/{operation}/wait", s.waitOperation)
	mux.HandleFunc("GET "+p+"/global/images", s.listImages)
	mux.HandleFunc("GET "+p+"/global/images/family/{family}", s.imageFromFamily)
	mux.HandleFunc("GET "+p+"/global/images/{image}", s.getImage)
	mux.HandleFunc("DELETE "+p+"/global/images/{image}", s.deleteImage)
	mux.HandleFunc("GET "+p+"/regions/{region}", s.getRegion)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The requested URL %s was not found on this server.", r.URL.Path))
	})
	s.srv = httptest.NewServer(s.intercept(mux))
	return s
}

// URL is the server's base URL, the client's endpoint.
func (s *Server) URL() string { return s.srv.URL }

// Project is the project the server serves.
func (s *Server) Project() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.project
}

// ClientOptions point cloud.google.com/go/compute/apiv1 REST clients at the
// fake: its endpoint, no credentials and the server's HTTP client.
func (s *Server) ClientOptions() []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(s.srv.URL),
		option.WithoutAuthentication(),
		option.WithHTTPClient(s.srv.Client()),
	}
}

// Close stops the server, its pending operations and the metadata servers
// it made.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for _, t := range s.timers {
		t.Stop()
	}
	var mds []*MetadataServer
	for _, m := range s.metadata {
		mds = append(mds, m)
	}
	s.mu.Unlock()
	for _, m := range mds {
		m.Close()
	}
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// SetOperationLatency changes how long operations started from now take.
func (s *Server) SetOperationLatency(d time.Duration) {
	s.mu.Lock()
	s.opLatency = d
	s.mu.Unlock()
}

// FailNext makes the next times requests of method (""/"*" for any) whose
// path matches pathPattern answer status with a Google JSON error.
// pathPattern is a path.Match glob over the whole path or over the path
// after /compute/v1/projects/{project}, e.g. "/zones/*/instances" or
// "/zones/*/instances/*/setMetadata"; "" matches any path.
func (s *Server) FailNext(method, pathPattern string, status, times int) {
	s.rec.add(&fault{kind: faultFail, method: method, pattern: pathPattern, status: status, times: times})
}

// DelayNext holds the next times matching requests for d before serving them.
func (s *Server) DelayNext(method, pathPattern string, d time.Duration, times int) {
	s.rec.add(&fault{kind: faultDelay, method: method, pattern: pathPattern, delay: d, times: times})
}

// DropNext closes the connection of the next times matching requests
// without an answer.
func (s *Server) DropNext(method, pathPattern string, times int) {
	s.rec.add(&fault{kind: faultDrop, method: method, pattern: pathPattern, times: times})
}

// FailNextOperation lets the next times matching requests start their
// operation normally, but the operation ends DONE with an error
// (httpErrorStatusCode status) and its change is not made.
func (s *Server) FailNextOperation(method, pathPattern string, status, times int) {
	s.rec.add(&fault{kind: faultOpFail, method: method, pattern: pathPattern, status: status, times: times})
}

// BeforeNext runs fn before serving the next times matching requests, e.g.
// to change an instance under a client that read its fingerprint.
func (s *Server) BeforeNext(method, pathPattern string, times int, fn func()) {
	s.rec.add(&fault{kind: faultHook, method: method, pattern: pathPattern, times: times, fn: fn})
}

// Calls lists the requests received whose method and path match (same
// pattern rules as FailNext).
func (s *Server) Calls(method, pathPattern string) []Call { return s.rec.matching(method, pathPattern) }

// PendingFaults is how many injected faults have not fired yet.
func (s *Server) PendingFaults() int { return s.rec.pending() }

func (s *Server) intercept(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.rec.record(r)
		for {
			f := s.rec.take(r, faultHook)
			if f == nil {
				break
			}
			f.fn()
		}
		if f := s.rec.take(r, faultDelay); f != nil {
			if !sleepCtx(r, f.delay) {
				return
			}
		}
		if f := s.rec.take(r, faultDrop); f != nil {
			dropConn(w)
			return
		}
		if f := s.rec.take(r, faultFail); f != nil {
			writeError(w, f.status, reasonFor(f.status), fmt.Sprintf("Injected failure: %s", http.StatusText(f.status)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// --- wire helpers ---

var marshal = protojson.MarshalOptions{}
var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

func readBody(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	b, err := io.ReadAll(r.Body)
	if err == nil {
		err = unmarshal.Unmarshal(b, m)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "parseError", "Invalid JSON payload received. "+err.Error())
		return false
	}
	return true
}

func writeProto(w http.ResponseWriter, m proto.Message) {
	b, err := marshal.Marshal(m)
	if err != nil {
		writeError(w, 500, "backendError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// writeError writes the Compute API's JSON error body.
func writeError(w http.ResponseWriter, status int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%d,"message":%s,"errors":[{"message":%s,"domain":"global","reason":%q}]}}`,
		status, strconv.Quote(msg), strconv.Quote(msg), reason)
}

func reasonFor(status int) string {
	switch status {
	case 400:
		return "invalid"
	case 401:
		return "required"
	case 403:
		return "forbidden"
	case 404:
		return "notFound"
	case 409:
		return "alreadyExists"
	case 412:
		return "conditionNotMet"
	case 429:
		return "rateLimitExceeded"
	case 503:
		return "backendError"
	default:
		if status >= 500 {
			return "backendError"
		}
		return "invalid"
	}
}

func notFound(w http.ResponseWriter, resource string) {
	writeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The resource '%s' was not found", resource))
}

func invalid(w http.ResponseWriter, field, value, why string) {
	writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("Invalid value for field '%s': '%s'. %s", field, value, why))
}

// timestamp formats like the API: RFC 3339 with milliseconds and the
// (Pacific) offset, not Z.
func timestamp(t time.Time) string {
	return t.In(pacific).Format("2006-01-02T15:04:05.000-07:00")
}

var pacific = time.FixedZone("PDT", -7*3600)

func lastSegment(u string) string {
	if i := strings.LastIndex(u, "/"); i >= 0 {
		return u[i+1:]
	}
	return u
}

func (s *Server) projectURL() string { return s.srv.URL + "/compute/v1/projects/" + s.project }

func (s *Server) zoneURL(zone string) string { return s.projectURL() + "/zones/" + zone }

// checkProject answers 404 for another project; s.mu must not be held.
func (s *Server) checkProject(w http.ResponseWriter, r *http.Request) bool {
	if p := r.PathValue("project"); p != s.Project() {
		notFound(w, "projects/"+p)
		return false
	}
	return true
}

var zoneRE = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+-[a-z]$`)

func (s *Server) checkZone(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !s.checkProject(w, r) {
		return "", false
	}
	z := r.PathValue("zone")
	if !zoneRE.MatchString(z) {
		invalid(w, "zone", z, "Unknown zone.")
		return "", false
	}
	return z, true
}

func pageToken(off int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("offset:" + strconv.Itoa(off)))
}

// page cuts n items into the page the request asks for.
func (s *Server) page(w http.ResponseWriter, r *http.Request, n int) (start, end int, next string, ok bool) {
	size := s.pageSize
	q := r.URL.Query()
	if v := q.Get("maxResults"); v != "" {
		m, err := strconv.Atoi(v)
		if err != nil || m < 0 || m > 500 {
			invalid(w, "maxResults", v, "Must be between 0 and 500.")
			return 0, 0, "", false
		}
		if m > 0 && m < size {
			size = m
		}
	}
	if t := q.Get("pageToken"); t != "" {
		b, err := base64.RawURLEncoding.DecodeString(t)
		off, err2 := strconv.Atoi(strings.TrimPrefix(string(b), "offset:"))
		if err != nil || err2 != nil || !strings.HasPrefix(string(b), "offset:") || off < 0 {
			invalid(w, "pageToken", t, "Invalid page token.")
			return 0, 0, "", false
		}
		start = off
	}
	if start > n {
		start = n
	}
	end = min(start+size, n)
	if end < n {
		next = pageToken(end)
	}
	return start, end, next, true
}

// listQuery parses filter and orderBy; the API refuses both together.
func (s *Server) listQuery(w http.ResponseWriter, r *http.Request) (filter, string, bool) {
	q := r.URL.Query()
	order := q.Get("orderBy")
	if order != "" && order != "name" && order != "creationTimestamp desc" {
		invalid(w, "orderBy", order, "Only sorting by name or creationTimestamp desc is supported.")
		return nil, "", false
	}
	fs := q.Get("filter")
	if fs != "" && order != "" {
		invalid(w, "orderBy", order, "Specifying both a list filter and sort order is not currently supported.")
		return nil, "", false
	}
	f, err := parseFilter(fs)
	if err != nil {
		invalid(w, "filter", fs, "Invalid list filter expression: "+err.Error())
		return nil, "", false
	}
	s.mu.Lock()
	ignore := s.ignoreFilters
	s.mu.Unlock()
	if ignore {
		f = nil
	}
	return f, order, true
}

// --- instances ---

func (s *Server) renderLocked(in *instance) *computepb.Instance {
	p := proto.CloneOf(in.p)
	p.Status = proto.String(in.status)
	items, fp := in.vm.items()
	md := &computepb.Metadata{Kind: proto.String("compute#metadata"), Fingerprint: proto.String(fp)}
	for _, it := range items {
		md.Items = append(md.Items, &computepb.Items{Key: proto.String(it.key), Value: proto.String(it.value)})
	}
	p.Metadata = md
	return p
}

func (in *instance) lookup(f string) (string, bool) {
	fields := map[string]string{
		"name":                                 in.p.GetName(),
		"id":                                   strconv.FormatUint(in.p.GetId(), 10),
		"status":                               in.status,
		"zone":                                 lastSegment(in.p.GetZone()),
		"machineType":                          lastSegment(in.p.GetMachineType()),
		"scheduling.provisioningModel":         in.p.GetScheduling().GetProvisioningModel(),
		"scheduling.automaticRestart":          strconv.FormatBool(in.p.GetScheduling().GetAutomaticRestart()),
		"scheduling.instanceTerminationAction": in.p.GetScheduling().GetInstanceTerminationAction(),
	}
	return lookupFields(fields, in.p.GetLabels())(f)
}

// sortedInstancesLocked lists the instances of zone ("" for all) that match f,
// by zone then name.
func (s *Server) sortedInstancesLocked(zone string, f filter) []*instance {
	var out []*instance
	for _, in := range s.instances {
		if zone != "" && lastSegment(in.p.GetZone()) != zone {
			continue
		}
		if !f.match(in.lookup) {
			continue
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool {
		zi, zj := lastSegment(out[i].p.GetZone()), lastSegment(out[j].p.GetZone())
		if zi != zj {
			return zi < zj
		}
		return out[i].p.GetName() < out[j].p.GetName()
	})
	return out
}

func sortByOrder[T any](items []T, order string, name func(T) string, created func(T) string) {
	if order == "creationTimestamp desc" {
		sort.SliceStable(items, func(i, j int) bool { return created(items[i]) > created(items[j]) })
		return
	}
	sort.SliceStable(items, func(i, j int) bool { return name(items[i]) < name(items[j]) })
}

func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) {
	zone, ok := s.checkZone(w, r)
	if !ok {
		return
	}
	f, order, ok := s.listQuery(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.sortedInstancesLocked(zone, f)
	sortByOrder(all, order, func(i *instance) string { return i.p.GetName() }, func(i *instance) string { return i.p.GetCreationTimestamp() })
	start, end, next, ok := s.page(w, r, len(all))
	if !ok {
		return
	}
	resp := &computepb.InstanceList{
		Kind:     proto.String("compute#instanceList"),
		Id:       proto.String("projects/" + s.project + "/zones/" + zone + "/instances"),
		SelfLink: proto.String(s.zoneURL(zone) + "/instances"),
	}
	for _, in := range all[start:end] {
		resp.Items = append(resp.Items, s.renderLocked(in))
	}
	if next != "" {
		resp.NextPageToken = proto.String(next)
	}
	writeProto(w, resp)
}

func (s *Server) aggregatedInstances(w http.ResponseWriter, r *http.Request) {
	if !s.checkProject(w, r) {
		return
	}
	f, order, ok := s.listQuery(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.sortedInstancesLocked("", f)
	if order != "" {
		sortByOrder(all, order, func(i *instance) string { return i.p.GetName() }, func(i *instance) string { return i.p.GetCreationTimestamp() })
	}
	start, end, next, ok := s.page(w, r, len(all))
	if !ok {
		return
	}
	resp := &computepb.InstanceAggregatedList{
		Kind:     proto.String("compute#instanceAggregatedList"),
		Id:       proto.String("projects/" + s.project + "/aggregated/instances"),
		SelfLink: proto.String(s.projectURL() + "/aggregated/instances"),
		Items:    map[string]*computepb.InstancesScopedList{},
	}
	for _, in := range all[start:end] {
		key := "zones/" + lastSegment(in.p.GetZone())
		sl := resp.Items[key]
		if sl == nil {
			sl = &computepb.InstancesScopedList{}
			resp.Items[key] = sl
		}
		sl.Instances = append(sl.Instances, s.renderLocked(in))
	}
	// Zones without results on this page come with a warning, like the API's.
	for z := range s.zones {
		key := "zones/" + z
		if _, ok := resp.Items[key]; !ok {
			resp.Items[key] = &computepb.InstancesScopedList{Warning: &computepb.Warning{
				Code:    proto.String("NO_RESULTS_ON_PAGE"),
				Message: proto.String("There are no results for scope '" + key + "' on this page."),
				Data:    []*computepb.Data{{Key: proto.String("scope"), Value: proto.String(key)}},
			}}
		}
	}
	if next != "" {
		resp.NextPageToken = proto.String(next)
	}
	writeProto(w, resp)
}

func (s *Server) instanceResource(zone, name string) string {
	return "projects/" + s.project + "/zones/" + zone + "/instances/" + name
}

func (s *Server) getInstance(w http.ResponseWriter, r *http.Request) {
	zone, ok := s.checkZone(w, r)
	if !ok {
		return
	}
	name := r.PathValue("instance")
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[zone+"/"+name]
	if in == nil {
		notFound(w, s.instanceResource(zone, name))
		return
	}
	writeProto(w, s.renderLocked(in))
}

var (
	nameRE     = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	labelKeyRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}$`)
	labelValRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$`)
	mdKeyRE    = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
	machineRE  = regexp.MustCompile(`^(?:https?://[^/]+/compute/v1/)?(?:projects/[^/]+/)?zones/([^/]+)/machineTypes/([^/]+)$`)
	imageRE    = regexp.MustCompile(`^(?:https?://[^/]+/compute/v1/)?(?:projects/([^/]+)/)?global/images/(family/)?([^/]+)$`)
	networkRE  = regexp.MustCompile(`^(?:https?://[^/]+/compute/v1/)?(?:projects/([^/]+)/)?global/networks/([^/]+)$`)
	// subnetworkRE's groups: the project, the region, the name.
	subnetworkRE = regexp.MustCompile(`^(?:https?://[^/]+/compute/v1/)?(?:projects/([^/]+)/)?regions/([^/]+)/subnetworks/([^/]+)$`)
)

func validLabels(w http.ResponseWriter, labels map[string]string) bool {
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) {
			invalid(w, "labels", k, "Label keys must start with a lowercase letter and contain only lowercase letters, digits, '_' and '-' (at most 63).")
			return false
		}
		if !labelValRE.MatchString(v) {
			invalid(w, "labels."+k, v, "Label values may contain only lowercase letters, digits, '_' and '-' (at most 63).")
			return false
		}
	}
	return true
}

// metadataItems validates items and returns them as keys and a map.
func metadataItems(w http.ResponseWriter, items []*computepb.Items) ([]string, map[string]string, bool) {
	var keys []string
	m := map[string]string{}
	for _, it := range items {
		k := it.GetKey()
		if !mdKeyRE.MatchString(k) {
			invalid(w, "resource.metadata.items.key", k, "Must be a match of regex '[a-zA-Z0-9-_]{1,128}'.")
			return nil, nil, false
		}
		if _, dup := m[k]; dup {
			invalid(w, "resource.metadata.items", k, "Duplicate keys are not allowed.")
			return nil, nil, false
		}
		keys = append(keys, k)
		m[k] = it.GetValue()
	}
	return keys, m, true
}

func (s *Server) insertInstance(w http.ResponseWriter, r *http.Request) {
	zone, ok := s.checkZone(w, r)
	if !ok {
		return
	}
	body := &computepb.Instance{}
	if !readBody(w, r, body) {
		return
	}
	name := body.GetName()
	if !nameRE.MatchString(name) {
		invalid(w, "resource.name", name, "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
		return
	}
	mt := machineRE.FindStringSubmatch(body.GetMachineType())
	if mt == nil {
		invalid(w, "resource.machineType", body.GetMachineType(), "Must be the URL of a machine type, e.g. zones/"+zone+"/machineTypes/e2-small.")
		return
	}
	if mt[1] != zone {
		invalid(w, "resource.machineType", body.GetMachineType(), "Machine type is not in the instance's zone '"+zone+"'.")
		return
	}
	if !validLabels(w, body.GetLabels()) {
		return
	}
	keys, attrs, ok := metadataItems(w, body.GetMetadata().GetItems())
	if !ok {
		return
	}
	disks := body.GetDisks()
	if len(disks) == 0 || !disks[0].GetBoot() {
		invalid(w, "resource.disks", "", "The first disk must be a boot disk.")
		return
	}
	srcImage := disks[0].GetInitializeParams().GetSourceImage()
	if srcImage == "" && disks[0].GetSource() == "" {
		invalid(w, "resource.disks[0].initializeParams.sourceImage", "", "A boot disk needs a source image or disk.")
		return
	}
	sch := proto.CloneOf(body.GetScheduling())
	if sch == nil {
		sch = &computepb.Scheduling{}
	}
	switch sch.GetProvisioningModel() {
	case "", "STANDARD":
		if sch.GetInstanceTerminationAction() != "" && !sch.GetPreemptible() {
			invalid(w, "resource.scheduling.instanceTerminationAction", sch.GetInstanceTerminationAction(), "Only Spot and preemptible VMs have a termination action.")
			return
		}
	case "SPOT":
		if sch.AutomaticRestart != nil && sch.GetAutomaticRestart() {
			invalid(w, "resource.scheduling.automaticRestart", "true", "Spot VMs cannot restart automatically.")
			return
		}
		if m := sch.GetOnHostMaintenance(); m != "" && m != "TERMINATE" {
			invalid(w, "resource.scheduling.onHostMaintenance", m, "Spot VMs must terminate on host maintenance.")
			return
		}
		switch a := sch.GetInstanceTerminationAction(); a {
		case "", "STOP", "DELETE":
		default:
			invalid(w, "resource.scheduling.instanceTerminationAction", a, "Must be STOP or DELETE.")
			return
		}
	default:
		invalid(w, "resource.scheduling.provisioningModel", sch.GetProvisioningModel(), "Unknown provisioning model.")
		return
	}
	if len(body.GetNetworkInterfaces()) == 0 {
		invalid(w, "resource.networkInterfaces", "", "At least one network interface is required.")
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if rid := r.URL.Query().Get("requestId"); rid != "" {
		if op := s.requestIDs[rid]; op != nil {
			writeProto(w, proto.CloneOf(op.p))
			return
		}
	}
	key := zone + "/" + name
	if s.instances[key] != nil {
		writeError(w, http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource '%s' already exists", s.instanceResource(zone, name)))
		return
	}
	if srcImage != "" {
		m := imageRE.FindStringSubmatch(srcImage)
		if m == nil {
			invalid(w, "resource.disks[0].initializeParams.sourceImage", srcImage, "Must be the URL of an image, e.g. projects/debian-cloud/global/images/family/debian-12.")
			return
		}
		if proj := m[1]; proj == "" || proj == s.project {
			var found *image
			if m[2] != "" {
				found = s.newestInFamilyLocked(m[3])
			} else {
				found = s.images[m[3]]
			}
			if found == nil || found.p.GetStatus() != "READY" {
				notFound(w, "projects/"+s.project+"/global/images/"+m[2]+m[3])
				return
			}
		}
	}

	now := time.Now()
	p := &computepb.Instance{
		Kind:              proto.String("compute#instance"),
		Id:                proto.Uint64(randUint64()),
		CreationTimestamp: proto.String(timestamp(now)),
		Name:              proto.String(name),
		Description:       body.Description,
		Zone:              proto.String(s.zoneURL(zone)),
		MachineType:       proto.String(s.zoneURL(zone) + "/machineTypes/" + mt[2]),
		SelfLink:          proto.String(s.zoneURL(zone) + "/instances/" + name),
		Labels:            body.GetLabels(),
		LabelFingerprint:  proto.String(newFingerprint()),
		Fingerprint:       proto.String(newFingerprint()),
		Scheduling:        sch,
		Tags:              body.Tags,
		ServiceAccounts:   body.ServiceAccounts,
		CpuPlatform:       proto.String("AMD Milan"),
	}
	if sch.GetProvisioningModel() == "" {
		sch.ProvisioningModel = proto.String("STANDARD")
	}
	if sch.AutomaticRestart == nil {
		sch.AutomaticRestart = proto.Bool(sch.GetProvisioningModel() != "SPOT")
	}
	if sch.OnHostMaintenance == nil {
		if sch.GetProvisioningModel() == "SPOT" {
			sch.OnHostMaintenance = proto.String("TERMINATE")
		} else {
			sch.OnHostMaintenance = proto.String("MIGRATE")
		}
	}
	if sch.Preemptible == nil {
		sch.Preemptible = proto.Bool(false)
	}
	for i, d := range disks {
		dn := d.GetInitializeParams().GetDiskName()
		if dn == "" {
			dn = name
			if i > 0 {
				dn = fmt.Sprintf("%s-%d", name, i)
			}
		}
		src := d.GetSource()
		if src == "" {
			src = s.zoneURL(zone) + "/disks/" + dn
		}
		p.Disks = append(p.Disks, &computepb.AttachedDisk{
			Kind:       proto.String("compute#attachedDisk"),
			Type:       proto.String("PERSISTENT"),
			Mode:       proto.String("READ_WRITE"),
			Source:     proto.String(src),
			DeviceName: proto.String(fmt.Sprintf("persistent-disk-%d", i)),
			Index:      proto.Int32(int32(i)),
			Boot:       proto.Bool(d.GetBoot()),
			AutoDelete: proto.Bool(d.GetAutoDelete()),
			Interface:  proto.String("SCSI"),
			DiskSizeGb: proto.Int64(max(d.GetInitializeParams().GetDiskSizeGb(), 10)),
		})
	}
	for i, nic := range body.GetNetworkInterfaces() {
		netw := nic.GetNetwork()
		if netw == "" {
			netw = "global/networks/default"
		}
		nm := networkRE.FindStringSubmatch(netw)
		if nm == nil {
			invalid(w, "resource.networkInterfaces[0].network", netw, "Must be the URL of a network.")
			return
		}
		region := zone[:strings.LastIndex(zone, "-")]
		out := &computepb.NetworkInterface{
			Kind:        proto.String("compute#networkInterface"),
			Name:        proto.String(fmt.Sprintf("nic%d", i)),
			Network:     proto.String(s.projectURL() + "/global/networks/" + nm[2]),
			Subnetwork:  proto.String(s.projectURL() + "/regions/" + region + "/subnetworks/" + nm[2]),
			NetworkIP:   proto.String(fmt.Sprintf("10.128.%d.%d", s.nextIP/250, s.nextIP%250+2)),
			Fingerprint: proto.String(newFingerprint()),
			StackType:   proto.String("IPV4_ONLY"),
		}
		if sub := nic.GetSubnetwork(); sub != "" {
			sm := subnetworkRE.FindStringSubmatch(sub)
			if sm == nil || sm[2] != region {
				invalid(w, "resource.networkInterfaces[0].subnetwork", sub, "Must be the URL of a subnetwork in the instance's region.")
				return
			}
			out.Subnetwork = proto.String(s.projectURL() + "/regions/" + region + "/subnetworks/" + sm[3])
		}
		s.nextIP++
		for _, ac := range nic.GetAccessConfigs() {
			ac = proto.CloneOf(ac)
			ac.Kind = proto.String("compute#accessConfig")
			if ac.GetType() == "" {
				ac.Type = proto.String("ONE_TO_ONE_NAT")
			}
			if ac.GetNatIP() == "" {
				ac.NatIP = proto.String(fmt.Sprintf("34.%d.%d.%d", s.nextIP%200, s.nextIP/200%250, s.nextIP%250+1))
			}
			out.AccessConfigs = append(out.AccessConfigs, ac)
		}
		p.NetworkInterfaces = append(p.NetworkInterfaces, out)
	}

	v := newVM()
	v.replace(keys, attrs)
	in := &instance{p: p, status: StatusProvisioning, image: srcImage, vm: v}
	s.instances[key] = in
	s.zones[zone] = true
	op := s.startOpLocked(r, zone, "insert", p.GetSelfLink(), p.GetId(), func(failed bool) {
		if failed {
			delete(s.instances, key)
			return
		}
		in.status = StatusRunning
	}, func() {
		if in.status == StatusProvisioning {
			in.status = StatusStaging
		}
	})
	if rid := r.URL.Query().Get("requestId"); rid != "" {
		s.requestIDs[rid] = op
	}
	writeProto(w, proto.CloneOf(op.p))
}

func (s *Server) deleteInstance(w http.ResponseWriter, r *http.Request) {
	zone, ok := s.checkZone(w, r)
	if !ok {
		return
	}
	name := r.PathValue("instance")
	s.mu.Lock()
	defer s.mu.Unlock()
	key := zone + "/" + name
	in := s.instances[key]
	if in == nil {
		notFound(w, s.instanceResource(zone, name))
		return
	}
	prev := in.status
	in.status = StatusStopping
	op := s.startOpLocked(r, zone, "delete", in.p.GetSelfLink(), in.p.GetId(), func(failed bool) {
		if failed {
			in.status = prev
			return
		}
		if s.instances[key] == in {
			delete(s.instances, key)
		}
	}, nil)
	writeProto(w, proto.CloneOf(op.p))
}

func (s *Server) setMetadata(w http.ResponseWriter, r *http.Request) {
	zone, ok := s.checkZone(w, r)
	if !ok {
		return
	}
	name := r.PathValue("instance")
	body := &computepb.Metadata{}
	if !readBody(w, r, body) {
		return
	}
	keys, attrs, ok := metadataItems(w, body.GetItems())
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[zone+"/"+name]
	if in == nil {
		notFound(w, s.instanceResource(zone, name))
		return
	}
	// The fingerprint check and the new fingerprint are one step under the
	// VM's lock, so of two writers holding the same fingerprint one wins.
	if !in.vm.replaceIf(body.GetFingerprint(), keys, attrs) {
		writeError(w, http.StatusPreconditionFailed, "conditionNotMet",
			"Supplied fingerprint does not match current metadata fingerprint.")
		return
	}
	op := s.startOpLocked(r, zone, "setMetadata", in.p.GetSelfLink(), in.p.GetId(), nil, nil)
	writeProto(w, proto.CloneOf(op.p))
}

func (s *Server) getGuestAttributes(w http.ResponseWriter, r *http.Request) {
	zone, ok := s.checkZone(w, r)
	if !ok {
		return
	}
	name := r.PathValue("instance")
	s.mu.Lock()
	in := s.instances[zone+"/"+name]
	s.mu.Unlock()
	if in == nil {
		notFound(w, s.instanceResource(zone, name))
		return
	}
	q := r.URL.Query()
	self := s.zoneURL(zone) + "/instances/" + name + "/guestAttributes/"
	resp := &computepb.GuestAttributes{Kind: proto.String("compute#guestAttributes")}
	if vk := q.Get("variableKey"); vk != "" {
		g := in.vm.guestCopy()
		v, ok := g[vk]
		if !ok {
			notFound(w, s.instanceResource(zone, name)+"/guestAttributes/"+vk)
			return
		}
		resp.SelfLink = proto.String(self + vk)
		resp.VariableKey = proto.String(vk)
		resp.VariableValue = proto.String(v)
		writeProto(w, resp)
		return
	}
	qp := q.Get("queryPath")
	items := in.vm.guestUnder(qp)
	if len(items) == 0 {
		// Nothing under the path (or guest attributes never written): 404,
		// like the API.
		notFound(w, s.instanceResource(zone, name)+"/guestAttributes/"+qp)
		return
	}
	resp.SelfLink = proto.String(self + qp)
	resp.QueryPath = proto.String(qp)
	resp.QueryValue = &computepb.GuestAttributesValue{}
	for _, it := range items {
		ns, k, _ := strings.Cut(it.key, "/")
		resp.QueryValue.Items = append(resp.QueryValue.Items, &computepb.GuestAttributesEntry{
			Namespace: proto.String(ns), Key: proto.String(k), Value: proto.String(it.value),
		})
	}
	writeProto(w, resp)
}

// --- operations ---

// startOpLocked creates an operation: PENDING now, RUNNING (and onRunning)
// half way, DONE (and effect) after the latency. s.mu must be held.
func (s *Server) startOpLocked(r *http.Request, zone, opType, target string, targetID uint64, effect func(failed bool), onRunning func()) *operation {
	now := time.Now()
	id := randUint64()
	name := fmt.Sprintf("operation-%d-%x", now.UnixMilli(), id&0xffffffffffff)
	p := &computepb.Operation{
		Kind:          proto.String("compute#operation"),
		Id:            proto.Uint64(id),
		Name:          proto.String(name),
		OperationType: proto.String(opType),
		TargetLink:    proto.String(target),
		TargetId:      proto.Uint64(targetID),
		Status:        computepb.Operation_PENDING.Enum(),
		User:          proto.String("fake@" + s.project + ".iam.gserviceaccount.com"),
		Progress:      proto.Int32(0),
		InsertTime:    proto.String(timestamp(now)),
	}
	if zone != "" {
		p.Zone = proto.String(s.zoneURL(zone))
		p.SelfLink = proto.String(s.zoneURL(zone) + "/operations/" + name)
	} else {
		p.SelfLink = proto.String(s.projectURL() + "/global/operations/" + name)
	}
	op := &operation{p: p, zone: zone, done: make(chan struct{}), effect: effect}
	if f := s.rec.take(r, faultOpFail); f != nil {
		op.failCode = f.status
	}
	s.ops[name] = op
	lat := s.opLatency
	if lat <= 0 {
		s.runningLocked(op, onRunning)
		s.finishLocked(op)
		return op
	}
	s.timers = append(s.timers,
		time.AfterFunc(lat/2, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.runningLocked(op, onRunning)
		}),
		time.AfterFunc(lat, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.runningLocked(op, onRunning)
			s.finishLocked(op)
		}))
	return op
}

func (s *Server) runningLocked(op *operation, onRunning func()) {
	if op.p.GetStatus() != computepb.Operation_PENDING {
		return
	}
	op.p.Status = computepb.Operation_RUNNING.Enum()
	op.p.StartTime = proto.String(timestamp(time.Now()))
	op.p.Progress = proto.Int32(50)
	if onRunning != nil {
		onRunning()
	}
}

func (s *Server) finishLocked(op *operation) {
	if op.p.GetStatus() == computepb.Operation_DONE {
		return
	}
	failed := op.failCode != 0
	if op.effect != nil {
		op.effect(failed)
	}
	op.p.Status = computepb.Operation_DONE.Enum()
	op.p.Progress = proto.Int32(100)
	op.p.EndTime = proto.String(timestamp(time.Now()))
	if failed {
		msg := fmt.Sprintf("Injected operation failure: %s", http.StatusText(op.failCode))
		code := strings.ToUpper(strings.ReplaceAll(http.StatusText(op.failCode), " ", "_"))
		if op.failCode == http.StatusServiceUnavailable {
			code = "ZONE_RESOURCE_POOL_EXHAUSTED"
			msg = "The zone '" + op.p.GetZone() + "' does not have enough resources available to fulfill the request."
		}
		op.p.Error = &computepb.Error{Errors: []*computepb.Errors{{Code: proto.String(code), Message: proto.String(msg)}}}
		op.p.HttpErrorStatusCode = proto.Int32(int32(op.failCode))
		op.p.HttpErrorMessage = proto.String(strings.ToUpper(http.StatusText(op.failCode)))
	}
	close(op.done)
}

func (s *Server) findOp(w http.ResponseWriter, r *http.Request) *operation {
	if !s.checkProject(w, r) {
		return nil
	}
	name := r.PathValue("operation")
	zone := r.PathValue("zone")
	s.mu.Lock()
	op := s.ops[name]
	s.mu.Unlock()
	if op == nil || op.zone != zone {
		res := "projects/" + s.Project() + "/global/operations/" + name
		if zone != "" {
			res = "projects/" + s.Project() + "/zones/" + zone + "/operations/" + name
		}
		notFound(w, res)
		return nil
	}
	return op
}

func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) {
	op := s.findOp(w, r)
	if op == nil {
		return
	}
	s.mu.Lock()
	p := proto.CloneOf(op.p)
	s.mu.Unlock()
	writeProto(w, p)
}

// waitOperation is operations.wait: it returns when the operation is DONE
// or the wait timeout passes, whichever comes first.
func (s *Server) waitOperation(w http.ResponseWriter, r *http.Request) {
	op := s.findOp(w, r)
	if op == nil {
		return
	}
	s.mu.Lock()
	wt := s.waitTimeout
	s.mu.Unlock()
	t := time.NewTimer(wt)
	defer t.Stop()
	select {
	case <-op.done:
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	s.mu.Lock()
	p := proto.CloneOf(op.p)
	s.mu.Unlock()
	writeProto(w, p)
}

// Operations lists the operations started so far, oldest first.
func (s *Server) Operations() []*computepb.Operation {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*computepb.Operation
	for _, op := range s.ops {
		out = append(out, proto.CloneOf(op.p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetInsertTime() < out[j].GetInsertTime() })
	return out
}

// --- images ---

func (im *image) lookup(f string) (string, bool) {
	fields := map[string]string{
		"name":   im.p.GetName(),
		"id":     strconv.FormatUint(im.p.GetId(), 10),
		"family": im.p.GetFamily(),
		"status": im.p.GetStatus(),
	}
	return lookupFields(fields, im.p.GetLabels())(f)
}

func (s *Server) newestInFamilyLocked(family string) *image {
	var best *image
	for _, im := range s.images {
		if im.p.GetFamily() != family || im.p.GetStatus() != "READY" {
			continue
		}
		if st := im.p.GetDeprecated().GetState(); st != "" && st != "ACTIVE" {
			continue
		}
		if best == nil || im.p.GetCreationTimestamp() > best.p.GetCreationTimestamp() {
			best = im
		}
	}
	return best
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	if !s.checkProject(w, r) {
		return
	}
	f, order, ok := s.listQuery(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*image
	for _, im := range s.images {
		if f.match(im.lookup) {
			all = append(all, im)
		}
	}
	// The API's default order is by name.
	sortByOrder(all, order, func(i *image) string { return i.p.GetName() }, func(i *image) string { return i.p.GetCreationTimestamp() })
	start, end, next, ok := s.page(w, r, len(all))
	if !ok {
		return
	}
	resp := &computepb.ImageList{
		Kind:     proto.String("compute#imageList"),
		Id:       proto.String("projects/" + s.project + "/global/images"),
		SelfLink: proto.String(s.projectURL() + "/global/images"),
	}
	for _, im := range all[start:end] {
		resp.Items = append(resp.Items, proto.CloneOf(im.p))
	}
	if next != "" {
		resp.NextPageToken = proto.String(next)
	}
	writeProto(w, resp)
}

func (s *Server) getImage(w http.ResponseWriter, r *http.Request) {
	if !s.checkProject(w, r) {
		return
	}
	name := r.PathValue("image")
	s.mu.Lock()
	defer s.mu.Unlock()
	im := s.images[name]
	if im == nil {
		notFound(w, "projects/"+s.project+"/global/images/"+name)
		return
	}
	writeProto(w, proto.CloneOf(im.p))
}

func (s *Server) imageFromFamily(w http.ResponseWriter, r *http.Request) {
	if !s.checkProject(w, r) {
		return
	}
	fam := r.PathValue("family")
	s.mu.Lock()
	defer s.mu.Unlock()
	im := s.newestInFamilyLocked(fam)
	if im == nil {
		notFound(w, "projects/"+s.project+"/global/images/family/"+fam)
		return
	}
	writeProto(w, proto.CloneOf(im.p))
}

func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) {
	if !s.checkProject(w, r) {
		return
	}
	name := r.PathValue("image")
	s.mu.Lock()
	defer s.mu.Unlock()
	im := s.images[name]
	if im == nil {
		notFound(w, "projects/"+s.project+"/global/images/"+name)
		return
	}
	op := s.startOpLocked(r, "", "delete", im.p.GetSelfLink(), im.p.GetId(), func(failed bool) {
		if !failed && s.images[name] == im {
			delete(s.images, name)
		}
	}, nil)
	writeProto(w, proto.CloneOf(op.p))
}

// --- control API ---

// AddInstance seeds an instance (RUNNING unless Status says otherwise) and
// returns it completed. It panics on a duplicate or a missing name or zone.
func (s *Server) AddInstance(in Instance) Instance {
	if in.Name == "" || in.Zone == "" {
		panic("gcetest: AddInstance needs Name and Zone")
	}
	if in.Status == "" {
		in.Status = StatusRunning
	}
	if in.MachineType == "" {
		in.MachineType = "e2-small"
	}
	if in.CreatedAt.IsZero() {
		in.CreatedAt = time.Now()
	}
	if in.ProvisioningModel == "" {
		in.ProvisioningModel = "STANDARD"
	}
	if in.Network == "" {
		in.Network = "default"
	}
	id := randUint64()
	if in.ID != "" {
		v, err := strconv.ParseUint(in.ID, 10, 64)
		if err != nil {
			panic("gcetest: AddInstance: ID must be numeric: " + in.ID)
		}
		id = v
	}
	s.mu.Lock()
	key := in.Zone + "/" + in.Name
	if s.instances[key] != nil {
		s.mu.Unlock()
		panic("gcetest: AddInstance: duplicate instance " + key)
	}
	z := s.zoneURL(in.Zone)
	sch := &computepb.Scheduling{ProvisioningModel: proto.String(in.ProvisioningModel)}
	if in.TerminationAction != "" {
		sch.InstanceTerminationAction = proto.String(in.TerminationAction)
	}
	labels := map[string]string{}
	for k, v := range in.Labels {
		labels[k] = v
	}
	nic := &computepb.NetworkInterface{
		Name:      proto.String("nic0"),
		Network:   proto.String(s.projectURL() + "/global/networks/" + lastSegment(in.Network)),
		NetworkIP: proto.String(fmt.Sprintf("10.128.%d.%d", s.nextIP/250, s.nextIP%250+2)),
	}
	s.nextIP++
	if in.ExternalIP {
		nic.AccessConfigs = []*computepb.AccessConfig{{Type: proto.String("ONE_TO_ONE_NAT"), Name: proto.String("External NAT"), NatIP: proto.String("34.1.2.3")}}
	}
	p := &computepb.Instance{
		Kind:              proto.String("compute#instance"),
		Id:                proto.Uint64(id),
		CreationTimestamp: proto.String(timestamp(in.CreatedAt)),
		Name:              proto.String(in.Name),
		Zone:              proto.String(z),
		MachineType:       proto.String(z + "/machineTypes/" + lastSegment(in.MachineType)),
		SelfLink:          proto.String(z + "/instances/" + in.Name),
		Labels:            labels,
		LabelFingerprint:  proto.String(newFingerprint()),
		Scheduling:        sch,
		NetworkInterfaces: []*computepb.NetworkInterface{nic},
		Disks: []*computepb.AttachedDisk{{
			Boot: proto.Bool(true), AutoDelete: proto.Bool(true), Type: proto.String("PERSISTENT"),
			Source: proto.String(z + "/disks/" + in.Name), DeviceName: proto.String("persistent-disk-0"),
		}},
	}
	v := newVM()
	var keys []string
	for k := range in.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	v.replace(keys, in.Metadata)
	s.instances[key] = &instance{p: p, status: in.Status, image: in.SourceImage, vm: v}
	s.zones[in.Zone] = true
	s.mu.Unlock()
	return s.snapshot(key)
}

func (s *Server) snapshot(key string) Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.toInstanceLocked(s.instances[key])
}

func (s *Server) toInstanceLocked(in *instance) Instance {
	items, fp := in.vm.items()
	md := map[string]string{}
	for _, it := range items {
		md[it.key] = it.value
	}
	labels := map[string]string{}
	for k, v := range in.p.GetLabels() {
		labels[k] = v
	}
	out := Instance{
		Name:                in.p.GetName(),
		Zone:                lastSegment(in.p.GetZone()),
		ID:                  strconv.FormatUint(in.p.GetId(), 10),
		Status:              in.status,
		MachineType:         lastSegment(in.p.GetMachineType()),
		SourceImage:         in.image,
		Labels:              labels,
		Metadata:            md,
		MetadataFingerprint: fp,
		ProvisioningModel:   in.p.GetScheduling().GetProvisioningModel(),
		TerminationAction:   in.p.GetScheduling().GetInstanceTerminationAction(),
	}
	out.CreatedAt, _ = time.Parse(time.RFC3339Nano, in.p.GetCreationTimestamp())
	if nics := in.p.GetNetworkInterfaces(); len(nics) > 0 {
		out.Network = nics[0].GetNetwork()
		out.InternalIP = nics[0].GetNetworkIP()
	}
	for _, nic := range in.p.GetNetworkInterfaces() {
		if len(nic.GetAccessConfigs()) > 0 {
			out.ExternalIP = true
		}
	}
	return out
}

// Instances lists the instances, by zone then name.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Instance
	for _, in := range s.sortedInstancesLocked("", nil) {
		out = append(out, s.toInstanceLocked(in))
	}
	return out
}

// Instance returns one instance and whether it exists.
func (s *Server) Instance(zone, name string) (Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[zone+"/"+name]
	if in == nil {
		return Instance{}, false
	}
	return s.toInstanceLocked(in), true
}

// InstanceResource returns the instance as the API renders it.
func (s *Server) InstanceResource(zone, name string) *computepb.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[zone+"/"+name]
	if in == nil {
		return nil
	}
	return s.renderLocked(in)
}

// SetInstanceStatus changes an instance's status (e.g. TERMINATED for a
// preempted Spot VM); false if there is no such instance.
func (s *Server) SetInstanceStatus(zone, name, status string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[zone+"/"+name]
	if in == nil {
		return false
	}
	in.status = status
	return true
}

// SetMetadataItem sets one metadata item of an instance as another writer
// would (the fingerprint changes); false if there is no such instance.
func (s *Server) SetMetadataItem(zone, name, key, value string) bool {
	s.mu.Lock()
	in := s.instances[zone+"/"+name]
	s.mu.Unlock()
	if in == nil {
		return false
	}
	in.vm.set(key, value)
	return true
}

// SetGuestAttribute writes a guest attribute of an instance as its guest
// would; key is "namespace/key".
func (s *Server) SetGuestAttribute(zone, name, key, value string) error {
	if !strings.Contains(key, "/") {
		return fmt.Errorf("gcetest: guest attribute key %q is not namespace/key", key)
	}
	s.mu.Lock()
	in := s.instances[zone+"/"+name]
	s.mu.Unlock()
	if in == nil {
		return fmt.Errorf("gcetest: no instance %s in %s", name, zone)
	}
	in.vm.setGuest(key, value)
	return nil
}

// GuestAttributes returns an instance's guest attributes ("namespace/key" →
// value), nil if there is no such instance.
func (s *Server) GuestAttributes(zone, name string) map[string]string {
	s.mu.Lock()
	in := s.instances[zone+"/"+name]
	s.mu.Unlock()
	if in == nil {
		return nil
	}
	return in.vm.guestCopy()
}

// AddImage seeds an image (READY unless Status says otherwise) and returns
// it completed. It panics on a duplicate or a missing name.
func (s *Server) AddImage(img Image) Image {
	if img.Name == "" {
		panic("gcetest: AddImage needs Name")
	}
	if img.Status == "" {
		img.Status = "READY"
	}
	if img.CreatedAt.IsZero() {
		img.CreatedAt = time.Now()
	}
	id := randUint64()
	if img.ID != "" {
		v, err := strconv.ParseUint(img.ID, 10, 64)
		if err != nil {
			panic("gcetest: AddImage: ID must be numeric: " + img.ID)
		}
		id = v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.images[img.Name] != nil {
		panic("gcetest: AddImage: duplicate image " + img.Name)
	}
	labels := map[string]string{}
	for k, v := range img.Labels {
		labels[k] = v
	}
	p := &computepb.Image{
		Kind:              proto.String("compute#image"),
		Id:                proto.Uint64(id),
		CreationTimestamp: proto.String(timestamp(img.CreatedAt)),
		Name:              proto.String(img.Name),
		SelfLink:          proto.String(s.projectURL() + "/global/images/" + img.Name),
		Labels:            labels,
		LabelFingerprint:  proto.String(newFingerprint()),
		Status:            proto.String(img.Status),
		SourceType:        proto.String("RAW"),
		DiskSizeGb:        proto.Int64(10),
		ArchiveSizeBytes:  proto.Int64(1 << 30),
	}
	if img.Family != "" {
		p.Family = proto.String(img.Family)
	}
	if img.Deprecated != "" {
		p.Deprecated = &computepb.DeprecationStatus{State: proto.String(img.Deprecated)}
	}
	s.images[img.Name] = &image{p: p}
	return toImage(p)
}

func toImage(p *computepb.Image) Image {
	img := Image{
		Name:       p.GetName(),
		ID:         strconv.FormatUint(p.GetId(), 10),
		Family:     p.GetFamily(),
		Labels:     map[string]string{},
		Status:     p.GetStatus(),
		Deprecated: p.GetDeprecated().GetState(),
	}
	for k, v := range p.GetLabels() {
		img.Labels[k] = v
	}
	img.CreatedAt, _ = time.Parse(time.RFC3339Nano, p.GetCreationTimestamp())
	return img
}

// Images lists the images by name.
func (s *Server) Images() []Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Image
	for _, im := range s.images {
		out = append(out, toImage(im.p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// MetadataServerFor returns the metadata server of an instance's VM,
// starting it on first use (Close closes it); nil if there is no such
// instance. Its attributes are the instance's metadata: setMetadata on the
// Server wakes its wait_for_change requests, its SetAttribute changes the
// instance's metadata and fingerprint, and guest attributes the VM PUTs are
// what getGuestAttributes returns.
func (s *Server) MetadataServerFor(zone, name string) *MetadataServer {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := zone + "/" + name
	if m := s.metadata[key]; m != nil {
		return m
	}
	in := s.instances[key]
	if in == nil || s.closed {
		return nil
	}
	m := newMetadataServer(in.vm, vmIdentity{
		name:    name,
		zone:    zone,
		id:      strconv.FormatUint(in.p.GetId(), 10),
		project: s.project,
	})
	s.metadata[key] = m
	return m
}
