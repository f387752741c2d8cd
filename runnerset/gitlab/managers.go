package gitlab

import (
	"context"
	"fmt"
	"net/http"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go"
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
	// Status is online, offline, stale or never_contacted.
	Status string `json:"status"`
}

// Managers lists the managers of runner id, with a token that may read the
// runner (scope read_api, api or manage_runner). client-go has no call for
// this endpoint yet, so the request goes through its generic request path:
// the same authentication, retries and errors as every other call.
func Managers(ctx context.Context, baseURL, pat string, id int64, o Options) ([]RunnerManager, error) {
	cl, err := New(baseURL, pat, o)
	if err != nil {
		return nil, err
	}
	c := cl.(*client).c
	var all []RunnerManager
	for page := int64(1); ; page++ {
		req, err := c.NewRequest(http.MethodGet, fmt.Sprintf("runners/%d/managers", id),
			&gl.ListOptions{Page: page, PerPage: 100}, []gl.RequestOptionFunc{gl.WithContext(ctx)})
		if err != nil {
			return nil, err
		}
		var batch []RunnerManager
		resp, err := c.Do(req, &batch)
		if err != nil {
			return nil, wrap(fmt.Sprintf("listing the managers of runner %d", id), resp, err)
		}
		all = append(all, batch...)
		if resp.NextPage == 0 {
			return all, nil
		}
	}
}

// RunnerDetails is what GET /runners/:id says of a runner that fleet's VM
// commands check.
type RunnerDetails struct {
	ID          int64
	Description string
	Tags        []string
	RunUntagged bool
}

// GetRunner reads runner id's details, with a token that may read the
// runner (scope read_api, api or manage_runner).
func GetRunner(ctx context.Context, baseURL, pat string, id int64, o Options) (RunnerDetails, error) {
	cl, err := New(baseURL, pat, o)
	if err != nil {
		return RunnerDetails{}, err
	}
	r, resp, err := cl.(*client).c.Runners.GetRunnerDetails(id, gl.WithContext(ctx))
	if err != nil {
		return RunnerDetails{}, wrap(fmt.Sprintf("getting runner %d", id), resp, err)
	}
	return RunnerDetails{ID: r.ID, Description: r.Description, Tags: r.TagList, RunUntagged: r.RunUntagged}, nil
}
