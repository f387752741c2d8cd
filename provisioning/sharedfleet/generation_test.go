package sharedfleet

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

var generationSettings = ReleaseSettings{GitLabURL: "https://gitlab.example.com", ManagerImage: "registry.example.com/ci/runner:v1", GraceSeconds: 11400}

func generationOf(t *testing.T, r Release, s ReleaseSettings) string {
	t.Helper()
	gen, err := r.GenerationOf(s)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(gen) {
		t.Fatalf("%s: generation %q is not %d hex digits", r.Name, gen, GenerationLength)
	}
	return gen
}

// What makes a manager a new process (its config, its image, its grace) is
// a new generation; the same inputs are the same generation, whatever the
// generation the Release carried before.
func TestAChangeOfWhatAManagerRunsIsANewGeneration(t *testing.T) {
	for _, g := range []fleetspec.ManagerGroup{production(), autoscaler()} {
		g.Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 2}
		r := Releases(g, "")[0]
		base := generationOf(t, r, generationSettings)
		r.Generation = "deadbeef"
		if again := generationOf(t, r, generationSettings); again != base {
			t.Errorf("%s: the same manager is generation %s, then %s", r.Name, base, again)
		}
		changed := map[string]Release{}
		idle := r
		idle.Group.IdleTime.Duration += time.Minute
		changed["idle time"] = idle
		vms := r
		vms.Group.MaxVMs++
		changed["maxVMs"] = vms
		other := Releases(g, "")[1]
		changed["another manager"] = other
		for what, c := range changed {
			if gen := generationOf(t, c, generationSettings); gen == base {
				t.Errorf("%s: a change of its %s keeps generation %s", r.Name, what, gen)
			}
		}
		image := generationSettings
		image.ManagerImage = "registry.example.com/ci/runner:v2"
		grace := generationSettings
		grace.GraceSeconds += 600
		for what, s := range map[string]ReleaseSettings{"manager image": image, "grace period": grace} {
			if gen := generationOf(t, r, s); gen == base {
				t.Errorf("%s: a change of its %s keeps generation %s", r.Name, what, gen)
			}
		}
	}
}

// Every name a generation gives (its release, its Deployment, its config
// Secret, its state claim, which is its VMs' incarnation label) fits its
// limit for the longest manager name the renderer accepts.
func TestAGenerationsNamesAreValidForTheLongestManagerName(t *testing.T) {
	g := production()
	g.Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 1}
	r := Releases(g, "")[0]
	r.Name = strings.Repeat("m", vmfleet.MaxManagerNameLength-2) + "-0"
	r.Generation = generationOf(t, r, generationSettings)
	rel := r.ReleaseName()
	if rel != r.Name+"-"+r.Generation {
		t.Fatalf("release %s", rel)
	}
	// Helm refuses a release name above 53 characters.
	if len(rel) > 53 || len(validation.IsDNS1123Label(rel)) > 0 {
		t.Errorf("release %s (%d characters) is no Helm release name: %v", rel, len(rel), validation.IsDNS1123Label(rel))
	}
	if name := r.StateClaim("production").Name; name != "" {
		t.Errorf("the claim is named %s: the provider must name it, a new name each time it is created", name)
	}
	// The provider's name for the claim: StateClaimName and its suffix.
	claim := StateClaimName(rel) + "-" + strings.Repeat("z", StateClaimSuffixLength-1)
	if len(validation.IsDNS1123Subdomain(claim)) > 0 || len(validation.IsValidLabelValue(claim)) > 0 {
		t.Errorf("claim %s: %v %v", claim, validation.IsDNS1123Subdomain(claim), validation.IsValidLabelValue(claim))
	}
	v := r.Values(generationSettings, "config", "script", "hash", claim)
	if v["fullnameOverride"] != rel || v["secrets"].([]any)[0].(map[string]any)["name"] != ConfigSecretName(rel) ||
		v["podLabels"].(map[string]any)[vmfleet.PodLabelIncarnation] != claim || v["podLabels"].(map[string]any)[LabelRelease] != r.Name {
		t.Errorf("values name another generation: %v", v)
	}
	if msgs := validation.IsDNS1123Subdomain(ConfigSecretName(rel)); len(msgs) > 0 {
		t.Errorf("config Secret %s: %v", ConfigSecretName(rel), msgs)
	}
}

// The VMs of an old generation stay owned while its manager drains (its
// terminating pod still carries the old state claim as its incarnation) and
// become orphans, for fleet gc to delete once idle, when that pod is gone
// and only the new generation runs: a change of generation leaks no VM and
// fleet gc takes none from a draining manager.
func TestAnOldGenerationsVMsAreOwnedWhileItDrainsAndCollectedAfter(t *testing.T) {
	g := production()
	g.Scaling = fleetspec.Scaling{MinManagers: 1, MaxManagers: 1}
	old := Releases(g, "")[0]
	old.Generation = generationOf(t, old, generationSettings)
	next := old
	next.Group.IdleCount++
	next.Generation = generationOf(t, next, generationSettings)
	if next.ReleaseName() == old.ReleaseName() {
		t.Fatal("the change made no new generation")
	}
	// The claims the provider names: a suffix drawn at each creation.
	incarnation := func(r Release) string {
		claim := StateClaimName(r.ReleaseName()) + "-k3j9x0qa"
		return r.Values(generationSettings, "", "", "", claim)["podLabels"].(map[string]any)[vmfleet.PodLabelIncarnation].(string)
	}
	vm := vmfleet.Owner{Fleet: g.Fleet, Group: g.ManagerName(), Manager: old.Name, Host: vmfleet.HostKubernetes, Incarnation: incarnation(old)}
	draining := oneKube{[]vmfleet.Manager{{Name: old.Name, Incarnation: incarnation(old)}, {Name: old.Name, Incarnation: incarnation(next)}, {Name: old.Name}}}
	after := oneKube{[]vmfleet.Manager{{Name: old.Name, Incarnation: incarnation(next)}, {Name: old.Name}}}
	for _, c := range []struct {
		what string
		k    oneKube
		want string
	}{{"while the old generation drains", draining, vmfleet.VerdictOwned}, {"once it is gone", after, vmfleet.VerdictNoted}} {
		got := classifyOwner(t, vm, c.k)
		if got != c.want {
			t.Errorf("%s: the old generation's VM is %s, want %s", c.what, got, c.want)
		}
	}
}

// classifyOwner is fleet gc's verdict on an old, idle VM of owner o with
// the managers k proves.
func classifyOwner(t *testing.T, o vmfleet.Owner, k oneKube) string {
	t.Helper()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	srv := gcetest.New()
	t.Cleanup(srv.Close)
	srv.AddInstance(gcetest.Instance{Name: "runner-abcdefghi-" + o.Manager + "-1700000000-deadbeef", Zone: "us-east1-c", Labels: o.Labels(), CreatedAt: time.Now().Add(-3 * time.Hour)})
	compute, err := gcp.New(context.Background(), srv.Project(), nil, srv.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { compute.Close() })
	plan, err := (&vmfleet.GC{Compute: compute, Sources: []vmfleet.Source{k}}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Rows) != 1 {
		t.Fatalf("%d rows", len(plan.Rows))
	}
	return plan.Rows[0].Verdict
}
