package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

func ec2Fleet(t *testing.T) *ec2test.Server {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIATESTTESTTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	return srv
}

func fleetCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestFleetRotateReplacesAWindowsManagerWhoseRunnerHasDrained(t *testing.T) {
	srv := ec2Fleet(t)
	img := srv.AddImage(ec2test.Image{Name: "wsrm-2026-11", CreationDate: time.Now()})
	srv.AddInstance(ec2test.Instance{ImageID: "ami-old", Zone: srv.Region() + "a", State: "running", Tags: map[string]string{
		"Name": "wsrm-blue-1", vmfleet.LabelGroup: vmfleet.WindowsGroup, vmfleet.LabelColor: "blue", vmfleet.LabelGeneration: "1",
		// Its drain agent already finished (a rerun after the agent reported).
		providers.EC2PhaseTag: string(providers.DrainDone), providers.EC2JobsLeftTag: "0",
	}})
	out, err := fleetCmd(t, "rotate", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--windows",
		"--image", img, "--zone", srv.Region()+"a", "--machine-type", "m7i.xlarge", "--poll", "50ms")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"Creating wsrm-green-1", "Asked 1 old blue VMs to drain", "Deleted wsrm-blue-1", "Rotation of windows-shared-runners-manager succeeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestFleetRotateRefusesBadInputNamingTheFlag(t *testing.T) {
	srv := ec2Fleet(t)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"rotate", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--image", "ami-1"}, "--group"},
		{[]string{"rotate", "--provider", "azure", "--group", "g", "--image", "i", "--zone", "z", "--machine-type", "m"}, `--provider "azure" is not one of gce, ec2`},
		{[]string{"rotate", "--provider", "gce", "--project", "", "--group", "g", "--image", "i", "--zone", "z", "--machine-type", "m"}, "--project is required"},
		{[]string{"rotate", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--group", "nope", "--image", "ami-1", "--zone", "z", "--machine-type", "m"}, "group nope does not exist"},
		{[]string{"gc", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--name-pattern", "runner-.*"}, "--name-pattern needs a group"},
	} {
		out, err := fleetCmd(t, tc.args...)
		if err == nil || !strings.Contains(out+err.Error(), tc.says) {
			t.Errorf("fleet %s: %v\n%s\nwant %q", strings.Join(tc.args, " "), err, out, tc.says)
		}
	}
}

func TestFleetGCIsADryRunUnlessApplied(t *testing.T) {
	srv := ec2Fleet(t)
	srv.AddInstance(ec2test.Instance{ImageID: "ami-r", Zone: srv.Region() + "a", State: "running", LaunchTime: time.Now().Add(-2 * time.Hour),
		Tags: map[string]string{"Name": "runner-ab12-wsrm-blue-9-1700000000-3", "runnerfleet-autoscaled": "true"}})
	args := []string{"gc", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL()}
	out, err := fleetCmd(t, args...)
	if err != nil || !strings.Contains(out, "would delete VM runner-ab12-wsrm-blue-9-1700000000-3") || !strings.Contains(out, "rerun with --apply") {
		t.Fatalf("%v\n%s", err, out)
	}
	if srv.Calls("TerminateInstances") != 0 {
		t.Fatal("a dry run terminated an instance")
	}
	if out, err := fleetCmd(t, append(args, "--apply")...); err != nil || srv.Calls("TerminateInstances") != 1 {
		t.Fatalf("--apply: %v\n%s", err, out)
	}
}
