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

// A fleet's grants name every account, Kubernetes ServiceAccount, project,
// bucket and VM account they join: the managers' account may act for each
// group's managers, use the compute API of the VM projects, the cache
// (the platform's, when the fleet names it or none) and sign as itself;
// gc's and the managers' account may act as the VMs' account; the
// Prometheus account may act for the fleet's Prometheus and view the VM
// projects. A fleet without accounts grants nothing.
func TestFleetPlanGrantsEachAccountWhatItNeeds(t *testing.T) {
	dm, da := production(), autoscaler()
	da.Name, da.Project = "fleeting", "ci-vms"
	s := fleetspec.SharedFleet{
		Name: "production", Namespace: "ci-production", GitLabURL: dm.GitLabURL, ManagerImage: "registry.example.com/ci/runner:v1",
		GCPServiceAccount: "managers@ci-prod.iam.gserviceaccount.com", VMServiceAccount: "vms@ci-prod.iam.gserviceaccount.com",
		Monitoring:  fleetspec.SharedFleetMonitoring{GCPServiceAccount: "prom@ci-prod.iam.gserviceaccount.com"},
		CacheBucket: "ci-prod-ci-cache", VMNetwork: fleetspec.VMNetwork{Subnetwork: "projects/ci-prod/regions/us-east1/subnetworks/shared"},
		Groups: []fleetspec.ManagerGroup{dm, da},
	}
	on := fleetspec.Platform{Project: "ci-prod", Cluster: "ci", CacheBucket: "ci-prod-ci-cache"}
	// gc covers one project: both groups run their VMs in ci-vms.
	s.Groups[0].Project = "ci-vms"
	p, err := PlanFleet(s, "sharedFleets[0]", on)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range p.Cloud.Grants {
		got = append(got, g.What+" "+g.Account+" "+g.On+" "+g.Namespace+"/"+g.ServiceAccount)
	}
	gc := GCAccountEmail("ci-prod", "ci", "ci-production")
	want := []string{
		"workload-identity managers@ci-prod.iam.gserviceaccount.com  ci-production/ci-production-shared-gce",
		"workload-identity managers@ci-prod.iam.gserviceaccount.com  ci-production/ci-production-fleeting",
		"manager-compute managers@ci-prod.iam.gserviceaccount.com ci-vms /",
		"cache managers@ci-prod.iam.gserviceaccount.com  /",
		"signer managers@ci-prod.iam.gserviceaccount.com managers@ci-prod.iam.gserviceaccount.com /",
		"vm-user " + gc + " vms@ci-prod.iam.gserviceaccount.com /",
		"vm-user managers@ci-prod.iam.gserviceaccount.com vms@ci-prod.iam.gserviceaccount.com /",
		"workload-identity prom@ci-prod.iam.gserviceaccount.com  ci-production/prometheus",
		"prometheus-compute prom@ci-prod.iam.gserviceaccount.com ci-vms /",
	}
	if !slices.Equal(got, want) {
		t.Errorf("grants:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	s.GCPServiceAccount, s.VMServiceAccount, s.Monitoring.GCPServiceAccount = "", "", ""
	if p, err = PlanFleet(s, "sharedFleets[0]", on); err != nil {
		t.Fatal(err)
	}
	if len(p.Cloud.Grants) != 0 {
		t.Errorf("a fleet without accounts grants %+v", p.Cloud.Grants)
	}
}
