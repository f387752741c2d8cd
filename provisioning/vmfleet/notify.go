package vmfleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Webhook returns a Notify that POSTs the report as JSON to url. A failed
// notification is reported to progress, never hidden, and never fails the
// rotation it reports on.
func Webhook(url string, progress io.Writer) func(context.Context, Report) {
	client := &http.Client{Timeout: 10 * time.Second}
	return func(ctx context.Context, r Report) {
		body, _ := json.Marshal(r)
		var last error
		for attempt := range 3 {
			if attempt > 0 {
				time.Sleep(time.Duration(attempt) * time.Second)
			}
			req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				last = err
				break
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				last = err
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 300 {
				return
			}
			last = fmt.Errorf("webhook answered %s", resp.Status)
		}
		fmt.Fprintf(progress, "notifying %s of the rotation's %s failed: %v\n", url, r.Result, last)
	}
}
