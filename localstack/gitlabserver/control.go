package gitlabserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The control API is what the local stack's operator (fleet) asks of the
// loopback GitLab that GitLab's own API has no call for: take a runner
// created in GitLab's UI (the token a RunnerSet's Secret holds), queue demo
// jobs, list the jobs. It listens on 127.0.0.1 beside the GitLab API.

// ControlRunner is a runner created as in GitLab's UI: POST /runners.
type ControlRunner struct {
	Token string   `json:"token"`
	Tags  []string `json:"tags"`
	// Description is the runner's description in GitLab; fleet writes the
	// RunnerSet's namespace/name, so a job's runner names who ran it.
	Description string `json:"description,omitempty"`
}

// ControlJobs queues Count jobs of Duration for Tags: POST /jobs.
type ControlJobs struct {
	Tags     []string `json:"tags"`
	Duration string   `json:"duration"`
	Count    int      `json:"count"`
}

// ControlJob is a job as GET /jobs lists it.
type ControlJob struct {
	ID       int64    `json:"id"`
	Tags     []string `json:"tags"`
	Duration string   `json:"duration"`
	State    string   `json:"state"` // JobPending, JobRunning, JobSuccess or JobFailed
	SystemID string   `json:"systemID,omitempty"`
	// Runner is the description of the runner that took the job.
	Runner   string    `json:"runner,omitempty"`
	QueuedAt time.Time `json:"queuedAt,omitzero"`
	PickedAt time.Time `json:"pickedAt,omitzero"`
}

// Waited is how long the job waited in the queue: until it was picked, or
// until now while it is pending.
func (j ControlJob) Waited(now time.Time) time.Duration {
	if j.QueuedAt.IsZero() {
		return 0
	}
	if j.PickedAt.IsZero() {
		return now.Sub(j.QueuedAt)
	}
	return j.PickedAt.Sub(j.QueuedAt)
}

// ControlHandler serves the control API of s: POST /runners (adding a
// runner whose token s has already is a no-op), POST /jobs, GET /jobs and
// GET /healthz.
func (s *Server) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /runners", func(w http.ResponseWriter, r *http.Request) {
		var in ControlRunner
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Token == "" {
			http.Error(w, "want {token, tags}", http.StatusBadRequest)
			return
		}
		for _, rn := range s.Runners() {
			if rn.Token == in.Token {
				w.WriteHeader(http.StatusOK)
				return
			}
		}
		desc := in.Description
		if desc == "" {
			desc = "runnerfleet local stack"
		}
		s.AddRunner(Runner{Type: InstanceType, Tags: in.Tags, Token: in.Token, Description: desc})
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("POST /jobs", func(w http.ResponseWriter, r *http.Request) {
		var in ControlJobs
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Count <= 0 {
			http.Error(w, "want {tags, duration, count}", http.StatusBadRequest)
			return
		}
		d, err := time.ParseDuration(in.Duration)
		if err != nil {
			http.Error(w, "duration: "+err.Error(), http.StatusBadRequest)
			return
		}
		for range in.Count {
			s.QueueJob(in.Tags, d)
		}
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("GET /jobs", func(w http.ResponseWriter, r *http.Request) {
		out := []ControlJob{}
		runners := map[int64]string{}
		for _, rn := range s.Runners() {
			runners[rn.ID] = rn.Description
		}
		for _, j := range s.Jobs() {
			out = append(out, ControlJob{ID: j.ID, Tags: j.Tags, Duration: j.Duration.String(), State: j.State, SystemID: j.SystemID,
				Runner: runners[j.RunnerID], QueuedAt: j.QueuedAt, PickedAt: j.PickedAt})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	return mux
}

// Control is a client of a control API at URL (http://127.0.0.1:port).
type Control struct {
	URL string
}

// AddRunner has the server take a runner with token and tags.
func (c Control) AddRunner(ctx context.Context, token string, tags []string) error {
	return c.post(ctx, "/runners", ControlRunner{Token: token, Tags: tags})
}

// AddNamedRunner is AddRunner with the runner's description.
func (c Control) AddNamedRunner(ctx context.Context, token, description string, tags []string) error {
	return c.post(ctx, "/runners", ControlRunner{Token: token, Tags: tags, Description: description})
}

// QueueJobs queues n jobs of d for tags.
func (c Control) QueueJobs(ctx context.Context, tags []string, d time.Duration, n int) error {
	return c.post(ctx, "/jobs", ControlJobs{Tags: tags, Duration: d.String(), Count: n})
}

// Jobs lists the server's jobs.
func (c Control) Jobs(ctx context.Context) ([]ControlJob, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/jobs", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/jobs: %s", c.URL, resp.Status)
	}
	var out []ControlJob
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

func (c Control) post(ctx context.Context, path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s%s: %s: %s", c.URL, path, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}
