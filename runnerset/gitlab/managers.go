package gitlab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go"
)

// Statuses GitLab gives a runner and each of its managers: online when it
// contacted GitLab within the last 2 hours, offline after that, stale after
// 7 days without contact; a runner no manager ever contacted GitLab for is
// never_contacted.
const (
	StatusOnline         = "online"
	StatusOffline        = "offline"
	StatusStale          = "stale"
	StatusNeverContacted = "never_contacted"
)

// RunnerManager is one process that authenticates with a runner's token
// (GET /runners/:id/managers): GitLab records it on its first request, by the
// system_id it sends, and stamps contacted_at on every request.
type RunnerManager struct {
	ID          int64      `json:"id"`
	SystemID    string     `json:"system_id"`
	Version     string     `json:"version"`
	ContactedAt *time.Time `json:"contacted_at"`
	CreatedAt   *time.Time `json:"created_at"`
	IPAddress   string     `json:"ip_address"`
	// Status is online, offline or stale.
	Status string `json:"status"`
}

// RunnerDetails is what runnerfleet reads of a runner (GET /runners/:id).
type RunnerDetails struct {
	ID          int64
	Description string
	Tags        []string
	RunUntagged bool
	// Status is online, offline, stale or never_contacted.
	Status      string
	ContactedAt *time.Time
}

// Managers lists the managers of runner id, with a token that may read the
// runner (scope read_api, api or manage_runner): New, then Client.Managers.
func Managers(ctx context.Context, baseURL, pat string, id int64, o Options) ([]RunnerManager, error) {
	cl, err := New(baseURL, pat, o)
	if err != nil {
		return nil, err
	}
	return cl.Managers(ctx, id)
}

// Managers implements Client. client-go has no call for this endpoint yet,
// so the request goes through its generic request path: the same
// authentication, retries and errors as every other call.
func (c *client) Managers(ctx context.Context, id int64) ([]RunnerManager, error) {
	var all []RunnerManager
	for page := int64(1); ; page++ {
		req, err := c.c.NewRequest(http.MethodGet, fmt.Sprintf("runners/%d/managers", id),
			&gl.ListOptions{Page: page, PerPage: 100}, []gl.RequestOptionFunc{gl.WithContext(ctx)})
		if err != nil {
			return nil, err
		}
		var batch []RunnerManager
		resp, err := c.c.Do(req, &batch)
		if err != nil {
			return nil, wrap(fmt.Sprintf("listing the managers of runner %d", id), resp, err)
		}
		all = append(all, batch...)
		if resp.NextPage == 0 {
			return all, nil
		}
	}
}

// GetRunner reads runner id's details, with a token that may read the
// runner (scope read_api, api or manage_runner): New, then Client.Runner.
func GetRunner(ctx context.Context, baseURL, pat string, id int64, o Options) (RunnerDetails, error) {
	cl, err := New(baseURL, pat, o)
	if err != nil {
		return RunnerDetails{}, err
	}
	r, err := cl.Runner(ctx, id)
	if err != nil {
		return RunnerDetails{}, err
	}
	return *r, nil
}

// Runner implements Client.
func (c *client) Runner(ctx context.Context, id int64) (*RunnerDetails, error) {
	r, resp, err := c.c.Runners.GetRunnerDetails(id, gl.WithContext(ctx))
	if err != nil {
		return nil, wrap(fmt.Sprintf("getting runner %d", id), resp, err)
	}
	return &RunnerDetails{ID: r.ID, Description: r.Description, Tags: r.TagList, RunUntagged: r.RunUntagged, Status: r.Status, ContactedAt: r.ContactedAt}, nil
}

// deleteManagerOptions is DELETE /runners/managers as gitlab-runner's
// unregister sends it: the runner's token and the manager's system_id in a
// JSON body, never in the URL (which error messages and proxies repeat).
type deleteManagerOptions struct {
	Token    string `json:"token"`
	SystemID string `json:"system_id"`
}

// DeleteManager implements Client.
func (c *client) DeleteManager(ctx context.Context, token, systemID string) error {
	op := fmt.Sprintf("deleting runner manager %s", systemID)
	req, err := c.c.NewRequest(http.MethodDelete, "runners/managers", nil, []gl.RequestOptionFunc{gl.WithContext(ctx)})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	body, err := json.Marshal(deleteManagerOptions{Token: token, SystemID: systemID})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := req.SetBody(body); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.c.Do(req, nil)
	if err = wrap(op, resp, err); StatusOf(err) == http.StatusNotFound {
		return nil
	}
	return err
}
