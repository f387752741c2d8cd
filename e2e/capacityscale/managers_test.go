package capacityscale

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runnerfleet/runnerfleet/internal/checkout"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// BenchmarkKarpenterWithManagersOnly tells what of Karpenter's idle cost
// in BenchmarkControllerCapacity's shared mode comes from the managers
// rather than from the capacity: the same control plane, Karpenter with
// no NodePool at all, and N one-replica Deployments of kwok pods placed as
// the controller places its managers (a namespace each, on the fake
// manager nodes, started without kwok's delays). It measures Karpenter's
// CPU and memory over the idle window once every pod runs.
//
//	RUNNERFLEET_BENCH_TAGS=10,1000 RUNNERFLEET_BENCH_IDLE=60s \
//	  go test -run '^$' -bench KarpenterWithManagersOnly -benchtime 1x -timeout 60m ./e2e/capacityscale/
func BenchmarkKarpenterWithManagersOnly(b *testing.B) {
	ctrllog.SetLogger(logr.Discard())
	s := settingsFromEnv(b, []int{10, 1000})
	root, err := checkout.Root()
	if err != nil {
		b.Fatalf("run from e2e/capacityscale of a runnerfleet checkout: %v", err)
	}
	guardRealNode(b)
	for _, n := range s.tags {
		b.Run(fmt.Sprintf("managers=%d", n), func(b *testing.B) {
			idleCPU, idleRSS, load := measureManagersOnly(b, root, n, s.idle)
			b.ReportMetric(idleCPU, "karpenter-idle-cpu-s/min")
			b.ReportMetric(idleRSS, "karpenter-idle-rss-MiB")
			b.ReportMetric(load, "load1")
			b.Logf("%d manager pods, no NodePool: Karpenter idle %.2f CPU s/min, RSS %.0f MiB; load %.1f", n, idleCPU, idleRSS, load)
		})
	}
}

func measureManagersOnly(b *testing.B, root string, n int, idle time.Duration) (idleCPU, idleRSS, load float64) {
	ctx := context.Background()
	cl, pid := controlPlane(b, root, n/100+2)
	c := cl.Client
	managersStartAtOnce(b, c)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				ns := fmt.Sprintf("team-%04d", i)
				labels := map[string]string{resources.LabelManagedBy: resources.ManagedBy, resources.LabelComponent: resources.ComponentManager, "app": ns}
				for _, o := range []client.Object{
					&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
					&appsv1.Deployment{
						ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "managers"},
						Spec: appsv1.DeploymentSpec{
							Replicas: ptr.To[int32](1),
							Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": ns}},
							Template: corev1.PodTemplateSpec{
								ObjectMeta: metav1.ObjectMeta{Labels: labels},
								Spec: corev1.PodSpec{
									NodeSelector: resources.ManagerNodeSelector(),
									Tolerations:  resources.ManagerTolerations(),
									Containers:   []corev1.Container{{Name: "manager", Image: "gitlab-runner"}},
								},
							},
						},
					},
				} {
					if err := c.Create(ctx, o); err != nil {
						b.Errorf("creating %T %s/%s: %v", o, o.GetNamespace(), o.GetName(), err)
					}
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	start := time.Now()
	for {
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.MatchingLabels{resources.LabelComponent: resources.ComponentManager}); err != nil {
			b.Fatal(err)
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running == n {
			break
		}
		if time.Since(start) > 15*time.Minute {
			b.Fatalf("%d of %d manager pods Running after 15 minutes", running, n)
		}
		time.Sleep(2 * time.Second)
	}
	b.Logf("%d manager pods Running %.1fs after the last create", n, time.Since(start).Seconds())
	cpu0 := cpuSeconds(b, pid)
	time.Sleep(idle)
	idleCPU = (cpuSeconds(b, pid) - cpu0) / idle.Minutes()
	idleRSS, _ = memory(b, pid)
	return idleCPU, idleRSS, load1()
}
