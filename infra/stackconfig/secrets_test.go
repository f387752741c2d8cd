package stackconfig

import (
	"strings"
	"testing"
)

// Every config secret the stack names is read once, even when a team and a
// shared-fleet group name the same key, and checked as each of its uses
// requires: a key a team may use as it is must still be a runner token
// when a group puts it into config.toml.
func TestEachConfigSecretIsReadOnceAndCheckedForEveryUse(t *testing.T) {
	v := sharedFleetStack()
	at(v, "sharedFleets", 1, "groups", 0)["tokenConfigKey"] = "teamA" // staging's linux group shares team-a's key
	f, err := Decode(encode(t, v), "gke-shared")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range f.ConfigSecrets() {
		keys = append(keys, s.Path.String()+"="+s.Key)
	}
	want := "runnerfleet:fleet.teams[0].tokenConfigKey=teamA runnerfleet:fleet.sharedFleets[0].groups[0].tokenConfigKey=sharedProductionLinux " +
		"runnerfleet:fleet.sharedFleets[0].groups[1].tokenConfigKey=sharedProductionAutoscaler runnerfleet:fleet.sharedFleets[1].groups[0].tokenConfigKey=teamA " +
		"runnerfleet:fleet.alerting.receiver=alertWebhookURL"
	if got := strings.Join(keys, " "); got != want {
		t.Fatalf("ConfigSecrets:\n%s\nwant\n%s", got, want)
	}

	config := map[string]string{"teamA": "glrt-team-a", "sharedProductionLinux": "glrt-prod-linux", "sharedProductionAutoscaler": "glrt-prod-autoscaler", "alertWebhookURL": "https://hooks.example.com/x"}
	reads := map[string]int{}
	get := func(key string) (string, bool) {
		reads[key]++
		v, ok := config[key]
		return v, ok
	}
	got, err := f.ReadSecrets("gke-shared", get)
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range reads {
		if n != 1 {
			t.Errorf("config key %s read %d times, want once", k, n)
		}
	}
	if len(reads) != len(config) || got["teamA"] != "glrt-team-a" || got["alertWebhookURL"] != config["alertWebhookURL"] {
		t.Errorf("read %v, got %v", reads, got)
	}

	// A value team-a's Secret would take as it is, but no runner token:
	// refused at the group's key, which puts it into config.toml.
	config["teamA"] = "glrt-x|y"
	_, err = f.ReadSecrets("gke-shared", get)
	if err == nil || !strings.Contains(err.Error(), "runnerfleet:fleet.sharedFleets[1].groups[0].tokenConfigKey: config key runnerfleet:teamA is not a runner token") ||
		strings.Contains(err.Error(), "teams[0]") || strings.Contains(err.Error(), "glrt-x|y") {
		t.Errorf("a shared key that is no runner token: %v", err)
	}

	// A missing key is named at every use, with the command that sets it;
	// an empty alert receiver is as good as none.
	delete(config, "teamA")
	config["alertWebhookURL"] = ""
	_, err = f.ReadSecrets("gke-shared", get)
	for _, w := range []string{
		"runnerfleet:fleet.teams[0].tokenConfigKey: config key runnerfleet:teamA is not set: pulumi config set --secret teamA <token> --stack gke-shared",
		"runnerfleet:fleet.sharedFleets[1].groups[0].tokenConfigKey: config key runnerfleet:teamA is not set: pulumi config set --secret teamA <glrt-token> --stack gke-shared",
		"runnerfleet:fleet.alerting.receiver: config key runnerfleet:alertWebhookURL is not set: pulumi config set --secret alertWebhookURL <value>",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v\ndoes not say %q", err, w)
		}
	}
}
