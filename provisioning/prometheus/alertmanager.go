package prometheus

// AlertmanagerFile is an alertmanager.yml: the parts runnerfleet writes.
type AlertmanagerFile struct {
	Route     Route      `json:"route"`
	Receivers []Receiver `json:"receivers"`
}

// Route is the routing tree's root.
type Route struct {
	Receiver       string   `json:"receiver"`
	GroupBy        []string `json:"group_by,omitempty"`
	GroupWait      string   `json:"group_wait,omitempty"`
	GroupInterval  string   `json:"group_interval,omitempty"`
	RepeatInterval string   `json:"repeat_interval,omitempty"`
}

// Receiver is where notifications go. Secrets (URLs with tokens, routing
// keys) are read from files, never written into the configuration.
type Receiver struct {
	Name             string            `json:"name"`
	WebhookConfigs   []WebhookConfig   `json:"webhook_configs,omitempty"`
	SlackConfigs     []SlackConfig     `json:"slack_configs,omitempty"`
	PagerdutyConfigs []PagerdutyConfig `json:"pagerduty_configs,omitempty"`
}

// WebhookConfig posts alerts to a URL read from URLFile.
type WebhookConfig struct {
	URLFile      string `json:"url_file"`
	SendResolved bool   `json:"send_resolved"`
}

// SlackConfig posts to a Slack incoming webhook read from APIURLFile.
type SlackConfig struct {
	APIURLFile   string `json:"api_url_file"`
	Channel      string `json:"channel,omitempty"`
	SendResolved bool   `json:"send_resolved"`
}

// PagerdutyConfig sends to PagerDuty's Events API v2 with the routing key
// read from RoutingKeyFile.
type PagerdutyConfig struct {
	RoutingKeyFile string `json:"routing_key_file"`
	SendResolved   bool   `json:"send_resolved"`
}
