// Package gitlab is runnerfleet's narrow view of the GitLab REST API: create a
// runner, reset its authentication token, find the runners an earlier attempt
// left, delete one. It wraps gitlab.com/gitlab-org/api/client-go and turns
// its errors into ones that say what to fix.
package gitlab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go"
)

// Client is what runnerfleet asks of GitLab.
type Client interface {
	// CreateRunner creates a runner (POST /user/runners).
	CreateRunner(ctx context.Context, o CreateOptions) (*Token, error)
	// ResetToken gives the runner a new authentication token; the old one
	// stops working (POST /runners/:id/reset_authentication_token).
	ResetToken(ctx context.Context, id int64) (*Token, error)
	// VerifyToken reports whether GitLab accepts a runner authentication
	// token (POST /runners/verify): false when it answers 403. Verify is
	// the runner's own call: GitLab records a runner manager under
	// systemID, so callers pass one stable ID of their own (SystemID),
	// never a manager's, and call it only when the token changed.
	VerifyToken(ctx context.Context, token, systemID string) (bool, error)
	// RunnerExists reports whether the runner is still there (GET
	// /runners/:id, which an access token with manage_runner may call and
	// which, unlike verify, does not pose as a runner manager).
	RunnerExists(ctx context.Context, id int64) (bool, error)
	// UpdateRunner sets a runner's settings to o (its scope is not changed).
	UpdateRunner(ctx context.Context, id int64, o CreateOptions) error
	// DeleteRunner deletes a runner; one that is already gone counts as deleted.
	DeleteRunner(ctx context.Context, id int64) error
	// FindRunners lists the IDs of the runners in scope whose description
	// carries marker, oldest first.
	FindRunners(ctx context.Context, s Scope, marker string) ([]int64, error)

	// GitLab's own record of a runner, read by the controller's slow poll
	// (managers.go):

	// Runner returns the runner's details (GET /runners/:id): its tags,
	// status and last contact.
	Runner(ctx context.Context, id int64) (*RunnerDetails, error)
	// Managers lists the runner's managers (GET /runners/:id/managers).
	Managers(ctx context.Context, id int64) ([]RunnerManager, error)
	// VerifiedRunnerID returns the ID of the runner whose authentication
	// token is token (POST /runners/verify, with systemID as for
	// VerifyToken), 0 when GitLab refuses the token.
	VerifiedRunnerID(ctx context.Context, token, systemID string) (int64, error)
	// DeleteManager deletes the manager recorded under systemID of the
	// runner whose authentication token is token (DELETE
	// /runners/managers); one that is already gone counts as deleted.
	DeleteManager(ctx context.Context, token, systemID string) error
}

// Scope is where a runner lives.
type Scope struct {
	Type      string // instance, group or project
	GroupID   int64
	ProjectID int64
}

// CreateOptions describe a new runner.
type CreateOptions struct {
	Scope
	Description     string
	MaintenanceNote string
	Tags            []string
	RunUntagged     bool
	Locked          bool
	Paused          bool
	Protected       bool
	MaximumTimeout  time.Duration
}

// Token is a runner's ID and authentication token.
type Token struct {
	RunnerID  int64
	Value     string // never logged
	ExpiresAt time.Time
}

// Error is a GitLab API failure with the HTTP status it came with (0 when
// the request got no answer).
type Error struct {
	Op      string
	Status  int
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s: no answer from GitLab: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s: GitLab answered %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// InsufficientScope reports whether GitLab refused the call because the
// access token lacks a scope the endpoint needs (403 insufficient_scope).
func (e *Error) InsufficientScope() bool {
	return e.Status == http.StatusForbidden && strings.Contains(e.Message, "insufficient_scope")
}

// Retryable reports whether trying again later may succeed: no answer, 429
// or a server error.
func (e *Error) Retryable() bool {
	return e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// StatusOf returns the HTTP status of a GitLab error, 0 for anything else.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// Options tune the client.
type Options struct {
	// Timeout bounds one HTTP request; default 30s.
	Timeout time.Duration
	// Retries of 429 and 5xx within one call, with client-go's backoff;
	// default 2, negative for none. The controller's own backoff handles
	// longer outages.
	Retries int
	// Transport sends the requests; default http.DefaultTransport. The
	// controller counts them through runnerset/metrics.GitLabTransport.
	Transport http.RoundTripper
}

// New returns a Client for the GitLab instance at baseURL (https://gitlab.example.com)
// acting with the access token pat.
func New(baseURL, pat string, o Options) (Client, error) {
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	switch {
	case o.Retries == 0:
		o.Retries = 2
	case o.Retries < 0:
		o.Retries = 0
	}
	c, err := gl.NewClient(pat,
		gl.WithBaseURL(strings.TrimSuffix(baseURL, "/")+"/api/v4"),
		gl.WithHTTPClient(&http.Client{Timeout: o.Timeout, Transport: o.Transport}),
		gl.WithCustomRetryMax(o.Retries),
		gl.WithCustomRetryWaitMinMax(200*time.Millisecond, 2*time.Second),
	)
	if err != nil {
		return nil, fmt.Errorf("creating GitLab client for %s: %w", baseURL, err)
	}
	return &client{c: c}, nil
}

type client struct{ c *gl.Client }

func wrap(op string, resp *gl.Response, err error) error {
	if err == nil {
		return nil
	}
	e := &Error{Op: op, Err: err}
	var er *gl.ErrorResponse
	switch {
	case errors.As(err, &er) && er.Response != nil:
		e.Status, e.Message = er.Response.StatusCode, er.Message
	case resp != nil && resp.Response != nil:
		e.Status, e.Message = resp.StatusCode, err.Error()
	case errors.Is(err, gl.ErrNotFound):
		// client-go answers every 404 with this sentinel.
		e.Status, e.Message = http.StatusNotFound, "404 Not Found"
	}
	return e
}

func runnerType(t string) string { return t + "_type" }

func (c *client) CreateRunner(ctx context.Context, o CreateOptions) (*Token, error) {
	opts := &gl.CreateUserRunnerOptions{
		RunnerType:  gl.Ptr(runnerType(o.Type)),
		Description: gl.Ptr(o.Description),
		Paused:      gl.Ptr(o.Paused),
		Locked:      gl.Ptr(o.Locked),
		RunUntagged: gl.Ptr(o.RunUntagged),
		TagList:     gl.Ptr(o.Tags),
		AccessLevel: gl.Ptr(accessLevel(o.Protected)),
	}
	if o.GroupID != 0 {
		opts.GroupID = gl.Ptr(o.GroupID)
	}
	if o.ProjectID != 0 {
		opts.ProjectID = gl.Ptr(o.ProjectID)
	}
	if o.MaintenanceNote != "" {
		opts.MaintenanceNote = gl.Ptr(o.MaintenanceNote)
	}
	if o.MaximumTimeout > 0 {
		opts.MaximumTimeout = gl.Ptr(int64(o.MaximumTimeout.Seconds()))
	}
	r, resp, err := c.c.Users.CreateUserRunner(opts, gl.WithContext(ctx))
	if err != nil {
		return nil, wrap("creating runner", resp, err)
	}
	return &Token{RunnerID: r.ID, Value: r.Token, ExpiresAt: deref(r.TokenExpiresAt)}, nil
}

// SystemID is the system_id runnerfleet's controller sends with every
// verify: one stable ID of its own, so that GitLab keeps one runner manager
// record for the controller's checks and never stamps a manager's record.
// gitlab-runner's own IDs start with r_ or s_; this one cannot collide.
const SystemID = "runnerfleet-controller"

// verifyOptions is POST /runners/verify with the system_id client-go's
// VerifyRegisteredRunnerOptions does not carry.
type verifyOptions struct {
	Token    string `url:"token" json:"token"`
	SystemID string `url:"system_id,omitempty" json:"system_id,omitempty"`
}

func (c *client) VerifyToken(ctx context.Context, token, systemID string) (bool, error) {
	req, err := c.c.NewRequest(http.MethodPost, "runners/verify", &verifyOptions{Token: token, SystemID: systemID}, []gl.RequestOptionFunc{gl.WithContext(ctx)})
	if err != nil {
		return false, fmt.Errorf("verifying a runner token: %w", err)
	}
	resp, err := c.c.Do(req, nil)
	err = wrap("verifying a runner token", resp, err)
	if StatusOf(err) == http.StatusForbidden {
		return false, nil
	}
	return err == nil, err
}

func (c *client) VerifiedRunnerID(ctx context.Context, token, systemID string) (int64, error) {
	req, err := c.c.NewRequest(http.MethodPost, "runners/verify", &verifyOptions{Token: token, SystemID: systemID}, []gl.RequestOptionFunc{gl.WithContext(ctx)})
	if err != nil {
		return 0, fmt.Errorf("verifying a runner token: %w", err)
	}
	var out struct {
		ID int64 `json:"id"`
	}
	resp, err := c.c.Do(req, &out)
	err = wrap("verifying a runner token", resp, err)
	if StatusOf(err) == http.StatusForbidden {
		return 0, nil
	}
	if err == nil && out.ID == 0 {
		return 0, errors.New("verifying a runner token: GitLab accepted it but named no runner")
	}
	return out.ID, err
}

func (c *client) RunnerExists(ctx context.Context, id int64) (bool, error) {
	_, resp, err := c.c.Runners.GetRunnerDetails(id, gl.WithContext(ctx))
	err = wrap(fmt.Sprintf("getting runner %d", id), resp, err)
	if StatusOf(err) == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

func (c *client) UpdateRunner(ctx context.Context, id int64, o CreateOptions) error {
	opts := &gl.UpdateRunnerDetailsOptions{
		Description:     gl.Ptr(o.Description),
		Paused:          gl.Ptr(o.Paused),
		TagList:         gl.Ptr(o.Tags),
		RunUntagged:     gl.Ptr(o.RunUntagged),
		Locked:          gl.Ptr(o.Locked),
		AccessLevel:     gl.Ptr(accessLevel(o.Protected)),
		MaintenanceNote: gl.Ptr(o.MaintenanceNote),
	}
	if o.MaximumTimeout > 0 {
		opts.MaximumTimeout = gl.Ptr(int64(o.MaximumTimeout.Seconds()))
	}
	_, resp, err := c.c.Runners.UpdateRunnerDetails(id, opts, gl.WithContext(ctx))
	return wrap(fmt.Sprintf("updating runner %d", id), resp, err)
}

func accessLevel(protected bool) string {
	if protected {
		return "ref_protected"
	}
	return "not_protected"
}

func (c *client) ResetToken(ctx context.Context, id int64) (*Token, error) {
	t, resp, err := c.c.Runners.ResetRunnerAuthenticationToken(id, gl.WithContext(ctx))
	if err != nil {
		return nil, wrap(fmt.Sprintf("resetting the token of runner %d", id), resp, err)
	}
	return &Token{RunnerID: id, Value: deref(t.Token), ExpiresAt: deref(t.TokenExpiresAt)}, nil
}

func (c *client) DeleteRunner(ctx context.Context, id int64) error {
	resp, err := c.c.Runners.DeleteRegisteredRunnerByID(id, gl.WithContext(ctx))
	if err = wrap(fmt.Sprintf("deleting runner %d", id), resp, err); StatusOf(err) == http.StatusNotFound {
		return nil
	}
	return err
}

func (c *client) FindRunners(ctx context.Context, s Scope, marker string) ([]int64, error) {
	var ids []int64
	typ := gl.Ptr(runnerType(s.Type))
	for page := int64(1); page != 0; {
		list := gl.ListOptions{Page: page, PerPage: 100}
		var (
			rs   []*gl.Runner
			resp *gl.Response
			err  error
		)
		switch s.Type {
		case "group":
			rs, resp, err = c.c.Runners.ListGroupsRunners(s.GroupID, &gl.ListGroupsRunnersOptions{ListOptions: list, Type: typ}, gl.WithContext(ctx))
		case "project":
			rs, resp, err = c.c.Runners.ListProjectRunners(s.ProjectID, &gl.ListProjectRunnersOptions{ListOptions: list, Type: typ}, gl.WithContext(ctx))
		default:
			rs, resp, err = c.c.Runners.ListAllRunners(&gl.ListRunnersOptions{ListOptions: list, Type: typ}, gl.WithContext(ctx))
		}
		if err != nil {
			return nil, wrap("listing runners", resp, err)
		}
		for _, r := range rs {
			if strings.Contains(r.Description, marker) {
				ids = append(ids, r.ID)
			}
		}
		page = resp.NextPage
	}
	slices.Sort(ids) // oldest first
	return ids, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
