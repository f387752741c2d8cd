package sharedfleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// dockerMachineVMName is the name gitlab-runner 19.4's docker+machine
// executor gives a VM (executors/docker/machine/name.go: "runner-", the
// token's first 9 characters after its glrt- and t1_ prefixes (helpers.ShortenToken),
// lower-cased and stripped to RFC 1123 characters (dns.MakeRFC1123Compatible),
// "-", and MachineName with %s replaced by "<unix time>-<4 random bytes in
// hex>").
func dockerMachineVMName(token, machineName string, at time.Time, random [4]byte) string {
	short := strings.TrimPrefix(token, "glrt-")
	for _, p := range []string{"t1_", "t2_", "t3_"} {
		short = strings.TrimPrefix(short, p)
	}
	short = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return -1
	}, strings.ToLower(short[:9]))
	return "runner-" + short + "-" + fmt.Sprintf(machineName, fmt.Sprintf("%d-%x", at.Unix(), random[:]))
}

type oneKube struct{ managers []vmfleet.Manager }

func (k oneKube) Host() string                                        { return vmfleet.HostKubernetes }
func (k oneKube) Describe() string                                    { return "test cluster" }
func (k oneKube) Managers(context.Context) ([]vmfleet.Manager, error) { return k.managers, nil }

// The renderer and fleet gc agree: a VM created the way docker+machine
// creates it from the rendered config (its name, its google-label options,
// the incarnation the start script puts in) is owned while its manager's pod
// runs, and an orphan once the pod is replaced.
func TestAVMDockerMachineCreatesFromTheRenderedConfigIsClassifiedByGC(t *testing.T) {
	const manager, pod = "production-shared-gce-0", "production-shared-gce-0-6d8f7c9b5-x2x7q"
	c, err := ConfigFor(production(), manager)
	if err != nil {
		t.Fatal(err)
	}
	m := c.Runners[0].Machine
	labels := map[string]string{}
	for _, o := range m.MachineOptions {
		if kv, ok := strings.CutPrefix(o, "google-label="); ok {
			k, v, _ := strings.Cut(kv, ":")
			labels[k] = strings.ReplaceAll(v, vmfleet.IncarnationPlaceholder, vmfleet.IncarnationOfPod(pod))
		}
	}
	for _, k := range []string{vmfleet.LabelFleet, vmfleet.LabelManagerGroup, vmfleet.LabelManager, vmfleet.LabelHost, vmfleet.LabelIncarnation, vmfleet.LabelAutoscaled} {
		if labels[k] == "" {
			t.Errorf("the rendered google-label options lack %s: %v", k, m.MachineOptions)
		}
	}
	name := dockerMachineVMName("glrt-t1_AbCdEf123456789", m.MachineName, time.Now().Add(-3*time.Hour), [4]byte{0xde, 0xad, 0xbe, 0xef})
	if len(name) > 63 {
		t.Fatalf("docker+machine would name the VM %s, %d characters: GCE refuses it", name, len(name))
	}
	if got, ok := vmfleet.ManagerOfMachine(name); !ok || got != manager {
		t.Errorf("ManagerOfMachine(%s) = %q, %t; want %s", name, got, ok, manager)
	}

	srv := gcetest.New()
	t.Cleanup(srv.Close)
	srv.AddInstance(gcetest.Instance{Name: name, Zone: "us-east1-c", Labels: labels, CreatedAt: time.Now().Add(-3 * time.Hour)})
	// The same VM without labels: gc falls back to the name.
	bare := dockerMachineVMName("glrt-t1_AbCdEf123456789", m.MachineName, time.Now().Add(-3*time.Hour), [4]byte{1, 2, 3, 4})
	srv.AddInstance(gcetest.Instance{Name: bare, Zone: "us-east1-c", Labels: map[string]string{vmfleet.LabelAutoscaled: "true"}, CreatedAt: time.Now().Add(-3 * time.Hour)})
	compute, err := gcp.New(context.Background(), srv.Project(), nil, srv.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { compute.Close() })
	classify := func(k oneKube, more ...vmfleet.Source) map[string]string {
		plan, err := (&vmfleet.GC{Compute: compute, Sources: append([]vmfleet.Source{k}, more...)}).Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range plan.Rows {
			out[r.Name] = r.Verdict
		}
		return out
	}
	running := oneKube{[]vmfleet.Manager{{Name: manager, Incarnation: vmfleet.IncarnationOfPod(pod)}, {Name: manager}}}
	if got := classify(running); got[name] != vmfleet.VerdictOwned || got[bare] != vmfleet.VerdictOwned {
		t.Errorf("with its pod running: %v, want both owned", got)
	}
	replaced := oneKube{[]vmfleet.Manager{{Name: manager, Incarnation: "production-shared-gce-0-6d8f7c9b5-new01"}, {Name: manager}}}
	if got := classify(replaced); got[name] != vmfleet.VerdictNoted || got[bare] != vmfleet.VerdictOwned {
		t.Errorf("with its pod replaced: %v, want the labelled VM an orphan and the bare one (no incarnation) owned", got)
	}
	// The bare VM names no host: only when every host's source answers is
	// its manager proven absent.
	if got := classify(oneKube{}); got[name] != vmfleet.VerdictNoted || got[bare] != vmfleet.VerdictUnknown {
		t.Errorf("with no manager in the cluster: %v, want the labelled VM an orphan, the bare one unknown", got)
	}
	if got := classify(oneKube{}, &vmfleet.VMSource{Compute: compute}); got[name] != vmfleet.VerdictNoted || got[bare] != vmfleet.VerdictNoted {
		t.Errorf("with no manager anywhere: %v, want both orphans", got)
	}
}

func TestAManagerNameTooLongForDockerMachinesVMNamesIsRefused(t *testing.T) {
	_, err := ConfigFor(production(), strings.Repeat("m", vmfleet.MaxManagerNameLength+1))
	if err == nil || !strings.Contains(err.Error(), "fleets.production.groups.shared-gce.name") || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("error %v", err)
	}
}
