package vmfleet_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// fakeKube is the cluster as a Source: the property test changes it
// between runs (KubeSource itself is tested on a real kube-apiserver).
type fakeKube struct {
	mu   sync.Mutex
	pods map[string]string // manager → its running pod (incarnation)
	fail bool
}

func (k *fakeKube) Host() string     { return vmfleet.HostKubernetes }
func (k *fakeKube) Describe() string { return "the test's cluster" }
func (k *fakeKube) Managers(context.Context) ([]vmfleet.Manager, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail {
		return nil, errors.New("dial tcp 10.0.0.1:443: connect: connection refused")
	}
	var out []vmfleet.Manager
	for m, pod := range k.pods {
		out = append(out, vmfleet.Manager{Name: m, Incarnation: pod}, vmfleet.Manager{Name: m})
	}
	return out, nil
}

// failing makes a source fail while *fail is set.
type failing struct {
	vmfleet.Source
	fail *bool
}

func (f failing) Managers(ctx context.Context) ([]vmfleet.Manager, error) {
	if *f.fail {
		return nil, errors.New("listing manager VMs: RequestLimitExceeded")
	}
	return f.Source.Managers(ctx)
}

func tag(t *testing.T, srv *ec2test.Server, id string, kv ...string) {
	t.Helper()
	var tags []types.Tag
	for i := 0; i < len(kv); i += 2 {
		tags = append(tags, types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	if _, err := ec2.NewFromConfig(srv.Config()).CreateTags(context.Background(), &ec2.CreateTagsInput{Resources: []string{id}, Tags: tags}); err != nil {
		t.Fatal(err)
	}
}

func report(t *testing.T, srv *ec2test.Server, id string, jobs int, at time.Time) {
	tag(t, srv, id, providers.EC2JobsTag, fmt.Sprint(jobs), providers.EC2JobsUpdatedAtTag, at.UTC().Format(time.RFC3339Nano))
}

// A VM goes only after two --apply runs a grace apart, its manager absent
// throughout, and only when a fresh job report shows it idle.
func TestGCDeletesAnOrphanOnlyAfterTheGraceAndOnlyWhenIdle(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	srv.SetLatency(0, 0)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	old := now.Add(-5 * time.Hour)
	kube := &fakeKube{pods: map[string]string{"prod-linux-0": "prod-linux-0-7d9f-abcde"}}
	vm := func(name, manager, incarnation string) string {
		l := vmfleet.Owner{Fleet: "prod", Group: "linux", Manager: manager, Host: vmfleet.HostKubernetes, Incarnation: incarnation}.Labels()
		l["Name"] = name
		return srv.AddInstance(ec2test.Instance{ImageID: "ami-runner", State: "running", LaunchTime: old, Tags: l})
	}
	owned := vm("owned", "prod-linux-0", "prod-linux-0-7d9f-abcde")
	lostState := vm("lost-state", "prod-linux-0", "prod-linux-0-7d9f-zzzzz") // the manager restarted
	idle := vm("idle-orphan", "prod-linux-1", "prod-linux-1-aaaa-bbbbb")
	busy := vm("busy-orphan", "prod-linux-1", "prod-linux-1-aaaa-bbbbb")
	silent := vm("silent-orphan", "prod-linux-1", "prod-linux-1-aaaa-bbbbb")

	run := func(at time.Time, apply bool) vmfleet.Plan {
		for _, id := range []string{owned, lostState, idle} {
			report(t, srv, id, 0, at.Add(-time.Minute))
		}
		report(t, srv, busy, 2, at.Add(-time.Minute))
		var out strings.Builder
		plan, err := (&vmfleet.GC{Compute: compute(srv), Sources: []vmfleet.Source{kube}, Grace: time.Hour, Apply: apply,
			Now: func() time.Time { return at }}).Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		plan.WriteTable(&out)
		t.Logf("at %s, apply %t:\n%s", at.Format(time.Kitchen), apply, out.String())
		return plan
	}
	if p := run(now, false); len(p.VMs) != 0 || p.Count(vmfleet.VerdictNoted) != 4 || p.Count(vmfleet.VerdictOwned) != 1 {
		t.Fatalf("first dry run: %+v", p.Rows)
	}
	if srv.Calls("CreateTags") != 4*1 || srv.Calls("TerminateInstances") != 0 {
		t.Fatal("a dry run wrote to the cloud")
	}
	run(now, true) // notes the four orphans
	if p := run(now.Add(59*time.Minute), true); len(p.VMs) != 0 || p.Count(vmfleet.VerdictWaiting) != 4 {
		t.Fatalf("within the grace: %+v", p.Rows)
	}
	p := run(now.Add(61*time.Minute), true)
	if got := strings.Join(p.VMs, ","); got != "idle-orphan,lost-state" {
		t.Errorf("deleted %s, want idle-orphan,lost-state", got)
	}
	if p.Count(vmfleet.VerdictBusy) != 2 || p.Orphans() != 2 {
		t.Errorf("busy and silent orphans: %+v", p.Rows)
	}
	for _, in := range srv.Instances() {
		deleted := in.State == "terminated" || in.State == "shutting-down"
		if deleted != (in.ID == lostState || in.ID == idle) {
			t.Errorf("%s is %s", in.Tags["Name"], in.State)
		}
	}
	_ = silent
}

func TestGCApplyIsRefusedWhenASourceDoesNotAnswer(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	srv.SetLatency(0, 0)
	l := vmfleet.Owner{Manager: "gone", Host: vmfleet.HostVM}.Labels()
	l["Name"] = "vm-of-gone"
	id := srv.AddInstance(ec2test.Instance{ImageID: "ami-runner", State: "stopped", LaunchTime: time.Now().Add(-5 * time.Hour), Tags: l})
	tag(t, srv, id, providers.EC2NotePrefix+vmfleet.NoteOrphanedSince, time.Now().Add(-3*time.Hour).UTC().Format(time.RFC3339))
	kube := &fakeKube{fail: true}
	for _, apply := range []bool{false, true} {
		_, err := (&vmfleet.GC{Compute: compute(srv), Sources: []vmfleet.Source{&vmfleet.VMSource{Compute: compute(srv)}, kube}, Apply: apply}).Run(context.Background())
		if apply != errors.Is(err, vmfleet.ErrSourceUnavailable) {
			t.Errorf("apply %t: error %v", apply, err)
		}
	}
	if srv.Calls("TerminateInstances") != 0 {
		t.Fatal("a VM was deleted while a source was down")
	}
	// Without the failing source, the same VM (stopped, noted 3h ago) goes:
	// the refusal above is what kept it.
	if _, err := (&vmfleet.GC{Compute: compute(srv), Sources: []vmfleet.Source{&vmfleet.VMSource{Compute: compute(srv)}}, Apply: true}).Run(context.Background()); err != nil || srv.Calls("TerminateInstances") != 1 {
		t.Fatalf("negative control: %v, %d terminations", err, srv.Calls("TerminateInstances"))
	}
}

var propertyCases = flag.Int("gc-cases", 100, "random fleets the gc property test runs")

// gcCase is one random fleet: managers in the cluster (with restarts that
// lose their state) and on VMs, autoscaled VMs in every state, jobs on some,
// job reports fresh, stale or missing, a source that fails now and then.
type gcCase struct {
	rng   *rand.Rand
	id    string
	srv   *ec2test.Server
	clock time.Time
	grace time.Duration

	kube      *fakeKube
	vmFail    bool
	vmMgrs    map[string]string // VM manager name → instance ID
	vms       []*caseVM
	absentSet map[string]time.Time // manager or manager/incarnation → absent since (truth)
}

type caseVM struct {
	id, name, manager, incarnation, host string
	runsJob                              bool
	reporter                             string // none, stale, fresh
	group                                bool   // owned by an instance group
	stopped                              bool
	createdAt                            time.Time
}

// alive: does the VM's owner (manager, incarnation) exist now (truth)?
func (c *gcCase) alive(v *caseVM) bool {
	if v.host == vmfleet.HostVM {
		_, ok := c.vmMgrs[v.manager]
		return ok
	}
	pod, ok := c.kube.pods[v.manager]
	return ok && (v.incarnation == "" || v.incarnation == pod)
}

func TestPropertyGCNeverDeletesAnOwnedOrBusyVMAndFindsEveryOrphan(t *testing.T) {
	srv := ec2test.New()
	t.Cleanup(srv.Close)
	srv.SetLatency(0, 0)
	c0 := compute(srv)
	runs, deleted := 0, 0
	for n := range *propertyCases {
		c := &gcCase{rng: rand.New(rand.NewPCG(uint64(n), 14)), id: fmt.Sprintf("c%d", n), srv: srv,
			clock: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), grace: time.Hour,
			kube: &fakeKube{pods: map[string]string{}}, vmMgrs: map[string]string{}, absentSet: map[string]time.Time{}}
		c.build(t)
		// Three --apply runs, the fleet changing in between.
		for step := range 3 {
			c.refreshReports(t)
			c.kube.fail = c.rng.IntN(6) == 0
			c.vmFail = c.rng.IntN(6) == 0
			before := c.truth()
			g := &vmfleet.GC{Compute: c0, Autoscaled: map[string]string{vmfleet.LabelAutoscaled: "true", "rf-case": c.id},
				Sources: []vmfleet.Source{c.kube, failing{&vmfleet.VMSource{Compute: c0}, &c.vmFail}},
				Grace:   c.grace, Apply: true, Now: func() time.Time { return c.clock }}
			plan, err := g.Run(context.Background())
			runs++
			if (c.kube.fail || c.vmFail) != errors.Is(err, vmfleet.ErrSourceUnavailable) {
				t.Fatalf("case %s step %d: error %v with kube failing %t, VMs failing %t", c.id, step, err, c.kube.fail, c.vmFail)
			}
			if err != nil && !errors.Is(err, vmfleet.ErrSourceUnavailable) {
				t.Fatalf("case %s step %d: %v", c.id, step, err)
			}
			c.check(t, step, plan, before, err != nil)
			for _, r := range plan.Rows {
				if r.Deleted {
					deleted++
				}
			}
			c.clock = c.clock.Add(c.grace + time.Duration(1+c.rng.IntN(20))*time.Minute)
			// The fleet changes just before the next run: the latest a
			// manager can have gone, so the grace is counted strictly.
			c.evolve(t)
		}
	}
	t.Logf("%d random fleets, %d gc --apply runs, %d VMs deleted", *propertyCases, runs, deleted)
	if deleted == 0 {
		t.Fatal("no case deleted anything: the property test proves nothing")
	}
}

func (c *gcCase) build(t *testing.T) {
	// Managers: 1–3 in the cluster, 0–2 on VMs; some already gone.
	for i := range 1 + c.rng.IntN(3) {
		m := fmt.Sprintf("%s-k%d", c.id, i)
		if c.rng.IntN(4) > 0 {
			c.kube.pods[m] = fmt.Sprintf("%s-pod%d", m, c.rng.IntN(1000))
		} else {
			c.absentSet[m] = c.clock.Add(-2 * time.Hour)
		}
	}
	for i := range c.rng.IntN(3) {
		m := fmt.Sprintf("%s-v%d", c.id, i)
		if c.rng.IntN(4) > 0 {
			c.vmMgrs[m] = c.srv.AddInstance(ec2test.Instance{ImageID: "ami-manager", State: "running",
				Tags: map[string]string{"Name": m, vmfleet.LabelRole: vmfleet.RoleManager, "rf-case": c.id}})
		}
	}
	managers := []string{}
	for i := range 3 {
		managers = append(managers, fmt.Sprintf("%s-k%d", c.id, i))
	}
	for i := range 2 {
		managers = append(managers, fmt.Sprintf("%s-v%d", c.id, i))
	}
	for i := range 4 + c.rng.IntN(10) {
		m := managers[c.rng.IntN(len(managers))]
		v := &caseVM{name: fmt.Sprintf("%s-vm%d", c.id, i), manager: m, host: vmfleet.HostKubernetes,
			runsJob: c.rng.IntN(3) == 0, reporter: []string{"none", "stale", "fresh", "fresh"}[c.rng.IntN(4)],
			group: c.rng.IntN(10) == 0, stopped: c.rng.IntN(8) == 0,
			createdAt: c.clock.Add(-time.Duration(c.rng.IntN(240)) * time.Minute)}
		if strings.Contains(m, "-v") {
			v.host = vmfleet.HostVM
		} else {
			switch c.rng.IntN(3) {
			case 0: // made by the running pod
				v.incarnation = c.kube.pods[m]
			case 1: // made by an earlier pod whose state is gone
				v.incarnation = m + "-old"
			}
		}
		if v.stopped {
			v.runsJob = false
		}
		l := vmfleet.Owner{Fleet: c.id, Group: "g", Manager: v.manager, Host: v.host, Incarnation: v.incarnation}.Labels()
		if c.rng.IntN(5) == 0 {
			delete(l, vmfleet.LabelHost) // labelled before hosts were
		}
		l["Name"], l["rf-case"] = v.name, c.id
		if v.group {
			l["aws:autoscaling:groupName"] = c.id + "-asg"
		}
		state := "running"
		if v.stopped {
			state = "stopped"
		}
		v.id = c.srv.AddInstance(ec2test.Instance{ImageID: "ami-runner", State: state, LaunchTime: v.createdAt, Tags: l})
		c.vms = append(c.vms, v)
	}
	// Absence so far: a VM whose owner is absent now counts as absent
	// since long ago only if its manager never existed in this case.
	for _, v := range c.vms {
		if !c.alive(v) {
			if _, ok := c.absentSet[v.id]; !ok {
				c.absentSet[v.id] = c.clock.Add(-2 * time.Hour)
			}
		}
	}
}

// refreshReports writes the job reporters' reports: fresh ones say the
// truth a minute ago; stale ones said "no job" an hour ago.
func (c *gcCase) refreshReports(t *testing.T) {
	for _, v := range c.vms {
		switch v.reporter {
		case "fresh":
			jobs := 0
			if v.runsJob {
				jobs = 1 + c.rng.IntN(3)
			}
			report(t, c.srv, v.id, jobs, c.clock.Add(-time.Minute))
		case "stale":
			report(t, c.srv, v.id, 0, c.clock.Add(-time.Hour))
		}
	}
}

// truth is what the test knows before a run: per VM, is it owned now, and
// since when has its owner been absent.
func (c *gcCase) truth() map[string]bool {
	alive := map[string]bool{}
	for _, v := range c.vms {
		alive[v.id] = c.alive(v)
	}
	return alive
}

func (c *gcCase) check(t *testing.T, step int, plan vmfleet.Plan, alive map[string]bool, refused bool) {
	t.Helper()
	byName := map[string]*caseVM{}
	for _, v := range c.vms {
		byName[v.name] = v
	}
	if refused && (len(plan.VMs) != 0 || len(plan.Rows) != 0) {
		t.Fatalf("case %s step %d: a refused run judged or deleted VMs: %v", c.id, step, plan.VMs)
	}
	for _, r := range plan.Rows {
		v := byName[r.Name]
		if r.Deleted {
			switch {
			case alive[v.id]:
				t.Errorf("case %s step %d: deleted %s, whose manager %s/%s exists", c.id, step, v.name, v.manager, v.incarnation)
			case v.runsJob:
				t.Errorf("case %s step %d: deleted %s, which runs a job", c.id, step, v.name)
			case v.group:
				t.Errorf("case %s step %d: deleted %s, which an instance group owns", c.id, step, v.name)
			case c.clock.Sub(c.absentSet[v.id]) < c.grace:
				t.Errorf("case %s step %d: deleted %s, whose manager is absent only since %s", c.id, step, v.name, c.absentSet[v.id])
			}
			v.stopped, v.reporter = true, "gone"
			continue
		}
		if v.reporter == "gone" {
			continue
		}
		// Completeness: an orphan is always found; once its manager has
		// been absent for the grace across a noted run, an idle one goes.
		if !alive[v.id] && !v.group && c.clock.Sub(v.createdAt) >= c.grace {
			switch r.Verdict {
			case vmfleet.VerdictOwned, vmfleet.VerdictUnknown, vmfleet.VerdictUnowned:
				t.Errorf("case %s step %d: %s's manager %s/%s is gone, but gc says %s: %s", c.id, step, v.name, v.manager, v.incarnation, r.Verdict, r.Reason)
			}
			provablyIdle := v.stopped || (v.reporter == "fresh" && !v.runsJob)
			if step > 0 && provablyIdle && r.Verdict != vmfleet.VerdictNoted && c.clock.Sub(c.absentSet[v.id]) >= 2*c.grace {
				t.Errorf("case %s step %d: %s is an idle orphan for %s, but gc says %s: %s", c.id, step, v.name, c.clock.Sub(c.absentSet[v.id]), r.Verdict, r.Reason)
			}
		}
	}
}

// evolve changes the fleet between runs: a manager goes, a pod restarts
// (a new incarnation; its old VMs are orphans now), a job ends or starts.
func (c *gcCase) evolve(t *testing.T) {
	for m := range c.kube.pods {
		switch c.rng.IntN(6) {
		case 0:
			delete(c.kube.pods, m)
		case 1:
			c.kube.pods[m] = fmt.Sprintf("%s-pod%d", m, 1000+c.rng.IntN(1000))
		}
	}
	for m, id := range c.vmMgrs {
		if c.rng.IntN(6) == 0 {
			tag(t, c.srv, id, vmfleet.LabelRole, "retired") // no longer a manager
			delete(c.vmMgrs, m)
		}
	}
	for _, v := range c.vms {
		if !v.stopped && c.rng.IntN(4) == 0 {
			v.runsJob = !v.runsJob
		}
		if _, ok := c.absentSet[v.id]; !ok && !c.alive(v) {
			c.absentSet[v.id] = c.clock // absent from the next run on
		} else if c.alive(v) {
			delete(c.absentSet, v.id)
		}
	}
}
