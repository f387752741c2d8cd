package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// BenchmarkScrape1000RunnerSets is one scrape of the controller's fleet
// metrics (collected from a real informer cache, encoded as Prometheus
// text) with 1000 Ready RunnerSets in 10 namespaces, each with a known
// token expiry. It reports the series the collector exports per RunnerSet.
func BenchmarkScrape1000RunnerSets(b *testing.B) {
	const n = 1000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	c := env.Client
	for i := range 10 {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("team-%d", i)}}); err != nil {
			b.Fatal(err)
		}
	}
	expiries := &metrics.Expiries{}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rs := &v1alpha1.RunnerSet{
				ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("team-%d", i%10), Name: fmt.Sprintf("rs-%d", i), Generation: 1},
				Spec: v1alpha1.RunnerSetSpec{ClassName: "eks-spot", Tags: []string{fmt.Sprintf("tag-%d", i)},
					GitLab: v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "t"}}},
			}
			if err := c.Create(ctx, rs); err != nil {
				errs <- err
				return
			}
			for _, t := range v1alpha1.DependentConditions {
				rs.SetCondition(t, metav1.ConditionTrue, v1alpha1.ReasonReconciled, "ok")
			}
			rs.RollUpReady()
			rs.Status.ObservedGeneration = rs.Generation
			if err := c.Status().Update(ctx, rs); err != nil {
				errs <- err
				return
			}
			expiries.Set(types.NamespacedName{Namespace: rs.Namespace, Name: rs.Name}, time.Now().Add(30*24*time.Hour))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}

	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, hc)
	if err != nil {
		b.Fatal(err)
	}
	opts := controller.CacheOptions(env.Scheme, mapper)
	opts.Scheme, opts.Mapper = env.Scheme, mapper
	ca, err := cache.New(env.Config, opts)
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	reg := prometheus.NewRegistry()
	reg.MustRegister(&metrics.Collector{Reader: ca, Mapper: mapper, CapacityKinds: controller.CapacityKinds(), Expiries: expiries})
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
	scrape := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			b.Fatalf("scrape: %d", rec.Code)
		}
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	// Wait for the cache to hold every RunnerSet.
	for deadline := time.Now().Add(time.Minute); ; {
		if strings.Count(scrape(), metrics.RunnerSetReady+"{") == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the cache did not fill")
		}
		time.Sleep(100 * time.Millisecond)
	}
	perRunnerSet := 0
	body := scrape()
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, `runnerset="rs-7"`) {
			perRunnerSet++
		}
	}
	b.ResetTimer()
	for b.Loop() {
		scrape()
	}
	b.ReportMetric(float64(perRunnerSet), "series/RunnerSet")
	b.ReportMetric(float64(len(body)), "bytes/scrape")
}
