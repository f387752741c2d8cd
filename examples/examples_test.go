// Package examples_test applies every example to a real kube-apiserver,
// runs the controller on it and waits for every RunnerSet to be Ready, so
// that no example rots.
package examples_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// The examples' placeholders, which the loopback GitLab accepts.
const (
	exampleAPIToken = "glpat-EXAMPLE-placeholder"
	exampleGroup    = 42
)

// Every example directory, applied to its own API server as a user would
// (kubectl apply of the directory), reconciled until each RunnerSet is
// Ready. GitLab is a loopback server speaking its REST API, standing in
// for the examples' gitlab.example.com.
func TestExamplesReconcileToReady(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "eks,gke,local" {
		t.Fatalf("example directories %v: this test expects eks, gke and local", names)
	}
	gl := gitlabserver.New()
	t.Cleanup(gl.Close)
	gl.AddUser(exampleAPIToken, gitlabserver.User{Scopes: []string{gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner}, Groups: []int64{exampleGroup}})

	for _, dir := range names {
		t.Run(dir, func(t *testing.T) {
			// Each platform on an API server of its own: they use the same
			// namespaces, and envtest runs no garbage collector to remove
			// what a deleted RunnerSet owned.
			env, err := testenv.Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Stop() })
			k8s, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			ctrl.SetLogger(logr.Discard())
			startController(ctx, t, env, gl)
			go func() { _ = testenv.SimulateDeployments(ctx, k8s, func(*appsv1.Deployment) bool { return false }) }()

			sets := apply(ctx, t, env.Client, dir)
			if len(sets) == 0 {
				t.Fatalf("examples/%s has no RunnerSet", dir)
			}
			defer func() {
				for _, k := range sets {
					rs := &v1alpha1.RunnerSet{}
					if err := env.Client.Get(ctx, k, rs); err == nil {
						_ = env.Client.Delete(ctx, rs)
					}
				}
				for _, k := range sets {
					waitGone(ctx, t, env.Client, k)
				}
			}()
			for _, k := range sets {
				waitReady(ctx, t, env.Client, k)
			}
		})
	}
	if got := len(gl.Runners()); got != 0 {
		t.Errorf("%d runners left in GitLab after the RunnerSets were deleted", got)
	}
}

func startController(ctx context.Context, t *testing.T, env *testenv.Env, gl *gitlabserver.Server) {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Cache:      controller.CacheOptions(env.Scheme, mapper),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	cs := controller.NewControllers(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(controller.Name),
		controller.WithGitLab(func(url, pat string) (gitlab.Client, error) {
			if url != "https://gitlab.example.com" {
				return nil, fmt.Errorf("the examples name GitLab %s, not https://gitlab.example.com", url)
			}
			return gitlab.New(gl.URL(), pat, gitlab.Options{Timeout: 5 * time.Second, Retries: 1})
		}))
	if err := controller.Register(ctx, mgr, cs...); err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
}

// apply server-side applies every document of the directory's files, in
// file order, and returns the RunnerSets.
func apply(ctx context.Context, t *testing.T, c client.Client, dir string) []client.ObjectKey {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// runnerclass.yaml sorts before runnerset*.yaml: the class comes first.
	sort.Strings(files)
	var sets []client.ObjectKey
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := charts.ObjectsOf(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, d := range docs {
			u := &unstructured.Unstructured{Object: d}
			err := c.Patch(ctx, u, client.Apply, client.FieldOwner("examples-test"), client.ForceOwnership, client.FieldValidation("Strict"))
			if err != nil {
				t.Fatalf("%s: %s %s: %v", f, u.GetKind(), u.GetName(), err)
			}
			if u.GetKind() == "RunnerSet" {
				sets = append(sets, client.ObjectKeyFromObject(u))
			}
		}
	}
	return sets
}

func waitReady(ctx context.Context, t *testing.T, c client.Client, k client.ObjectKey) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		rs := &v1alpha1.RunnerSet{}
		if err := c.Get(ctx, k, rs); err != nil {
			t.Fatal(err)
		}
		if rs.IsReady() {
			return
		}
		last = ""
		for _, cond := range rs.Status.Conditions {
			last += fmt.Sprintf("\n  %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("RunnerSet %s not Ready: %s", k, last)
}

func waitGone(ctx context.Context, t *testing.T, c client.Client, k client.ObjectKey) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if err := c.Get(ctx, k, &v1alpha1.RunnerSet{}); client.IgnoreNotFound(err) == nil && err != nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("RunnerSet %s still there", k)
}
