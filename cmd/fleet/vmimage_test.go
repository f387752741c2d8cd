package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
)

// imageArgs are the --image-* inputs of a Windows 2022 manager image, with
// its config.toml in a file; in is the same as vmimage.Inputs.
func imageArgs(t *testing.T) (args []string, in vmimage.Inputs) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("concurrent = 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args = []string{"--image-os", "windows", "--image-os-version", "2022", "--image-runner-version", "17.5.0", "--image-agent-version", "v0.1.0", "--image-runner-config", cfg}
	in = vmimage.Inputs{Family: "wsrm", OS: "windows", OSVersion: "2022", RunnerVersion: "17.5.0", AgentVersion: "0.1.0", RunnerConfig: []byte("concurrent = 4\n")}
	return args, in
}

// A pipeline computes the name with fleet image-name; it is vmimage.Name's.
func TestFleetImageNamePrintsTheNameOfTheInputs(t *testing.T) {
	args, in := imageArgs(t)
	want, err := vmimage.Name(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := fleetCmd(t, append([]string{"image-name", "--image-family", "wsrm"}, args...)...)
	if err != nil || out != want+"\n" {
		t.Fatalf("fleet image-name: %q, %v; want %s", out, err, want)
	}
	out, err = fleetCmd(t, append([]string{"image-name", "--image-family", "wsrm", "--canonical"}, args...)...)
	if err != nil || out != in.Canonical() {
		t.Fatalf("--canonical: %q, %v", out, err)
	}
	for _, tc := range []struct{ args []string }{
		{append([]string{"image-name", "--image-family", "wsrm"}, slices.Concat(args[:2], args[4:])...)},
		{append([]string{"image-name", "--image-family", "Wsrm"}, args...)},
	} {
		_, err := fleetCmd(t, tc.args...)
		flag := "--image-os-version"
		if tc.args[2] == "Wsrm" {
			flag = "--image-family"
		}
		if err == nil || !strings.HasPrefix(err.Error(), flag+": ") {
			t.Errorf("fleet %s: %v, want an error naming %s", strings.Join(tc.args, " "), err, flag)
		}
	}
}

// fleet rotate with the image's inputs refuses an image of another name,
// naming --image and the expected name, before it creates or drains
// anything; without --image it boots the image they name.
func TestFleetRotateBootsOnlyTheImageItsInputsName(t *testing.T) {
	srv := ec2Fleet(t)
	args, in := imageArgs(t)
	want, _ := vmimage.Name(in)
	ami := srv.AddImage(ec2test.Image{Name: want, CreationDate: time.Now().Add(-time.Hour), Tags: map[string]string{"family": "wsrm"}})
	other := srv.AddImage(ec2test.Image{Name: "wsrm-hand-built", CreationDate: time.Now(), Tags: map[string]string{"family": "wsrm"}})
	srv.AddInstance(ec2test.Instance{ImageID: "ami-old", Zone: srv.Region() + "a", State: "running", Tags: map[string]string{
		"Name": "wsrm-blue-1", vmfleet.LabelGroup: vmfleet.WindowsGroup, vmfleet.LabelColor: "blue", vmfleet.LabelGeneration: "1",
		providers.EC2PhaseTag: string(providers.DrainDone), providers.EC2JobsLeftTag: "0",
	}})
	rot := []string{"rotate", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--windows",
		"--zone", srv.Region() + "a", "--machine-type", "m7i.xlarge", "--poll", "50ms", "--health", "running", "--settle", "0s", "--image-family", "wsrm"}
	rot = append(rot, args...)

	out, err := fleetCmd(t, append(rot, "--image", other)...)
	if err == nil || !strings.Contains(err.Error(), "--image: image "+other+" is not the image its inputs name: they name "+want) || !strings.Contains(err.Error(), "nothing was created or drained") {
		t.Fatalf("another image: %v\n%s", err, out)
	}
	bad := slices.Clone(rot)
	bad[slices.Index(bad, "17.5.0")] = "17.6.0" // inputs no image was built from
	if _, err := fleetCmd(t, bad...); err == nil || !strings.Contains(err.Error(), "family wsrm has no image wsrm-") {
		t.Fatalf("inputs of no image: %v", err)
	}
	if n := srv.Calls("RunInstances") + srv.Calls("CreateTags"); n != 0 {
		t.Fatalf("a refused rotation changed the cloud: %d calls", n)
	}
	// The negative control: the image the inputs name rotates.
	out, err = fleetCmd(t, rot...)
	if err != nil || !strings.Contains(out, "image "+ami) || !strings.Contains(out, "succeeded") {
		t.Fatalf("the inputs' image: %v\n%s", err, out)
	}
}

// fleet rotate adopts --gitlab-runner-id only when its tags in GitLab are
// the group's; a runner tagged for another Windows version is refused
// before anything is created.
func TestFleetRotateRefusesARunnerTaggedForAnotherWindowsVersion(t *testing.T) {
	srv := ec2Fleet(t)
	args, in := imageArgs(t)
	want, _ := vmimage.Name(in)
	srv.AddImage(ec2test.Image{Name: want, CreationDate: time.Now(), Tags: map[string]string{"family": "wsrm"}})
	gl := gitlabserver.New()
	t.Cleanup(gl.Close)
	gl.AddUser("glpat-reader", gitlabserver.User{Admin: true, Scopes: []string{gitlabserver.ScopeReadAPI}})
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("glpat-reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := gl.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"windows", "windows-1809"}})
	rot := []string{"rotate", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--windows",
		"--zone", srv.Region() + "a", "--machine-type", "m7i.xlarge", "--image-family", "wsrm",
		"--gitlab-url", gl.URL(), "--gitlab-token-file", tokenFile}
	rot = append(rot, args...)
	_, err := fleetCmd(t, append(rot, "--gitlab-runner-id", strconv.FormatInt(old.ID, 10))...)
	if err == nil || !strings.Contains(err.Error(), "--gitlab-runner-id "+strconv.FormatInt(old.ID, 10)) || !strings.Contains(err.Error(), "windows-1809") || !strings.Contains(err.Error(), "nothing was created") {
		t.Fatalf("a windows-1809 runner for a 2022 image: %v", err)
	}
	// Declared tags are checked against the image's version too.
	_, err = fleetCmd(t, append(rot, "--gitlab-runner-id", strconv.FormatInt(old.ID, 10), "--runner-tag", "windows", "--runner-tag", "windows-1809")...)
	if err == nil || !strings.HasPrefix(err.Error(), "--runner-tag: tag windows-1809") {
		t.Fatalf("--runner-tag windows-1809 on a 2022 image: %v", err)
	}
	if n := srv.Calls("RunInstances") + srv.Calls("CreateTags"); n != 0 {
		t.Fatalf("a refused rotation changed the cloud: %d calls", n)
	}
}

// fleet vm-runner creates the group's runner with its tags and writes the
// token to a new file; a rerun adopts it; a version tag that disagrees with
// the image is refused naming --runner-tag.
func TestFleetVMRunnerCreatesTheRunnerWithTheGroupsTags(t *testing.T) {
	gl := gitlabserver.New()
	t.Cleanup(gl.Close)
	gl.AddUser("glpat-admin", gitlabserver.User{Admin: true, Scopes: []string{gitlabserver.ScopeAPI}})
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("glpat-admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runnerToken := filepath.Join(dir, "runner-token")
	base := []string{"vm-runner", "--windows", "--image-os-version", "2022", "--gitlab-url", gl.URL(), "--gitlab-token-file", tokenFile}

	if _, err := fleetCmd(t, append(base, "--runner-tag", "windows-1809", "--runner-token-file", runnerToken)...); err == nil || !strings.HasPrefix(err.Error(), "--runner-tag: tag windows-1809") {
		t.Fatalf("--runner-tag windows-1809 on a 2022 image: %v", err)
	}
	if len(gl.Runners()) != 0 {
		t.Fatal("a refused vm-runner created a runner")
	}
	out, err := fleetCmd(t, append(base, "--runner-token-file", runnerToken)...)
	if err != nil || !strings.Contains(out, "Created runner") {
		t.Fatalf("%v\n%s", err, out)
	}
	rs := gl.Runners()
	tok, _ := os.ReadFile(runnerToken)
	if len(rs) != 1 || !slices.Equal(rs[0].Tags, []string{"windows", "windows-2022"}) || strings.TrimSpace(string(tok)) != rs[0].Token {
		t.Fatalf("runners %+v, token file %q", rs, tok)
	}
	if st, err := os.Stat(runnerToken); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", st.Mode().Perm())
	}
	if strings.Contains(out, rs[0].Token) {
		t.Error("the runner's token was printed")
	}
	// A rerun finds the group's runner instead of creating another.
	out, err = fleetCmd(t, append(base, "--runner-token-file", filepath.Join(dir, "second"))...)
	if err != nil || !strings.Contains(out, "Adopted runner "+strconv.FormatInt(rs[0].ID, 10)) || len(gl.Runners()) != 1 {
		t.Fatalf("rerun: %v\n%s", err, out)
	}
	// An existing token file is never overwritten.
	if _, err := fleetCmd(t, append([]string{"vm-runner", "--group", "other", "--image-os", "linux", "--image-os-version", "debian-12", "--gitlab-url", gl.URL(), "--gitlab-token-file", tokenFile}, "--runner-token-file", runnerToken)...); err == nil || !strings.Contains(err.Error(), "never overwrites") {
		t.Fatalf("an existing --runner-token-file: %v", err)
	}
}

// fleet gc --image-family with the family's inputs keeps the image they
// name though it is beyond --keep and nothing boots it yet; without them,
// the negative control, it goes.
func TestFleetGCKeepsTheImageTheInputsName(t *testing.T) {
	for _, withInputs := range []bool{true, false} {
		srv := ec2Fleet(t)
		srv.SetLatency(0, 0)
		args, in := imageArgs(t)
		want, _ := vmimage.Name(in)
		srv.AddImage(ec2test.Image{Name: "wsrm-newest", CreationDate: time.Now(), Tags: map[string]string{"family": "wsrm"}})
		srv.AddImage(ec2test.Image{Name: want, CreationDate: time.Now().Add(-time.Hour), Tags: map[string]string{"family": "wsrm"}})
		gc := []string{"gc", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--source", "vm", "--image-family", "wsrm", "--keep", "1", "--apply"}
		if withInputs {
			gc = append(gc, args...)
		}
		out, err := fleetCmd(t, gc...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		kept := false
		for _, im := range srv.Images() {
			kept = kept || im.Name == want
		}
		if kept != withInputs {
			t.Errorf("with inputs %v: %s kept %v\n%s", withInputs, want, kept, out)
		}
	}
	srv := ec2Fleet(t)
	args, _ := imageArgs(t)
	_, err := fleetCmd(t, append([]string{"gc", "--provider", "ec2", "--region", srv.Region(), "--endpoint", srv.URL(), "--source", "vm", "--image-family", "a", "--image-family", "b"}, args...)...)
	if err == nil || !strings.Contains(err.Error(), "exactly one --image-family") {
		t.Fatalf("inputs with two families: %v", err)
	}
}
