package sharedfleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
)

// amtool checks an alertmanager.yml as Alertmanager loads it.
func amtool(t *testing.T, file string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, AlertmanagerConfigFile), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	return prometheus.Amtool(dir, "check-config", AlertmanagerConfigFile)
}

// Every receiver the stack config can name renders an Alertmanager
// configuration that amtool accepts, with the secret only as a file.
func TestEveryAlertReceiverPassesAmtool(t *testing.T) {
	for _, r := range []fleetspec.AlertReceiver{
		{Name: "ci-platform", WebhookURLConfigKey: "alertWebhookURL"},
		{Name: "ci-platform", SlackWebhookURLConfigKey: "slackURL", SlackChannel: "#ci-alerts"},
		{Name: "on-call", PagerDutyRoutingKeyConfigKey: "pagerDutyKey"},
	} {
		ap, err := PlanAlertmanager(&fleetspec.Alerting{Receiver: r}, "alerting")
		if err != nil {
			t.Fatal(err)
		}
		out, err := amtool(t, ap.File)
		if err != nil || !strings.Contains(out, "SUCCESS") {
			t.Errorf("%+v: amtool check-config: %v\n%s\n%s", r, err, out, ap.File)
		}
		if !strings.Contains(ap.File, "_file: "+alertmanagerSecretsDir+"/"+AlertmanagerSecretKey) {
			t.Errorf("%+v: the receiver's secret is not read from its file:\n%s", r, ap.File)
		}
	}
	// Negative control: amtool refuses a route to a receiver that does not
	// exist, so its SUCCESS above means something.
	bad := strings.Replace(mustPlanAlertmanager(t).File, "receiver: ci-platform", "receiver: nobody", 1)
	if out, err := amtool(t, bad); err == nil {
		t.Errorf("amtool accepted a route to an unknown receiver:\n%s", out)
	}
}

func mustPlanAlertmanager(t *testing.T) *AlertmanagerPlan {
	t.Helper()
	ap, err := PlanAlertmanager(&fleetspec.Alerting{Receiver: fleetspec.AlertReceiver{Name: "ci-platform", WebhookURLConfigKey: "k"}}, "alerting")
	if err != nil {
		t.Fatal(err)
	}
	return ap
}
