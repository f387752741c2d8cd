package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// apiPrefix is where GitLab's REST API lives under its URL.
const apiPrefix = "/api/v4"

// GitLabEndpoints are the path templates of the GitLab API calls
// runnerset/gitlab makes; a request to any other path counts as "other", so
// that the endpoint label stays bounded whatever a URL holds.
var GitLabEndpoints = []string{
	"/user/runners",
	"/runners/verify",
	"/runners/all",
	"/runners/:id",
	"/runners/:id/reset_authentication_token",
	"/groups/:id/runners",
	"/projects/:id/runners",
	"/projects/:id/jobs/:id",
	"/projects/:id/jobs/:id/retry",
}

// EndpointOther is the endpoint label of a path not in GitLabEndpoints.
const EndpointOther = "other"

// Endpoint is the path template of a GitLab API request path: the path under
// /api/v4 with numeric and URL-encoded IDs replaced by :id.
func Endpoint(path string) string {
	i := strings.Index(path, apiPrefix+"/")
	if i < 0 {
		return EndpointOther
	}
	segs := strings.Split(strings.TrimSuffix(path[i+len(apiPrefix):], "/"), "/")
	for j, s := range segs {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil || strings.Contains(s, "%") {
			segs[j] = ":id"
		}
	}
	t := strings.Join(segs, "/")
	for _, e := range GitLabEndpoints {
		if e == t {
			return t
		}
	}
	return EndpointOther
}

// CodeNone is the code label of a request that got no answer.
const CodeNone = "none"

// GitLabTransport counts every request that goes through it in
// GitLabRequests and GitLabDuration, then hands it to next
// (http.DefaultTransport when nil). Retries of the GitLab client are
// requests of their own and are counted as such.
func GitLabTransport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper{next}
}

type roundTripper struct{ next http.RoundTripper }

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	endpoint := Endpoint(req.URL.EscapedPath())
	start := time.Now()
	resp, err := rt.next.RoundTrip(req)
	code := CodeNone
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
		GitLabDuration.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
	}
	GitLabRequests.WithLabelValues(endpoint, req.Method, code).Inc()
	return resp, err
}
