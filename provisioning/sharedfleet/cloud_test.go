package sharedfleet

import (
	"slices"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

// A fleet's plan carries its cloud side as plain values: the subnetwork the
// program declares (none for an existing one), one firewall rule per
// consumer and VM tag on exactly the ports VMIngress names, an instance
// group per docker-autoscaler manager (none for docker+machine), and gc's
// account scoped to the groups' project and zones.
func TestFleetPlanCarriesItsCloudSide(t *testing.T) {
	dm, da := production(), autoscaler()
	da.Name = "fleeting"
	da.Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 2, TargetUtilization: 0.7}
	s := fleetspec.SharedFleet{
		Name: "production", GitLabURL: dm.GitLabURL, ManagerImage: "registry.example.com/ci/runner:v1",
		VMNetwork: fleetspec.VMNetwork{CIDR: "10.30.0.0/20"},
		Groups:    []fleetspec.ManagerGroup{dm, da},
	}
	on := fleetspec.Platform{Project: "ci-prod", Region: "us-east1", Cluster: "ci", Network: "projects/ci-prod/global/networks/ci"}
	p, err := PlanFleet(s, "sharedFleets[0]", on)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Cloud
	if c.Subnetwork == nil || c.Subnetwork.Name != "ci-production-vms" || c.Subnetwork.CIDR != "10.30.0.0/20" ||
		c.VMSubnetwork != "projects/ci-prod/regions/us-east1/subnetworks/ci-production-vms" {
		t.Errorf("subnetwork %+v, path %s", c.Subnetwork, c.VMSubnetwork)
	}
	ingress := p.Spec.VMIngress()
	if len(c.Firewalls) != len(ingress) {
		t.Fatalf("%d firewall rules for %d ingresses", len(c.Firewalls), len(ingress))
	}
	for i, fw := range c.Firewalls {
		if fw.Name != ingress[i].FirewallName("ci") || fw.Tag != ingress[i].Tag || len(fw.Ports) != len(ingress[i].Ports) || !strings.Contains(fw.Description, fw.Tag) {
			t.Errorf("rule %d: %+v for %+v", i, fw, ingress[i])
		}
	}
	var managers []string
	for _, ig := range c.InstanceGroups {
		managers = append(managers, ig.Manager)
		if ig.Tags[0] != p.Spec.Groups[1].VMNetworkTag() || ig.Labels["runnerfleet-manager"] != ig.Manager || ig.Zone != da.Zone {
			t.Errorf("instance group %+v", ig)
		}
	}
	if !slices.Equal(managers, []string{"production-fleeting-0", "production-fleeting-1"}) {
		t.Errorf("instance groups of %v, want the docker-autoscaler managers only", managers)
	}
	gc := c.GC
	if gc.Email != GCAccountEmail("ci-prod", "ci", "production") || gc.Project != "ci-prod" || !slices.Equal(gc.Zones, []string{"us-east1-c"}) ||
		gc.Condition != GCInstanceCondition("ci-prod", []string{"us-east1-c"}) || gc.ServiceAccount != GCName("production") {
		t.Errorf("gc identity %+v", gc)
	}
	if p.GC.CronJob.Spec.JobTemplate.Spec.Template.Spec.ServiceAccountName != gc.ServiceAccount {
		t.Errorf("gc's CronJob runs as %s, not the ServiceAccount its account trusts", p.GC.CronJob.Spec.JobTemplate.Spec.Template.Spec.ServiceAccountName)
	}
	s.VMNetwork = fleetspec.VMNetwork{Subnetwork: "projects/ci-prod/regions/us-east1/subnetworks/shared"}
	if p, err = PlanFleet(s, "sharedFleets[0]", on); err != nil {
		t.Fatal(err)
	}
	if p.Cloud.Subnetwork != nil || p.Cloud.VMSubnetwork != s.VMNetwork.Subnetwork {
		t.Errorf("an existing subnetwork: plan %+v, path %s", p.Cloud.Subnetwork, p.Cloud.VMSubnetwork)
	}
	if _, err := PlanFleet(s, "sharedFleets[0]", fleetspec.Platform{}); err == nil || !strings.Contains(err.Error(), "sharedFleets[0]") {
		t.Errorf("a plan without a platform: %v", err)
	}
}
