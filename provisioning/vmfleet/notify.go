package vmfleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

// The shapes Webhook posts a Report in: Slack's incoming-webhook message
// (text, and section blocks of mrkdwn text) or the Report itself as JSON,
// for receivers of its own.
// They are defined with the model of a VM group, whose notify.format
// names them (fleetspec.NotifyFormats).
const (
	NotifySlack = fleetspec.NotifySlack
	NotifyJSON  = fleetspec.NotifyJSON
)

// NotifyFormats are the formats Webhook knows, the default first.
var NotifyFormats = fleetspec.NotifyFormats

// Slack's limits on a section's text and on each of its fields (Block Kit).
const (
	slackMaxSectionText = 3000
	slackMaxFieldText   = 2000
)

// Webhook returns a Notify that POSTs the report to url in format (one of
// NotifyFormats). A failed notification is reported to progress, never
// hidden, and never fails the rotation it reports on.
func Webhook(url, format string, progress io.Writer) (func(context.Context, Report), error) {
	var encode func(Report) []byte
	switch format {
	case NotifySlack:
		encode = SlackMessage
	case NotifyJSON:
		encode = func(r Report) []byte { b, _ := json.Marshal(r); return b }
	default:
		return nil, fmt.Errorf("notification format %q: want %s", format, strings.Join(NotifyFormats, " or "))
	}
	client := &http.Client{Timeout: 10 * time.Second}
	return func(ctx context.Context, r Report) {
		body := encode(r)
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
	}, nil
}

type slackText struct {
	Type string `json:"type"` // mrkdwn
	Text string `json:"text"`
}

type slackBlock struct {
	Type   string      `json:"type"` // section
	Text   *slackText  `json:"text,omitempty"`
	Fields []slackText `json:"fields,omitempty"`
}

type slackMessage struct {
	Text   string       `json:"text"` // the notification's fallback
	Blocks []slackBlock `json:"blocks"`
}

// SlackMessage is the report as a Slack incoming-webhook message: the
// outcome with the step a failure stopped at and its message, the colors,
// and the managers created, deleted and still draining, each section within
// Slack's limits (longer text is cut, marked with …).
func SlackMessage(r Report) []byte {
	head := fmt.Sprintf("Rotation of manager group %s %s", r.Group, r.Result)
	if r.Result == "timeout" {
		head = fmt.Sprintf("Rotation of manager group %s timed out", r.Group)
	}
	if r.Step != "" {
		head += " at step: " + r.Step
	}
	text := head
	if r.Message != "" {
		text += ": " + r.Message
	}
	m := slackMessage{Text: cut(text, slackMaxSectionText)}
	section := func(s string) {
		m.Blocks = append(m.Blocks, slackBlock{Type: "section", Text: &slackText{Type: "mrkdwn", Text: cut(s, slackMaxSectionText)}})
	}
	section("*" + slackEscape(head) + "*")
	if r.Message != "" {
		section(slackEscape(r.Message))
	}
	field := func(name, value string) slackText {
		return slackText{Type: "mrkdwn", Text: cut("*"+name+"*\n"+slackEscape(value), slackMaxFieldText)}
	}
	m.Blocks = append(m.Blocks, slackBlock{Type: "section", Fields: []slackText{
		field("From", orNone(r.From)), field("To", orNone(r.To)),
		field("Result", r.Result), field("Duration", r.Duration.Round(time.Second).String()),
	}})
	for _, l := range []struct {
		name  string
		names []string
	}{{"Created", r.Created}, {"Deleted", r.Deleted}, {"Still draining", r.Waiting}} {
		if len(l.names) > 0 {
			section(fmt.Sprintf("*%s* (%d): %s", l.name, len(l.names), slackEscape(strings.Join(l.names, ", "))))
		}
	}
	b, _ := json.Marshal(m)
	return b
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// slackEscape escapes what Slack's mrkdwn reads as markup.
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace

// cut shortens s to at most n characters, ending in … when it was cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
