package gcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
)

var _ providers.Self = (*Self)(nil)

// DefaultMetadataURL is the metadata server of a GCE VM.
const DefaultMetadataURL = "http://metadata.google.internal/computeMetadata/v1"

// Self is providers.Self for the drain agent on a GCE VM: it long-polls the
// drain request on the VM's metadata server and reports through guest
// attributes. The zero value works on a VM; tests set BaseURL and
// HTTPClient to a gcetest.MetadataServer's.
type Self struct {
	// BaseURL is the metadata API root; default http://$GCE_METADATA_HOST/computeMetadata/v1
	// if that variable is set, else DefaultMetadataURL.
	BaseURL string
	// HTTPClient defaults to a client that never goes through a proxy (the
	// metadata server is link-local) and has no overall timeout (long polls
	// are bounded per request instead).
	HTTPClient *http.Client
	// WaitTimeout is each long poll's timeout_sec (whole seconds, default
	// 60s); the server answers by then even if nothing changed.
	WaitTimeout time.Duration
	// ResponseGrace is how long past WaitTimeout a long poll may take
	// before it counts as hung and is made again (default 10s); it is also
	// the timeout of the other requests.
	ResponseGrace time.Duration
	// MinBackoff and MaxBackoff pace retries after errors and polls the
	// server answered at once without news (defaults 250ms and 30s;
	// jittered).
	MinBackoff, MaxBackoff time.Duration
	// Now is the clock for DrainState.UpdatedAt when a report has none.
	Now func() time.Time
}

func (s *Self) baseURL() string {
	if s.BaseURL != "" {
		return strings.TrimRight(s.BaseURL, "/")
	}
	if h := os.Getenv("GCE_METADATA_HOST"); h != "" {
		return "http://" + h + "/computeMetadata/v1"
	}
	return DefaultMetadataURL
}

var defaultMetadataClient = &http.Client{Transport: &http.Transport{
	Proxy:               nil,
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConnsPerHost: 2,
	IdleConnTimeout:     90 * time.Second,
}}

func (s *Self) client() *http.Client {
	if s.HTTPClient != nil {
		return s.HTTPClient
	}
	return defaultMetadataClient
}

func durOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// StatusError is an unexpected HTTP status from the metadata server.
type StatusError struct {
	Method, Path string
	Code         int
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("metadata server: %s %s: %d %s: %s", e.Method, e.Path, e.Code, http.StatusText(e.Code), e.Body)
}

// permanent reports errors that retrying will not fix: the request itself
// is wrong (400), or the endpoint is refused (403: a missing
// Metadata-Flavor header, guest attributes disabled).
func permanent(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		switch se.Code {
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusMethodNotAllowed:
			return true
		}
	}
	return false
}

// do sends one request with the Metadata-Flavor header, bounded by timeout.
func (s *Self) do(ctx context.Context, method, path string, q url.Values, body string, timeout time.Duration) (status int, etag, value string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := s.baseURL() + "/" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != "" || method == http.MethodPut {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := s.client().Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, "", "", err
	}
	if resp.Header.Get("Metadata-Flavor") != "Google" && resp.StatusCode == http.StatusOK {
		return 0, "", "", fmt.Errorf("metadata server: %s %s: answer without Metadata-Flavor: Google (not the metadata server?)", method, path)
	}
	return resp.StatusCode, resp.Header.Get("ETag"), string(b), nil
}

// backoff is a capped, jittered exponential pause.
type backoff struct{ cur, min, max time.Duration }

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	// Full jitter over the upper half.
	return b.cur/2 + rand.N(b.cur/2+1)
}

func (b *backoff) reset() { b.cur = 0 }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// WaitDrainRequest blocks until instance metadata runnerfleet-drain is true
// or ctx ends (returning ctx.Err()). It reads the attribute once, then
// long-polls it with wait_for_change and the last ETag, so a change made
// while no request was open is not missed. An absent key (404) is no
// request. Server errors, dropped and hung connections are retried with
// backoff; 400 and 403 are returned, as retrying cannot fix them.
func (s *Self) WaitDrainRequest(ctx context.Context) error {
	wait := durOr(s.WaitTimeout, 60*time.Second)
	waitSec := int((wait + time.Second - 1) / time.Second)
	grace := durOr(s.ResponseGrace, 10*time.Second)
	bo := backoff{min: durOr(s.MinBackoff, 250*time.Millisecond), max: durOr(s.MaxBackoff, 30*time.Second)}
	path := "instance/attributes/" + providers.GCEDrainKey

	etag := ""
	polling := false // false until a first plain read succeeded
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		q := url.Values{}
		timeout := grace
		if polling {
			q.Set("wait_for_change", "true")
			q.Set("timeout_sec", strconv.Itoa(waitSec))
			if etag != "" {
				q.Set("last_etag", etag)
			}
			timeout = time.Duration(waitSec)*time.Second + grace
		}
		start := time.Now()
		code, tag, value, err := s.do(ctx, http.MethodGet, path, q, "", timeout)
		if err == nil && code != http.StatusOK && code != http.StatusNotFound {
			err = &StatusError{Method: http.MethodGet, Path: path, Code: code, Body: strings.TrimSpace(value)}
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if permanent(err) {
				return fmt.Errorf("waiting for drain request: %w", err)
			}
			// Dropped, hung, refused or 5xx: back off and ask again, with
			// the same ETag, so a change in between answers at once.
			if err := sleep(ctx, bo.next()); err != nil {
				return err
			}
			continue
		}
		if code == http.StatusOK && isTrue(value) {
			return nil
		}
		news := tag != "" && tag != etag
		if tag != "" {
			etag = tag
		}
		if !polling {
			polling = true
			bo.reset()
			continue
		}
		// A poll that came back quickly with nothing new (a server that does
		// not wait on absent keys, or gives no ETag) is paced; one that
		// waited or brought a change is not.
		if !news && time.Since(start) < bo.min {
			if err := sleep(ctx, bo.next()); err != nil {
				return err
			}
			continue
		}
		bo.reset()
	}
}

func isTrue(v string) bool {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	return err == nil && b
}

// Report writes the drain state as guest attributes runnerfleet/drain-jobs-left,
// drain-updated-at and, last, drain-phase. Each write is retried a few
// times on server and connection errors.
func (s *Self) Report(ctx context.Context, st providers.DrainState) error {
	at := st.UpdatedAt
	if at.IsZero() {
		now := time.Now
		if s.Now != nil {
			now = s.Now
		}
		at = now()
	}
	writes := []struct{ key, value string }{
		{providers.GCEGuestJobsLeftKey, strconv.Itoa(st.JobsLeft)},
		{providers.GCEGuestUpdatedAtKey, at.UTC().Format(time.RFC3339Nano)},
		{providers.GCEGuestPhaseKey, string(st.Phase)},
	}
	for _, w := range writes {
		if err := s.putGuestAttribute(ctx, w.key, w.value); err != nil {
			return err
		}
	}
	return nil
}

// ReportJobs writes the job count as guest attributes runnerfleet/jobs-updated-at
// and, last, runnerfleet/jobs.
func (s *Self) ReportJobs(ctx context.Context, r providers.JobReport) error {
	at := r.UpdatedAt
	if at.IsZero() {
		now := time.Now
		if s.Now != nil {
			now = s.Now
		}
		at = now()
	}
	if err := s.putGuestAttribute(ctx, providers.GCEGuestJobsUpdatedAtKey, at.UTC().Format(time.RFC3339Nano)); err != nil {
		return err
	}
	return s.putGuestAttribute(ctx, providers.GCEGuestJobsKey, strconv.Itoa(r.Jobs))
}

func (s *Self) putGuestAttribute(ctx context.Context, key, value string) error {
	path := "instance/guest-attributes/" + providers.GCEGuestNamespace + "/" + key
	grace := durOr(s.ResponseGrace, 10*time.Second)
	bo := backoff{min: durOr(s.MinBackoff, 250*time.Millisecond), max: durOr(s.MaxBackoff, 30*time.Second)}
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		if attempt > 0 {
			if serr := sleep(ctx, bo.next()); serr != nil {
				return fmt.Errorf("reporting %s: %w (last error: %v)", key, serr, err)
			}
		}
		var code int
		var body string
		code, _, body, err = s.do(ctx, http.MethodPut, path, nil, value, grace)
		if err == nil && code/100 != 2 {
			err = &StatusError{Method: http.MethodPut, Path: path, Code: code, Body: strings.TrimSpace(body)}
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("reporting %s: %w", key, ctx.Err())
		}
		if permanent(err) {
			break
		}
	}
	return fmt.Errorf("reporting %s: %w", key, err)
}
