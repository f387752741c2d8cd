package vmfleet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
)

func wsrmInputs() vmimage.Inputs {
	return vmimage.Inputs{Family: "wsrm", OS: vmimage.OSWindows, OSVersion: "2022", RunnerVersion: "17.5.0", AgentVersion: "0.1.0",
		RunnerConfig: []byte("concurrent = 4\n")}
}

func gceCompute(t *testing.T, srv *gcetest.Server, zones ...string) *gcp.Compute {
	t.Helper()
	c, err := gcp.New(context.Background(), "test-project", zones, srv.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// imageFleet is a project whose family wsrm has, newest first: wsrm-newest
// (built since, from other inputs), the image the inputs name (not booted
// yet), wsrm-in-use (booted by the live manager wsrm-blue-1 in us-east1-b)
// and wsrm-stale (nothing boots it).
func imageFleet(t *testing.T) (srv *gcetest.Server, expected string) {
	t.Helper()
	srv = gcetest.New()
	t.Cleanup(srv.Close)
	expected, err := vmimage.Name(wsrmInputs())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for name, age := range map[string]time.Duration{"wsrm-newest": 0, expected: 24 * time.Hour, "wsrm-in-use": 72 * time.Hour, "wsrm-stale": 240 * time.Hour} {
		srv.AddImage(gcetest.Image{Name: name, Family: "wsrm", CreatedAt: now.Add(-age)})
	}
	// The manager is created as fleet rotate creates it, by the provider.
	_, err = gceCompute(t, srv).CreateInstance(context.Background(), providers.InstanceSpec{
		Name: "wsrm-blue-1", Zone: "us-east1-b", MachineType: "n2d-standard-4", Image: "wsrm-in-use",
		Labels: map[string]string{vmfleet.LabelGroup: "wsrm", vmfleet.LabelRole: vmfleet.RoleManager, vmfleet.LabelColor: "blue", vmfleet.LabelGeneration: "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv, expected
}

func imageNames(srv *gcetest.Server) []string {
	var out []string
	for _, im := range srv.Images() {
		out = append(out, im.Name)
	}
	slices.Sort(out)
	return out
}

// fleet gc --image-family keeps the newest --keep, every image a VM of the
// project boots (in any zone, even when gc's VMs are narrowed to others)
// and the image the family's inputs name; the stale one goes.
func TestGCKeepsTheImagesInUseAndTheExpectedOneOnGCE(t *testing.T) {
	gc := func(srv *gcetest.Server, keep []string, users bool) (vmfleet.Plan, error) {
		narrowed := gceCompute(t, srv, "us-east1-c") // fleet gc --zones us-east1-c
		g := &vmfleet.GC{
			Compute: narrowed, Sources: []vmfleet.Source{&vmfleet.VMSource{Compute: gceCompute(t, srv)}},
			ImageFamilies: []string{"wsrm"}, Keep: 1, KeepImages: keep, Apply: true,
		}
		if users {
			g.ImageUsers = gceCompute(t, srv)
		}
		return g.Run(context.Background())
	}

	srv, expected := imageFleet(t)
	plan, err := gc(srv, []string{expected}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{expected, "wsrm-in-use", "wsrm-newest"}
	slices.Sort(want)
	if got := imageNames(srv); !slices.Equal(got, want) || !slices.Equal(plan.Images, []string{"wsrm-stale"}) {
		t.Fatalf("images left %v, pruned %v; want %v left and wsrm-stale pruned", got, plan.Images, want)
	}

	// Negative controls, each on a project of its own. Without the
	// expected image kept, the image a rotation is about to boot goes.
	srv, expected = imageFleet(t)
	if _, err := gc(srv, nil, true); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(imageNames(srv), expected) {
		t.Fatalf("negative control: without KeepImages the expected image %s was kept: the test proves nothing", expected)
	}
	// Without every zone's VMs, the image a manager in another zone boots goes.
	srv, expected = imageFleet(t)
	if _, err := gc(srv, []string{expected}, false); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(imageNames(srv), "wsrm-in-use") {
		t.Fatal("negative control: gc narrowed to us-east1-c kept wsrm-in-use without seeing its VM: the test proves nothing")
	}
}

// A manager VM that does not say which image it boots (a VM made by hand,
// without the image metadata) stops the pruning: any image may be its.
func TestGCPrunesNoImageWhenAManagersImageIsUnknown(t *testing.T) {
	srv, expected := imageFleet(t)
	srv.AddInstance(gcetest.Instance{Name: "wsrm-by-hand", Zone: "us-east1-b", SourceImage: "projects/test-project/global/images/wsrm-stale",
		Labels: map[string]string{vmfleet.LabelGroup: "wsrm", vmfleet.LabelRole: vmfleet.RoleManager}})
	c := gceCompute(t, srv)
	before := imageNames(srv)
	_, err := (&vmfleet.GC{
		Compute: c, Sources: []vmfleet.Source{&vmfleet.VMSource{Compute: c}},
		ImageFamilies: []string{"wsrm"}, Keep: 1, KeepImages: []string{expected}, Apply: true,
	}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "wsrm-by-hand") || !strings.Contains(err.Error(), "no image was deleted") {
		t.Fatalf("error %v, want the manager named and no image deleted", err)
	}
	if got := imageNames(srv); !slices.Equal(got, before) {
		t.Fatalf("images %v, want all of %v", got, before)
	}
}

// fleet rotate's image check: the image the inputs name, found in its
// family by name, URL or ID; another image, or a family without it, is
// refused naming the expected name.
func TestResolveImageRefusesAnImageTheInputsDoNotName(t *testing.T) {
	srv, expected := imageFleet(t)
	c := gceCompute(t, srv)
	ctx := context.Background()
	in := wsrmInputs()
	for _, ref := range []string{"", expected, "projects/test-project/global/images/" + expected} {
		img, err := vmfleet.ResolveImage(ctx, c, ref, in)
		if err != nil || img.Name != expected {
			t.Errorf("--image %q: %v, %+v", ref, err, img)
		}
	}
	_, err := vmfleet.ResolveImage(ctx, c, "wsrm-newest", in)
	var mm *vmfleet.ImageMismatchError
	if !errors.As(err, &mm) || !strings.Contains(err.Error(), "wsrm-newest is not the image its inputs name: they name "+expected) {
		t.Fatalf("another image of the family: %v", err)
	}
	in.RunnerVersion = "17.6.0" // inputs no image was built from
	want, _ := vmimage.Name(in)
	for _, ref := range []string{"", expected} {
		_, err := vmfleet.ResolveImage(ctx, c, ref, in)
		if !errors.As(err, &mm) || !strings.Contains(err.Error(), want) {
			t.Errorf("--image %q with inputs of no image: %v, want %s named", ref, err, want)
		}
	}
}

// A VM that boots the family (the newest image when it was created), not
// an image of it, stops the pruning of that family: which image it got is
// not known.
func TestGCPrunesNoImageOfAFamilyAVMBootsByReference(t *testing.T) {
	srv, expected := imageFleet(t)
	c := gceCompute(t, srv)
	_, err := c.CreateInstance(context.Background(), providers.InstanceSpec{
		Name: "wsrm-by-family", Zone: "us-east1-b", MachineType: "n2d-standard-4", Image: "family/wsrm",
		Labels: map[string]string{vmfleet.LabelGroup: "wsrm", vmfleet.LabelRole: vmfleet.RoleManager},
	})
	if err != nil {
		t.Fatal(err)
	}
	before := imageNames(srv)
	_, err = (&vmfleet.GC{
		Compute: c, Sources: []vmfleet.Source{&vmfleet.VMSource{Compute: c}},
		ImageFamilies: []string{"wsrm"}, Keep: 1, KeepImages: []string{expected}, Apply: true,
	}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "wsrm-by-family boot from image family wsrm") {
		t.Fatalf("error %v, want the VM that boots the family named", err)
	}
	if got := imageNames(srv); !slices.Equal(got, before) {
		t.Fatalf("images %v, want all of %v", got, before)
	}
}
