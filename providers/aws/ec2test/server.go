// Package ec2test provides loopback fakes of the EC2 Query API and of the
// instance metadata service (IMDSv2), for driving the real aws-sdk-go-v2
// clients in tests.
//
// Server keeps instances, images, snapshots and spot instance requests in
// memory and speaks EC2's wire protocol: form-encoded POSTs
// (Action=…&Version=2016-11-15, lists flattened as Filter.1.Value.1), XML
// responses in the 2016-11-15 namespace, and errors as
// <Response><Errors><Error><Code>… with the HTTP status EC2 uses. Instances
// move pending→running and shutting-down→terminated after configurable
// latencies, so the SDK's waiters really poll. Faults and delays can be
// injected per action. Everything is safe for concurrent use.
//
// The fake accepts SigV4-signed requests without verifying the signature
// (it only requires an AWS4-HMAC-SHA256 Authorization header).
package ec2test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Namespace is the XML namespace of EC2 API version 2016-11-15.
const Namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"

// APIVersion is the only Version the fake accepts.
const APIVersion = "2016-11-15"

// Defaults of a new Server.
const (
	DefaultRegion    = "us-east-1"
	DefaultAccountID = "123456789012"
)

// Instance states as EC2 names them.
const (
	StatePending      = "pending"
	StateRunning      = "running"
	StateShuttingDown = "shutting-down"
	StateTerminated   = "terminated"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
)

var stateCodes = map[string]int{
	StatePending: 0, StateRunning: 16, StateShuttingDown: 32,
	StateTerminated: 48, StateStopping: 64, StateStopped: 80,
}

// Instance is an EC2 instance as the fake stores it.
type Instance struct {
	ID            string
	ReservationID string
	ImageID       string
	InstanceType  string
	Zone          string
	SubnetID      string
	State         string
	// Tags are the instance's tags; VolumeTags those RunInstances put on its
	// volumes (TagSpecification with ResourceType volume).
	Tags       map[string]string
	VolumeTags map[string]string
	// UserData is decoded (RunInstances carries it base64-encoded).
	UserData string
	// PublicIP is set unless the request disabled it
	// (NetworkInterface.1.AssociatePublicIpAddress=false): like a default
	// subnet, the fake maps a public IP on launch.
	PublicIP         string
	PrivateIP        string
	SecurityGroupIDs []string
	// Spot instances have InstanceLifecycle "spot" and a spot request.
	Spot          bool
	SpotRequestID string
	// Metadata options: HttpTokens "required" or "optional" (the fake's IMDS
	// requires a token unless "optional"); MetadataTags enables
	// meta-data/tags/instance.
	HTTPTokens      string
	MetadataTags    bool
	HopLimit        int
	InstanceProfile string
	ClientToken     string
	LaunchTime      time.Time

	stateSince time.Time // when State was last set
}

// Image is an AMI.
type Image struct {
	ID           string
	Name         string
	OwnerID      string // default: the Server's account
	State        string // default "available"
	CreationDate time.Time
	Tags         map[string]string
	// SnapshotIDs of the image's EBS block device mappings; AddImage
	// creates the snapshots (one is made up if none is given).
	SnapshotIDs []string
}

// SpotRequest is a spot instance request.
type SpotRequest struct {
	ID         string
	State      string // open, active, closed, cancelled, failed, disabled
	StatusCode string // e.g. fulfilled, instance-terminated-by-user
	Type       string // one-time or persistent
	InstanceID string
	Zone       string
	Tags       map[string]string
	CreateTime time.Time
}

type fault struct {
	code   string
	status int
	delay  time.Duration
	left   int
}

// Server is a fake EC2 Query API endpoint.
type Server struct {
	hs *httptest.Server

	mu               sync.Mutex
	region           string
	account          string
	pendingLatency   time.Duration
	terminateLatency time.Duration
	pageLimit        int
	seq              int
	instances        map[string]*Instance
	order            []string // instance IDs in creation order
	images           map[string]*Image
	snapshots        map[string]bool
	spots            map[string]*SpotRequest
	clientTokens     map[string]string // client token → reservation ID
	failures         map[string][]*fault
	delays           map[string][]*fault
	calls            map[string]int
	requests         map[string][]url.Values
	accessKeys       map[string]int // access key ID of the signature → requests
	imds             map[string]*IMDS
	now              func() time.Time
}

// New starts a fake EC2 endpoint on the loopback interface, in region
// us-east-1, with 50ms pending→running and shutting-down→terminated
// latencies.
func New() *Server {
	s := &Server{
		region:           DefaultRegion,
		account:          DefaultAccountID,
		pendingLatency:   50 * time.Millisecond,
		terminateLatency: 50 * time.Millisecond,
		instances:        map[string]*Instance{},
		images:           map[string]*Image{},
		snapshots:        map[string]bool{},
		spots:            map[string]*SpotRequest{},
		clientTokens:     map[string]string{},
		failures:         map[string][]*fault{},
		delays:           map[string][]*fault{},
		calls:            map[string]int{},
		requests:         map[string][]url.Values{},
		imds:             map[string]*IMDS{},
		now:              time.Now,
	}
	s.hs = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	return s
}

// URL is the endpoint's base URL (http://127.0.0.1:port).
func (s *Server) URL() string { return s.hs.URL }

// Region is the region the fake claims to be.
func (s *Server) Region() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.region
}

// Close shuts the endpoint and every IMDS made by IMDSFor down.
func (s *Server) Close() {
	s.mu.Lock()
	imds := slices.Collect(maps.Values(s.imds))
	s.mu.Unlock()
	for _, m := range imds {
		m.Close()
	}
	s.hs.Close()
}

// Config is an aws.Config for the fake: static credentials, the fake's
// region and BaseEndpoint. The SDK signs its requests with them.
func (s *Server) Config() aws.Config {
	return aws.Config{
		Region: s.Region(),
		Credentials: aws.NewCredentialsCache(aws.CredentialsProviderFunc(
			func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{
					AccessKeyID:     "AKIDEXAMPLE",
					SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
					Source:          "ec2test",
				}, nil
			})),
		BaseEndpoint: aws.String(s.URL()),
	}
}

// SetLatency sets how long instances stay pending after RunInstances and
// shutting-down after TerminateInstances.
func (s *Server) SetLatency(pending, shuttingDown time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pendingLatency, s.terminateLatency = pending, shuttingDown
}

// SetPageLimit caps the items of one Describe* page (0: only MaxResults
// limits them), to exercise NextToken pagination.
func (s *Server) SetPageLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pageLimit = n
}

// FailNext makes the next times calls of action fail with code and HTTP
// status (e.g. "RequestLimitExceeded", 503).
func (s *Server) FailNext(action, code string, status, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[action] = append(s.failures[action], &fault{code: code, status: status, left: times})
}

// DelayNext delays the next times calls of action by d before they are
// handled (the delay ends early if the client goes away).
func (s *Server) DelayNext(action string, d time.Duration, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delays[action] = append(s.delays[action], &fault{delay: d, left: times})
}

// AccessKeys counts requests by the access key ID that signed them.
func (s *Server) AccessKeys() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.accessKeys))
	for k, v := range s.accessKeys {
		out[k] = v
	}
	return out
}

// Calls counts the requests for action, failed ones included.
func (s *Server) Calls(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[action]
}

// Requests returns the decoded forms of the requests for action, in order.
func (s *Server) Requests(action string) []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []url.Values
	for _, f := range s.requests[action] {
		out = append(out, cloneValues(f))
	}
	return out
}

// AddInstance stores an instance. Empty ID, State, Zone, InstanceType,
// HTTPTokens and LaunchTime get defaults (a fresh i-…, running, the
// region's zone a, t3.micro, required, now). It returns the ID.
func (s *Server) AddInstance(in Instance) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if in.ID == "" {
		in.ID = s.newID("i-", 17)
	}
	if in.ReservationID == "" {
		in.ReservationID = s.newID("r-", 17)
	}
	if in.State == "" {
		in.State = StateRunning
	}
	if in.Zone == "" {
		in.Zone = s.region + "a"
	}
	if in.InstanceType == "" {
		in.InstanceType = "t3.micro"
	}
	if in.HTTPTokens == "" {
		in.HTTPTokens = "required"
	}
	if in.LaunchTime.IsZero() {
		in.LaunchTime = now
	}
	if in.PrivateIP == "" {
		in.PrivateIP = s.newPrivateIP()
	}
	in.Tags = maps.Clone(in.Tags)
	in.VolumeTags = maps.Clone(in.VolumeTags)
	in.stateSince = now
	if _, ok := s.instances[in.ID]; !ok {
		s.order = append(s.order, in.ID)
	}
	s.instances[in.ID] = &in
	return in.ID
}

// Instances returns copies of all instances, terminated ones included, in
// creation order, with their states advanced to now.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	out := make([]Instance, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, copyInstance(s.instances[id]))
	}
	return out
}

// Instance returns a copy of one instance.
func (s *Server) Instance(id string) (Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	in, ok := s.instances[id]
	if !ok {
		return Instance{}, false
	}
	return copyInstance(in), true
}

// AddImage stores an image and its snapshots. Empty ID, OwnerID, State and
// CreationDate get defaults; an image without SnapshotIDs gets one. It
// returns the ID.
func (s *Server) AddImage(im Image) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if im.ID == "" {
		im.ID = s.newID("ami-", 17)
	}
	if im.OwnerID == "" {
		im.OwnerID = s.account
	}
	if im.State == "" {
		im.State = "available"
	}
	if im.CreationDate.IsZero() {
		im.CreationDate = s.now()
	}
	if len(im.SnapshotIDs) == 0 {
		im.SnapshotIDs = []string{s.newID("snap-", 17)}
	}
	im.SnapshotIDs = slices.Clone(im.SnapshotIDs)
	for _, id := range im.SnapshotIDs {
		s.snapshots[id] = true
	}
	im.Tags = maps.Clone(im.Tags)
	s.images[im.ID] = &im
	return im.ID
}

// Images returns copies of the registered images, oldest first.
func (s *Server) Images() []Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Image, 0, len(s.images))
	for _, im := range s.images {
		c := *im
		c.Tags = maps.Clone(im.Tags)
		c.SnapshotIDs = slices.Clone(im.SnapshotIDs)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreationDate.Equal(out[j].CreationDate) {
			return out[i].CreationDate.Before(out[j].CreationDate)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Snapshots returns the IDs of the existing snapshots, sorted.
func (s *Server) Snapshots() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.snapshots))
}

// AddSpotRequest stores a spot instance request. Empty ID, State, Type and
// CreateTime get defaults (a fresh sir-…, open, one-time, now). It returns
// the ID.
func (s *Server) AddSpotRequest(r SpotRequest) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.ID == "" {
		r.ID = s.newID("sir-", 8)
	}
	if r.State == "" {
		r.State = "open"
	}
	if r.Type == "" {
		r.Type = "one-time"
	}
	if r.StatusCode == "" {
		r.StatusCode = map[string]string{"open": "pending-fulfillment", "active": "fulfilled",
			"cancelled": "canceled-before-fulfillment", "closed": "instance-terminated-by-user"}[r.State]
	}
	if r.CreateTime.IsZero() {
		r.CreateTime = s.now()
	}
	r.Tags = maps.Clone(r.Tags)
	s.spots[r.ID] = &r
	return r.ID
}

// SpotRequests returns copies of all spot instance requests, sorted by ID.
func (s *Server) SpotRequests() []SpotRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	out := make([]SpotRequest, 0, len(s.spots))
	for _, id := range slices.Sorted(maps.Keys(s.spots)) {
		r := *s.spots[id]
		r.Tags = maps.Clone(r.Tags)
		out = append(out, r)
	}
	return out
}

// advance moves instances through their timed transitions. s.mu is held.
func (s *Server) advance() {
	now := s.now()
	for _, in := range s.instances {
		switch in.State {
		case StatePending:
			if now.Sub(in.stateSince) >= s.pendingLatency {
				in.State, in.stateSince = StateRunning, in.stateSince.Add(s.pendingLatency)
			}
		case StateShuttingDown:
			if now.Sub(in.stateSince) >= s.terminateLatency {
				in.State, in.stateSince = StateTerminated, in.stateSince.Add(s.terminateLatency)
				in.PublicIP = ""
				s.spotInstanceGone(in)
			}
		case StateStopping:
			if now.Sub(in.stateSince) >= s.terminateLatency {
				in.State, in.stateSince = StateStopped, in.stateSince.Add(s.terminateLatency)
			}
		}
	}
}

// spotInstanceGone closes a one-time spot request whose instance
// terminated; a persistent one goes back to open (EC2 would relaunch).
func (s *Server) spotInstanceGone(in *Instance) {
	r, ok := s.spots[in.SpotRequestID]
	if !ok || r.State != "active" {
		return
	}
	r.StatusCode = "instance-terminated-by-user"
	if r.Type == "persistent" {
		r.State = "open"
	} else {
		r.State = "closed"
	}
}

const hexDigits = "0123456789abcdef"

// newID makes a fresh resource ID. s.mu is held.
func (s *Server) newID(prefix string, n int) string {
	s.seq++
	v := s.seq
	b := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		b[i] = hexDigits[v%16]
		v /= 16
	}
	// Mix a fixed pattern into the leading digits so IDs look like EC2's.
	for i := 0; i < n-6 && i < len("0a1b2c3d4e5f"); i++ {
		b[i] = "0a1b2c3d4e5f"[i]
	}
	return prefix + string(b)
}

func (s *Server) newPrivateIP() string {
	s.seq++
	return fmt.Sprintf("10.0.%d.%d", (s.seq/250)%250, s.seq%250+2)
}

func copyInstance(in *Instance) Instance {
	c := *in
	c.Tags = maps.Clone(in.Tags)
	c.VolumeTags = maps.Clone(in.VolumeTags)
	c.SecurityGroupIDs = slices.Clone(in.SecurityGroupIDs)
	return c
}

func cloneValues(v url.Values) url.Values {
	c := make(url.Values, len(v))
	for k, vs := range v {
		c[k] = slices.Clone(vs)
	}
	return c
}

// takeFault pops the next pending fault of action from list. s.mu is held.
func takeFault(list map[string][]*fault, action string) *fault {
	fs := list[action]
	for len(fs) > 0 && fs[0].left <= 0 {
		fs = fs[1:]
	}
	list[action] = fs
	if len(fs) == 0 {
		return nil
	}
	fs[0].left--
	return fs[0]
}

// regionOf is the region of an availability zone (us-east-1a → us-east-1).
func regionOf(zone string) string {
	return strings.TrimRightFunc(zone, func(r rune) bool { return r >= 'a' && r <= 'z' })
}
