package gcp

import (
	"maps"
	"slices"
	"strings"
	"testing"

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
func vmTags(p *platform) map[string]bool {
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

// vmReachers are the ingress rules of the VPC that admit traffic to a job
// VM, and from where: a rule without target tags applies to every
// instance of the network.
func vmReachers(rules []infratest.Resource, tags map[string]bool) map[string][]string {
	out := map[string][]string{}
	for _, r := range rules {
		if d := str(r.Input("direction")); d != "" && d != "INGRESS" {
			continue
		}
		targets := strs(r.Input("targetTags"))
		if len(targets) > 0 && !slices.ContainsFunc(targets, func(t string) bool { return tags[t] }) {
			continue
		}
		out[r.Name] = append(strs(r.Input("sourceRanges")), strs(r.Input("sourceTags"))...)
	}
	return out
}

// A reviewer's invariant: only the managers (the cluster's pod range)
// reach the VMs, on the ports their executors use, and nothing else does.
func TestOnlyTheManagersPodRangeReachesTheVMs(t *testing.T) {
	p := withSharedFleets(t)
	rules := p.m.ByToken(tokFirewall)
	reach := vmReachers(rules, vmTags(p))
	if len(reach) == 0 {
		t.Fatal("no rule lets the managers reach the VMs")
	}
	for name, sources := range reach {
		if !slices.Equal(sources, []string{p.fleet.GCP.PodsCIDR}) {
			t.Errorf("rule %s lets %v reach the job VMs; only the pods range %s may", name, sources, p.fleet.GCP.PodsCIDR)
		}
	}
	// Each rule opens exactly the ports of the groups whose VMs it
	// targets: docker+machine's Docker and SSH, the Linux connector's SSH.
	for _, c := range []struct {
		fleet, access string
		ports         []string
	}{
		{"production", fleetspec.AccessDockerMachine, []string{"22", "2376"}},
		{"production", fleetspec.AccessSSH, []string{"22"}},
		{"staging", fleetspec.AccessDockerMachine, []string{"22", "2376"}},
	} {
		tag := fleetspec.VMNetworkTag(c.fleet, c.access)
		r := p.m.Get(t, tokFirewall, "runners-prod-"+c.fleet+"-vms-"+tag)
		allow := r.Input("allows").ArrayValue()
		if len(allow) != 1 || str(allow[0].ObjectValue()["protocol"]) != "tcp" || !slices.Equal(strs(allow[0].ObjectValue()["ports"]), c.ports) {
			t.Errorf("%s allows %v, want tcp %v", r.Name, allow, c.ports)
		}
		if got := strs(r.Input("targetTags")); !slices.Equal(got, []string{tag}) {
			t.Errorf("%s targets %v", r.Name, got)
		}
	}
	if n := len(reach); n != 3 {
		t.Errorf("%d rules reach the VMs, want the 3 above: %v", n, slices.Sorted(maps.Keys(reach)))
	}

	// Negative control: the cluster's internal rule without its node tag
	// (as it was) would let the nodes' subnet and every pod reach the VMs
	// on every port.
	var loose []infratest.Resource
	for _, r := range rules {
		if strings.HasSuffix(r.Name, "-allow-internal") {
			r.Inputs = maps.Clone(r.Inputs)
			delete(r.Inputs, "targetTags")
		}
		loose = append(loose, r)
	}
	if got := vmReachers(loose, vmTags(p))["runners-prod-network-allow-internal"]; len(got) == 0 {
		t.Error("the check does not see a rule without target tags")
	}
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
