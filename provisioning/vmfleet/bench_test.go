package vmfleet_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/aws/ec2test"
	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
)

// BenchmarkGCClassify10000VMs: one dry run of gc over 10,000 autoscaled
// VMs in the GCE fake, listed through the real SDK (aggregatedList, 500 a
// page): 40 managers in the cluster, a quarter of the VMs orphaned
// (noted; none past the grace, so no per-VM calls). Reports VMs/s.
func BenchmarkGCClassify10000VMs(b *testing.B) {
	const n = 10_000
	srv := gcetest.New()
	b.Cleanup(srv.Close)
	now := time.Now()
	var managers []vmfleet.Manager
	for m := range 40 {
		name := fmt.Sprintf("production-linux-%d", m)
		managers = append(managers, vmfleet.Manager{Name: name, Incarnation: name + "-pod"})
	}
	for i := range n {
		m := i % 40
		inc := fmt.Sprintf("production-linux-%d-pod", m)
		if i%4 == 0 {
			inc = "lost-state"
		}
		l := vmfleet.Owner{Fleet: "production", Group: "linux", Manager: fmt.Sprintf("production-linux-%d", m), Host: vmfleet.HostKubernetes, Incarnation: inc}.Labels()
		srv.AddInstance(gcetest.Instance{Name: fmt.Sprintf("runner-abcdef123-production-linux-%d-1700000000-%08x", m, i), Zone: []string{"europe-west1-b", "europe-west1-c"}[i%2],
			Labels: l, CreatedAt: now.Add(-3 * time.Hour)})
	}
	c, err := gcp.New(context.Background(), srv.Project(), nil, srv.ClientOptions()...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	kube := staticSource{managers}
	b.ResetTimer()
	for b.Loop() {
		plan, err := (&vmfleet.GC{Compute: c, Sources: []vmfleet.Source{kube}}).Run(context.Background())
		if err != nil || len(plan.Rows) != n || plan.Count(vmfleet.VerdictNoted) != n/4 {
			b.Fatalf("%v: %d rows, %d noted", err, len(plan.Rows), plan.Count(vmfleet.VerdictNoted))
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "VMs/s")
}

// BenchmarkGCClassifyOnly10000VMs is the judging alone, without the API:
// what gc adds to listing.
func BenchmarkGCClassifyOnly10000VMs(b *testing.B) {
	const n = 10_000
	vms := make([]providers.Instance, n)
	now := time.Now()
	var managers []vmfleet.Manager
	for m := range 40 {
		managers = append(managers, vmfleet.Manager{Name: fmt.Sprintf("m-%d", m), Incarnation: "pod"})
	}
	for i := range vms {
		inc := "pod"
		if i%4 == 0 {
			inc = "old"
		}
		vms[i] = providers.Instance{Name: fmt.Sprintf("vm-%d", i), CreatedAt: now.Add(-3 * time.Hour),
			Labels: vmfleet.Owner{Manager: fmt.Sprintf("m-%d", i%40), Host: vmfleet.HostKubernetes, Incarnation: inc}.Labels()}
	}
	lister := &listOnly{vms: vms}
	b.ResetTimer()
	for b.Loop() {
		if _, err := (&vmfleet.GC{Compute: lister, Sources: []vmfleet.Source{staticSource{managers}}}).Run(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "VMs/s")
}

type staticSource struct{ m []vmfleet.Manager }

func (s staticSource) Host() string                                        { return vmfleet.HostKubernetes }
func (s staticSource) Describe() string                                    { return "static" }
func (s staticSource) Managers(context.Context) ([]vmfleet.Manager, error) { return s.m, nil }

// listOnly is a Compute that only lists (the benchmark makes no other call).
type listOnly struct {
	providers.Compute
	vms []providers.Instance
}

func (l *listOnly) ListInstances(context.Context, map[string]string) ([]providers.Instance, error) {
	return l.vms, nil
}

// BenchmarkRotation4Managers: a rotation of 4 Windows-style managers on the
// EC2 fake, each with a stand-in runner and the real drain agent, holding
// jobs of up to 2 s. Reports the rotation's time and its ratio to the
// longest job (1.0 would be the drains costing nothing beyond the job).
func BenchmarkRotation4Managers(b *testing.B) {
	jobs := [][]int{{1500}, {1200, 2000}, {1800}, {900}}
	longest := 2 * time.Second
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		srv := ec2test.New()
		srv.SetLatency(100*time.Millisecond, 100*time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		for i, j := range jobs {
			startManager(b, ctx, srv, fmt.Sprintf("wsrm-blue-%d", i+1), "blue", 1, j)
		}
		r := rotation(srv, nil, io.Discard)
		r.Poll = 50 * time.Millisecond
		b.StartTimer()
		start := time.Now()
		if _, err := r.Run(ctx); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		cancel()
		srv.Close()
		b.StartTimer()
	}
	per := total / time.Duration(b.N)
	b.ReportMetric(per.Seconds(), "s/rotation")
	b.ReportMetric(per.Seconds()/longest.Seconds(), "x-longest-job")
}
