package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

const testPrometheus = "http://prometheus.monitoring.svc:9090"

// prometheusClass is a class whose managers a Prometheus scrapes.
func prometheusClass(t *testing.T) *v1alpha1.RunnerClass {
	t.Helper()
	return newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Prometheus = &v1alpha1.PrometheusEndpoint{Address: testPrometheus}
	})
}

// autoscaled is runnerSet with spec.managers.autoscale.
func autoscaled(ns, name, class string, minR, maxR, target int32) *v1alpha1.RunnerSet {
	rs := runnerSet(ns, name, class)
	rs.Spec.Managers.Autoscale = &v1alpha1.ManagerAutoscale{MinReplicas: minR, MaxReplicas: maxR, TargetRunningJobs: target}
	return rs
}

// scaledObject reads rs's ScaledObject, nil when there is none.
func scaledObject(t *testing.T, rs *v1alpha1.RunnerSet) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(resources.ScaledObjectGVK)
	err := k8s.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: naming.For(rs.Namespace, rs.Name).Managers()}, u)
	if apierrors.IsNotFound(err) {
		return nil
	}
	must(t, err)
	return u
}

func waitScaledObject(t *testing.T, rs *v1alpha1.RunnerSet) *unstructured.Unstructured {
	t.Helper()
	var u *unstructured.Unstructured
	eventually(t, "ScaledObject of "+rs.Name, func() error {
		if u = scaledObject(t, rs); u == nil {
			return fmt.Errorf("none")
		}
		return nil
	})
	return u
}

func nested[T any](t *testing.T, u *unstructured.Unstructured, path ...string) T {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if err != nil || !ok {
		t.Fatalf("%s: missing (%v)", strings.Join(path, "."), err)
	}
	x, ok := v.(T)
	if !ok {
		t.Fatalf("%s: %T %v", strings.Join(path, "."), v, v)
	}
	return x
}

// setKEDAStatus writes the status KEDA's operator would write.
func setKEDAStatus(t *testing.T, rs *v1alpha1.RunnerSet, conds ...map[string]any) {
	t.Helper()
	u := scaledObject(t, rs)
	list := make([]any, len(conds))
	for i, c := range conds {
		list[i] = c
	}
	must(t, unstructured.SetNestedSlice(u.Object, list, "status", "conditions"))
	must(t, k8s.Status().Update(ctx, u))
}

// An autoscaled RunnerSet's managers get a ScaledObject that KEDA's own
// CRD (v2.21.0, its schema) accepts, owned by the RunnerSet, scaling the
// managers' Deployment by their running jobs through the class's
// Prometheus; KEDA's status of it comes back as ConditionAutoscaling,
// and a Prometheus KEDA cannot reach is named on the RunnerSet.
func TestAutoscaledManagersGetAScaledObjectKEDAAccepts(t *testing.T) {
	ns := newNamespace(t)
	class := prometheusClass(t)
	newSecret(t, ns, "build-token", token)
	rs := autoscaled(ns, "build", class.Name, 1, 4, 8)
	must(t, k8s.Create(ctx, rs))
	// Ready while KEDA has not reported yet.
	cur := waitReady(t, rs)
	if c := condition(cur, v1alpha1.ConditionAutoscaling); c == nil || c.Status != metav1.ConditionUnknown || c.Reason != v1alpha1.ReasonScaledObjectNotReady {
		t.Errorf("Autoscaling %+v before KEDA reported", c)
	}

	so := waitScaledObject(t, rs)
	n := naming.For(ns, "build")
	if !metav1.IsControlledBy(so, cur) {
		t.Errorf("ScaledObject not controlled by the RunnerSet: %v", so.GetOwnerReferences())
	}
	if got := nested[string](t, so, "spec", "scaleTargetRef", "name"); got != n.Managers() {
		t.Errorf("scaleTargetRef.name %q, want the managers' Deployment %q", got, n.Managers())
	}
	if got := nested[string](t, so, "spec", "scaleTargetRef", "kind"); got != "Deployment" {
		t.Errorf("scaleTargetRef.kind %q", got)
	}
	for path, want := range map[string]int64{
		"spec.minReplicaCount": 1, "spec.maxReplicaCount": 4, "spec.pollingInterval": 15, "spec.cooldownPeriod": 300,
		"spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds": 300,
	} {
		if got := nested[int64](t, so, strings.Split(path, ".")...); got != want {
			t.Errorf("%s = %d, want %d", path, got, want)
		}
	}
	triggers := nested[[]any](t, so, "spec", "triggers")
	if len(triggers) != 1 {
		t.Fatalf("%d triggers, want 1: %v", len(triggers), triggers)
	}
	tr := triggers[0].(map[string]any)
	md := tr["metadata"].(map[string]any)
	if tr["type"] != "prometheus" || tr["metricType"] != "AverageValue" || md["serverAddress"] != testPrometheus ||
		md["query"] != monitoring.RunningJobsQuery(ns, "build") || md["threshold"] != "8" || md["activationThreshold"] != "0" {
		t.Errorf("running jobs trigger %v", tr)
	}

	// KEDA reports it ready and inactive, then its trigger failing.
	setKEDAStatus(t, rs, map[string]any{"type": "Ready", "status": "True", "reason": "ScaledObjectReady", "message": "ScaledObject is defined correctly and is ready for scaling"},
		map[string]any{"type": "Active", "status": "False", "reason": "ScalerNotActive", "message": "Scaling is not performed because triggers are not active"})
	waitCondition(t, rs, v1alpha1.ConditionAutoscaling, metav1.ConditionTrue, v1alpha1.ReasonScaledObjectReady)
	setKEDAStatus(t, rs, map[string]any{"type": "Ready", "status": "False", "reason": "TriggerError",
		"message": "Triggers defined in ScaledObject are not working correctly: dial tcp: lookup prometheus.monitoring.svc: no such host"})
	cur = waitCondition(t, rs, v1alpha1.ConditionAutoscaling, metav1.ConditionFalse, v1alpha1.ReasonScaledObjectNotReady)
	msg := condition(cur, v1alpha1.ConditionAutoscaling).Message
	for _, want := range []string{"spec.prometheus.address", class.Name, testPrometheus, "no such host"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Autoscaling message does not name %q: %s", want, msg)
		}
	}
	if ready := condition(cur, v1alpha1.ConditionReady); ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.ReasonScaledObjectNotReady {
		t.Errorf("Ready %+v while KEDA cannot scale the managers", ready)
	}
}

// The count KEDA's HPA sets through the Deployment's scale subresource
// stands: a pass that rewrites the Deployment for a new template keeps
// it, and status follows it. The budget exists at maxReplicas above one
// whatever the count. Without autoscale again, the ScaledObject goes and
// replicas sets the count.
func TestAutoscaledManagersKeepTheCountTheHPASet(t *testing.T) {
	ns := newNamespace(t)
	class := prometheusClass(t)
	newSecret(t, ns, "build-token", token)
	rs := autoscaled(ns, "build", class.Name, 1, 5, 4)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	waitScaledObject(t, rs)
	n := naming.For(ns, "build")
	d := get(t, ns, n.Managers(), &appsv1.Deployment{})
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Fatalf("new Deployment's replicas %v, want minReplicas 1", d.Spec.Replicas)
	}
	// One manager now, five at most: the budget keeps a drained node from
	// taking two managers once KEDA runs more than one.
	get(t, ns, n.Managers(), &policyv1.PodDisruptionBudget{})

	// The HPA scales to 3 as it does: the scale subresource.
	scale := &autoscalingv1.Scale{}
	must(t, k8s.SubResource("scale").Get(ctx, d, scale))
	scale.Spec.Replicas = 3
	must(t, k8s.SubResource("scale").Update(ctx, d, client.WithSubResourceBody(scale)))
	eventually(t, "status follows the HPA's count", func() error {
		cur := get(t, ns, "build", &v1alpha1.RunnerSet{})
		if cur.Status.DesiredManagers != 3 || cur.Status.Managers != "3/3" {
			return fmt.Errorf("desiredManagers %d, managers %q", cur.Status.DesiredManagers, cur.Status.Managers)
		}
		return nil
	})

	// A new config rolls the managers: the Deployment is rewritten.
	hash := d.Spec.Template.Annotations[resources.AnnotationConfigHash]
	update(t, rs, func(rs *v1alpha1.RunnerSet) {
		rs.Spec.Managers.CheckInterval = &metav1.Duration{Duration: 7 * time.Second}
	})
	eventually(t, "the Deployment rewritten with the new config", func() error {
		d = get(t, ns, n.Managers(), &appsv1.Deployment{})
		if d.Spec.Template.Annotations[resources.AnnotationConfigHash] == hash {
			return fmt.Errorf("config hash still %s", hash)
		}
		return nil
	})
	if got := ptr.Deref(d.Spec.Replicas, -1); got != 3 {
		t.Fatalf("the rewrite set replicas %d: it must keep the 3 the HPA set", got)
	}
	waitReady(t, rs)
	if d = get(t, ns, n.Managers(), &appsv1.Deployment{}); *d.Spec.Replicas != 3 {
		t.Fatalf("replicas %d after the pass, want the HPA's 3", *d.Spec.Replicas)
	}

	// Autoscale removed: replicas (2) sets the count, the ScaledObject
	// and the condition go.
	update(t, rs, func(rs *v1alpha1.RunnerSet) {
		rs.Spec.Managers.Autoscale = nil
		rs.Spec.Managers.Replicas = ptr.To[int32](2)
	})
	eventually(t, "replicas back in charge", func() error {
		d = get(t, ns, n.Managers(), &appsv1.Deployment{})
		cur := get(t, ns, "build", &v1alpha1.RunnerSet{})
		if *d.Spec.Replicas != 2 || scaledObject(t, rs) != nil || condition(cur, v1alpha1.ConditionAutoscaling) != nil {
			return fmt.Errorf("replicas %d, ScaledObject %v, conditions %+v", *d.Spec.Replicas, scaledObject(t, rs) != nil, cur.Status.Conditions)
		}
		return nil
	})
}

// An overflow is checked against its primary before its ScaledObject is
// written: a primary that does not exist or has other tags is named on
// the condition, and a ScaledObject already written stays as it was
// (the running managers keep their count). With its primary right, its
// queue time trigger reads both RunnerSets' queue times.
func TestOverflowIsCheckedAgainstItsPrimary(t *testing.T) {
	ns := newNamespace(t)
	class := prometheusClass(t)
	newSecret(t, ns, "burst-token", token)
	newSecret(t, ns, "build-token", token)
	overflow := autoscaled(ns, "burst", class.Name, 0, 3, 4)
	overflow.Spec.Tags = []string{"linux", "docker"}
	overflow.Spec.Overflow = &v1alpha1.OverflowSpec{Primary: "build", QueueTime: v1alpha1.QueueTimeTrigger{Threshold: metav1.Duration{Duration: 90 * time.Second}}}
	must(t, k8s.Create(ctx, overflow))
	cur := waitCondition(t, overflow, v1alpha1.ConditionAutoscaling, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotFound)
	if msg := condition(cur, v1alpha1.ConditionAutoscaling).Message; !strings.Contains(msg, "spec.overflow.primary") || !strings.Contains(msg, "build") {
		t.Errorf("message does not name spec.overflow.primary and build: %s", msg)
	}
	if scaledObject(t, overflow) != nil {
		t.Fatal("a ScaledObject for an overflow without its primary")
	}
	if r := condition(cur, v1alpha1.ConditionReady); r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.ReasonPrimaryNotFound {
		t.Errorf("Ready %+v", r)
	}

	// The primary appears with other tags: the watch brings the overflow back.
	primary := runnerSet(ns, "build", class.Name)
	primary.Spec.Tags = []string{"linux"}
	must(t, k8s.Create(ctx, primary))
	cur = waitCondition(t, overflow, v1alpha1.ConditionAutoscaling, metav1.ConditionFalse, v1alpha1.ReasonPrimaryTagsDiffer)
	if msg := condition(cur, v1alpha1.ConditionAutoscaling).Message; !strings.Contains(msg, "spec.overflow.primary") || !strings.Contains(msg, "[docker, linux]") {
		t.Errorf("message: %s", msg)
	}

	// The same tags, in another order.
	update(t, primary, func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = []string{"docker", "linux"} })
	waitCondition(t, overflow, v1alpha1.ConditionAutoscaling, metav1.ConditionUnknown, v1alpha1.ReasonScaledObjectNotReady)
	so := waitScaledObject(t, overflow)
	if got := nested[int64](t, so, "spec", "minReplicaCount"); got != 0 {
		t.Errorf("minReplicaCount %d", got)
	}
	triggers := nested[[]any](t, so, "spec", "triggers")
	if len(triggers) != 2 {
		t.Fatalf("%d triggers, want running jobs and queue time: %v", len(triggers), triggers)
	}
	md := triggers[1].(map[string]any)["metadata"].(map[string]any)
	if md["query"] != monitoring.QueueTimeQuery(ns, []string{"build", "burst"}, 2*time.Minute) || md["threshold"] != "90" ||
		md["activationThreshold"] != "90" || md["serverAddress"] != testPrometheus {
		t.Errorf("queue time trigger metadata %v", md)
	}

	// The primary's tags change: the ScaledObject stays as it was.
	update(t, primary, func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = []string{"linux"} })
	update(t, overflow, func(rs *v1alpha1.RunnerSet) { rs.Spec.Managers.Autoscale.MaxReplicas = 6 })
	waitCondition(t, overflow, v1alpha1.ConditionAutoscaling, metav1.ConditionFalse, v1alpha1.ReasonPrimaryTagsDiffer)
	if again := scaledObject(t, overflow); again.GetResourceVersion() != so.GetResourceVersion() {
		t.Errorf("the ScaledObject was rewritten while the primary's tags differ: max %v",
			nested[int64](t, again, "spec", "maxReplicaCount"))
	}
}

// A class without spec.prometheus.address gets no ScaledObject for its
// autoscaled RunnerSets, and the condition names the field.
func TestAutoscaleNeedsTheClassesPrometheus(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, nil)
	newSecret(t, ns, "build-token", token)
	rs := autoscaled(ns, "build", class.Name, 1, 2, 4)
	must(t, k8s.Create(ctx, rs))
	cur := waitCondition(t, rs, v1alpha1.ConditionAutoscaling, metav1.ConditionFalse, v1alpha1.ReasonPrometheusAddressMissing)
	if msg := condition(cur, v1alpha1.ConditionAutoscaling).Message; !strings.Contains(msg, "spec.prometheus.address") || !strings.Contains(msg, class.Name) {
		t.Errorf("message: %s", msg)
	}
	if scaledObject(t, rs) != nil {
		t.Error("a ScaledObject without a Prometheus to read")
	}
}

// Deleting an autoscaled RunnerSet deletes its ScaledObject before the
// managers are scaled to zero to drain: KEDA would start one again.
// (envtest runs no garbage collector: only the finalizer deletes it.)
func TestDeletingAnAutoscaledRunnerSetStopsKEDAFirst(t *testing.T) {
	ns := newNamespace(t)
	class := prometheusClass(t)
	newSecret(t, ns, "build-token", token)
	rs := autoscaled(ns, "build", class.Name, 2, 3, 4)
	must(t, k8s.Create(ctx, rs))
	waitReady(t, rs)
	waitScaledObject(t, rs)
	deleteAndWaitGone(t, rs)
	if scaledObject(t, rs) != nil {
		t.Error("the ScaledObject outlived its RunnerSet's drain")
	}
}

// The API server refuses bad autoscale and overflow input, naming the field.
func TestAdmissionRefusesBadAutoscaleAndOverflow(t *testing.T) {
	ns := newNamespace(t)
	base := func() *v1alpha1.RunnerSet {
		rs := autoscaled(ns, "x"+rand.String(5), "c", 0, 3, 4)
		rs.Spec.Overflow = &v1alpha1.OverflowSpec{Primary: "build", QueueTime: v1alpha1.QueueTimeTrigger{Threshold: metav1.Duration{Duration: time.Minute}}}
		return rs
	}
	must(t, k8s.Create(ctx, base(), client.DryRunAll))
	cases := []struct {
		name   string
		mutate func(*v1alpha1.RunnerSet)
		want   []string
	}{
		{"min above max", func(rs *v1alpha1.RunnerSet) { rs.Spec.Overflow = nil; rs.Spec.Managers.Autoscale.MinReplicas = 4 },
			[]string{"spec.managers.autoscale", "minReplicas must not exceed maxReplicas"}},
		{"target at concurrent", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.Concurrent = 4
		}, []string{"spec.managers.autoscale.targetRunningJobs", "must be below managers.concurrent"}},
		{"target above the default concurrent", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Managers.Autoscale.TargetRunningJobs = 10
		}, []string{"spec.managers.autoscale.targetRunningJobs", "must be below managers.concurrent"}},
		{"overflow without autoscale", func(rs *v1alpha1.RunnerSet) { rs.Spec.Managers.Autoscale = nil },
			[]string{"spec.overflow", "needs spec.managers.autoscale with minReplicas 0"}},
		{"overflow with managers left running", func(rs *v1alpha1.RunnerSet) { rs.Spec.Managers.Autoscale.MinReplicas = 1 },
			[]string{"spec.overflow", "needs spec.managers.autoscale with minReplicas 0"}},
		{"threshold zero", func(rs *v1alpha1.RunnerSet) { rs.Spec.Overflow.QueueTime.Threshold = metav1.Duration{} },
			[]string{"spec.overflow.queueTime.threshold", "between 1s and 24h"}},
		{"window too short", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Overflow.QueueTime.Window = &metav1.Duration{Duration: 10 * time.Second}
		},
			[]string{"spec.overflow.queueTime.window", "between 30s and 1h"}},
		{"its own primary", func(rs *v1alpha1.RunnerSet) { rs.Spec.Overflow.Primary = rs.Name },
			[]string{"spec.overflow.primary names this RunnerSet itself"}},
		{"prometheus not a URL", func(rs *v1alpha1.RunnerSet) {
			rs.Spec.Overflow.Prometheus = &v1alpha1.PrometheusEndpoint{Address: "prometheus:9090"}
		}, []string{"spec.overflow.prometheus.address", "http(s) URL"}},
		{"max above 50", func(rs *v1alpha1.RunnerSet) { rs.Spec.Managers.Autoscale.MaxReplicas = 51 },
			[]string{"spec.managers.autoscale.maxReplicas"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := base()
			c.mutate(rs)
			err := k8s.Create(ctx, rs, client.DryRunAll)
			if err == nil {
				t.Fatal("admitted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q: %v", w, err)
				}
			}
		})
	}
	bad := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "c-" + rand.String(5)}, Spec: v1alpha1.RunnerClassSpec{
		Provider: v1alpha1.CapacityProviderKWOK, Prometheus: &v1alpha1.PrometheusEndpoint{Address: "http://"},
	}}
	if err := k8s.Create(ctx, bad, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "spec.prometheus.address") {
		t.Errorf("a class with a Prometheus address without a host: %v", err)
	}
}
