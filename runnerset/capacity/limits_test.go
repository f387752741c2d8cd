package capacity

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// A tag's limits become the [[runners]] limit of each manager: the jobs
// that fit (each limited resource over one job's build + helper + service
// requests, the smallest count winning), shared among the replicas, at
// most concurrent, and never 0 (gitlab-runner's no-limit).
func TestJobsPerManagerIsTheJobsThatFitTheLimitsPerReplica(t *testing.T) {
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	for _, c := range []struct {
		name                 string
		cpu, mem             string // limits; "" for none
		build, helper, svc   string // cpu requests
		buildMem             string
		replicas, concurrent int32
		want                 int
	}{
		{name: "no limits: concurrent", replicas: 1, concurrent: 10, want: 10},
		{name: "cpu fits 4 jobs of 2", cpu: "8", build: "1500m", helper: "500m", replicas: 1, concurrent: 10, want: 4},
		{name: "rounds down", cpu: "9", build: "2", replicas: 1, concurrent: 10, want: 4},
		{name: "services count too", cpu: "8", build: "1", helper: "500m", svc: "500m", replicas: 1, concurrent: 10, want: 4},
		{name: "shared among replicas", cpu: "8", build: "1", replicas: 3, concurrent: 10, want: 2},
		{name: "capped by concurrent", cpu: "64", build: "1", replicas: 2, concurrent: 5, want: 5},
		{name: "memory the tighter", cpu: "64", mem: "6Gi", build: "1", buildMem: "2Gi", replicas: 1, concurrent: 10, want: 3},
		{name: "cpu the tighter", cpu: "2", mem: "64Gi", build: "1", buildMem: "2Gi", replicas: 1, concurrent: 10, want: 2},
		{name: "a limit no job asks for counts nothing", mem: "64Gi", build: "1", replicas: 1, concurrent: 7, want: 7},
		{name: "exactly one job per manager", cpu: "4", build: "2", replicas: 2, concurrent: 10, want: 1},
		{name: "zero replicas as one", cpu: "4", build: "2", replicas: 0, concurrent: 10, want: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rs()
			r.Spec.Managers.Replicas = ptr.To(c.replicas)
			r.Spec.Managers.Concurrent = c.concurrent
			res := &r.Spec.Jobs.Resources
			for _, x := range []struct {
				q   string
				dst **resource.Quantity
			}{{c.build, &res.Build.CPURequest}, {c.helper, &res.Helper.CPURequest}, {c.svc, &res.Service.CPURequest}, {c.buildMem, &res.Build.MemoryRequest}} {
				if x.q != "" {
					*x.dst = q(x.q)
				}
			}
			r.Spec.Capacity.Limits = corev1.ResourceList{}
			if c.cpu != "" {
				r.Spec.Capacity.Limits[corev1.ResourceCPU] = resource.MustParse(c.cpu)
			}
			if c.mem != "" {
				r.Spec.Capacity.Limits[corev1.ResourceMemory] = resource.MustParse(c.mem)
			}
			got, err := JobsPerManager(r)
			if err != nil || got != c.want {
				t.Fatalf("JobsPerManager = %d, %v; want %d", got, err, c.want)
			}
			// What runs: the placement of both builders carries it.
			for _, mode := range []string{"own", "shared"} {
				var cp *Capacity
				if mode == "own" {
					cp, err = build(r, kwokClass())
				} else {
					cp, err = shared(r, kwokClass())
				}
				if err != nil || cp.Placement.JobsPerManager != c.want {
					t.Errorf("%s NodePool: placement's JobsPerManager %v (err %v), want %d", mode, cp, err, c.want)
				}
			}
		})
	}
}

// Limits that fit fewer jobs than there are managers cannot be kept by
// a per-manager limit (each manager runs at least one; 0 is no limit):
// refused naming both fields and the fix; as many jobs as managers pass.
func TestLimitsBelowTheManagersAreRefused(t *testing.T) {
	r := rs()
	r.Spec.Jobs.Resources.Build.CPURequest = ptr.To(resource.MustParse("2"))
	r.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")}
	r.Spec.Managers.Replicas = ptr.To[int32](3)
	for _, b := range []func(*v1alpha1.RunnerSet, *v1alpha1.RunnerClass) (*Capacity, error){build, shared} {
		_, err := b(r, kwokClass())
		var f *v1alpha1.Failure
		if !errors.As(err, &f) || f.Reason != v1alpha1.ReasonLimitsBelowManagers {
			t.Fatalf("got %v, want a %s failure", err, v1alpha1.ReasonLimitsBelowManagers)
		}
		for _, want := range []string{"spec.capacity.limits fit 2 job(s)", "spec.managers.replicas is 3", "fit at least 3 jobs", "lower spec.managers.replicas to 2"} {
			if !strings.Contains(f.Message, want) {
				t.Errorf("%q does not say %q", f.Message, want)
			}
		}
	}
	r.Spec.Managers.Replicas = ptr.To[int32](2)
	if n, err := JobsPerManager(r); err != nil || n != 1 {
		t.Errorf("two managers, two jobs: %d, %v; want 1 each", n, err)
	}
}

// An autoscaled RunnerSet's limits are shared among its most managers,
// maxReplicas, whatever replicas says: however many KEDA runs, they never
// run more than the limits hold. Too many is refused naming maxReplicas.
func TestAutoscaledLimitsAreSharedAmongMaxReplicas(t *testing.T) {
	r := rs()
	r.Spec.Jobs.Resources.Build.CPURequest = ptr.To(resource.MustParse("1"))
	r.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("12")}
	r.Spec.Managers.Replicas = ptr.To[int32](1)
	r.Spec.Managers.Autoscale = &v1alpha1.ManagerAutoscale{MinReplicas: 0, MaxReplicas: 4, TargetRunningJobs: 2}
	if n, err := JobsPerManager(r); err != nil || n != 3 {
		t.Errorf("12 jobs fit, at most 4 managers: %d, %v; want 3 each", n, err)
	}
	r.Spec.Managers.Autoscale.MaxReplicas = 13
	_, err := JobsPerManager(r)
	var f *v1alpha1.Failure
	if !errors.As(err, &f) || f.Reason != v1alpha1.ReasonLimitsBelowManagers || !strings.Contains(f.Message, "lower spec.managers.autoscale.maxReplicas to 12") {
		t.Errorf("13 managers for 12 jobs: %v", err)
	}
}
