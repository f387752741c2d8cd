package vmfleet_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// slackCheck is a loopback Slack incoming webhook: it checks each message
// against the documented fields and limits (text, the notification's
// fallback, is required with blocks; at most 50 blocks, each with a type; a
// section's text object is mrkdwn and at most 3000 characters; at most 10
// fields of at most 2000) and keeps the messages' texts for the test.
func slackCheck(t *testing.T) (url string, got func() []string) {
	t.Helper()
	var texts []string
	done := make(chan struct{}, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		b, _ := io.ReadAll(r.Body)
		var m struct {
			Text   *string `json:"text"`
			Blocks []struct {
				Type string `json:"type"`
				Text *struct {
					Type, Text string
				} `json:"text"`
				Fields []struct {
					Type, Text string
				} `json:"fields"`
			} `json:"blocks"`
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			t.Errorf("message %s: %v", b, err)
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		if m.Text == nil || *m.Text == "" {
			t.Errorf("message %s: no text (the notification's fallback)", b)
		}
		if len(m.Blocks) == 0 || len(m.Blocks) > 50 {
			t.Errorf("%d blocks, want 1 to 50", len(m.Blocks))
		}
		all := []string{*m.Text}
		for i, bl := range m.Blocks {
			if bl.Type != "section" {
				t.Errorf("block %d: type %q, want section", i, bl.Type)
			}
			if bl.Text == nil && len(bl.Fields) == 0 {
				t.Errorf("block %d: a section needs text or fields", i)
			}
			if bl.Text != nil {
				if bl.Text.Type != "mrkdwn" || bl.Text.Text == "" || utf8.RuneCountInString(bl.Text.Text) > 3000 {
					t.Errorf("block %d: text %s %d characters, want mrkdwn, 1 to 3000", i, bl.Text.Type, utf8.RuneCountInString(bl.Text.Text))
				}
				all = append(all, bl.Text.Text)
			}
			if len(bl.Fields) > 10 {
				t.Errorf("block %d: %d fields, want at most 10", i, len(bl.Fields))
			}
			for j, f := range bl.Fields {
				if f.Type != "mrkdwn" || f.Text == "" || utf8.RuneCountInString(f.Text) > 2000 {
					t.Errorf("block %d field %d: %s %d characters, want mrkdwn, 1 to 2000", i, j, f.Type, utf8.RuneCountInString(f.Text))
				}
				all = append(all, f.Text)
			}
		}
		texts = append(texts, strings.Join(all, "\n"))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("no message reached the webhook")
		}
		return texts
	}
}

// A failed rotation's Slack message names the step it stopped at, its
// message and the managers it created and deleted; a long message and many
// managers are cut to Slack's limits, not refused by Slack.
func TestSlackMessageOnFailure(t *testing.T) {
	url, got := slackCheck(t)
	var progress strings.Builder
	notify, err := vmfleet.Webhook(url, vmfleet.NotifySlack, &progress)
	if err != nil {
		t.Fatal(err)
	}
	var many []string
	for i := range 400 {
		many = append(many, "wsrm-green-"+strings.Repeat("x", 3)+string(rune('a'+i%26)))
	}
	notify(context.Background(), vmfleet.Report{
		Group: "wsrm", From: "blue", To: "green", Result: "failed", Step: vmfleet.StepHealthy,
		Message: "the new green VMs never became healthy: <metrics> & more " + strings.Repeat("detail ", 800),
		Created: []string{"wsrm-green-1", "wsrm-green-2"}, Deleted: many, Duration: 15 * time.Minute,
	})
	texts := got()
	if len(texts) != 1 {
		t.Fatalf("%d messages, want 1", len(texts))
	}
	for _, want := range []string{"wsrm", "failed", "at step: " + vmfleet.StepHealthy, "never became healthy", "&lt;metrics&gt; &amp; more",
		"wsrm-green-1, wsrm-green-2", "*From*\nblue", "*To*\ngreen", "15m0s", "…"} {
		if !strings.Contains(texts[0], want) {
			t.Errorf("the message lacks %q:\n%s", want, texts[0])
		}
	}
	if progress.Len() > 0 {
		t.Errorf("progress: %s", progress.String())
	}
}

// A success names no step and says succeeded.
func TestSlackMessageOnSuccess(t *testing.T) {
	url, got := slackCheck(t)
	notify, err := vmfleet.Webhook(url, vmfleet.NotifySlack, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	notify(context.Background(), vmfleet.Report{Group: "wsrm", From: "blue", To: "green", Result: "succeeded",
		Created: []string{"wsrm-green-1"}, Deleted: []string{"wsrm-blue-1"}, Duration: time.Hour})
	texts := got()
	if len(texts) != 1 || !strings.Contains(texts[0], "wsrm succeeded") || strings.Contains(texts[0], "at step") ||
		!strings.Contains(texts[0], "*Deleted* (1): wsrm-blue-1") {
		t.Errorf("messages %q", texts)
	}
}

// The JSON format posts the report itself; an unknown format is refused,
// naming the formats.
func TestWebhookFormats(t *testing.T) {
	var rep vmfleet.Report
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&rep)
	}))
	defer srv.Close()
	notify, err := vmfleet.Webhook(srv.URL, vmfleet.NotifyJSON, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	notify(context.Background(), vmfleet.Report{Group: "wsrm", Result: "timeout", Step: vmfleet.StepDelete})
	if rep.Group != "wsrm" || rep.Step != vmfleet.StepDelete {
		t.Errorf("JSON report %+v", rep)
	}
	if _, err := vmfleet.Webhook(srv.URL, "teams", io.Discard); err == nil || !strings.Contains(err.Error(), "slack or json") {
		t.Errorf("unknown format: %v", err)
	}
}
