package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/rbac"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// The controller runs as a ServiceAccount holding only the generated
// ClusterRole, and does everything it does: RunnerSets of every capacity
// provider and both token modes become Ready, take updates and drain through
// their finalizer; Events are recorded; leader election holds its Lease.
// A marker missing in rbac.go makes this fail.
func TestRBACGeneratedClusterRoleIsEnoughForTheController(t *testing.T) {
	// The suite's manager runs as cluster admin and would do the work for
	// the one under test: stop it while this test runs.
	stopManager()
	t.Cleanup(func() {
		if err := startManager(); err != nil {
			t.Errorf("restarting the suite's manager: %v", err)
		}
	})

	sys := newNamespace(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "runnerset-controller"}}
	must(t, k8s.Create(ctx, sa))
	role, err := rbac.ClusterRole()
	must(t, err)
	role.Name = rbac.Name + "-" + sys
	must(t, k8s.Create(ctx, role))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), role) })
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sys, Name: sa.Name}},
	}
	must(t, k8s.Create(ctx, binding))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), binding) })

	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = controller.DefaultQPS, controller.DefaultBurst
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", sys, sa.Name)}
	// The authorizer sees the binding shortly after it is written.
	first := role.Rules[0]
	res, sub, _ := strings.Cut(first.Resources[0], "/")
	eventually(t, "the binding is in effect", func() error {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   cfg.Impersonate.UserName,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + sys, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: first.APIGroups[0], Resource: res, Subresource: sub, Verb: first.Verbs[0],
			},
		}}
		if err := k8s.Create(ctx, sar); err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return fmt.Errorf("%s %+v not allowed yet", sar.Spec.User, *sar.Spec.ResourceAttributes)
		}
		return nil
	})
	as, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	must(t, err)
	if err := as.List(ctx, &corev1.PersistentVolumeList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing PersistentVolumes as the ServiceAccount: %v; the test is not running with the ClusterRole alone", err)
	}
	// The metrics' cache of nodes (metrics.NodeCache) lists and watches
	// their metadata.
	nodes, _ := metrics.NodeCache()
	nodeList := &metav1.PartialObjectMetadataList{}
	nodeList.SetGroupVersionKind(nodes.GetObjectKind().GroupVersionKind().GroupVersion().WithKind("NodeList"))
	if err := as.List(ctx, nodeList); err != nil {
		t.Errorf("the ClusterRole does not let the metrics list nodes: %v", err)
	}
	asWatch, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	must(t, err)
	if w, err := asWatch.Watch(ctx, nodeList); err != nil {
		t.Errorf("the ClusterRole does not let the metrics watch nodes: %v", err)
	} else {
		w.Stop()
	}

	since := len(logs.String())
	mgrErr := startManagerAs(t, cfg, sys)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// Each refusal once: the API server names the missing permission.
		seen := map[string]bool{}
		for _, l := range strings.Split(logs.String()[since:], "\n") {
			var entry struct{ Error string }
			if json.Unmarshal([]byte(l), &entry) != nil || !strings.Contains(entry.Error, "forbidden") || seen[entry.Error] {
				continue
			}
			seen[entry.Error] = true
			if len(seen) <= 10 {
				t.Logf("refused: %s", entry.Error)
			}
		}
		select {
		case err := <-mgrErr:
			t.Logf("manager: %v", err)
		default:
		}
	})

	// One RunnerSet per capacity provider with a stored token, and one whose
	// runner the controller creates in GitLab (its token Secret is written,
	// patched and deleted).
	ns := newNamespace(t)
	kwok := newClass(t, nil)
	eks := eksClass(t, nil)
	gke := newClass(t, func(c *v1alpha1.RunnerClass) {
		c.Spec.Provider = v1alpha1.CapacityProviderComputeClass
		c.Spec.ComputeClass = &v1alpha1.ComputeClassSettings{MachineFamilies: []string{"n2d"}}
		c.Spec.Policy.Identity = v1alpha1.IdentityPolicy{}
	})
	srv := gitlabServer(t)
	newSecret(t, ns, patName, pat)
	// And an autoscaled one with its overflow: ScaledObjects written,
	// watched, and deleted with them.
	prom := prometheusClass(t)
	burst := autoscaled(ns, "burst", prom.Name, 0, 2, 4)
	burst.Spec.Tags = []string{"team-scaled"}
	burst.Spec.Overflow = &v1alpha1.OverflowSpec{Primary: "scaled", QueueTime: v1alpha1.QueueTimeTrigger{Threshold: metav1.Duration{Duration: time.Minute}}}
	sets := []*v1alpha1.RunnerSet{
		runnerSet(ns, "kwok", kwok.Name),
		runnerSet(ns, "eks", eks.Name),
		runnerSet(ns, "gke", gke.Name),
		createdRunnerSet(srv, ns, "made", kwok.Name),
		autoscaled(ns, "scaled", prom.Name, 1, 3, 4),
		burst,
	}
	for _, rs := range sets {
		if rs.Spec.GitLab.TokenSecretRef != nil {
			newSecret(t, ns, rs.Spec.GitLab.TokenSecretRef.Name, token)
		}
		must(t, k8s.Create(ctx, rs))
	}
	for _, rs := range sets {
		waitReady(t, rs)
	}
	for _, rs := range sets[4:] {
		waitCondition(t, rs, v1alpha1.ConditionAutoscaling, metav1.ConditionUnknown, v1alpha1.ReasonScaledObjectNotReady)
		waitScaledObject(t, rs)
	}

	// Updates: config.toml, the manager Deployment and the NodePool are
	// rewritten; the created runner's new tags reach GitLab and its Secret.
	kwokRS, made := sets[0], sets[3]
	settingsHash := func() string {
		return string(get(t, ns, naming.For(ns, made.Name).RunnerToken(), &corev1.Secret{}).Data["settings-hash"])
	}
	before := settingsHash()
	update(t, kwokRS, func(rs *v1alpha1.RunnerSet) {
		rs.Spec.Managers.Concurrent = 25
		rs.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
	})
	update(t, made, func(rs *v1alpha1.RunnerSet) { rs.Spec.Tags = append(rs.Spec.Tags, "arm64") })
	n := naming.For(ns, "kwok")
	eventually(t, "ConfigMap and NodePool updated", func() error {
		if !strings.Contains(string(get(t, ns, n.Config(), &corev1.Secret{}).Data["config.toml"]), "concurrent = 25") {
			return errors.New("config.toml still has the old concurrent")
		}
		np := &unstructured.Unstructured{}
		np.SetGroupVersionKind(capacity.KarpenterGroupVersion.WithKind("NodePool"))
		must(t, k8s.Get(ctx, client.ObjectKey{Name: n.Capacity()}, np))
		if cpu, _, _ := unstructured.NestedString(np.Object, "spec", "limits", "cpu"); cpu != "64" {
			return fmt.Errorf("NodePool cpu limit %q", cpu)
		}
		return nil
	})
	eventually(t, "tags updated in GitLab and recorded in the token Secret", func() error {
		r := runnersOf(srv, string(made.UID))
		if len(r) != 1 || !strings.Contains(strings.Join(r[0].Tags, ","), "arm64") {
			return fmt.Errorf("%+v", r)
		}
		if settingsHash() == before {
			return errors.New("settings hash unchanged")
		}
		return nil
	})
	waitReady(t, kwokRS)

	eventually(t, "an events.k8s.io Event from the controller", func() error {
		list := &eventsv1.EventList{}
		must(t, k8s.List(ctx, list, client.InNamespace(ns)))
		for _, e := range list.Items {
			if e.ReportingController == controller.Name && e.Regarding.Kind == "RunnerSet" && e.Reason == v1alpha1.ReasonReconciled {
				return nil
			}
		}
		return fmt.Errorf("none among %d", len(list.Items))
	})
	eventually(t, "the leader's Event on its Lease", func() error {
		list := &corev1.EventList{}
		must(t, k8s.List(ctx, list, client.InNamespace(sys)))
		for _, e := range list.Items {
			if e.Reason == "LeaderElection" && e.InvolvedObject.Kind == "Lease" {
				return nil
			}
		}
		return fmt.Errorf("none among %d", len(list.Items))
	})

	// A job pod no manager is left to delete: the controller deletes it
	// (pods: delete) once its grace, here none, has passed.
	update(t, kwokRS, func(rs *v1alpha1.RunnerSet) {
		rs.Spec.Managers.OrphanedJobGracePeriod = &metav1.Duration{}
	})
	orphan := orphanPod(kwokRS, naming.For(ns, kwokRS.Name).JobsNamespace(), "runner-kwok-job-1-abcde", resources.ComponentJob)
	must(t, k8s.Create(ctx, orphan))
	for _, rs := range sets {
		must(t, k8s.Delete(ctx, rs))
	}
	for _, rs := range sets {
		eventually(t, "RunnerSet "+rs.Name+" drained and gone", func() error {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(rs), &v1alpha1.RunnerSet{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
	}
	for _, rs := range sets {
		for _, gvk := range []schema.GroupVersionKind{
			capacity.KarpenterGroupVersion.WithKind("NodePool"),
			capacity.KWOKGroupVersion.WithKind("KWOKNodeClass"),
			capacity.AWSGroupVersion.WithKind("EC2NodeClass"),
			capacity.ComputeClassGVK,
		} {
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(gvk)
			if err := k8s.Get(ctx, client.ObjectKey{Name: naming.For(ns, rs.Name).Capacity()}, obj); !apierrors.IsNotFound(err) {
				t.Errorf("%s of RunnerSet %s left behind (%v)", gvk.Kind, rs.Name, err)
			}
		}
	}
	for _, rs := range sets[4:] {
		if scaledObject(t, rs) != nil {
			t.Errorf("the ScaledObject of RunnerSet %s left behind", rs.Name)
		}
	}
	if n := len(runnersOf(srv, string(made.UID))); n != 0 {
		t.Errorf("%d runners left in GitLab", n)
	}
	if _, err := storedToken(t, ns, made.Name); !apierrors.IsNotFound(err) {
		t.Errorf("token Secret left behind (%v)", err)
	}
}

// startManagerAs runs the controller as cmd/runnerset-controller does, with
// cfg, leader election in leaseNS, until the test ends. A watch it may not
// make fails the start within 20 s instead of the default two minutes.
func startManagerAs(t *testing.T, cfg *rest.Config, leaseNS string) <-chan error {
	t.Helper()
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, must2(rest.HTTPClientFor(cfg)))
	must(t, err)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        env.Scheme,
		Cache:                         controller.CacheOptions(env.Scheme, mapper),
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		LeaderElection:                true,
		LeaderElectionID:              "runnerset-controller.runnerfleet.dev",
		LeaderElectionNamespace:       leaseNS,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(true), CacheSyncTimeout: 20 * time.Second},
	})
	must(t, err)
	runCtx, cancel := context.WithCancel(context.Background())
	cs := controller.NewControllers(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(controller.Name),
		controller.WithGitLab(func(url, pat string) (gitlab.Client, error) {
			return gitlab.New(url, pat, gitlab.Options{Timeout: 2 * time.Second, Retries: 1})
		}))
	must(t, controller.Register(runCtx, mgr, cs...))
	errs := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(runCtx); err != nil {
			errs <- err
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			// controller-runtime v0.25 spins instead of returning when it is
			// stopped before its cache synced (kubernetes-sigs/controller-runtime#3440),
			// as it does when a watch is forbidden: leave it, the test failed.
			t.Error("the manager did not stop")
		}
	})
	return errs
}
