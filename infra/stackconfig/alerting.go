package stackconfig

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

func (f *Fleet) validateAlerting(p *field.Path) field.ErrorList {
	if f.Alerting == nil {
		// The local platform declares no Alertmanager
		// (validateLocalSharedFleets).
		if len(f.SharedFleets) > 0 && f.Platform != PlatformLocal {
			return field.ErrorList{field.Required(p, "the shared fleets' alerts need a receiver: add alerting.receiver with one of webhookURLConfigKey, slackWebhookURLConfigKey or pagerDutyRoutingKeyConfigKey (a config secret set with pulumi config set --secret)")}
		}
		return nil
	}
	if f.Alerting.Receiver.Name == "" {
		f.Alerting.Receiver.Name = fleetspec.DefaultAlertReceiver
	}
	var errs field.ErrorList
	r, rp := f.Alerting.Receiver, p.Child("receiver")
	if len(f.SharedFleets) == 0 {
		errs = append(errs, field.Forbidden(p, "alerting is the shared fleets' Alertmanager; this stack has no sharedFleets, so remove it"))
	}
	if f.Platform == PlatformLocal {
		errs = append(errs, field.Forbidden(p, "the local platform declares no Alertmanager for its shared fleets; remove alerting or set platform: gke"))
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
