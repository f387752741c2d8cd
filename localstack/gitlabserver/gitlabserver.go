// Package gitlabserver is the local stack's GitLab: a loopback server of the
// part of the GitLab v4 REST API that creates, lists, rotates and deletes CI
// runners, and of the runner API's job queue. fleet up --stack local runs it
// as a process beside the control plane (cmd/fleet's gitlab.go), the
// stand-in runner (localstack/standin) takes jobs from it, and the tests use
// it as their GitLab. It speaks the wire protocol closely enough that the
// real gitlab.com/gitlab-org/api/client-go works against it unchanged:
//
//	srv := gitlabserver.New()
//	defer srv.Close()
//	srv.AddUser("glpat-admin", gitlabserver.User{Admin: true, Scopes: []string{gitlabserver.ScopeAPI}})
//	c, _ := gitlab.NewClient("glpat-admin", gitlab.WithBaseURL(srv.URL()+"/api/v4"))
//
// The server keeps state (users and their personal access tokens, groups,
// projects, runners and their authentication tokens) and can inject faults:
// an error status without acting (FailNext), acting and then dropping the
// connection without a response (DropAfterNext), and answering late
// (DelayNext).
//
// Endpoints, all under /api/v4:
//
//	POST   /user/runners                          create a runner (PAT: api or create_runner)
//	GET    /runners                               runners the user owns (PAT: api or read_api)
//	GET    /runners/all                           every runner, admin only (PAT: api or read_api)
//	GET    /groups/:id/runners                    group's and instance runners (PAT: api, read_api or manage_runner)
//	GET    /projects/:id/runners                  project's and instance runners (PAT: api, read_api or manage_runner)
//	GET    /runners/:id                           details, with status and contacted_at from its managers (PAT: api, read_api or manage_runner)
//	GET    /runners/:id/managers                  the managers GitLab recorded (PAT: api, read_api or manage_runner)
//	DELETE /runners/:id                           delete (PAT: api or manage_runner)
//	POST   /runners/:id/reset_authentication_token new token (PAT: api or manage_runner)
//	POST   /runners/verify                        check a runner authentication token (records the system_id's manager)
//	DELETE /runners                               delete the runner owning an authentication token
//	DELETE /runners/managers                      delete one manager (system_id) of the runner owning an authentication token
//	POST   /runners                               registration-token registration: always 410 Gone
//	POST   /jobs/request, PUT /jobs/:id, PATCH /jobs/:id/trace
//	                                              the runner API's job queue (see jobs.go, QueueJob)
//	GET    /projects/:id/jobs/:job_id             a job (PAT: api or read_api; see projectjobs.go)
//	POST   /projects/:id/jobs/:job_id/retry       retry a finished job (PAT: api; Developer role)
//
// The server never logs a token: log lines (see SetLogf) carry methods, paths,
// statuses and runner IDs only.
package gitlabserver

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Personal access token scopes the server knows about.
const (
	ScopeAPI          = "api"
	ScopeReadAPI      = "read_api"
	ScopeCreateRunner = "create_runner"
	ScopeManageRunner = "manage_runner"
)

// Runner types, as GitLab spells them.
const (
	InstanceType = "instance_type"
	GroupType    = "group_type"
	ProjectType  = "project_type"
)

// Access levels, as GitLab spells them.
const (
	NotProtected = "not_protected"
	RefProtected = "ref_protected"
)

// TokenPrefix starts every runner authentication token the server issues.
const TokenPrefix = "glrt-"

const (
	apiPrefix      = "/api/v4"
	defaultPerPage = 20
	maxPerPage     = 100
	minTimeout     = 600 // seconds; GitLab refuses a maximum_timeout under 10 minutes
	maxBodyBytes   = 1 << 20
	expiredPATText = "Token is expired. You can either do re-authorization or token refresh."
	scopeErrorText = "The request requires higher privileges than provided by the access token."
)

// User is the owner of a personal access token.
type User struct {
	// Admin makes the user an instance administrator: instance runners,
	// GET /runners/all, and every group, project and runner.
	Admin bool
	// Scopes of the token: ScopeAPI, ScopeReadAPI, ScopeCreateRunner,
	// ScopeManageRunner (others are kept but grant nothing here).
	Scopes []string
	// ExpiresAt, when set, is the instant from which the token is refused
	// with 401 invalid_token.
	ExpiresAt time.Time
	// Groups and Projects the user can manage runners of (and, for a
	// project, retry its jobs: GitLab's Developer role or more). AddUser
	// creates them on the server if they do not exist yet.
	Groups, Projects []int64
	// ReporterProjects are projects whose jobs the user may read but not
	// retry (GitLab's Reporter role).
	ReporterProjects []int64
}

// Runner is the server's record of one runner.
type Runner struct {
	ID              int64
	Type            string // InstanceType, GroupType or ProjectType
	GroupID         int64  // set for GroupType
	ProjectID       int64  // set for ProjectType
	Description     string
	Tags            []string
	RunUntagged     bool
	Locked          bool
	Paused          bool
	AccessLevel     string // NotProtected or RefProtected
	MaximumTimeout  int64  // seconds; 0 when unset
	MaintenanceNote string
	Token           string
	TokenExpiresAt  time.Time // zero when the token does not expire
	TokenResets     int
	CreatedAt       time.Time
}

type faultKind int

const (
	faultFail faultKind = iota
	faultDrop
	faultDelay
)

type fault struct {
	kind    faultKind
	method  string
	pattern string
	status  int
	delay   time.Duration
	left    int
}

func (f *fault) matches(method, p string) bool {
	return methodMatches(f.method, method) && patternMatches(f.pattern, p)
}

type call struct{ method, path string }

// Server is a fake GitLab. All methods are safe for concurrent use.
type Server struct {
	srv       *httptest.Server
	closing   chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	users    map[string]User // by personal access token
	groups   map[int64]bool
	projects map[int64]bool
	runners  map[int64]*Runner
	nextID   int64
	lifetime time.Duration
	faults   []*fault
	calls    []call
	logf     func(format string, args ...any)

	jobs      []*Job
	nextJobID int64

	managers map[int64]map[string]*Manager // by runner, then system_id
	clock    func() time.Time              // judges managers' status; nil: time.Now
}

// New starts a server on 127.0.0.1. Close it when done.
func New() *Server {
	s := newServer()
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// NewOn starts a server listening on addr (host:port, port 0 for any), for
// clients that cannot reach 127.0.0.1: runners in containers reach the host
// at their network's gateway address. Close it when done.
func NewOn(addr string) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gitlabserver: listening on %s: %w", addr, err)
	}
	s := newServer()
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Listener.Close()
	s.srv.Listener = l
	s.srv.Start()
	return s, nil
}

func newServer() *Server {
	return &Server{
		closing:  make(chan struct{}),
		users:    map[string]User{},
		groups:   map[int64]bool{},
		projects: map[int64]bool{},
		runners:  map[int64]*Runner{},
		nextID:   1,
	}
}

// URL is the server's base URL, without /api/v4.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server. Requests held by DelayNext stop waiting and are
// dropped without a response.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.srv.Close()
	})
}

// SetLogf sets where the server logs requests (for example t.Logf); nil
// silences it. Log lines never carry a token.
func (s *Server) SetLogf(logf func(format string, args ...any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logf = logf
}

func (s *Server) log(format string, args ...any) {
	s.mu.Lock()
	logf := s.logf
	s.mu.Unlock()
	if logf != nil {
		logf("gitlabserver: "+format, args...)
	}
}

// AddUser adds (or replaces) the user owning the personal access token pat.
// The user's groups and projects are created if missing.
func (s *Server) AddUser(pat string, u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u.Scopes = slices.Clone(u.Scopes)
	u.Groups = slices.Clone(u.Groups)
	u.Projects = slices.Clone(u.Projects)
	u.ReporterProjects = slices.Clone(u.ReporterProjects)
	for _, p := range u.ReporterProjects {
		s.projects[p] = true
	}
	for _, g := range u.Groups {
		s.groups[g] = true
	}
	for _, p := range u.Projects {
		s.projects[p] = true
	}
	s.users[pat] = u
}

// AddGroup creates a group no user can reach unless listed in User.Groups
// (administrators reach every group).
func (s *Server) AddGroup(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups[id] = true
}

// AddProject creates a project, like AddGroup.
func (s *Server) AddProject(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.projects[id] = true
}

// SetTokenLifetime sets how long runner authentication tokens issued from now
// on stay valid; 0 (the default) issues tokens that never expire.
func (s *Server) SetTokenLifetime(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lifetime = d
}

// AddRunner stores a runner as if an earlier run had created it, and returns
// the stored copy. A zero ID, Token or AccessLevel is filled in; a zero
// CreatedAt becomes now. Its group or project is created if missing.
func (s *Server) AddRunner(r Runner) Runner {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.ID == 0 {
		r.ID = s.nextID
	}
	if r.ID >= s.nextID {
		s.nextID = r.ID + 1
	}
	if r.Token == "" {
		r.Token = s.newTokenLocked()
	}
	if r.AccessLevel == "" {
		r.AccessLevel = NotProtected
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now()
	}
	switch r.Type {
	case GroupType:
		s.groups[r.GroupID] = true
	case ProjectType:
		s.projects[r.ProjectID] = true
	}
	r.Tags = slices.Clone(r.Tags)
	stored := r
	s.runners[r.ID] = &stored
	return copyRunner(&stored)
}

// Runners is a snapshot of every runner, by ascending ID.
func (s *Server) Runners() []Runner {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Runner, 0, len(s.runners))
	for _, r := range s.sortedRunnersLocked() {
		out = append(out, copyRunner(r))
	}
	return out
}

// ValidToken reports whether tok is the current, unexpired authentication
// token of a runner.
func (s *Server) ValidToken(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runnerByTokenLocked(tok) != nil
}

// FailNext makes the next times requests matching method and pathPattern
// fail with status and a GitLab-like JSON body, without acting.
//
// method "" or "*" matches any method. pathPattern is matched against the
// request path (with /api/v4) by path.Match: "*" stands for one path segment,
// so "/api/v4/runners/*" matches /api/v4/runners/7 and /api/v4/runners/all
// but not /api/v4/runners/7/reset_authentication_token.
//
// Faults are consumed in the order they were added: a request takes at most
// one DelayNext and then at most one FailNext or DropAfterNext, each the
// earliest added that matches and has uses left.
func (s *Server) FailNext(method, pathPattern string, status int, times int) {
	if status < 100 || status > 599 {
		panic(fmt.Sprintf("gitlabserver: FailNext: bad status %d", status))
	}
	s.addFault(&fault{kind: faultFail, method: method, pattern: pathPattern, status: status, left: times})
}

// DropAfterNext makes the server carry out the next times requests matching
// method and pathPattern (creating the runner, resetting the token, ...) and
// then close the connection without writing a response, so the client sees a
// transport error although the server acted. Matching is as for FailNext.
func (s *Server) DropAfterNext(method, pathPattern string, times int) {
	s.addFault(&fault{kind: faultDrop, method: method, pattern: pathPattern, left: times})
}

// DelayNext makes the next times requests matching method and pathPattern
// wait d before they are handled. The request is still carried out after the
// wait even if its client has given up in the meantime, like a slow server
// that finishes work nobody waits for; when the server closes during the wait
// the request is dropped unhandled. Matching is as for FailNext.
func (s *Server) DelayNext(method, pathPattern string, d time.Duration, times int) {
	if d < 0 {
		panic("gitlabserver: DelayNext: negative delay")
	}
	s.addFault(&fault{kind: faultDelay, method: method, pattern: pathPattern, delay: d, left: times})
}

// Calls is how many requests since New or the last Reset matched method and
// pathPattern (matched as for FailNext), faulted ones included.
func (s *Server) Calls(method, pathPattern string) int {
	mustValidPattern(pathPattern)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if methodMatches(method, c.method) && patternMatches(pathPattern, c.path) {
			n++
		}
	}
	return n
}

// Reset forgets pending faults and counted calls; users, groups, projects
// and runners stay.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
	s.calls = nil
}

func (s *Server) addFault(f *fault) {
	if f.left < 1 {
		panic(fmt.Sprintf("gitlabserver: times must be at least 1, got %d", f.left))
	}
	mustValidPattern(f.pattern)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
}

// takeFaultLocked consumes one use of the earliest matching fault of the
// wanted kinds.
func (s *Server) takeFaultLocked(method, p string, delay bool) *fault {
	for i, f := range s.faults {
		if (f.kind == faultDelay) != delay || !f.matches(method, p) {
			continue
		}
		f.left--
		if f.left == 0 {
			s.faults = slices.Delete(s.faults, i, i+1)
		}
		return f
	}
	return nil
}

func mustValidPattern(p string) {
	if _, err := path.Match(p, ""); err != nil {
		panic(fmt.Sprintf("gitlabserver: bad path pattern %q: %v", p, err))
	}
}

func methodMatches(want, got string) bool {
	return want == "" || want == "*" || strings.EqualFold(want, got)
}

func patternMatches(pattern, p string) bool {
	ok, err := path.Match(pattern, p)
	return err == nil && ok
}

// reply is an API answer, computed under the lock and written after it.
type reply struct {
	status int
	header http.Header
	body   any // nil: no body
	runner int64
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	method, p := r.Method, r.URL.Path
	s.mu.Lock()
	s.calls = append(s.calls, call{method, p})
	delay := s.takeFaultLocked(method, p, true)
	f := s.takeFaultLocked(method, p, false)
	s.mu.Unlock()

	if delay != nil {
		s.log("%s %s: delaying %s", method, p, delay.delay)
		t := time.NewTimer(delay.delay)
		select {
		case <-t.C:
		case <-s.closing:
			t.Stop()
			s.log("%s %s: server closing during delay, dropping", method, p)
			dropConnection(w)
			return
		}
	}
	if f != nil && f.kind == faultFail {
		s.log("%s %s: injected %d", method, p, f.status)
		writeReply(w, failReply(f.status))
		return
	}

	rep := s.route(r)
	if f != nil && f.kind == faultDrop {
		s.log("%s %s: acted (%d%s), dropping connection", method, p, rep.status, runnerNote(rep.runner))
		dropConnection(w)
		return
	}
	s.log("%s %s: %d%s", method, p, rep.status, runnerNote(rep.runner))
	writeReply(w, rep)
}

func runnerNote(id int64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf(" runner %d", id)
}

// dropConnection closes the client's connection without a response.
func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // the server closes the connection
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

func writeReply(w http.ResponseWriter, rep reply) {
	h := w.Header()
	for k, v := range rep.header {
		h[k] = v
	}
	if rep.body == nil {
		w.WriteHeader(rep.status)
		return
	}
	b, err := json.Marshal(rep.body)
	if err != nil {
		panic(err)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(rep.status)
	_, _ = w.Write(b)
}

func msg(status int, text string) reply {
	return reply{status: status, body: map[string]any{"message": text}}
}

// paramError is Grape's answer to a missing or malformed parameter.
func paramError(text string) reply {
	return reply{status: http.StatusBadRequest, body: map[string]any{"error": text}}
}

func failReply(status int) reply {
	rep := msg(status, fmt.Sprintf("%d %s", status, http.StatusText(status)))
	if status == http.StatusTooManyRequests {
		rep.header = http.Header{"Retry-After": {"1"}}
	}
	return rep
}

var (
	notFoundRoute  = reply{status: http.StatusNotFound, body: map[string]any{"error": "404 Not Found"}}
	runnerNotFound = msg(http.StatusNotFound, "404 Runner Not Found")
	forbidden      = msg(http.StatusForbidden, "403 Forbidden")
	noAccess       = msg(http.StatusForbidden, "403 Forbidden - No access granted")
)

func notAllowed(allow ...string) reply {
	return reply{
		status: http.StatusMethodNotAllowed,
		header: http.Header{"Allow": {strings.Join(allow, ", ")}},
		body:   map[string]any{"error": "405 Not Allowed"},
	}
}

// route dispatches an /api/v4 request.
func (s *Server) route(r *http.Request) reply {
	rest, ok := strings.CutPrefix(r.URL.Path, apiPrefix+"/")
	if !ok {
		return notFoundRoute
	}
	seg := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	m := r.Method
	if rep, ok := s.routeJobs(r, seg); ok {
		return rep
	}
	if rep, ok := s.routeProjectJobs(r, seg); ok {
		return rep
	}

	switch {
	case len(seg) == 2 && seg[0] == "user" && seg[1] == "runners":
		if m != http.MethodPost {
			return notAllowed(http.MethodPost)
		}
		return s.withParams(r, s.createRunner)
	case len(seg) == 1 && seg[0] == "runners":
		switch m {
		case http.MethodGet:
			return s.withParams(r, s.listOwnedRunners)
		case http.MethodPost:
			return msg(http.StatusGone, "410 Gone - runner registration disallowed")
		case http.MethodDelete:
			return s.withParams(r, s.deleteByToken)
		}
		return notAllowed(http.MethodGet, http.MethodPost, http.MethodDelete)
	case len(seg) == 2 && seg[0] == "runners" && seg[1] == "all":
		if m != http.MethodGet {
			return notAllowed(http.MethodGet)
		}
		return s.withParams(r, s.listAllRunners)
	case len(seg) == 2 && seg[0] == "runners" && seg[1] == "managers":
		if m != http.MethodDelete {
			return notAllowed(http.MethodDelete)
		}
		return s.withParams(r, s.deleteManager)
	case len(seg) == 2 && seg[0] == "runners" && seg[1] == "verify":
		if m != http.MethodPost {
			return notAllowed(http.MethodPost)
		}
		return s.withParams(r, s.verifyRunner)
	case len(seg) == 2 && seg[0] == "runners":
		id, bad := pathID(seg[1])
		if bad != nil {
			return *bad
		}
		switch m {
		case http.MethodGet:
			return s.withParams(r, func(q *params) reply { return s.getRunner(q, id) })
		case http.MethodPut:
			return s.withParams(r, func(q *params) reply { return s.updateRunner(q, id) })
		case http.MethodDelete:
			return s.withParams(r, func(q *params) reply { return s.deleteRunner(q, id) })
		}
		return notAllowed(http.MethodGet, http.MethodPut, http.MethodDelete)
	case len(seg) == 3 && seg[0] == "runners" && seg[2] == "managers":
		id, bad := pathID(seg[1])
		if bad != nil {
			return *bad
		}
		if m != http.MethodGet {
			return notAllowed(http.MethodGet)
		}
		return s.withParams(r, func(q *params) reply { return s.listManagers(q, id) })
	case len(seg) == 3 && seg[0] == "runners" && seg[2] == "reset_authentication_token":
		id, bad := pathID(seg[1])
		if bad != nil {
			return *bad
		}
		if m != http.MethodPost {
			return notAllowed(http.MethodPost)
		}
		return s.withParams(r, func(q *params) reply { return s.resetToken(q, id) })
	case len(seg) == 3 && (seg[0] == "groups" || seg[0] == "projects") && seg[2] == "runners":
		if m != http.MethodGet {
			return notAllowed(http.MethodGet)
		}
		return s.withParams(r, func(q *params) reply { return s.listScopeRunners(q, seg[0], seg[1]) })
	}
	return notFoundRoute
}

func pathID(v string) (int64, *reply) {
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		rep := paramError("id is invalid")
		return 0, &rep
	}
	return id, nil
}

// withParams reads the request's parameters, then runs h under the lock.
func (s *Server) withParams(r *http.Request, h func(*params) reply) reply {
	q, err := readParams(r)
	if err != nil {
		return reply{status: http.StatusBadRequest, body: map[string]any{"error": err.Error()}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return h(q)
}

// authLocked authenticates the request's personal access token and checks
// that it has one of the allowed scopes.
func (s *Server) authLocked(q *params, allowed ...string) (User, *reply) {
	tok := q.header.Get("Private-Token")
	if tok == "" {
		tok = q.query.Get("private_token")
	}
	if tok == "" {
		if a, ok := strings.CutPrefix(q.header.Get("Authorization"), "Bearer "); ok {
			tok = strings.TrimSpace(a)
		}
	}
	u, ok := s.users[tok]
	if tok == "" || !ok {
		rep := msg(http.StatusUnauthorized, "401 Unauthorized")
		return User{}, &rep
	}
	if !u.ExpiresAt.IsZero() && !time.Now().Before(u.ExpiresAt) {
		rep := reply{
			status: http.StatusUnauthorized,
			header: http.Header{"Www-Authenticate": {fmt.Sprintf(
				`Bearer realm="Protected by OAuth 2.0", error="invalid_token", error_description=%q`, expiredPATText)}},
			body: map[string]any{"error": "invalid_token", "error_description": expiredPATText},
		}
		return User{}, &rep
	}
	for _, sc := range u.Scopes {
		if slices.Contains(allowed, sc) {
			return u, nil
		}
	}
	rep := reply{status: http.StatusForbidden, body: map[string]any{
		"error":             "insufficient_scope",
		"error_description": scopeErrorText,
		"scope":             strings.Join(allowed, " "),
	}}
	return User{}, &rep
}

func (s *Server) canGroupLocked(u User, id int64) bool {
	return s.groups[id] && (u.Admin || slices.Contains(u.Groups, id))
}

func (s *Server) canProjectLocked(u User, id int64) bool {
	return s.projects[id] && (u.Admin || slices.Contains(u.Projects, id))
}

// canManageLocked: may u change or delete the runner?
func (s *Server) canManageLocked(u User, r *Runner) bool {
	switch {
	case u.Admin:
		return true
	case r.Type == GroupType:
		return s.canGroupLocked(u, r.GroupID)
	case r.Type == ProjectType:
		return s.canProjectLocked(u, r.ProjectID)
	}
	return false
}

// canReadLocked: may u see the runner? Instance runners are visible to all.
func (s *Server) canReadLocked(u User, r *Runner) bool {
	return r.Type == InstanceType || s.canManageLocked(u, r)
}

func (s *Server) createRunner(q *params) reply {
	u, bad := s.authLocked(q, ScopeAPI, ScopeCreateRunner)
	if bad != nil {
		return *bad
	}
	v := &validation{}
	rt, hasType := v.str(q, "runner_type")
	switch {
	case !hasType:
		v.fail("runner_type is missing")
	case rt != InstanceType && rt != GroupType && rt != ProjectType:
		v.fail("runner_type does not have a valid value")
	}
	var gid, pid int64
	var hasGID, hasPID bool
	if rt == GroupType {
		if gid, hasGID = v.int(q, "group_id"); !hasGID {
			v.fail("group_id is missing")
		}
	}
	if rt == ProjectType {
		if pid, hasPID = v.int(q, "project_id"); !hasPID {
			v.fail("project_id is missing")
		}
	}
	desc, _ := v.str(q, "description")
	paused, _ := v.bool(q, "paused")
	locked, _ := v.bool(q, "locked")
	runUntagged, hasRunUntagged := v.bool(q, "run_untagged")
	tags, _ := v.strs(q, "tag_list")
	access, hasAccess := v.str(q, "access_level")
	if hasAccess && access != NotProtected && access != RefProtected {
		v.fail("access_level does not have a valid value")
	}
	timeout, hasTimeout := v.int(q, "maximum_timeout")
	note, _ := v.str(q, "maintenance_note")
	if len(note) > 1024 {
		v.fail("maintenance_note is too long (maximum is 1024 characters)")
	}
	if bad := v.reply(); bad != nil {
		return *bad
	}

	switch rt {
	case GroupType:
		if !s.canGroupLocked(u, gid) {
			return msg(http.StatusNotFound, "404 Group Not Found")
		}
	case ProjectType:
		if !s.canProjectLocked(u, pid) {
			return msg(http.StatusNotFound, "404 Project Not Found")
		}
	case InstanceType:
		if !u.Admin {
			return msg(http.StatusForbidden, "403 Forbidden - Insufficient permissions")
		}
	}

	if !hasRunUntagged {
		runUntagged = true
	}
	if !hasAccess {
		access = NotProtected
	}
	tags = normalizeTags(tags)
	switch {
	case hasTimeout && timeout < minTimeout:
		return msg(http.StatusBadRequest, "400 Bad request - Maximum timeout needs to be at least 10 minutes")
	case !runUntagged && len(tags) == 0:
		return msg(http.StatusBadRequest,
			"400 Bad request - Tags list can not be empty when runner is not allowed to pick untagged jobs")
	}

	r := &Runner{
		ID:              s.nextID,
		Type:            rt,
		GroupID:         gid,
		ProjectID:       pid,
		Description:     desc,
		Tags:            tags,
		RunUntagged:     runUntagged,
		Locked:          locked,
		Paused:          paused,
		AccessLevel:     access,
		MaximumTimeout:  timeout,
		MaintenanceNote: note,
		CreatedAt:       now(),
	}
	s.nextID++
	s.issueTokenLocked(r)
	s.runners[r.ID] = r
	return reply{status: http.StatusCreated, runner: r.ID, body: map[string]any{
		"id":               r.ID,
		"token":            r.Token,
		"token_expires_at": timeJSON(r.TokenExpiresAt),
	}}
}

func (s *Server) listAllRunners(q *params) reply {
	u, bad := s.authLocked(q, ScopeAPI, ScopeReadAPI)
	if bad != nil {
		return *bad
	}
	if !u.Admin {
		return forbidden
	}
	return s.listLocked(q, func(*Runner) bool { return true })
}

func (s *Server) listOwnedRunners(q *params) reply {
	u, bad := s.authLocked(q, ScopeAPI, ScopeReadAPI)
	if bad != nil {
		return *bad
	}
	return s.listLocked(q, func(r *Runner) bool { return r.Type != InstanceType && s.canManageLocked(u, r) })
}

func (s *Server) listScopeRunners(q *params, kind, rawID string) reply {
	u, bad := s.authLocked(q, ScopeAPI, ScopeReadAPI, ScopeManageRunner)
	if bad != nil {
		return *bad
	}
	id, err := strconv.ParseInt(rawID, 10, 64)
	if kind == "groups" {
		if err != nil || !s.canGroupLocked(u, id) {
			return msg(http.StatusNotFound, "404 Group Not Found")
		}
		return s.listLocked(q, func(r *Runner) bool {
			return r.Type == InstanceType || (r.Type == GroupType && r.GroupID == id)
		})
	}
	if err != nil || !s.canProjectLocked(u, id) {
		return msg(http.StatusNotFound, "404 Project Not Found")
	}
	return s.listLocked(q, func(r *Runner) bool {
		return r.Type == InstanceType || (r.Type == ProjectType && r.ProjectID == id)
	})
}

// listLocked filters (type, paused, status, tag_list), orders by ID and
// paginates like GitLab's offset pagination.
func (s *Server) listLocked(q *params, in func(*Runner) bool) reply {
	v := &validation{}
	typ, hasType := v.str(q, "type")
	if hasType && typ != InstanceType && typ != GroupType && typ != ProjectType {
		v.fail("type does not have a valid value")
	}
	paused, hasPaused := v.bool(q, "paused")
	status, hasStatus := v.str(q, "status")
	if hasStatus && !slices.Contains([]string{"active", "paused", "online", "offline", "stale", "never_contacted"}, status) {
		v.fail("status does not have a valid value")
	}
	tags, hasTags := v.strs(q, "tag_list")
	page, hasPage := v.int(q, "page")
	perPage, hasPerPage := v.int(q, "per_page")
	if bad := v.reply(); bad != nil {
		return *bad
	}
	if !hasPage || page < 1 {
		page = 1
	}
	if !hasPerPage || perPage < 1 {
		perPage = defaultPerPage
	}
	perPage = min(perPage, maxPerPage)

	var items []*Runner
	for _, r := range s.sortedRunnersLocked() {
		switch {
		case !in(r),
			hasType && r.Type != typ,
			hasPaused && r.Paused != paused,
			hasStatus && !statusMatches(r, status),
			hasTags && !containsAll(r.Tags, tags):
			continue
		}
		items = append(items, r)
	}

	total := int64(len(items))
	totalPages := max((total+perPage-1)/perPage, 1)
	lo := min((page-1)*perPage, total)
	hi := min(lo+perPage, total)
	body := make([]runnerJSON, 0, hi-lo)
	for _, r := range items[lo:hi] {
		body = append(body, toRunnerJSON(r))
	}

	h := http.Header{}
	h.Set("X-Page", strconv.FormatInt(page, 10))
	h.Set("X-Per-Page", strconv.FormatInt(perPage, 10))
	h.Set("X-Total", strconv.FormatInt(total, 10))
	h.Set("X-Total-Pages", strconv.FormatInt(totalPages, 10))
	next, prev := "", ""
	if page < totalPages {
		next = strconv.FormatInt(page+1, 10)
	}
	if page > 1 {
		prev = strconv.FormatInt(page-1, 10)
	}
	h.Set("X-Next-Page", next)
	h.Set("X-Prev-Page", prev)
	var links []string
	link := func(p int64, rel string) {
		links = append(links, fmt.Sprintf(`<%s>; rel="%s"`, q.pageURL(p, perPage), rel))
	}
	if prev != "" {
		link(page-1, "prev")
	}
	if next != "" {
		link(page+1, "next")
	}
	link(1, "first")
	link(totalPages, "last")
	h.Set("Link", strings.Join(links, ", "))
	return reply{status: http.StatusOK, header: h, body: body}
}

func statusMatches(r *Runner, status string) bool {
	switch status {
	case "never_contacted":
		return true // no runner ever contacts this server
	case "active":
		return !r.Paused
	case "paused":
		return r.Paused
	}
	return false // online, offline, stale
}

func (s *Server) getRunner(q *params, id int64) reply {
	u, bad := s.authLocked(q, ScopeAPI, ScopeReadAPI, ScopeManageRunner)
	if bad != nil {
		return *bad
	}
	r := s.runners[id]
	if r == nil {
		return runnerNotFound
	}
	if !s.canReadLocked(u, r) {
		return noAccess
	}
	d := s.detailsJSON(r)
	// GitLab's runner status and contacted_at are its managers' latest.
	d.Status, d.Online, d.ContactedAt = s.runnerStatusLocked(id)
	return reply{status: http.StatusOK, runner: id, body: d}
}

// updateRunner is PUT /runners/:id (UpdateRunnerDetails): only the fields
// sent change.
func (s *Server) updateRunner(q *params, id int64) reply {
	u, bad := s.authLocked(q, ScopeAPI, ScopeManageRunner)
	if bad != nil {
		return *bad
	}
	r := s.runners[id]
	if r == nil {
		return runnerNotFound
	}
	if !s.canManageLocked(u, r) {
		return noAccess
	}
	v := &validation{}
	if d, ok := v.str(q, "description"); ok {
		r.Description = d
	}
	if b, ok := v.bool(q, "paused"); ok {
		r.Paused = b
	}
	if b, ok := v.bool(q, "locked"); ok {
		r.Locked = b
	}
	if b, ok := v.bool(q, "run_untagged"); ok {
		r.RunUntagged = b
	}
	if t, ok := v.strs(q, "tag_list"); ok {
		r.Tags = t
	}
	if a, ok := v.str(q, "access_level"); ok {
		if a != NotProtected && a != RefProtected {
			v.fail("access_level does not have a valid value")
		}
		r.AccessLevel = a
	}
	if t, ok := v.int(q, "maximum_timeout"); ok {
		if t < 600 {
			return msg(http.StatusBadRequest, "400 Bad request - Maximum timeout needs to be at least 10 minutes")
		}
		r.MaximumTimeout = t
	}
	if n, ok := v.str(q, "maintenance_note"); ok {
		r.MaintenanceNote = n
	}
	if bad := v.reply(); bad != nil {
		return *bad
	}
	return reply{status: http.StatusOK, runner: id, body: s.detailsJSON(r)}
}

func (s *Server) deleteRunner(q *params, id int64) reply {
	u, bad := s.authLocked(q, ScopeAPI, ScopeManageRunner)
	if bad != nil {
		return *bad
	}
	r := s.runners[id]
	if r == nil {
		return runnerNotFound
	}
	if !s.canManageLocked(u, r) {
		return noAccess
	}
	delete(s.runners, id)
	return reply{status: http.StatusNoContent, runner: id}
}

func (s *Server) resetToken(q *params, id int64) reply {
	u, bad := s.authLocked(q, ScopeAPI, ScopeManageRunner)
	if bad != nil {
		return *bad
	}
	r := s.runners[id]
	if r == nil {
		return runnerNotFound
	}
	if !s.canManageLocked(u, r) {
		return noAccess
	}
	s.issueTokenLocked(r)
	r.TokenResets++
	return reply{status: http.StatusCreated, runner: id, body: map[string]any{
		"token":            r.Token,
		"token_expires_at": timeJSON(r.TokenExpiresAt),
	}}
}

// runnerToken is the runner API's authentication: a token parameter.
func (s *Server) runnerTokenLocked(q *params) (*Runner, *reply) {
	v := &validation{}
	tok, ok := v.str(q, "token")
	if !ok {
		v.fail("token is missing")
	}
	if bad := v.reply(); bad != nil {
		return nil, bad
	}
	r := s.runnerByTokenLocked(tok)
	if r == nil {
		return nil, &forbidden
	}
	return r, nil
}

func (s *Server) verifyRunner(q *params) reply {
	r, bad := s.runnerTokenLocked(q)
	if bad != nil {
		return *bad
	}
	v := &validation{}
	systemID, _ := v.str(q, "system_id")
	if bad := v.reply(); bad != nil {
		return *bad
	}
	// Verify is a runner's call: GitLab records (or stamps) the runner
	// manager of its system_id, as for a job request.
	s.contactedLocked(r.ID, systemID)
	return reply{status: http.StatusOK, runner: r.ID, body: map[string]any{
		"id":               r.ID,
		"token":            r.Token,
		"token_expires_at": timeJSON(r.TokenExpiresAt),
	}}
}

func (s *Server) deleteByToken(q *params) reply {
	r, bad := s.runnerTokenLocked(q)
	if bad != nil {
		return *bad
	}
	delete(s.runners, r.ID)
	return reply{status: http.StatusNoContent, runner: r.ID}
}

func (s *Server) runnerByTokenLocked(tok string) *Runner {
	if tok == "" {
		return nil
	}
	for _, r := range s.runners {
		if r.Token == tok {
			if !r.TokenExpiresAt.IsZero() && !time.Now().Before(r.TokenExpiresAt) {
				return nil
			}
			return r
		}
	}
	return nil
}

func (s *Server) issueTokenLocked(r *Runner) {
	r.Token = s.newTokenLocked()
	r.TokenExpiresAt = time.Time{}
	if s.lifetime > 0 {
		r.TokenExpiresAt = now().Add(s.lifetime)
	}
}

const tokenAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"

func (s *Server) newTokenLocked() string {
	for {
		var b strings.Builder
		b.WriteString(TokenPrefix)
		for range 20 {
			n, err := rand.Int(rand.Reader, big.NewInt(int64(len(tokenAlphabet))))
			if err != nil {
				panic(err)
			}
			b.WriteByte(tokenAlphabet[n.Int64()])
		}
		tok := b.String()
		taken := false
		for _, r := range s.runners {
			taken = taken || r.Token == tok
		}
		if !taken {
			return tok
		}
	}
}

func (s *Server) sortedRunnersLocked() []*Runner {
	out := make([]*Runner, 0, len(s.runners))
	for _, r := range s.runners {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func copyRunner(r *Runner) Runner {
	c := *r
	c.Tags = slices.Clone(r.Tags)
	return c
}

// now is the current time at GitLab's millisecond precision, so that what a
// client parses back equals what the server stores.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// timeJSON renders a time as GitLab does (ISO 8601, milliseconds, UTC), or
// null for the zero time.
func timeJSON(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func normalizeTags(in []string) []string {
	var out []string
	for _, t := range in {
		t = strings.TrimSpace(t)
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, strings.TrimSpace(w)) {
			return false
		}
	}
	return true
}

// runnerJSON is GitLab's Runner entity, as listed.
type runnerJSON struct {
	ID          int64   `json:"id"`
	Description string  `json:"description"`
	IPAddress   *string `json:"ip_address"`
	Active      bool    `json:"active"`
	Paused      bool    `json:"paused"`
	IsShared    bool    `json:"is_shared"`
	RunnerType  string  `json:"runner_type"`
	Name        *string `json:"name"`
	Online      bool    `json:"online"`
	CreatedAt   any     `json:"created_at"`
	Status      string  `json:"status"`
}

func toRunnerJSON(r *Runner) runnerJSON {
	return runnerJSON{
		ID:          r.ID,
		Description: r.Description,
		Active:      !r.Paused,
		Paused:      r.Paused,
		IsShared:    r.Type == InstanceType,
		RunnerType:  r.Type,
		CreatedAt:   timeJSON(r.CreatedAt),
		Status:      "never_contacted",
	}
}

type detailsGroupJSON struct {
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	WebURL string `json:"web_url"`
}

type detailsProjectJSON struct {
	ID                int64  `json:"id"`
	Name              string `json:"name"`
	NameWithNamespace string `json:"name_with_namespace"`
	Path              string `json:"path"`
	PathWithNamespace string `json:"path_with_namespace"`
}

// detailsJSON is GitLab's RunnerDetails entity.
type detailsJSON struct {
	runnerJSON
	TagList         []string             `json:"tag_list"`
	RunUntagged     bool                 `json:"run_untagged"`
	Locked          bool                 `json:"locked"`
	MaximumTimeout  *int64               `json:"maximum_timeout"`
	AccessLevel     string               `json:"access_level"`
	MaintenanceNote string               `json:"maintenance_note"`
	ContactedAt     any                  `json:"contacted_at"`
	Architecture    any                  `json:"architecture"`
	Platform        any                  `json:"platform"`
	Revision        any                  `json:"revision"`
	Version         any                  `json:"version"`
	Projects        []detailsProjectJSON `json:"projects"`
	Groups          []detailsGroupJSON   `json:"groups"`
}

func (s *Server) detailsJSON(r *Runner) detailsJSON {
	d := detailsJSON{
		runnerJSON:      toRunnerJSON(r),
		TagList:         slices.Clone(r.Tags),
		RunUntagged:     r.RunUntagged,
		Locked:          r.Locked,
		AccessLevel:     r.AccessLevel,
		MaintenanceNote: r.MaintenanceNote,
		Projects:        []detailsProjectJSON{},
		Groups:          []detailsGroupJSON{},
	}
	if d.TagList == nil {
		d.TagList = []string{}
	}
	if r.MaximumTimeout > 0 {
		t := r.MaximumTimeout
		d.MaximumTimeout = &t
	}
	switch r.Type {
	case GroupType:
		name := fmt.Sprintf("group-%d", r.GroupID)
		d.Groups = append(d.Groups, detailsGroupJSON{ID: r.GroupID, Name: name, WebURL: s.srv.URL + "/groups/" + name})
	case ProjectType:
		name := fmt.Sprintf("project-%d", r.ProjectID)
		d.Projects = append(d.Projects, detailsProjectJSON{
			ID: r.ProjectID, Name: name, NameWithNamespace: "namespace / " + name,
			Path: name, PathWithNamespace: "namespace/" + name,
		})
	}
	return d
}

// params are a request's parameters the way Grape sees them: the query
// string, overlaid by a JSON or form body. Array keys may end in "[]".
type params struct {
	header http.Header
	query  url.Values
	vals   map[string]any // string, []string, json.Number, bool, []any, nil
	url    url.URL
	host   string
}

func readParams(r *http.Request) (*params, error) {
	q := &params{header: r.Header, query: r.URL.Query(), vals: map[string]any{}, url: *r.URL, host: r.Host}
	addValues := func(vs url.Values) {
		for k, v := range vs {
			k = strings.TrimSuffix(k, "[]")
			if len(v) == 1 {
				q.vals[k] = v[0]
			} else {
				q.vals[k] = slices.Clone(v)
			}
		}
	}
	addValues(q.query)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	if err != nil {
		return nil, fmt.Errorf("reading body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return q, nil
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/x-www-form-urlencoded":
		vs, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, errors.New("invalid form body")
		}
		addValues(vs)
	default: // GitLab's clients send JSON
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return nil, errors.New("There was a problem with the JSON in your request")
		}
		for k, v := range m {
			q.vals[strings.TrimSuffix(k, "[]")] = v
		}
	}
	return q, nil
}

func (q *params) pageURL(page, perPage int64) string {
	u := q.url
	u.Scheme, u.Host = "http", q.host
	vs := u.Query()
	vs.Del("private_token")
	vs.Set("page", strconv.FormatInt(page, 10))
	vs.Set("per_page", strconv.FormatInt(perPage, 10))
	u.RawQuery = vs.Encode()
	return u.String()
}

// validation collects Grape-style parameter errors.
type validation struct{ errs []string }

func (v *validation) fail(text string) { v.errs = append(v.errs, text) }

func (v *validation) reply() *reply {
	if len(v.errs) == 0 {
		return nil
	}
	rep := paramError(strings.Join(v.errs, ", "))
	return &rep
}

func (v *validation) str(q *params, name string) (string, bool) {
	raw, ok := q.vals[name]
	if !ok || raw == nil {
		return "", false
	}
	switch x := raw.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	}
	v.fail(name + " is invalid")
	return "", false
}

func (v *validation) int(q *params, name string) (int64, bool) {
	raw, ok := q.vals[name]
	if !ok || raw == nil {
		return 0, false
	}
	var s string
	switch x := raw.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		v.fail(name + " is invalid")
		return 0, false
	}
	return n, true
}

func (v *validation) bool(q *params, name string) (bool, bool) {
	raw, ok := q.vals[name]
	if !ok || raw == nil {
		return false, false
	}
	var s string
	switch x := raw.(type) {
	case bool:
		return x, true
	case string:
		s = x
	case json.Number:
		s = x.String()
	}
	switch strings.ToLower(s) {
	case "true", "1", "t", "yes":
		return true, true
	case "false", "0", "f", "no":
		return false, true
	}
	v.fail(name + " is invalid")
	return false, false
}

// strs reads an array parameter: a JSON array, repeated form keys, or a
// comma-separated string.
func (v *validation) strs(q *params, name string) ([]string, bool) {
	raw, ok := q.vals[name]
	if !ok || raw == nil {
		return nil, false
	}
	switch x := raw.(type) {
	case string:
		if x == "" {
			return []string{}, true
		}
		return strings.Split(x, ","), true
	case []string:
		return x, true
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				v.fail(name + " is invalid")
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	v.fail(name + " is invalid")
	return nil, false
}
