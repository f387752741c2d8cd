package stackconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// eksFleet returns a valid eks fleet as JSON, with aws merged over the
// minimal aws section (a nil value deletes a key) and extra keys set at the
// top.
func eksFleet(t *testing.T, aws map[string]any, extra map[string]any) []byte {
	t.Helper()
	return fleetJSON(t, "eks", "aws", map[string]any{"region": "eu-west-1", "zones": []string{"eu-west-1a", "eu-west-1b", "eu-west-1c"}}, aws, extra)
}

// fleetJSON returns a fleet of the platform as JSON: its section (aws, gcp)
// is base with over merged in (a nil value deletes a key), and extra keys
// are set at the top.
func fleetJSON(t *testing.T, platform, section string, base, over, extra map[string]any) []byte {
	t.Helper()
	for k, v := range over {
		if v == nil {
			delete(base, k)
			continue
		}
		base[k] = v
	}
	f := map[string]any{
		"platform":   platform,
		"gitlabURL":  "https://gitlab.example.com",
		"controller": map[string]any{"image": "example.invalid/runnerset-controller:v1"},
		section:      base,
	}
	for k, v := range extra {
		f[k] = v
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAWSDefaults(t *testing.T) {
	f, err := Decode(eksFleet(t, nil, nil), "dev")
	if err != nil {
		t.Fatal(err)
	}
	a := f.AWS
	for got, want := range map[string]string{
		a.VPCCIDR:                  "10.0.0.0/16",
		a.KubernetesVersion:        DefaultKubernetesVersion,
		a.KarpenterVersion:         DefaultKarpenterVersion,
		a.SystemNodes.CapacityType: "on-demand",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if want := []string{"10.0.0.0/19", "10.0.32.0/19", "10.0.64.0/19"}; !slices.Equal(a.PrivateSubnetCIDRs, want) {
		t.Errorf("private subnets %v, want %v", a.PrivateSubnetCIDRs, want)
	}
	if want := []string{"10.0.224.0/24", "10.0.225.0/24", "10.0.226.0/24"}; !slices.Equal(a.PublicSubnetCIDRs, want) {
		t.Errorf("public subnets %v, want %v", a.PublicSubnetCIDRs, want)
	}
	n := a.SystemNodes
	if len(n.InstanceTypes) < 3 || n.Min != 1 || n.Max != 3 || n.Desired != 2 {
		t.Errorf("system nodes %+v, want several instance types, min 1, max 3, desired 2", n)
	}
	if a.EndpointPublicAccessCIDRs != nil {
		t.Errorf("public endpoint CIDRs defaulted to %v; the endpoint must be private unless asked", a.EndpointPublicAccessCIDRs)
	}
}

func TestAWSDefaultSubnetsFollowTheVPC(t *testing.T) {
	f, err := Decode(eksFleet(t, map[string]any{"vpcCIDR": "172.20.0.0/20", "zones": []string{"us-east-2a", "us-east-2b"}, "region": "us-east-2"}, nil), "dev")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"172.20.0.0/23", "172.20.2.0/23"}; !slices.Equal(f.AWS.PrivateSubnetCIDRs, want) {
		t.Errorf("private %v, want %v", f.AWS.PrivateSubnetCIDRs, want)
	}
	if want := []string{"172.20.14.0/28", "172.20.14.16/28"}; !slices.Equal(f.AWS.PublicSubnetCIDRs, want) {
		t.Errorf("public %v, want %v", f.AWS.PublicSubnetCIDRs, want)
	}
}

func TestAWSSystemNodeBoundsFollowEachOther(t *testing.T) {
	f, err := Decode(eksFleet(t, map[string]any{"systemNodes": map[string]any{"min": 4}}, nil), "dev")
	if err != nil {
		t.Fatal(err)
	}
	if n := f.AWS.SystemNodes; n.Max != 4 || n.Desired != 4 {
		t.Errorf("min 4 gave max %d desired %d, want 4 and 4", n.Max, n.Desired)
	}
}

// The chart pinned by default must be the release whose APIs
// runnerset/capacity builds NodePools and EC2NodeClasses against.
func TestAWSDefaultKarpenterMatchesTheModule(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/aws/karpenter-provider-aws v(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod does not require github.com/aws/karpenter-provider-aws")
	}
	if string(m[1]) != DefaultKarpenterVersion {
		t.Errorf("DefaultKarpenterVersion %s, go.mod has karpenter-provider-aws v%s: keep them equal", DefaultKarpenterVersion, m[1])
	}
}

func TestAWSArchitecture(t *testing.T) {
	for typ, want := range map[string]string{
		"m6i.large": "amd64", "m7i-flex.xlarge": "amd64", "g4dn.xlarge": "amd64", "x2iezn.6xlarge": "amd64", "u-6tb1.metal": "amd64",
		"m7g.large": "arm64", "c7gn.2xlarge": "arm64", "im4gn.large": "arm64", "t4g.medium": "arm64", "a1.large": "arm64", "is4gen.large": "arm64",
	} {
		if got, ok := Architecture(typ); !ok || got != want {
			t.Errorf("Architecture(%s) = %s, %v; want %s", typ, got, ok, want)
		}
	}
	for _, bad := range []string{"m6i", "M6I.large", "large", "m6i.", ".large", "m6i large"} {
		if _, ok := Architecture(bad); ok {
			t.Errorf("Architecture(%q) accepted it", bad)
		}
	}
}

// problem is one expected error: the key it names and words of its fix.
type problem struct {
	key string
	fix string
}

func TestAWSRefusesBadConfig(t *testing.T) {
	zones2 := []string{"eu-west-1a", "eu-west-1b"}
	cases := map[string]struct {
		aws   map[string]any
		extra map[string]any
		want  []problem
	}{
		"missing region": {map[string]any{"region": nil, "zones": nil}, nil, []problem{
			{"aws.region", "the AWS region to deploy to"}, {"aws.zones", "at least two availability zones"}}},
		"region with a zone": {map[string]any{"region": "eu-west-1a"}, nil, []problem{
			{"aws.region", "an AWS region code such as eu-west-1"}}},
		"zone of another region": {map[string]any{"zones": []string{"eu-west-1a", "eu-central-1b"}}, nil, []problem{
			{"aws.zones[1]", "a zone of region eu-west-1: the region followed by one letter, like eu-west-1a"}}},
		"zone id instead of name": {map[string]any{"zones": []string{"eu-west-1a", "euw1-az2"}}, nil, []problem{
			{"aws.zones[1]", "a zone of region eu-west-1"}}},
		"local zone": {map[string]any{"zones": []string{"eu-west-1a", "eu-west-1-lax-1a"}}, nil, []problem{
			{"aws.zones[1]", "the region followed by one letter"}}},
		"one zone": {map[string]any{"zones": []string{"eu-west-1a"}}, nil, []problem{
			{"aws.zones", "at least two availability zones of the region (EKS needs subnets in two), for example [eu-west-1a"}}},
		"same zone twice": {map[string]any{"zones": []string{"eu-west-1a", "eu-west-1a"}}, nil, []problem{
			{"aws.zones[1]", "list each zone once"}}},
		"bad vpc": {map[string]any{"vpcCIDR": "10.0.0/16"}, nil, []problem{
			{"aws.vpcCIDR", "an IPv4 CIDR such as 10.0.0.0/16"}}},
		"vpc host bits": {map[string]any{"vpcCIDR": "10.0.1.0/16"}, nil, []problem{
			{"aws.vpcCIDR", "write the network address, 10.0.0.0/16"}}},
		"vpc too big": {map[string]any{"vpcCIDR": "10.0.0.0/8"}, nil, []problem{
			{"aws.vpcCIDR", "use /16 to /24"}}},
		"vpc too small for default subnets": {map[string]any{"vpcCIDR": "10.0.0.0/22"}, nil, []problem{
			{"aws.privateSubnetCIDRs", "use /20 or larger; list one public and one private subnet CIDR per zone"}}},
		"subnet outside the vpc": {map[string]any{"zones": zones2,
			"publicSubnetCIDRs": []string{"10.0.224.0/24", "10.1.225.0/24"}, "privateSubnetCIDRs": []string{"10.0.0.0/19", "10.0.32.0/19"}}, nil, []problem{
			{"aws.publicSubnetCIDRs[1]", "outside vpcCIDR 10.0.0.0/16: every subnet must lie inside the VPC"}}},
		"subnet larger than the vpc": {map[string]any{"zones": zones2, "vpcCIDR": "10.0.0.0/20",
			"publicSubnetCIDRs": []string{"10.0.14.0/28", "10.0.14.16/28"}, "privateSubnetCIDRs": []string{"10.0.0.0/16", "10.0.2.0/23"}}, nil, []problem{
			{"aws.privateSubnetCIDRs[0]", "outside vpcCIDR 10.0.0.0/20"},
			{"aws.privateSubnetCIDRs[0]", "overlaps runnerfleet:fleet.aws.publicSubnetCIDRs[0]"},
			{"aws.privateSubnetCIDRs[0]", "overlaps runnerfleet:fleet.aws.publicSubnetCIDRs[1]"},
			{"aws.privateSubnetCIDRs[1]", "overlaps runnerfleet:fleet.aws.privateSubnetCIDRs[0]"}}},
		"private subnets overlap": {map[string]any{"zones": zones2,
			"publicSubnetCIDRs": []string{"10.0.224.0/24", "10.0.225.0/24"}, "privateSubnetCIDRs": []string{"10.0.0.0/19", "10.0.16.0/20"}}, nil, []problem{
			{"aws.privateSubnetCIDRs[1]", "overlaps runnerfleet:fleet.aws.privateSubnetCIDRs[0] (10.0.0.0/19): subnets may not share addresses"}}},
		"public overlaps private": {map[string]any{"zones": zones2,
			"publicSubnetCIDRs": []string{"10.0.0.0/24", "10.0.225.0/24"}, "privateSubnetCIDRs": []string{"10.0.0.0/19", "10.0.32.0/19"}}, nil, []problem{
			{"aws.privateSubnetCIDRs[0]", "overlaps runnerfleet:fleet.aws.publicSubnetCIDRs[0]"}}},
		"subnet not a cidr": {map[string]any{"zones": zones2,
			"publicSubnetCIDRs": []string{"10.0.224.0/24", "10.0.225.0"}, "privateSubnetCIDRs": []string{"10.0.0.0/19", "10.0.32.0/19"}}, nil, []problem{
			{"aws.publicSubnetCIDRs[1]", "an IPv4 CIDR"}}},
		"subnet too small": {map[string]any{"zones": zones2,
			"publicSubnetCIDRs": []string{"10.0.224.0/24", "10.0.225.0/29"}, "privateSubnetCIDRs": []string{"10.0.0.0/19", "10.0.32.0/19"}}, nil, []problem{
			{"aws.publicSubnetCIDRs[1]", "/28 at the smallest"}}},
		"fewer subnets than zones": {map[string]any{
			"publicSubnetCIDRs": []string{"10.0.224.0/24", "10.0.225.0/24"}, "privateSubnetCIDRs": []string{"10.0.0.0/19", "10.0.32.0/19", "10.0.64.0/19"}}, nil, []problem{
			{"aws.publicSubnetCIDRs", "one subnet per zone, in the order of zones: 3 zones but 2 subnets"}}},
		"only private subnets given": {map[string]any{"zones": zones2,
			"privateSubnetCIDRs": []string{"10.0.0.0/19", "10.0.32.0/19"}}, nil, []problem{
			{"aws.publicSubnetCIDRs", "2 zones but 0 subnets"}}},
		"kubernetes version with patch": {map[string]any{"kubernetesVersion": "v1.35.1"}, nil, []problem{
			{"aws.kubernetesVersion", "an EKS Kubernetes minor version such as 1.35"}}},
		"public endpoint for everyone": {map[string]any{"endpointPublicAccessCIDRs": []string{"203.0.113.0/24", "0.0.0.0/0"}}, nil, []problem{
			{"aws.endpointPublicAccessCIDRs[1]", "list the ranges that deploy"}}},
		"public endpoint not a cidr": {map[string]any{"endpointPublicAccessCIDRs": []string{"203.0.113.7"}}, nil, []problem{
			{"aws.endpointPublicAccessCIDRs[0]", "an IPv4 CIDR such as 203.0.113.0/24"}}},
		"bad instance type": {map[string]any{"systemNodes": map[string]any{"instanceTypes": []string{"m6i.large", "m6i-large"}}}, nil, []problem{
			{"aws.systemNodes.instanceTypes[1]", "an EC2 instance type such as m6i.large"}}},
		"one instance type": {map[string]any{"systemNodes": map[string]any{"instanceTypes": []string{"m6i.large"}}}, nil, []problem{
			{"aws.systemNodes.instanceTypes", "at least two instance types, so that the group finds capacity when one type runs short"}}},
		"mixed architectures": {map[string]any{"systemNodes": map[string]any{"instanceTypes": []string{"m6i.large", "m7g.large"}}}, nil, []problem{
			{"aws.systemNodes.instanceTypes", "mixes arm64 (m7g.large) and amd64 (m6i.large) types"}}},
		"min above max": {map[string]any{"systemNodes": map[string]any{"min": 4, "max": 2}}, nil, []problem{
			{"aws.systemNodes.min", "greater than max (2): raise max or lower min"}}},
		"desired outside bounds": {map[string]any{"systemNodes": map[string]any{"min": 1, "max": 3, "desired": 5}}, nil, []problem{
			{"aws.systemNodes.desired", "between min (1) and max (3)"}}},
		"unknown capacity type": {map[string]any{"systemNodes": map[string]any{"capacityType": "SPOT"}}, nil, []problem{
			{"aws.systemNodes.capacityType", `supported values: "on-demand"`}}},
		"karpenter v0": {map[string]any{"karpenterVersion": "0.37.0"}, nil, []problem{
			{"aws.karpenterVersion", "Karpenter 1.0 or later"}}},
		"karpenter with v": {map[string]any{"karpenterVersion": "v1.15.0"}, nil, []problem{
			{"aws.karpenterVersion", "a Karpenter chart version such as"}}},
		"reserved tag": {map[string]any{"tags": map[string]string{"team": "ci", "runnerfleet:stack": "other"}}, nil, []problem{
			{"aws.tags[runnerfleet:stack]", "set by AWS, Karpenter or runnerfleet; rename the tag"}}},
		"misspelt key": {map[string]any{"vpcCidr": "10.0.0.0/16"}, nil, []problem{
			{"aws.vpcCidr", `did you mean "vpcCIDR"?`}}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(eksFleet(t, c.aws, c.extra), "dev")
			expectProblems(t, err, c.want)
		})
	}
}

func TestAWSEveryProblemAtOnce(t *testing.T) {
	_, err := Decode(eksFleet(t, map[string]any{
		"region": "eu-west-1", "zones": []string{"eu-west-1a"}, "vpcCIDR": "10.0.0.0/33",
		"systemNodes": map[string]any{"min": 3, "max": 1},
	}, nil), "dev")
	expectProblems(t, err, []problem{
		{"aws.zones", "at least two"},
		{"aws.vpcCIDR", "an IPv4 CIDR"},
		{"aws.systemNodes.min", "greater than max"},
	})
}

// The managers' pool is on-demand whatever capacity.allowOnDemand says
// (that is the teams' job capacity), and a spot one is refused.
func TestAWSManagersPoolIsOnDemandAndNeverSpot(t *testing.T) {
	_, err := Decode(eksFleet(t, map[string]any{"systemNodes": map[string]any{"capacityType": "spot"}}, nil), "dev")
	expectProblems(t, err, []problem{{"aws.systemNodes.capacityType", "remove capacityType (on-demand is the default) or set it to on-demand"}})
	for _, allow := range []bool{false, true} {
		f, err := Decode(eksFleet(t, map[string]any{"systemNodes": map[string]any{"capacityType": "on-demand"}},
			map[string]any{"capacity": map[string]any{"allowOnDemand": allow}}), "dev")
		if err != nil {
			t.Errorf("allowOnDemand %v: on-demand system nodes refused: %v", allow, err)
		} else if f.Capacity.AllowOnDemand != allow {
			t.Errorf("allowOnDemand became %v", f.Capacity.AllowOnDemand)
		}
	}
}

// expectProblems checks that err lists exactly the wanted problems, each
// on its key (under runnerfleet:fleet) and saying its fix.
func expectProblems(t *testing.T, err error, want []problem) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want a config *Error, got %v", err)
	}
	var got []*field.Error
	got = append(got, e.List...)
	for _, w := range want {
		key := Root.String() + "." + w.key
		i := slices.IndexFunc(got, func(g *field.Error) bool { return g.Field == key && strings.Contains(g.Error(), w.fix) })
		if i < 0 {
			t.Errorf("no problem on %s saying %q; got:\n%s", key, w.fix, err)
			continue
		}
		got = slices.Delete(got, i, i+1)
	}
	for _, g := range got {
		t.Errorf("unexpected problem: %s", g)
	}
}
