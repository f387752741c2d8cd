package gcetest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

type vmIdentity struct {
	name, zone, id, project string
}

// MetadataServer is a fake of a VM's metadata server
// (http://metadata.google.internal/computeMetadata/v1/) on 127.0.0.1:
//
//	GET  instance/attributes/                    the keys, one a line
//	GET  instance/attributes/{key}               200 value, or 404; ETag header
//	     ?wait_for_change=true[&last_etag=E][&timeout_sec=N]
//	                                             returns at once if the etag is not E,
//	                                             else when the value (or its existence)
//	                                             changes or after N seconds (default
//	                                             MaxWait) with the value as it is
//	PUT  instance/guest-attributes/{ns}/{key}    body is the value; 403 unless the
//	                                             enable-guest-attributes attribute is TRUE
//	GET  instance/guest-attributes/{ns}/{key}
//	DELETE instance/guest-attributes/{ns}/{key}
//	GET  instance/name, instance/zone, instance/id, project/project-id
//
// Every request needs the Metadata-Flavor: Google header (403 otherwise),
// and every answer carries it.
type MetadataServer struct {
	srv *httptest.Server
	rec recorder
	vm  *vm
	id  vmIdentity

	mu              sync.Mutex
	maxWait         time.Duration
	noWaitOnMissing bool
	waiters         int
	dropWaiters     chan struct{} // closed by DropWaiters
	closeOnce       sync.Once
}

// NewMetadataServer starts a metadata server of a VM of its own (not linked
// to a Server), with guest attributes enabled (enable-guest-attributes=TRUE).
func NewMetadataServer() *MetadataServer {
	v := newVM()
	v.replace([]string{"enable-guest-attributes"}, map[string]string{"enable-guest-attributes": "TRUE"})
	return newMetadataServer(v, vmIdentity{name: "test-vm", zone: "us-central1-a", id: "1234567890", project: "test-project"})
}

func newMetadataServer(v *vm, id vmIdentity) *MetadataServer {
	m := &MetadataServer{vm: v, id: id, maxWait: 60 * time.Second, dropWaiters: make(chan struct{})}
	m.rec.prefix = "/computeMetadata/v1"
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	return m
}

// URL is the server's root URL (http://127.0.0.1:port); the metadata API is
// under URL()+"/computeMetadata/v1".
func (m *MetadataServer) URL() string { return m.srv.URL }

// BaseURL is URL()+"/computeMetadata/v1".
func (m *MetadataServer) BaseURL() string { return m.srv.URL + "/computeMetadata/v1" }

// Client is an HTTP client for the server.
func (m *MetadataServer) Client() *http.Client { return m.srv.Client() }

// Close stops the server, ending the waits in progress.
func (m *MetadataServer) Close() {
	m.closeOnce.Do(func() {
		m.srv.CloseClientConnections()
		m.srv.Close()
	})
}

// SetMaxWait sets how long a wait_for_change request without timeout_sec
// blocks at most (default 60s).
func (m *MetadataServer) SetMaxWait(d time.Duration) {
	m.mu.Lock()
	m.maxWait = d
	m.mu.Unlock()
}

// SetNoWaitOnMissing makes wait_for_change on an absent key answer 404 at
// once, without an ETag, as a conservative server might; clients must then
// pace their polling themselves.
func (m *MetadataServer) SetNoWaitOnMissing(b bool) {
	m.mu.Lock()
	m.noWaitOnMissing = b
	m.mu.Unlock()
}

// SetAttribute sets an instance attribute (custom metadata); on a linked
// server this is the instance's metadata, fingerprint included.
func (m *MetadataServer) SetAttribute(key, value string) { m.vm.set(key, value) }

// DeleteAttribute removes an instance attribute.
func (m *MetadataServer) DeleteAttribute(key string) { m.vm.del(key) }

// Attribute returns an instance attribute and whether it is set.
func (m *MetadataServer) Attribute(key string) (string, bool) {
	v, ok, _, _ := m.vm.get(key)
	return v, ok
}

// GuestAttributes returns the guest attributes written ("namespace/key" →
// value).
func (m *MetadataServer) GuestAttributes() map[string]string { return m.vm.guestCopy() }

// Waiters is how many wait_for_change requests are blocked right now.
func (m *MetadataServer) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waiters
}

// FailNext makes the next times requests of method ("" for any) whose path
// matches pathPattern (a path.Match glob over the whole path or the path
// after /computeMetadata/v1, e.g. "/instance/attributes/*") answer status.
func (m *MetadataServer) FailNext(method, pathPattern string, status, times int) {
	m.rec.add(&fault{kind: faultFail, method: method, pattern: pathPattern, status: status, times: times})
}

// DropNext makes the next times matching requests wait for after, then
// lose their connection without an answer (a dropped long poll).
func (m *MetadataServer) DropNext(method, pathPattern string, after time.Duration, times int) {
	m.rec.add(&fault{kind: faultDrop, method: method, pattern: pathPattern, delay: after, times: times})
}

// DelayNext holds the next times matching requests for d (or until the
// client gives up) before serving them; with a d past the client's timeout
// it is a hung connection.
func (m *MetadataServer) DelayNext(method, pathPattern string, d time.Duration, times int) {
	m.rec.add(&fault{kind: faultDelay, method: method, pattern: pathPattern, delay: d, times: times})
}

// DropWaiters closes the connections of the wait_for_change requests
// blocked right now, without an answer: long polls dropped mid-wait.
func (m *MetadataServer) DropWaiters() {
	m.mu.Lock()
	close(m.dropWaiters)
	m.dropWaiters = make(chan struct{})
	m.mu.Unlock()
}

// Calls lists the requests received that match.
func (m *MetadataServer) Calls(method, pathPattern string) []Call {
	return m.rec.matching(method, pathPattern)
}

func (m *MetadataServer) serve(w http.ResponseWriter, r *http.Request) {
	m.rec.record(r)
	w.Header().Set("Metadata-Flavor", "Google")
	w.Header().Set("Server", "Metadata Server for VM")
	if r.Header.Get("Metadata-Flavor") != "Google" {
		http.Error(w, "Missing required header: Metadata-Flavor", http.StatusForbidden)
		return
	}
	if f := m.rec.take(r, faultDelay); f != nil {
		if !sleepCtx(r, f.delay) {
			return
		}
	}
	if f := m.rec.take(r, faultDrop); f != nil {
		if sleepCtx(r, f.delay) {
			dropConn(w)
		}
		return
	}
	if f := m.rec.take(r, faultFail); f != nil {
		http.Error(w, http.StatusText(f.status), f.status)
		return
	}
	p, ok := strings.CutPrefix(r.URL.Path, "/computeMetadata/v1/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	switch {
	case p == "instance/attributes/" && r.Method == http.MethodGet:
		items, _ := m.vm.items()
		var keys []string
		for _, it := range items {
			keys = append(keys, it.key)
		}
		sort.Strings(keys)
		w.Header().Set("Content-Type", "application/text")
		for _, k := range keys {
			io.WriteString(w, k+"\n")
		}
	case strings.HasPrefix(p, "instance/attributes/") && r.Method == http.MethodGet:
		m.attribute(w, r, strings.TrimPrefix(p, "instance/attributes/"))
	case strings.HasPrefix(p, "instance/guest-attributes/"):
		m.guestAttribute(w, r, strings.TrimPrefix(p, "instance/guest-attributes/"))
	case p == "instance/name" && r.Method == http.MethodGet:
		io.WriteString(w, m.id.name)
	case p == "instance/id" && r.Method == http.MethodGet:
		io.WriteString(w, m.id.id)
	case p == "instance/zone" && r.Method == http.MethodGet:
		io.WriteString(w, "projects/"+m.id.project+"/zones/"+m.id.zone)
	case p == "project/project-id" && r.Method == http.MethodGet:
		io.WriteString(w, m.id.project)
	default:
		http.NotFound(w, r)
	}
}

func (m *MetadataServer) attribute(w http.ResponseWriter, r *http.Request, key string) {
	q := r.URL.Query()
	value, ok, etag, changed := m.vm.get(key)
	if q.Get("wait_for_change") == "true" {
		m.mu.Lock()
		wait := m.maxWait
		noWait := m.noWaitOnMissing
		m.mu.Unlock()
		if ts := q.Get("timeout_sec"); ts != "" {
			n, err := strconv.Atoi(ts)
			if err != nil || n <= 0 {
				http.Error(w, "timeout_sec must be a positive integer", http.StatusBadRequest)
				return
			}
			wait = time.Duration(n) * time.Second
		}
		ref := q.Get("last_etag")
		if ref == "" {
			ref = etag // no etag: wait for the next change
		}
		if ref == etag && !(noWait && !ok) {
			m.mu.Lock()
			m.waiters++
			dropped := m.dropWaiters
			m.mu.Unlock()
			timer := time.NewTimer(wait)
			drop := false
		loop:
			for {
				select {
				case <-dropped:
					drop = true
					break loop
				case <-changed:
					value, ok, etag, changed = m.vm.get(key)
					if etag != ref {
						break loop
					}
				case <-timer.C:
					break loop
				case <-r.Context().Done():
					break loop
				}
			}
			timer.Stop()
			m.mu.Lock()
			m.waiters--
			m.mu.Unlock()
			if drop {
				dropConn(w)
				return
			}
			if r.Context().Err() != nil {
				return
			}
		}
		if noWait && !ok {
			http.NotFound(w, r)
			return
		}
	}
	w.Header().Set("ETag", etag)
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/text")
	io.WriteString(w, value)
}

func (m *MetadataServer) guestAttribute(w http.ResponseWriter, r *http.Request, nsKey string) {
	ns, key, _ := strings.Cut(nsKey, "/")
	if ns == "" || key == "" || strings.Contains(key, "/") {
		http.Error(w, "guest attributes are namespace/key", http.StatusBadRequest)
		return
	}
	if !m.vm.guestEnabled() {
		http.Error(w, "Guest attributes endpoint access is disabled.", http.StatusForbidden)
		return
	}
	switch r.Method {
	case http.MethodPut:
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.vm.setGuest(nsKey, string(b))
	case http.MethodGet:
		g := m.vm.guestCopy()
		v, ok := g[nsKey]
		if !ok {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, v)
	case http.MethodDelete:
		m.vm.delGuest(nsKey)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}
