package sharedfleet_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	psharedfleet "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

const (
	tokVMGroup       = "runnerfleet:sharedfleet:VMGroup"
	tokAccount       = "gcp:serviceaccount/account:Account"
	tokProjectIAM    = "gcp:projects/iAMMember:IAMMember"
	tokConfigMap     = "kubernetes:core/v1:ConfigMap"
	tokSecret        = "gcp:secretmanager/secret:Secret"
	tokSecretVersion = "gcp:secretmanager/secretVersion:SecretVersion"
	tokSecretIAM     = "gcp:secretmanager/secretIamMember:SecretIamMember"
	// The admin and RDP ranges of the Windows group.
	adminRange = "203.0.113.0/24"
	rdpRange   = "198.51.100.0/28"
	// The cluster's pods range (the gcp section's default), where the
	// fleet's Prometheus runs.
	podsRange = "10.20.0.0/14"
)

// vmGroupsJSON is sharedFleetsJSON with a Windows VM group (admin and RDP
// ranges) in production and a Linux one (neither) in staging.
var vmGroupsJSON = func() string {
	s := strings.Replace(sharedFleetsJSON, `"groups": [`, `"vmGroups": [
        {"name": "windows-2022", "os": "windows", "windowsVersion": "2022", "machineType": "n2d-standard-8",
         "image": "family/wsrm-2022", "tokenConfigKey": "windowsToken", "zones": ["europe-west1-b", "europe-west1-c"], "count": 2,
         "adminSourceRanges": ["`+adminRange+`"], "rdpSourceRanges": ["`+rdpRange+`"],
         "notify": {"webhookURLConfigKey": "rotationWebhook"}}
      ],
      "groups": [`, 1)
	i := strings.Index(s, `"name": "staging"`)
	return s[:i] + strings.Replace(s[i:], `"groups": [`, `"vmGroups": [
        {"name": "linux-vm", "os": "linux", "machineType": "e2-standard-4", "image": "runner-manager", "tokenConfigKey": "linuxVMToken"}
      ],
      "groups": [`, 1)
}()

var (
	vmGroupsOnce   sync.Once
	vmGroupsResult *deployed
)

func withVMGroups(t *testing.T) *deployed {
	t.Helper()
	vmGroupsOnce.Do(func() { vmGroupsResult = run(t, vmGroupsJSON) })
	if vmGroupsResult == nil {
		t.Fatal("the run with VM groups failed")
	}
	return vmGroupsResult
}

// vmGroupEmail is the account of VM group name, as the program names it.
func vmGroupEmail(name string) string {
	return fleetspec.VMGroupServiceAccountEmail(project, "runners-prod", name)
}

// groupOpenings are, for every tcp port an ingress rule opens to the
// managers running as account, the sorted sources it is open to. A rule
// that targets no account and no tag opens its ports to every VM, so it
// counts for the group's too.
func groupOpenings(rules []infratest.Resource, account string) map[string][]string {
	out := map[string][]string{}
	for _, r := range rules {
		if d := str(r.Input("direction")); d != "" && d != "INGRESS" {
			continue
		}
		accounts, tags := strs(r.Input("targetServiceAccounts")), strs(r.Input("targetTags"))
		if !slices.Contains(accounts, account) && (len(accounts) > 0 || len(tags) > 0) {
			continue
		}
		for _, a := range r.Input("allows").ArrayValue() {
			ports := strs(a.ObjectValue()["ports"])
			if len(ports) == 0 {
				ports = []string{"all"}
			}
			for _, p := range ports {
				k := str(a.ObjectValue()["protocol"]) + "/" + p
				out[k] = append(out[k], strs(r.Input("sourceRanges"))...)
				slices.Sort(out[k])
				out[k] = slices.Compact(out[k])
			}
		}
	}
	return out
}

// openingProblems compares what is open with what is wanted, and refuses
// any port but Remote Desktop open to the whole internet.
func openingProblems(open, want map[string][]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(open)) {
		for _, src := range open[k] {
			if pfx, err := netip.ParsePrefix(src); err == nil && pfx.Bits() == 0 && k != fmt.Sprintf("tcp/%d", fleetspec.RDPPort) {
				out = append(out, fmt.Sprintf("%s is open to %s", k, src))
			}
		}
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s is open to %v, and nothing needs it", k, open[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !slices.Equal(open[k], want[k]) {
			out = append(out, fmt.Sprintf("%s is open to %v, want %v", k, open[k], want[k]))
		}
	}
	return out
}

// A reviewer's invariant: on a VM group's managers, the fleet's Prometheus
// (the pods range) and the admin ranges reach gitlab-runner's metrics and
// the host exporter, the admin ranges alone WinRM (or SSH), the RDP ranges
// alone Remote Desktop, only when listed, and nothing else is open. The
// rules target the group's account, so no other VM is opened by them.
func TestVMGroupFirewallsAdmitOnlyTheFleetsPrometheusAndTheListedRanges(t *testing.T) {
	p := withVMGroups(t)
	if probs := p.m.Problems(); len(probs) > 0 {
		t.Fatalf("registrations the provider schemas refuse: %v", probs)
	}
	rules := p.m.ByToken(tokFirewall)
	both := []string{adminRange, podsRange}
	slices.Sort(both)
	cases := map[string]map[string][]string{
		"windows-2022": {
			"tcp/9252": both, "tcp/9182": both, // gitlab-runner's metrics, windows_exporter
			"tcp/5985": {adminRange}, "tcp/5986": {adminRange}, // WinRM
			"tcp/3389": {rdpRange},
		},
		// No admin or RDP ranges: Prometheus alone, and no SSH.
		"linux-vm": {"tcp/9252": {podsRange}, "tcp/9100": {podsRange}},
	}
	for group, want := range cases {
		open := groupOpenings(rules, vmGroupEmail(group))
		for _, pr := range openingProblems(open, want) {
			t.Errorf("%s: %s", group, pr)
		}
	}
	// Every rule of a group targets its account alone: none opens a port
	// to every VM of the VPC or to tagged VMs.
	n := 0
	for _, r := range rules {
		if !strings.Contains(r.Name, "-vmgroup-") {
			continue
		}
		n++
		if acc := strs(r.Input("targetServiceAccounts")); len(acc) != 1 || len(strs(r.Input("targetTags"))) > 0 {
			t.Errorf("rule %s targets accounts %v and tags %v, want its group's account alone", str(r.Input("name")), acc, strs(r.Input("targetTags")))
		}
	}
	if n != 4 {
		t.Errorf("%d VM group rules, want 4 (windows: prom, admin, rdp; linux: prom)", n)
	}

	// The negative control: the Windows group's admin rule opened to the
	// whole internet (or with an extra port) fails the same check.
	for _, mutate := range []func(r *infratest.Resource){
		func(r *infratest.Resource) {
			r.Inputs["sourceRanges"] = resource.NewArrayProperty([]resource.PropertyValue{resource.NewStringProperty("0.0.0.0/0")})
		},
		func(r *infratest.Resource) {
			r.Inputs["allows"] = resource.NewArrayProperty([]resource.PropertyValue{resource.NewObjectProperty(resource.PropertyMap{
				"protocol": resource.NewStringProperty("tcp"), "ports": resource.NewArrayProperty([]resource.PropertyValue{resource.NewStringProperty("5985"), resource.NewStringProperty("22")}),
			})})
		},
	} {
		bad := slices.Clone(rules)
		found := false
		for i, r := range bad {
			if str(r.Input("name")) == "runners-prod-windows-2022-admin" {
				r.Inputs = maps.Clone(r.Inputs)
				mutate(&r)
				bad[i], found = r, true
			}
		}
		if !found {
			t.Fatal("no rule runners-prod-windows-2022-admin")
		}
		if probs := openingProblems(groupOpenings(bad, vmGroupEmail("windows-2022")), cases["windows-2022"]); len(probs) == 0 {
			t.Error("a widened admin rule passed the check")
		}
	}
}

// Each group's managers run as an account of their own with the log and
// metric writer roles in the project, and the reading of their runner
// token's secret on that secret alone: no other grant of the stack names
// the account, none lets anyone act as it, and no one else may read the
// secret. The secret holds the group's token, as a Pulumi secret.
func TestVMGroupAccountsHaveOnlyLogAndMetricWritingAndTheirToken(t *testing.T) {
	p := withVMGroups(t)
	for group, key := range map[string]string{"windows-2022": "windowsToken", "linux-vm": "linuxVMToken"} {
		email := vmGroupEmail(group)
		acct := p.m.Get(t, tokAccount, "runners-prod-vmgroup-"+group+"-sa")
		if str(acct.Input("accountId")) != fleetspec.VMGroupServiceAccountID("runners-prod", group) || str(acct.Input("project")) != project {
			t.Errorf("%s: account %v", group, acct.Inputs)
		}
		secret := p.m.Get(t, tokSecret, "runners-prod-vmgroup-"+group+"-token")
		secretID := fleetspec.VMGroupTokenSecretID("runners-prod", group)
		if str(secret.Input("secretId")) != secretID || str(secret.Input("project")) != project {
			t.Errorf("%s: secret %v", group, secret.Inputs)
		}
		version := p.m.Get(t, tokSecretVersion, "runners-prod-vmgroup-"+group+"-token-version")
		if data := version.Inputs["secretData"]; !data.IsSecret() || str(version.Input("secretData")) != "glrt-"+key+"NotReal" {
			t.Errorf("%s: the secret's version holds %v, want the group's token as a Pulumi secret", group, data)
		}
		var grants []string
		for _, r := range p.m.Resources() {
			if !strings.Contains(strings.ToLower(r.Token), "iammember") {
				continue
			}
			if str(r.Input("secretId")) == secretID && str(r.Input("member")) != "serviceAccount:"+email {
				t.Errorf("%s: %s lets %s read the group's token", group, r.Name, str(r.Input("member")))
			}
			if str(r.Input("member")) == "serviceAccount:"+email {
				if r.Input("condition").IsObject() {
					t.Errorf("%s: grant %s has a condition", group, r.Name)
				}
				on := str(r.Input("project"))
				if r.Token == tokSecretIAM {
					on = "secret " + str(r.Input("secretId"))
				} else if r.Token != tokProjectIAM {
					on = r.Token
				}
				grants = append(grants, str(r.Input("role"))+" on "+on)
			}
			if strings.Contains(str(r.Input("serviceAccountId")), email) {
				t.Errorf("%s: %s lets %s act on the group's account", group, r.Name, str(r.Input("member")))
			}
		}
		slices.Sort(grants)
		want := []string{"roles/logging.logWriter on " + project, "roles/monitoring.metricWriter on " + project, "roles/secretmanager.secretAccessor on secret " + secretID}
		if !slices.Equal(grants, want) {
			t.Errorf("%s: grants %v, want %v", group, grants, want)
		}
	}
}

// A VM group is a component of its fleet's, on the platform's gcp
// provider, and a stack without VM groups declares none.
func TestVMGroupsAreComponentsOfTheirFleets(t *testing.T) {
	p := withVMGroups(t)
	fleets := map[string]string{}
	for _, r := range p.m.ByToken("runnerfleet:sharedfleet:SharedFleet") {
		fleets[r.URN] = r.Name
	}
	got := map[string]string{}
	for _, c := range p.m.ByToken(tokVMGroup) {
		got[c.Name] = fleets[c.Parent]
		for _, r := range p.m.Resources() {
			if r.Parent == c.URN && (!r.Custom || r.Provider == "") {
				t.Errorf("%s: child %s %s is not on the gcp provider", c.Name, r.Token, r.Name)
			}
		}
	}
	want := map[string]string{"runners-prod-vmgroup-windows-2022": "shared-production", "runners-prod-vmgroup-linux-vm": "shared-staging"}
	if !maps.Equal(got, want) {
		t.Errorf("VM group components and their fleets %v, want %v", got, want)
	}
	if n := len(withSharedFleets(t).m.ByToken(tokVMGroup)); n != 0 {
		t.Errorf("%d VM groups declared without vmGroups", n)
	}
}

// The fleet's Prometheus scrapes its VM groups (runner and host exporter,
// by GCE discovery of the group's label in its zones) and carries their
// alert rules, and promtool accepts the whole configuration.
func TestTheFleetsPrometheusScrapesItsVMGroupsWithTheirAlertRules(t *testing.T) {
	p := withVMGroups(t)
	for fleet, c := range map[string]struct {
		group, alert, port string
		zones              []string
	}{
		"production": {"windows-2022", "WindowsRunnerManagerDown", "9182", []string{"europe-west1-b", "europe-west1-c"}},
		"staging":    {"linux-vm", "LinuxRunnerManagerDown", "9100", []string{"europe-west1-b"}},
	} {
		data := p.m.Get(t, tokConfigMap, "shared-"+fleet+"-prometheus-config").Input("data").ObjectValue()
		files := prometheus.Files{}
		for k, v := range data {
			files[string(k)] = []byte(v.StringValue())
		}
		cfg, alerts := string(files[psharedfleet.PrometheusConfigFile]), string(files[psharedfleet.AlertRulesFile])
		for _, want := range append([]string{"job_name: " + psharedfleet.VMGroupJob(c.group), fmt.Sprintf(`labels.runnerfleet-group = "%s"`, c.group), "port: 9252", "port: " + c.port}, zoneLines(c.zones)...) {
			if !strings.Contains(cfg, want) {
				t.Errorf("%s's prometheus.yml lacks %q", fleet, want)
			}
		}
		if !strings.Contains(alerts, "alert: "+c.alert) || !strings.Contains(alerts, fmt.Sprintf(`up{job="%s", exporter="gitlab-runner"} == 0`, psharedfleet.VMGroupJob(c.group))) {
			t.Errorf("%s's alerts.yml lacks %s on job %s:\n%s", fleet, c.alert, psharedfleet.VMGroupJob(c.group), alerts)
		}
		dir := t.TempDir()
		if err := files.Write(dir); err != nil {
			t.Fatal(err)
		}
		if out, err := prometheus.Promtool(dir, "check", "config", psharedfleet.PrometheusConfigFile); err != nil || !strings.Contains(out, "SUCCESS") {
			t.Errorf("%s: promtool: %v\n%s", fleet, err, out)
		}
	}
}

func zoneLines(zones []string) []string {
	var out []string
	for _, z := range zones {
		out = append(out, "zone: "+z)
	}
	return out
}
