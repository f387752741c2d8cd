package stackconfig

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
)

// SecretKind is what a config secret holds, and so how it is checked.
type SecretKind int

const (
	// SecretToken is a team's GitLab token (runner or API): the program
	// writes it into the team's Secret and the controller judges it.
	SecretToken SecretKind = iota
	// SecretRunnerToken goes into a shared fleet's config.toml as it is:
	// it must be a runner token (gitlabrunner.TokenFormat).
	SecretRunnerToken
	// SecretValue is the alert receiver's URL or key: it must not be empty.
	SecretValue
)

// placeholder is what a secret of the kind looks like in the fix.
func (k SecretKind) placeholder() string {
	return [...]string{SecretToken: "<token>", SecretRunnerToken: "<glrt-token>", SecretValue: "<value>"}[k]
}

// ConfigSecret is one use of a config secret: the stack config key that
// names it (Path) and the config key it names (Key, in the runnerfleet
// namespace).
type ConfigSecret struct {
	Path *field.Path
	Key  string
	Kind SecretKind
}

// ConfigSecrets are every use of a config secret the stack makes, in the
// order of the stack config: the teams' tokens, the shared fleets' runner
// tokens, the VM groups' runner tokens and notification webhooks and, with
// shared fleets, the alert receiver's secret. A key may be
// used more than once; the program reads each once (ReadSecrets).
func (f *Fleet) ConfigSecrets() []ConfigSecret {
	var out []ConfigSecret
	for i, t := range f.Teams {
		tp := Root.Child("teams").Index(i)
		if t.TokenConfigKey != "" {
			out = append(out, ConfigSecret{tp.Child("tokenConfigKey"), t.TokenConfigKey, SecretToken})
		}
		if t.APITokenConfigKey != "" {
			out = append(out, ConfigSecret{tp.Child("apiTokenConfigKey"), t.APITokenConfigKey, SecretToken})
		}
	}
	for i, s := range f.SharedFleets {
		for j, g := range s.Groups {
			out = append(out, ConfigSecret{Root.Child("sharedFleets").Index(i).Child("groups").Index(j).Child("tokenConfigKey"), g.TokenConfigKey, SecretRunnerToken})
		}
		for j, g := range s.VMGroups {
			gp := Root.Child("sharedFleets").Index(i).Child("vmGroups").Index(j)
			out = append(out, ConfigSecret{gp.Child("tokenConfigKey"), g.TokenConfigKey, SecretRunnerToken})
			if g.Notify != nil {
				out = append(out, ConfigSecret{gp.Child("notify", "webhookURLConfigKey"), g.Notify.WebhookURLConfigKey, SecretValue})
			}
		}
	}
	if len(f.SharedFleets) > 0 && f.Alerting != nil {
		for _, k := range f.Alerting.Receiver.SecretKeys() {
			out = append(out, ConfigSecret{Root.Child("alerting", "receiver"), k, SecretValue})
		}
	}
	return out
}

// ReadSecrets reads every config secret the stack names, each key once,
// through get (the program passes Pulumi's config; found is false for a
// key that is not set), and checks each value as every one of its uses
// requires. It returns the values by key, or one error naming every
// stack config key whose secret is missing or unfit, with the command that
// sets it: the program calls it before it declares anything.
func (f *Fleet) ReadSecrets(stack string, get func(key string) (value string, found bool)) (map[string]string, error) {
	out := map[string]string{}
	read := map[string]bool{}
	var problems []string
	for _, s := range f.ConfigSecrets() {
		v, ok := out[s.Key]
		if !read[s.Key] {
			read[s.Key] = true
			if v, ok = get(s.Key); ok {
				out[s.Key] = v
			}
		}
		switch {
		case !ok || (s.Kind == SecretValue && v == ""):
			problems = append(problems, fmt.Sprintf("%s: config key runnerfleet:%s is not set: pulumi config set --secret %s %s --stack %s", s.Path, s.Key, s.Key, s.Kind.placeholder(), stack))
		case s.Kind == SecretRunnerToken && !gitlabrunner.TokenFormat.MatchString(v):
			// Nothing else is a runner token; config.toml gets it TOML-encoded.
			problems = append(problems, fmt.Sprintf("%s: config key runnerfleet:%s is not a runner token (8 to 512 letters, digits, '.', '_' or '-', such as glrt-…)", s.Path, s.Key))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, &Error{Extra: problems}
	}
	return out, nil
}
