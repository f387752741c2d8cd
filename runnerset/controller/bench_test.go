package controller_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	runnertoken "github.com/runnerfleet/runnerfleet/runnerset/controller/token"
)

// steadyWindow is how long the benchmark watches a converged fleet for writes.
var steadyWindow = func() time.Duration {
	if s := os.Getenv("RUNNERFLEET_BENCH_STEADY"); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			return d
		}
	}
	return 60 * time.Second
}()

// BenchmarkFleet creates N RunnerSets against a real kube-apiserver and
// reports: seconds until all are Ready, the controller's API writes while
// converging and during a steady window (a hot loop shows up here), and the
// test process's peak heap and resident memory (controller, caches, client).
// Run with -benchtime 1x: each iteration is a whole fleet.
func BenchmarkFleet(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("runnersets=%d", n), func(b *testing.B) {
			for range b.N {
				benchFleet(b, n)
			}
		})
	}
}

func benchFleet(b *testing.B, n int) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: fmt.Sprintf("bench-%d-", n)}}
	if err := k8s.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	class := &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"},
		Spec:       v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK},
	}
	if err := k8s.Create(ctx, class); err != nil {
		b.Fatal(err)
	}
	var peakHeap atomic.Uint64
	stopSampling := sampleHeap(&peakHeap)
	defer stopSampling()

	startWrites := writes.Load()
	startReads := readLog.len()
	startPasses := reconciles(b)
	startKinds := writeKinds.snapshot()
	startCPU := cpuSeconds()
	startServer := serverCPUSeconds()
	stopProfile := profileAPIServer(b, n)
	start := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("r%04d", i)
				sec := &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name + "-token"},
					Data:       map[string][]byte{"token": []byte(token)},
				}
				if err := k8s.Create(ctx, sec); err != nil {
					b.Error(err)
				}
				if err := k8s.Create(ctx, runnerSet(ns.Name, name, class.Name)); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	created := time.Since(start)

	waitAllReady(b, ns.Name, n)
	toReady := time.Since(start)
	stopProfile()
	convergeWrites := writes.Load() - startWrites
	convergeCPU := cpuSeconds() - startCPU
	convergeServer := serverCPUSeconds()
	for k, v := range startServer {
		convergeServer[k] -= v
	}
	convergeReads := readLog.len() - startReads
	convergePasses := reconciles(b) - startPasses
	kinds := writeKinds.snapshot()
	var breakdown []string
	for k, v := range kinds {
		if d := v - startKinds[k]; d > 0 {
			breakdown = append(breakdown, fmt.Sprintf("%s %.2f", k, float64(d)/float64(n)))
		}
	}
	slices.Sort(breakdown)
	b.Logf("writes per RunnerSet while converging: %s", strings.Join(breakdown, "; "))
	reads, _ := readLog.since(startReads)
	readKinds := map[string]int{}
	for _, e := range reads {
		readKinds[e.kind]++
	}
	breakdown = breakdown[:0]
	for k, v := range readKinds {
		breakdown = append(breakdown, fmt.Sprintf("%s %.2f", k, float64(v)/float64(n)))
	}
	slices.Sort(breakdown)
	b.Logf("reads per RunnerSet while converging (what the caches did not answer): %s", strings.Join(breakdown, "; "))

	b.Logf("%d RunnerSets Ready after %.1f s (the clients had created them all after %.1f s)", n, toReady.Seconds(), created.Seconds())
	// The class counts its Ready RunnerSets (one status write, when the
	// count is in): the steady window starts once it has.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		must(b, k8s.Get(ctx, client.ObjectKeyFromObject(class), class))
		if class.Status.ReadyRunnerSets == int32(n) || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(2 * time.Second) // the last status patches' watch events arrive
	steadyStart := writes.Load()
	time.Sleep(steadyWindow)
	steadyWrites := writes.Load() - steadyStart

	b.ReportMetric(toReady.Seconds(), "s-to-ready")
	b.ReportMetric(float64(convergeWrites)/float64(n), "writes/runnerset")
	b.ReportMetric(float64(steadyWrites), "writes-in-steady-window")
	b.ReportMetric(steadyWindow.Seconds(), "steady-window-s")
	b.ReportMetric(convergeCPU/float64(n), "cpu-s/runnerset")
	b.ReportMetric(convergeServer["kube-apiserver"]/float64(n), "apiserver-cpu-s/runnerset")
	b.ReportMetric(convergeServer["etcd"]/float64(n), "etcd-cpu-s/runnerset")
	// The API server's floor: the CPU kube-apiserver and etcd spent while
	// the fleet converged (every request of the controller, the creating
	// clients and the Deployment stand-in, and their watch events), spread
	// over the machine's cores: no controller, however fast, converges
	// the fleet sooner on this machine. Its ratio to the time until Ready
	// is what the controller can still improve; the writes per RunnerSet
	// lower the floor itself.
	server := convergeServer["kube-apiserver"] + convergeServer["etcd"]
	floor := server / float64(runtime.NumCPU())
	b.Logf("the API server's floor: %.1f s of kube-apiserver and etcd CPU on %d cores is %.1f s; Ready after %.1f s, %.2f × the floor; %.2f ms of their CPU per controller write",
		server, runtime.NumCPU(), floor, toReady.Seconds(), toReady.Seconds()/floor, 1000*server/float64(convergeWrites))
	b.ReportMetric(floor, "apiserver-floor-s")
	b.ReportMetric(toReady.Seconds()/floor, "ready/floor")
	b.ReportMetric(float64(convergeReads)/float64(n), "reads/runnerset")
	b.ReportMetric(convergePasses/float64(n), "passes/runnerset")
	b.ReportMetric(float64(peakHeap.Load())/(1<<20), "peak-heap-MiB")
	b.ReportMetric(peakRSSMiB(), "peak-rss-MiB")
	if steadyWrites != 0 {
		b.Errorf("the controller wrote %d times to a fleet that did not change: a hot loop", steadyWrites)
	}
}

// cpuSeconds is the user and system CPU time of the test process (the
// controller, its caches and the clients that create the fleet; the API
// server and etcd are processes of their own).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func sampleHeap(peak *atomic.Uint64) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done) }
}

// peakRSSMiB is the process's high-water resident set (VmHWM).
func peakRSSMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkGitLabCalls counts the GitLab calls of N RunnerSets whose
// runners the controller creates (group runners, a token with only
// create_runner and manage_runner), through the loopback GitLab: while they
// are created, over ten minutes of simulated steady state (the controller's
// clock moves a minute and every RunnerSet is reconciled, ten times), across
// a controller restart, and when the hourly check comes due (two simulated
// hours later). The reads of GitLab's view (RunnerOnline, one GET
// /runners/:id/managers per RunnerSet about every 5 minutes) are counted
// apart, and bounded: none per pass, at most one per RunnerSet every 4
// minutes.
func BenchmarkGitLabCalls(b *testing.B) {
	const n = 100
	for range b.N {
		srv := gitlabserver.New()
		srv.AddUser(pat, gitlabserver.User{Scopes: []string{gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner}, Groups: []int64{groupID}})
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-gitlab-"}}
		if err := k8s.Create(ctx, ns); err != nil {
			b.Fatal(err)
		}
		class := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
		if err := k8s.Create(ctx, class); err != nil {
			b.Fatal(err)
		}
		if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: patName}, Data: map[string][]byte{"token": []byte(pat)}}); err != nil {
			b.Fatal(err)
		}
		var sets []*v1alpha1.RunnerSet
		startWrites := writes.Load()
		for i := range n {
			rs := createdRunnerSet(srv, ns.Name, fmt.Sprintf("g%03d", i), class.Name)
			if err := k8s.Create(ctx, rs); err != nil {
				b.Fatal(err)
			}
			sets = append(sets, rs)
		}
		waitAllReady(b, ns.Name, n)
		created := gitlabCalls(srv)
		convergeWrites := writes.Load() - startWrites
		time.Sleep(2 * time.Second)

		nudgeAll := func(round int) {
			for _, rs := range sets {
				cur := &v1alpha1.RunnerSet{}
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), cur); err != nil {
					b.Fatal(err)
				}
				patch := client.MergeFrom(cur.DeepCopy())
				if cur.Annotations == nil {
					cur.Annotations = map[string]string{}
				}
				cur.Annotations["bench.runnerfleet.dev/nudge"] = strconv.Itoa(round)
				if err := k8s.Patch(ctx, cur, patch); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(time.Second)
		}
		before := gitlabCalls(srv)
		viewsBefore := srv.Calls("GET", "/api/v4/runners/*/managers")
		steadyWrites := writes.Load()
		for minute := range 10 {
			clockAhead.Add(int64(time.Minute))
			nudgeAll(minute)
		}
		time.Sleep(2 * time.Second)
		// GitLab's view (gitlabview.go) reads each runner's managers on its
		// own slow schedule, never per pass: those reads are counted apart.
		views := srv.Calls("GET", "/api/v4/runners/*/managers") - viewsBefore
		steady := gitlabCalls(srv) - before - views
		steadyWrites = writes.Load() - steadyWrites

		before = gitlabCalls(srv)
		stopManager()
		if err := startManager(); err != nil {
			b.Fatal(err)
		}
		nudgeAll(100)
		time.Sleep(2 * time.Second)
		restart := gitlabCalls(srv) - before

		before = gitlabCalls(srv)
		clockAhead.Add(int64(2 * time.Hour))
		nudgeAll(200)
		time.Sleep(3 * time.Second)
		hourly := gitlabCalls(srv) - before
		clockAhead.Add(-int64(2*time.Hour + 10*time.Minute))

		b.ReportMetric(float64(created)/n, "gitlab-calls/runnerset-creating")
		b.ReportMetric(float64(steady)/n, "gitlab-calls/runnerset-10min-steady")
		b.ReportMetric(float64(views)/n, "gitlab-view-calls/runnerset-10min")
		b.ReportMetric(float64(restart)/n, "gitlab-calls/runnerset-restart")
		b.ReportMetric(float64(hourly)/n, "gitlab-calls/runnerset-hourly-check")
		b.ReportMetric(float64(convergeWrites)/n, "writes/runnerset")
		b.ReportMetric(float64(steadyWrites), "writes-in-steady-window")
		if steady != 0 || restart != 0 {
			b.Errorf("GitLab calls in steady state: %d over 10 simulated minutes (besides GitLab's view), %d after a restart", steady, restart)
		}
		// At most one read per RunnerSet every 4 minutes (RunnerViewInterval
		// - RunnerViewJitter), counted from its first pass.
		if most := n * (int(10*time.Minute/(runnertoken.RunnerViewInterval-runnertoken.RunnerViewJitter)) + 1); views > most {
			b.Errorf("%d reads of GitLab's view by %d RunnerSets over 10 simulated minutes, more than %d", views, n, most)
		}
		srv.Close()
	}
}

// waitAllReady waits until the n RunnerSets of namespace ns are Ready. It
// watches them: listing a thousand RunnerSets every 200 ms cost the API
// server and this process a share of the two cores the fleet it measures
// runs on.
func waitAllReady(b testing.TB, ns string, n int) {
	b.Helper()
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ready := map[string]bool{}
	count := 0
	set := func(name string, now bool) {
		if ready[name] != now {
			if now {
				count++
			} else {
				count--
			}
		}
		if now {
			ready[name] = true
		} else {
			delete(ready, name)
		}
	}
	for {
		// A list, then a watch from its resourceVersion; a watch the API
		// server ends is followed by another list.
		list := &v1alpha1.RunnerSetList{}
		if err := k8s.List(wctx, list, client.InNamespace(ns)); err != nil {
			b.Fatalf("%d of %d Ready: %v", count, n, err)
		}
		clear(ready)
		count = 0
		for i := range list.Items {
			set(list.Items[i].Name, list.Items[i].IsReady())
		}
		if count == n {
			return
		}
		w, err := k8s.Watch(wctx, &v1alpha1.RunnerSetList{}, client.InNamespace(ns),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			b.Fatalf("%d of %d Ready: %v", count, n, err)
		}
		for ev := range w.ResultChan() {
			rs, ok := ev.Object.(*v1alpha1.RunnerSet)
			if !ok {
				break // an error event (a resourceVersion too old): list again
			}
			set(rs.Name, ev.Type != watch.Deleted && rs.IsReady())
			if count == n {
				w.Stop()
				return
			}
		}
		w.Stop()
		if wctx.Err() != nil {
			b.Fatalf("%d of %d Ready after 30 minutes", count, n)
		}
	}
}

// profileAPIServer takes a CPU profile of the kube-apiserver while the
// fleet converges, when RUNNERFLEET_BENCH_APISERVER_PROFILE names a
// directory (one file per fleet size, for go tool pprof); stop ends it.
func profileAPIServer(b *testing.B, n int) (stop func()) {
	dir := os.Getenv("RUNNERFLEET_BENCH_APISERVER_PROFILE")
	if dir == "" {
		return func() {}
	}
	rc, err := rest.RESTClientFor(withNegotiatedSerializer(env.Config))
	if err != nil {
		b.Fatal(err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The profile runs for its whole length unless its request ends:
		// cancel ends it when the fleet is Ready, and pprof writes what it
		// has so far only at the end, so ask for slices of 5 s.
		for i := 0; pctx.Err() == nil; i++ {
			data, err := rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", "5").DoRaw(context.Background())
			if err != nil {
				b.Errorf("profiling kube-apiserver: %v", err)
				return
			}
			name := filepath.Join(dir, fmt.Sprintf("apiserver-%d-%02d.pprof", n, i))
			if err := os.WriteFile(name, data, 0o644); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

func withNegotiatedSerializer(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return c
}

// serverCPUSeconds is the user and system CPU time of this process's
// kube-apiserver and etcd (envtest starts both as its children), by
// command name.
func serverCPUSeconds() map[string]float64 {
	out := map[string]float64{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: the comm may hold spaces,
		// so the fields are counted from its closing parenthesis.
		open, closing := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || closing < open {
			continue
		}
		comm, f := string(b[open+1:closing]), strings.Fields(string(b[closing+1:]))
		if len(f) < 13 || f[1] != self || (comm != "kube-apiserver" && comm != "etcd") {
			continue
		}
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		out[comm] += (utime + stime) / clockTicks
	}
	return out
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTicks = 100
