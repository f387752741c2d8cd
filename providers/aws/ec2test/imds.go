package ec2test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"time"
)

// IMDSv2 header names.
const (
	TokenHeader    = "X-Aws-Ec2-Metadata-Token"
	TokenTTLHeader = "X-Aws-Ec2-Metadata-Token-Ttl-Seconds"
)

// IMDS is a fake instance metadata service for one instance of a Server:
// what it serves (instance ID, placement, tags, user data) is read live from
// the Server, so CreateTags on the Server shows in meta-data/tags/instance.
//
// It speaks IMDSv2: PUT /latest/api/token with
// X-aws-ec2-metadata-token-ttl-seconds (1–21600) returns a token and echoes
// the TTL granted; GETs must carry a valid X-aws-ec2-metadata-token or get
// 401 (unless the instance's HttpTokens is "optional"). Paths:
//
//	/latest/meta-data/instance-id
//	/latest/meta-data/instance-type
//	/latest/meta-data/ami-id
//	/latest/meta-data/placement/availability-zone
//	/latest/meta-data/placement/region
//	/latest/meta-data/tags/instance            (keys, one a line)
//	/latest/meta-data/tags/instance/{key}      (the value; 404 if absent)
//	/latest/user-data
//	/latest/meta-data/iam/security-credentials/         (the role, if the instance has a profile)
//	/latest/meta-data/iam/security-credentials/{role}   (its temporary credentials, JSON)
//
// The tags paths answer 404 unless the instance has instance metadata tags
// enabled (RunInstances MetadataOptions.InstanceMetadataTags=enabled).
type IMDS struct {
	srv        *Server
	instanceID string
	hs         *httptest.Server

	// Guarded by srv.mu.
	tokens   map[string]time.Time // token → expiry
	maxTTL   time.Duration
	failures map[string][]*fault
	calls    map[string]int
}

// IMDSFor returns the metadata service of instance id, starting it on first
// use. The Server's Close closes it.
func (s *Server) IMDSFor(id string) *IMDS {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.imds[id]; ok {
		return m
	}
	m := &IMDS{srv: s, instanceID: id, tokens: map[string]time.Time{},
		failures: map[string][]*fault{}, calls: map[string]int{}}
	m.hs = httptest.NewServer(http.HandlerFunc(m.serveHTTP))
	s.imds[id] = m
	return m
}

// URL is the service's endpoint (what imds.Options.Endpoint takes).
func (m *IMDS) URL() string { return m.hs.URL }

// Close shuts the service down.
func (m *IMDS) Close() { m.hs.Close() }

// SetMaxTokenTTL caps the TTL granted to new tokens (0: grant what is
// asked). The granted TTL is what the token response's TTL header says, so
// the client knows when to refresh.
func (m *IMDS) SetMaxTokenTTL(d time.Duration) {
	m.srv.mu.Lock()
	defer m.srv.mu.Unlock()
	m.maxTTL = d
}

// ExpireTokens invalidates every token issued so far, as if their TTL had
// run out: requests carrying one get 401 until the client fetches a new one.
func (m *IMDS) ExpireTokens() {
	m.srv.mu.Lock()
	defer m.srv.mu.Unlock()
	clear(m.tokens)
}

// FailNext makes the next times requests for path (e.g.
// "/latest/meta-data/tags/instance/runnerfleet:drain", or
// "/latest/api/token") answer with HTTP status.
func (m *IMDS) FailNext(path string, status, times int) {
	m.srv.mu.Lock()
	defer m.srv.mu.Unlock()
	m.failures[path] = append(m.failures[path], &fault{status: status, left: times})
}

// Calls counts the requests for path, failed ones included.
func (m *IMDS) Calls(path string) int {
	m.srv.mu.Lock()
	defer m.srv.mu.Unlock()
	return m.calls[path]
}

func (m *IMDS) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s := m.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	m.calls[r.URL.Path]++
	if f := takeFault(m.failures, r.URL.Path); f != nil {
		http.Error(w, http.StatusText(f.status), f.status)
		return
	}
	in := s.instances[m.instanceID]

	if r.URL.Path == "/latest/api/token" {
		if r.Method != http.MethodPut {
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.Header.Get("X-Forwarded-For") != "" {
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		}
		secs, err := strconv.Atoi(r.Header.Get(TokenTTLHeader))
		if err != nil || secs < 1 || secs > 21600 {
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		ttl := time.Duration(secs) * time.Second
		if m.maxTTL > 0 && ttl > m.maxTTL {
			ttl = m.maxTTL
			secs = max(int(ttl/time.Second), 1)
		}
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		tok := "AQAEA" + hex.EncodeToString(b)
		m.tokens[tok] = s.now().Add(ttl)
		w.Header().Set(TokenTTLHeader, strconv.Itoa(secs))
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(tok))
		return
	}

	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	if tok := r.Header.Get(TokenHeader); tok != "" {
		exp, ok := m.tokens[tok]
		if !ok || !s.now().Before(exp) {
			delete(m.tokens, tok)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
	} else if in == nil || in.HTTPTokens != "optional" {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if in == nil {
		http.NotFound(w, r)
		return
	}

	p := r.URL.Path
	var body string
	switch {
	case p == "/latest/meta-data/instance-id":
		body = in.ID
	case p == "/latest/meta-data/instance-type":
		body = in.InstanceType
	case p == "/latest/meta-data/ami-id":
		body = in.ImageID
	case p == "/latest/meta-data/placement/availability-zone":
		body = in.Zone
	case p == "/latest/meta-data/placement/region":
		body = regionOf(in.Zone)
	case p == "/latest/meta-data/iam/security-credentials/" || p == "/latest/meta-data/iam/security-credentials":
		if in.InstanceProfile == "" {
			http.NotFound(w, r)
			return
		}
		body = RoleOf(in.InstanceProfile)
	case strings.HasPrefix(p, "/latest/meta-data/iam/security-credentials/"):
		role := strings.TrimPrefix(p, "/latest/meta-data/iam/security-credentials/")
		if in.InstanceProfile == "" || role != RoleOf(in.InstanceProfile) {
			http.NotFound(w, r)
			return
		}
		b, _ := json.Marshal(map[string]string{
			"Code": "Success", "Type": "AWS-HMAC", "LastUpdated": s.now().UTC().Format(time.RFC3339),
			"AccessKeyId": InstanceRoleAccessKey(in.ID), "SecretAccessKey": "instance-role-secret", "Token": "instance-role-token",
			"Expiration": s.now().Add(6 * time.Hour).UTC().Format(time.RFC3339),
		})
		body = string(b)
	case p == "/latest/user-data":
		if in.UserData == "" {
			http.NotFound(w, r)
			return
		}
		body = in.UserData
	case p == "/latest/meta-data/tags/instance" || p == "/latest/meta-data/tags/instance/":
		if !in.MetadataTags {
			http.NotFound(w, r)
			return
		}
		keys := make([]string, 0, len(in.Tags))
		for k := range in.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		body = strings.Join(keys, "\n")
	case strings.HasPrefix(p, "/latest/meta-data/tags/instance/"):
		v, ok := in.Tags[strings.TrimPrefix(p, "/latest/meta-data/tags/instance/")]
		if !in.MetadataTags || !ok {
			http.NotFound(w, r)
			return
		}
		body = v
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(body))
}

// RoleOf is the role name of an instance profile (ARN or name): its last
// path segment, as IMDS lists it.
func RoleOf(profile string) string {
	if i := strings.LastIndexAny(profile, "/:"); i >= 0 {
		return profile[i+1:]
	}
	return profile
}

// InstanceRoleAccessKey is the access key ID of the temporary credentials
// IMDS hands the instance id, so tests can tell which signed a request.
func InstanceRoleAccessKey(id string) string {
	return "ASIA" + strings.ToUpper(strings.TrimPrefix(id, "i-"))
}
