package sharedfleet

import (
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// generationResources are the resources of a manager's generation: its
// release, its config Secret and its state claim, by URN.
func generationResources(t *testing.T, m *infratest.Mocks) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range m.ByToken(tokRelease) {
		out[r.URN] = str(t, r, "name")
	}
	for _, r := range m.ByToken(tokSecret) {
		if strings.HasSuffix(r.Name, "-config") && !strings.Contains(r.Name, "prometheus") && !strings.Contains(r.Name, "alertmanager") {
			out[r.URN] = str(t, r, "metadata.name")
		}
	}
	for _, r := range m.ByToken(tokClaim) {
		if strings.HasSuffix(r.Name, "-state") {
			out[r.URN] = r.Name
		}
	}
	return out
}

// A change of what a group's managers run (here production-linux's idle
// VMs) declares each of them a new generation (a release, a config Secret
// and a state claim of new names, so Pulumi creates them beside the old
// ones and deletes the old ones after) and changes nothing else but the
// ScaledObjects that now scale the new generation; the other groups keep
// their generations. A rotated token keeps every generation (it rolls in
// place: TestARotatedTokenRollsTheManagers).
func TestAConfigChangeIsANewGenerationBesideTheOld(t *testing.T) {
	before := deployedStack(t)
	changedJSON := strings.Replace(stackJSON, `"maxVMs": 100, "idleCount": 10,`, `"maxVMs": 100, "idleCount": 12,`, 1)
	if changedJSON == stackJSON {
		t.Fatal("the change did not apply")
	}
	after, _, err := deploy(t, changedJSON, tokens)
	if err != nil {
		t.Fatal(err)
	}
	old, now := generationResources(t, before), generationResources(t, after)
	var created, deleted []string
	for u := range now {
		if _, ok := old[u]; !ok {
			created = append(created, u)
		}
	}
	for u := range old {
		if _, ok := now[u]; !ok {
			deleted = append(deleted, u)
		}
	}
	sort.Strings(created)
	sort.Strings(deleted)
	// production-linux has 4 managers, 3 resources each (docker+machine).
	if len(created) != 12 || len(deleted) != 12 {
		t.Fatalf("created %d generation resources, deleted %d; want 12 each:\ncreated %v\ndeleted %v", len(created), len(deleted), created, deleted)
	}
	for _, u := range append(slices.Clone(created), deleted...) {
		if !strings.Contains(u, "::shared-production-production-linux-") && !strings.Contains(u, "PersistentVolumeClaim::production-linux-") {
			t.Errorf("%s changed generation, but only production-linux changed", u)
		}
	}
	for u, name := range now {
		if strings.Contains(u, "production-linux-") && slices.Contains(slices.Collect(maps.Values(old)), name) {
			t.Errorf("%s: the new generation reuses the old one's name %s", u, name)
		}
	}
	// What a preview shows: the old generation deleted, the new one
	// created, the ScaledObjects pointed at it, and nothing else.
	for _, d := range infratest.Compare(infratest.Record(before.Resources()), after.Resources()) {
		generation := regexp.MustCompile(`(::shared-production-production-linux-[0-3]-[0-9a-f]{8}(-config)? \((kubernetes:helm.sh/v3:Release|kubernetes:core/v1:Secret)\)|PersistentVolumeClaim::production-linux-[0-3]-[0-9a-f]{8}-state \(kubernetes:core/v1:PersistentVolumeClaim\)) would be (created|deleted)`)
		scaler := regexp.MustCompile(`::shared-production-production-linux-[23]-scaler: input spec changed$`)
		if !generation.MatchString(d) && !scaler.MatchString(d) {
			t.Errorf("unexpected difference: %s", d)
		}
	}
	rotated := maps.Clone(tokens)
	rotated["runnerfleet:sharedProductionLinux"] = "glrt-prodLinuxTokenRotated-77aa00"
	m, _, err := deploy(t, stackJSON, rotated)
	if err != nil {
		t.Fatal(err)
	}
	if got := generationResources(t, m); !maps.Equal(got, old) {
		t.Errorf("a rotated token changed generations:\n%v\nwas\n%v", got, old)
	}
}

// An old generation's deletion returns at once while its managers drain:
// its release is declared skipAwait and not atomic (the provider's Delete
// then uninstalls without waiting), and its state claim is never deleted
// by Pulumi (deleted with its config Secret, which owns it in Kubernetes:
// the garbage collector deletes it, and the pvc-protection finalizer keeps
// it until the draining pod is gone). Nothing is retained: every claim has
// an owner that Pulumi deletes.
func TestAnOldGenerationsDeletionDoesNotWaitForItsDrain(t *testing.T) {
	m := deployedStack(t)
	schema := pulumix.SchemaOf(tokRelease)
	if schema == nil || !slices.Contains(schema.Inputs, "skipAwait") || !slices.Contains(schema.Inputs, "atomic") {
		t.Fatalf("the provider's Release schema has no skipAwait or atomic input: %+v", schema)
	}
	secrets := map[string]infratest.Resource{}
	for _, s := range m.ByToken(tokSecret) {
		secrets[s.URN] = s
	}
	for name, want := range managers {
		r := releaseOf(t, m, name)
		if v := r.Input("skipAwait"); !v.IsBool() || !v.BoolValue() {
			t.Errorf("%s: skipAwait %v, want true: the provider's Delete would wait for the release's objects", name, v)
		}
		if v := r.Input("atomic"); v.IsBool() && v.BoolValue() {
			t.Errorf("%s: atomic: the provider's Delete would wait for the release's objects", name)
		}
		if want.executor != "docker+machine" {
			continue
		}
		claim := shared.StateClaimName(str(t, r, "name"))
		var c *infratest.Resource
		for _, x := range m.ByToken(tokClaim) {
			if x.Name == claim {
				c = &x
			}
		}
		if c == nil {
			t.Fatalf("%s: no claim declared as %s", name, claim)
		}
		// The provider names the claim, a new name at each creation: a
		// generation created again while its previous claim still waits
		// for its draining pod gets a claim of its own. The release mounts
		// the claim by the name the provider gave it.
		if v := c.Input("metadata.name"); !v.IsNull() {
			t.Errorf("%s: claim named %v: a generation re-created within a drain would get the claim being deleted", name, v)
		}
		given := claim + "-" + infratest.MockAutonameSuffix
		vols := r.Input("values.volumes").ArrayValue()
		if len(vols) != 1 || vols[0].ObjectValue()["persistentVolumeClaim"].ObjectValue()["claimName"].StringValue() != given ||
			object(t, r, "values.podLabels")[resource.PropertyKey(vmfleet.PodLabelIncarnation)].StringValue() != given {
			t.Errorf("%s: the release mounts %v, its incarnation is %v; want the claim the provider named, %s", name, vols, object(t, r, "values.podLabels")[resource.PropertyKey(vmfleet.PodLabelIncarnation)], given)
		}
		owner, ok := secrets[c.DeletedWith]
		if !ok {
			t.Errorf("%s: claim %s is deleted with %q, not with a Secret: Pulumi would delete it and wait for its pod's drain", name, claim, c.DeletedWith)
			continue
		}
		if c.RetainOnDelete {
			t.Errorf("%s: claim %s is retained: it would outlive its generation", name, claim)
		}
		secretName := str(t, owner, "metadata.name")
		if secretName != shared.ConfigSecretName(str(t, r, "name")) {
			t.Errorf("%s: claim %s is deleted with Secret %s, not its generation's config Secret", name, claim, secretName)
		}
		refs := c.Input("metadata.ownerReferences")
		if !refs.IsArray() || len(refs.ArrayValue()) != 1 {
			t.Fatalf("%s: claim %s owner references %v, want its config Secret", name, claim, refs)
		}
		ref := refs.ArrayValue()[0].ObjectValue()
		wantRef := resource.PropertyMap{
			"apiVersion": resource.NewStringProperty("v1"), "kind": resource.NewStringProperty("Secret"),
			"name": resource.NewStringProperty(secretName), "uid": resource.NewStringProperty("uid-" + owner.Name),
		}
		if !ref.DeepEquals(wantRef) {
			t.Errorf("%s: claim %s owner reference %v, want %v (no blockOwnerDeletion: the Secret's deletion must not wait for the claim)", name, claim, ref, wantRef)
		}
		// The release waits for its generation's claim and Secret.
		for _, dep := range []string{c.URN, owner.URN} {
			if !slices.Contains(r.DependsOn, dep) {
				t.Errorf("%s: the release does not depend on %s", name, dep)
			}
		}
	}
}
