package fleetspec

// Alerting is where the shared fleets' alerts go: the receiver of the
// Alertmanager in the monitoring namespace, which every fleet's Prometheus
// sends to. A stack with shared fleets needs one, so that an alert reaches
// someone.
type Alerting struct {
	Receiver AlertReceiver `json:"receiver"`
}

// AlertReceiver is one of a webhook, a Slack channel or PagerDuty. Its
// secrets (the webhook URL, Slack's incoming webhook URL, PagerDuty's
// routing key) are stack config secrets named by key: pulumi config set
// --secret <key> <value>; the program writes them into a Secret that
// Alertmanager reads as files, never into its configuration.
type AlertReceiver struct {
	// Name of the receiver; default platform.
	Name string `json:"name,omitempty"`
	// WebhookURLConfigKey names the secret holding a URL that gets every
	// alert as Alertmanager's webhook JSON.
	WebhookURLConfigKey string `json:"webhookURLConfigKey,omitempty"`
	// SlackWebhookURLConfigKey names the secret holding a Slack incoming
	// webhook URL; SlackChannel overrides the webhook's channel.
	SlackWebhookURLConfigKey string `json:"slackWebhookURLConfigKey,omitempty"`
	SlackChannel             string `json:"slackChannel,omitempty"`
	// PagerDutyRoutingKeyConfigKey names the secret holding a PagerDuty
	// Events API v2 routing key.
	PagerDutyRoutingKeyConfigKey string `json:"pagerDutyRoutingKeyConfigKey,omitempty"`
}

// DefaultAlertReceiver names the receiver when the stack does not.
const DefaultAlertReceiver = "platform"

// SecretKeys are the config keys of the receiver's secrets, in a fixed
// order.
func (r AlertReceiver) SecretKeys() []string {
	var keys []string
	for _, k := range []string{r.WebhookURLConfigKey, r.SlackWebhookURLConfigKey, r.PagerDutyRoutingKeyConfigKey} {
		if k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}
