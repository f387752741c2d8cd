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
// online (Ci::Runner's ONLINE_CONTACT_TIMEOUT: 2 hours).
const managerOnline = 2 * time.Hour

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
	now := time.Now().UTC()
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
		c.Status = "offline"
		if time.Since(c.ContactedAt) < managerOnline {
			c.Status = "online"
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return reply{status: http.StatusOK, runner: id, body: out}
}
