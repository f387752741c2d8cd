package sharedfleet_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

const (
	tokFirewall = "gcp:compute/firewall:Firewall"
	tokTemplate = "gcp:compute/instanceTemplate:InstanceTemplate"
	tokMIG      = "gcp:compute/instanceGroupManager:InstanceGroupManager"
)

// vmTags are every network tag a job VM of the stack may carry: the fleets'
// VM tags, the groups' own, and the instance templates'.
func vmTags(p *deployed) map[string]bool {
	tags := map[string]bool{}
	for _, s := range p.fleet.SharedFleets {
		for _, g := range s.Groups {
			tags[g.VMNetworkTag()] = true
			for _, t := range g.NetworkTags {
				tags[t] = true
			}
		}
	}
	for _, r := range p.m.ByToken(tokTemplate) {
		for _, t := range strs(r.Input("tags")) {
			tags[t] = true
		}
	}
	return tags
}

// vmNeed is a port some consumer needs on the VMs tagged tag.
type vmNeed struct {
	tag  string
	port string
}

// vmOpenings are, for every port some ingress rule opens to VMs tagged
// with one of tags, the rules (by GCE name) that open it and their
// sources; a rule without target tags opens its ports to every tag, a
// rule without ports every port ("all"). The consumers of the VMs share
// the pods range, so a rule, not a source range, is what stands for one
// consumer.
func vmOpenings(rules []infratest.Resource, tags map[string]bool) map[vmNeed]map[string][]string {
	out := map[vmNeed]map[string][]string{}
	for _, r := range rules {
		if d := str(r.Input("direction")); d != "" && d != "INGRESS" {
			continue
		}
		targets := strs(r.Input("targetTags"))
		if len(targets) == 0 {
			targets = slices.Sorted(maps.Keys(tags))
		}
		sources := slices.Sorted(slices.Values(append(strs(r.Input("sourceRanges")), strs(r.Input("sourceTags"))...)))
		for _, a := range r.Input("allows").ArrayValue() {
			ports := strs(a.ObjectValue()["ports"])
			if len(ports) == 0 {
				ports = []string{"all"}
			}
			for _, t := range targets {
				if !tags[t] {
					continue
				}
				for _, p := range ports {
					k := vmNeed{t, str(a.ObjectValue()["protocol"]) + "/" + p}
					if out[k] == nil {
						out[k] = map[string][]string{}
					}
					out[k][str(r.Input("name"))] = sources
				}
			}
		}
	}
	return out
}

// vmAccessProblems compares what the rules open on the VMs with what the
// consumers need (each need with the rule of each consumer that has it and
// that consumer's sources): a port open through a rule of no consumer of
// it or to other sources, a need left closed, a port nobody needs.
func vmAccessProblems(open, needs map[vmNeed]map[string][]string) []string {
	var out []string
	for _, k := range slices.SortedFunc(maps.Keys(needs), cmpNeed) {
		if !maps.EqualFunc(open[k], needs[k], slices.Equal) {
			out = append(out, fmt.Sprintf("%s on VMs tagged %s is open through %v, want exactly its consumers' %v", k.port, k.tag, open[k], needs[k]))
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(open), cmpNeed) {
		if _, ok := needs[k]; !ok {
			out = append(out, fmt.Sprintf("%s on VMs tagged %s is open through %v, and no consumer needs it", k.port, k.tag, open[k]))
		}
	}
	return out
}

func cmpNeed(a, b vmNeed) int {
	if c := strings.Compare(a.tag, b.tag); c != 0 {
		return c
	}
	return strings.Compare(a.port, b.port)
}

// A reviewer's invariant: every port a consumer needs on the job VMs is
// open to that consumer and to nothing else, and no other port is open.
// The consumers: gitlab-runner's managers (docker+machine: SSH 22 and
// Docker 2376; the Linux fleeting connector: SSH 22), from the pods range
// where they run, and each fleet's Prometheus, from the same range (the
// cluster's VPC-native pods keep their own addresses towards the VMs'
// private subnetworks), to the node_exporter of the docker+machine VMs on
// the fleet's port (production the default 9100, staging 9200). The needs
// are written here, from the consumers, not read from the program.
func TestEveryPortAConsumerNeedsOnTheVMsIsOpenToItAlone(t *testing.T) {
	p := withSharedFleets(t)
	pods := p.fleet.GCP.PodsCIDR
	// Each consumer's rule (GCE name) and sources.
	managers := func(fleet, access string) (string, []string) {
		return "runners-prod-" + fleetspec.VMNetworkTag(fleet, access), []string{pods}
	}
	prometheus := func(fleet, access string) (string, []string) {
		return "runners-prod-" + fleetspec.VMNetworkTag(fleet, access) + "-prom", []string{pods}
	}
	needs := map[vmNeed]map[string][]string{}
	need := func(consumer func(fleet, access string) (string, []string), fleet, access string, port int) {
		k := vmNeed{fleetspec.VMNetworkTag(fleet, access), "tcp/" + strconv.Itoa(port)}
		if needs[k] == nil {
			needs[k] = map[string][]string{}
		}
		rule, sources := consumer(fleet, access)
		needs[k][rule] = sources
	}
	for _, fleet := range []string{"production", "staging"} {
		need(managers, fleet, fleetspec.AccessDockerMachine, 22)
		need(managers, fleet, fleetspec.AccessDockerMachine, 2376)
	}
	need(managers, "production", fleetspec.AccessSSH, 22)
	need(prometheus, "production", fleetspec.AccessDockerMachine, 9100)
	need(prometheus, "staging", fleetspec.AccessDockerMachine, 9200)

	rules := p.m.ByToken(tokFirewall)
	tags := vmTags(p)
	if bad := vmAccessProblems(vmOpenings(rules, tags), needs); len(bad) > 0 {
		t.Errorf("the VMs' firewall:\n%s", strings.Join(bad, "\n"))
	}
	// One rule per consumer: Prometheus's opens node_exporter's port alone.
	for _, c := range []struct {
		resource string
		ports    []string
	}{
		{"runners-prod-production-vms-" + fleetspec.VMNetworkTag("production", fleetspec.AccessDockerMachine), []string{"22", "2376"}},
		{"runners-prod-production-vms-" + fleetspec.VMNetworkTag("production", fleetspec.AccessDockerMachine) + "-prometheus", []string{"9100"}},
		{"runners-prod-staging-vms-" + fleetspec.VMNetworkTag("staging", fleetspec.AccessDockerMachine) + "-prometheus", []string{"9200"}},
	} {
		r := p.m.Get(t, tokFirewall, c.resource)
		allow := r.Input("allows").ArrayValue()
		if len(allow) != 1 || !slices.Equal(strs(allow[0].ObjectValue()["ports"]), c.ports) {
			t.Errorf("%s allows %v, want tcp %v", c.resource, allow, c.ports)
		}
	}

	// Negative controls, each on a copy of the rules.
	mutate := func(suffix string, f func(r *infratest.Resource)) []infratest.Resource {
		var out []infratest.Resource
		found := false
		for _, r := range rules {
			if strings.HasSuffix(r.Name, suffix) {
				r.Inputs = maps.Clone(r.Inputs)
				f(&r)
				found = true
			}
			out = append(out, r)
		}
		if !found {
			t.Fatalf("no rule %s", suffix)
		}
		return out
	}
	setPorts := func(ports ...string) func(r *infratest.Resource) {
		return func(r *infratest.Resource) {
			r.Inputs["allows"] = resource.NewArrayProperty([]resource.PropertyValue{resource.NewObjectProperty(resource.PropertyMap{
				"protocol": resource.NewStringProperty("tcp"), "ports": resource.NewArrayProperty(strProps(ports)),
			})})
		}
	}
	dm := fleetspec.VMNetworkTag("production", fleetspec.AccessDockerMachine)
	for name, c := range map[string]struct {
		rules []infratest.Resource
		says  string
	}{
		// The cluster's internal rule without its node tag (as it was)
		// lets the nodes' subnet reach the VMs on every port.
		"a rule without target tags": {mutate("-allow-internal", func(r *infratest.Resource) { delete(r.Inputs, "targetTags") }), "tcp/all on VMs tagged " + dm + " is open through map[runners-prod-internal:"},
		// The exporter's rule opening Docker too.
		"Prometheus's rule opening Docker": {mutate(dm+"-prometheus", setPorts("9100", "2376")), "tcp/2376 on VMs tagged " + dm + " is open through map[runners-prod-" + dm + ":[" + pods + "] runners-prod-" + dm + "-prom:"},
		// The old firewall: no rule for Prometheus.
		"no rule for node_exporter": {mutate(dm+"-prometheus", setPorts()), "tcp/9100 on VMs tagged " + dm + " is open through map[]"},
		// A rule from anywhere.
		"the managers' rule from anywhere": {mutate("-vms-"+dm, func(r *infratest.Resource) {
			r.Inputs["sourceRanges"] = resource.NewArrayProperty(strProps([]string{"0.0.0.0/0"}))
		}), "tcp/22 on VMs tagged " + dm + " is open through map[runners-prod-" + dm + ":[0.0.0.0/0]]"},
	} {
		bad := strings.Join(vmAccessProblems(vmOpenings(c.rules, tags), needs), "\n")
		if !strings.Contains(bad, c.says) {
			t.Errorf("%s: the check says %q, want %q", name, bad, c.says)
		}
	}
}

func strProps(ss []string) []resource.PropertyValue {
	out := []resource.PropertyValue{}
	for _, s := range ss {
		out = append(out, resource.NewStringProperty(s))
	}
	return out
}

// Windows groups' VMs are reached on WinRM, not SSH or Docker.
func TestWindowsVMsAreReachedOnWinRM(t *testing.T) {
	raw := strings.Replace(sharedFleetsJSON, `"tokenConfigKey": "stagingLinux", "zone": "europe-west1-b", "machineType": "e2-standard-2",
         "image": "runner-vm", "maxVMs": 10, "idleCount": 1, "idleTime": "10m"}`, `"tokenConfigKey": "stagingWindows", "executor": "docker-autoscaler", "windows": true,
         "zone": "europe-west1-b", "machineType": "n2d-standard-8", "image": "windows-2022", "maxVMs": 2, "idleCount": 0, "idleTime": "10m"}`, 1)
	if raw == sharedFleetsJSON {
		t.Fatal("the staging group was not replaced")
	}
	p := run(t, raw)
	tag := fleetspec.VMNetworkTag("staging", fleetspec.AccessWinRM)
	r := p.m.Get(t, tokFirewall, "runners-prod-staging-vms-"+tag)
	allow := r.Input("allows").ArrayValue()
	if len(allow) != 1 || !slices.Equal(strs(allow[0].ObjectValue()["ports"]), []string{"5985", "5986"}) {
		t.Errorf("windows VMs are reached on %v, want WinRM 5985 and 5986", allow)
	}
	for _, tpl := range p.m.ByToken(tokTemplate) {
		if strings.Contains(tpl.Name, "staging-windows") && !slices.Equal(strs(tpl.Input("tags")), []string{tag}) {
			t.Errorf("%s: tags %v, want %s", tpl.Name, strs(tpl.Input("tags")), tag)
		}
	}
}

// A reviewer's invariant: no job VM has a public address, and every one is
// labelled with its fleet, group and manager, the labels fleet gc reads.
func TestDockerAutoscalerVMsAreInternalLabelledAndInAGroupTheirManagerAloneSizes(t *testing.T) {
	p := withSharedFleets(t)
	want := map[string]bool{}
	for _, s := range p.fleet.SharedFleets {
		for _, g := range s.Groups {
			if g.Executor == fleetspec.ExecutorDockerAutoscaler {
				for _, m := range g.ManagerNames() {
					want[m] = true
				}
			}
		}
	}
	templates := p.m.ByToken(tokTemplate)
	migs := p.m.ByToken(tokMIG)
	if len(want) == 0 || len(templates) != len(want) || len(migs) != len(want) {
		t.Fatalf("%d templates and %d groups for the %d docker-autoscaler managers %v", len(templates), len(migs), len(want), slices.Sorted(maps.Keys(want)))
	}
	for _, tpl := range templates {
		for i, nic := range tpl.Input("networkInterfaces").ArrayValue() {
			if ac := nic.ObjectValue()["accessConfigs"]; ac.IsArray() && len(ac.ArrayValue()) > 0 {
				t.Errorf("%s: network interface %d has an access config: a public address", tpl.Name, i)
			}
			if str(nic.ObjectValue()["subnetwork"]) == "" {
				t.Errorf("%s: network interface %d names no subnetwork", tpl.Name, i)
			}
		}
		labels := tpl.Input("labels").ObjectValue()
		manager := str(labels[vmfleet.LabelManager])
		if !want[manager] || str(labels[vmfleet.LabelFleet]) != "production" || str(labels[vmfleet.LabelManagerGroup]) != "fleeting" ||
			str(labels[vmfleet.LabelAutoscaled]) != "true" || str(labels[vmfleet.LabelHost]) != vmfleet.HostKubernetes {
			t.Errorf("%s: labels %v", tpl.Name, labels)
		}
		// fleet gc reads the same owner back from the labels.
		l := map[string]string{}
		for k, v := range labels {
			l[string(k)] = str(v)
		}
		if o, ok := vmfleet.OwnerOf(providers.Instance{Name: "vm-1", Labels: l}); !ok || o.Manager != manager || o.Incarnation != "" {
			t.Errorf("%s: fleet gc reads owner %+v (%v)", tpl.Name, o, ok)
		}
		if !slices.Contains(strs(tpl.Input("tags")), fleetspec.VMNetworkTag("production", fleetspec.AccessSSH)) {
			t.Errorf("%s: tags %v lack the fleet's VM tag", tpl.Name, strs(tpl.Input("tags")))
		}
		if disk := tpl.Input("disks").ArrayValue()[0].ObjectValue()["labels"].ObjectValue(); str(disk[vmfleet.LabelManager]) != manager {
			t.Errorf("%s: the boot disk's labels %v", tpl.Name, disk)
		}
		if s := tpl.Input("scheduling"); str(s.ObjectValue()["provisioningModel"]) != "SPOT" || str(s.ObjectValue()["instanceTerminationAction"]) != "DELETE" {
			t.Errorf("%s: scheduling %v, want spot VMs deleted on preemption", tpl.Name, s)
		}
	}
	for _, mig := range migs {
		name := str(mig.Input("name"))
		if !want[name] || name != fleetspec.InstanceGroupName(name) {
			t.Errorf("group %s names no docker-autoscaler manager", name)
		}
		// config.toml's plugin_config names this very group.
		if str(mig.Input("zone")) != "europe-west1-c" || str(mig.Input("project")) != vmProject {
			t.Errorf("%s: zone %s project %s", name, str(mig.Input("zone")), str(mig.Input("project")))
		}
		if v := mig.Input("targetSize"); !v.IsNull() {
			t.Errorf("%s: the program sets targetSize %v; the fleeting plugin alone sizes the group", name, v)
		}
		if up := mig.Input("updatePolicy").ObjectValue(); str(up["type"]) != "OPPORTUNISTIC" {
			t.Errorf("%s: update policy %v: a new template must never replace a VM running a job", name, up)
		}
		if v := mig.Input("versions").ArrayValue(); len(v) != 1 {
			t.Errorf("%s: versions %v, want its one template", name, v)
		}
	}
	if n := len(p.m.ByToken("gcp:compute/autoscaler:Autoscaler")); n != 0 {
		t.Errorf("%d autoscalers: fleeting's googlecloud plugin needs groups without one", n)
	}
}

// A fleet with a cidr gets its own subnetwork with Private Google Access
// and a Cloud NAT for it; a fleet naming an existing one gets neither.
func TestVMsReachGitLabTheCacheAndRegistriesWithoutPublicAddresses(t *testing.T) {
	p := withSharedFleets(t)
	subnets := map[string]infratest.Resource{}
	for _, r := range p.m.ByToken("gcp:compute/subnetwork:Subnetwork") {
		subnets[str(r.Input("name"))] = r
	}
	staging, ok := subnets["runners-prod-staging-vms"]
	if !ok {
		t.Fatalf("no subnetwork for staging's VMs: %v", slices.Sorted(maps.Keys(subnets)))
	}
	if str(staging.Input("ipCidrRange")) != "10.30.0.0/20" || !staging.Input("privateIpGoogleAccess").BoolValue() {
		t.Errorf("staging's VM subnetwork %v", staging.Inputs)
	}
	if _, ok := subnets["runners-prod-production-vms"]; ok {
		t.Error("a subnetwork was declared for production, which names an existing one")
	}
	nat := p.m.Get(t, "gcp:compute/routerNat:RouterNat", "runners-prod-staging-vms-nat")
	subs := nat.Input("subnetworks").ArrayValue()
	if len(subs) != 1 || !slices.Equal(strs(subs[0].ObjectValue()["sourceIpRangesToNats"]), []string{"ALL_IP_RANGES"}) {
		t.Errorf("staging's NAT covers %v", subs)
	}
	if n := len(p.m.ByToken("gcp:compute/routerNat:RouterNat")); n != 2 {
		t.Errorf("%d Cloud NATs, want the cluster's and staging's VMs'", n)
	}
}

// Resources declared per fleet, for BENCHMARKS.md.
func TestReportResourcesPerFleet(t *testing.T) {
	p := withSharedFleets(t)
	count := map[string]int{}
	for _, r := range p.m.Resources() {
		for _, fleet := range []string{"production", "staging"} {
			if strings.Contains(r.Name, "-"+fleet+"-vms") {
				count[fleet]++
			}
		}
	}
	t.Logf("GCP resources of the VM network per fleet: %v", count)
	if count["production"] == 0 || count["staging"] == 0 {
		t.Errorf("counts %v", count)
	}
}
