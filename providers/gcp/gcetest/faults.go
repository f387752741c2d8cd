package gcetest

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
)

// Call is one request a fake server received.
type Call struct {
	Method string
	Path   string
	Query  url.Values
	Body   []byte
	Header http.Header
	At     time.Time
}

type faultKind int

const (
	faultFail   faultKind = iota // answer with an error status
	faultDelay                   // hold the request, then serve it
	faultDrop                    // hold the request, then close the connection without an answer
	faultOpFail                  // serve the request, but the operation it starts ends in an error
	faultHook                    // run a function, then serve the request
)

type fault struct {
	kind    faultKind
	method  string
	pattern string
	status  int
	delay   time.Duration
	times   int
	fn      func()
}

// recorder keeps the calls a fake received and the faults queued for it.
type recorder struct {
	mu     sync.Mutex
	prefix string // path prefix that patterns may leave out
	calls  []Call
	faults []*fault
}

// matchPath reports whether pattern (a path.Match glob; "" or "**" match
// everything) matches p, or p with the recorder's prefix cut off.
func (r *recorder) matchPath(pattern, p string) bool {
	if pattern == "" || pattern == "**" {
		return true
	}
	if ok, _ := path.Match(pattern, p); ok {
		return true
	}
	if r.prefix != "" && strings.HasPrefix(p, r.prefix) {
		if ok, _ := path.Match(pattern, strings.TrimPrefix(p, r.prefix)); ok {
			return true
		}
	}
	return false
}

func methodMatches(want, got string) bool {
	return want == "" || want == "*" || strings.EqualFold(want, got)
}

// record stores the call (restoring the body for the handler).
func (r *recorder) record(req *http.Request) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	c := Call{
		Method: req.Method,
		Path:   req.URL.Path,
		Query:  req.URL.Query(),
		Body:   body,
		Header: req.Header.Clone(),
		At:     time.Now(),
	}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) add(f *fault) {
	if f.times <= 0 {
		f.times = 1
	}
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
}

// take consumes the first queued fault of one of kinds matching the request.
func (r *recorder) take(req *http.Request, kinds ...faultKind) *fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, f := range r.faults {
		if !kindIn(f.kind, kinds) || !methodMatches(f.method, req.Method) || !r.matchPath(f.pattern, req.URL.Path) {
			continue
		}
		cp := *f
		f.times--
		if f.times <= 0 {
			r.faults = append(r.faults[:i:i], r.faults[i+1:]...)
		}
		return &cp
	}
	return nil
}

func kindIn(k faultKind, ks []faultKind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func (r *recorder) matching(method, pattern string) []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Call
	for _, c := range r.calls {
		if methodMatches(method, c.Method) && r.matchPath(pattern, c.Path) {
			out = append(out, c)
		}
	}
	return out
}

// pendingFaults reports how many injected faults are still queued.
func (r *recorder) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, f := range r.faults {
		n += f.times
	}
	return n
}

// sleepCtx waits d or until the request is cancelled; false if cancelled.
func sleepCtx(req *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-req.Context().Done():
		return false
	}
}

// drop closes the client's connection without an answer.
func dropConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}
