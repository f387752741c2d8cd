package stackconfig

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

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

func (f *Fleet) validateAlerting(p *field.Path) field.ErrorList {
	if f.Alerting == nil {
		if len(f.SharedFleets) > 0 {
			return field.ErrorList{field.Required(p, "the shared fleets' alerts need a receiver: add alerting.receiver with one of webhookURLConfigKey, slackWebhookURLConfigKey or pagerDutyRoutingKeyConfigKey (a config secret set with pulumi config set --secret)")}
		}
		return nil
	}
	if f.Alerting.Receiver.Name == "" {
		f.Alerting.Receiver.Name = DefaultAlertReceiver
	}
	var errs field.ErrorList
	r, rp := f.Alerting.Receiver, p.Child("receiver")
	if len(f.SharedFleets) == 0 {
		errs = append(errs, field.Forbidden(p, "alerting is the shared fleets' Alertmanager; this stack has no sharedFleets, so remove it"))
	}
	for _, k := range []struct{ key, value string }{
		{"webhookURLConfigKey", r.WebhookURLConfigKey},
		{"slackWebhookURLConfigKey", r.SlackWebhookURLConfigKey},
		{"pagerDutyRoutingKeyConfigKey", r.PagerDutyRoutingKeyConfigKey},
	} {
		if k.value != "" && !configKey.MatchString(k.value) {
			errs = append(errs, field.Invalid(rp.Child(k.key), k.value, "a config key name such as alertWebhookURL (letters, digits, '-' and '_'), set with pulumi config set --secret"))
		}
	}
	if n := len(r.SecretKeys()); n != 1 {
		errs = append(errs, field.Invalid(rp, n, "give exactly one of webhookURLConfigKey, slackWebhookURLConfigKey or pagerDutyRoutingKeyConfigKey"))
	}
	if r.SlackChannel != "" && r.SlackWebhookURLConfigKey == "" {
		errs = append(errs, field.Forbidden(rp.Child("slackChannel"), "only with slackWebhookURLConfigKey"))
	}
	return errs
}
