package gitlabserver

import (
	"net/http"
	"sort"
	"time"
)

// Manager is a runner manager as GitLab records it: created by the first
// job request carrying its system_id, contacted_at stamped by each.
type Manager struct {
	ID          int64     `json:"id"`
	SystemID    string    `json:"system_id"`
	CreatedAt   time.Time `json:"created_at"`
	ContactedAt time.Time `json:"contacted_at"`
	Status      string    `json:"status"`
}

// managerOnline is how long after its last contact GitLab calls a manager
// online (Ci::Runner's ONLINE_CONTACT_TIMEOUT: 2 hours); managerStale how
// long after it GitLab calls it stale (STALE_TIMEOUT: 7 days).
const (
	managerOnline = 2 * time.Hour
	managerStale  = 7 * 24 * time.Hour
)

// managerStatus is GitLab's status, at now, of a manager last contacted at
// contacted.
func managerStatus(now, contacted time.Time) string {
	switch age := now.Sub(contacted); {
	case age < managerOnline:
		return "online"
	case age < managerStale:
		return "offline"
	}
	return "stale"
}

// SetClock sets the time by which the server judges its managers online,
// offline or stale and stamps a job's queueing and pick (so its job_info's
// time_in_queue_seconds) (nil: the wall clock), so a test can let hours
// pass for GitLab.
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock = now
}

func (s *Server) clockLocked() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

// SetManager records (or replaces) a manager of runner id as if it had
// contacted GitLab: m.SystemID names it, m.CreatedAt and m.ContactedAt say
// when it first and last did (zero: now), so a test can make GitLab answer
// that a runner's managers are online, offline or stale. Its ID is
// assigned; its Status follows from ContactedAt.
func (s *Server) SetManager(id int64, m Manager) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.managers == nil {
		s.managers = map[int64]map[string]*Manager{}
	}
	if s.managers[id] == nil {
		s.managers[id] = map[string]*Manager{}
	}
	if old := s.managers[id][m.SystemID]; old != nil {
		m.ID = old.ID
	} else {
		s.nextID++
		m.ID = s.nextID
	}
	now := time.Now().UTC()
	if m.CreatedAt.IsZero() {
		m.CreatedAt = now
	}
	if m.ContactedAt.IsZero() {
		m.ContactedAt = now
	}
	m.CreatedAt, m.ContactedAt = m.CreatedAt.UTC().Truncate(time.Millisecond), m.ContactedAt.UTC().Truncate(time.Millisecond)
	s.managers[id][m.SystemID] = &m
}

// runnerStatusLocked is GitLab's status, online flag and contacted_at of
// runner id: its most recently contacted manager's, never_contacted with
// none.
func (s *Server) runnerStatusLocked(id int64) (string, bool, any) {
	var last time.Time
	for _, m := range s.managers[id] {
		if m.ContactedAt.After(last) {
			last = m.ContactedAt
		}
	}
	if last.IsZero() {
		return "never_contacted", false, nil
	}
	st := managerStatus(s.clockLocked(), last)
	return st, st == "online", timeJSON(last)
}

// deleteManager is DELETE /runners/managers: the runner's authentication
// token and the manager's system_id (gitlab-runner unregister sends them
// as a JSON body). 404 when the runner has no such manager.
func (s *Server) deleteManager(q *params) reply {
	r, bad := s.runnerTokenLocked(q)
	if bad != nil {
		return *bad
	}
	v := &validation{}
	systemID, ok := v.str(q, "system_id")
	if !ok || systemID == "" {
		v.fail("system_id is missing")
	}
	if bad := v.reply(); bad != nil {
		return *bad
	}
	if s.managers[r.ID][systemID] == nil {
		return msg(http.StatusNotFound, "404 Not Found")
	}
	delete(s.managers[r.ID], systemID)
	return reply{status: http.StatusNoContent, runner: r.ID}
}

// contactedLocked records a job request of runner id from systemID.
func (s *Server) contactedLocked(id int64, systemID string) {
	if systemID == "" {
		return
	}
	if s.managers == nil {
		s.managers = map[int64]map[string]*Manager{}
	}
	if s.managers[id] == nil {
		s.managers[id] = map[string]*Manager{}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	m := s.managers[id][systemID]
	if m == nil {
		s.nextID++
		m = &Manager{ID: s.nextID, SystemID: systemID, CreatedAt: now}
		s.managers[id][systemID] = m
	}
	m.ContactedAt = now
}

// Managers are the system_ids of runner id's managers GitLab recorded,
// sorted.
func (s *Server) Managers(id int64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for sid := range s.managers[id] {
		out = append(out, sid)
	}
	sort.Strings(out)
	return out
}

// listManagers is GET /runners/:id/managers.
func (s *Server) listManagers(q *params, id int64) reply {
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
	out := []Manager{}
	for _, m := range s.managers[id] {
		c := *m
		c.Status = managerStatus(s.clockLocked(), c.ContactedAt)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return reply{status: http.StatusOK, runner: id, body: out}
}
