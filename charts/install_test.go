package charts_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// writeKubeconfig writes a kubeconfig for cfg (envtest's admin), as a user
// of helm or kubectl would have.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// runInstalledController runs the controller as the install made it: as
// its ServiceAccount (so with the installed ClusterRole only) and with the
// installed Deployment's leader election. The Deployment's pods cannot run
// here (envtest has no kubelet), so the test stands in for its container.
func runInstalledController(ctx context.Context, t *testing.T, env *testenv.Env, ns string) {
	t.Helper()
	ctrl.SetLogger(logr.Discard())
	d := install.Deployment(install.Options{Namespace: ns})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatalf("the installed Deployment: %v", err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", ns, d.Spec.Template.Spec.ServiceAccountName),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: env.Scheme, Cache: controller.CacheOptions(env.Scheme, mapper),
		Metrics:        metricsserver.Options{BindAddress: "0"},
		LeaderElection: true, LeaderElectionID: "runnerset-controller.runnerfleet.dev", LeaderElectionNamespace: ns,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	cs := controller.NewControllers(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(controller.Name))
	if err := controller.Register(ctx, mgr, cs...); err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
}

// applyFile server-side applies every document of a file.
func applyFile(ctx context.Context, t *testing.T, c client.Client, path string) []client.ObjectKey {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return applyYAML(ctx, t, c, b)
}

func applyYAML(ctx context.Context, t *testing.T, c client.Client, b []byte) []client.ObjectKey {
	t.Helper()
	docs, err := charts.ObjectsOf(b)
	if err != nil {
		t.Fatal(err)
	}
	var sets []client.ObjectKey
	for _, d := range docs {
		u := &unstructured.Unstructured{Object: d}
		// A CRD applied just before may not be served yet, or the API
		// server's MutatingAdmissionPolicy dispatcher may not resolve its
		// kind yet (503 "Resource kind ... not found. There can be a
		// delay ..."): kubectl apply would be run again, so the test tries
		// again for a while, as fleet up does.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			err := c.Patch(ctx, u, client.Apply, client.FieldOwner("install-test"), client.ForceOwnership, client.FieldValidation("Strict"))
			if err == nil {
				break
			}
			if !(meta.IsNoMatchError(err) || apierrors.IsServiceUnavailable(err)) || time.Now().After(deadline) {
				t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
		if u.GetKind() == "RunnerSet" {
			sets = append(sets, client.ObjectKeyFromObject(u))
		}
	}
	return sets
}

func waitReady(ctx context.Context, t *testing.T, c client.Client, keys []client.ObjectKey) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for _, k := range keys {
		for {
			rs := &v1alpha1.RunnerSet{}
			if err := c.Get(ctx, k, rs); err == nil && rs.IsReady() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("RunnerSet %s not Ready: %+v", k, rs.Status.Conditions)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// Each install path on its own kube-apiserver: the chart through the Helm
// SDK (helm install --create-namespace), and charts/manifests/install.yaml
// applied as kubectl apply --server-side does; then the local example's
// RunnerClass and RunnerSet, reconciled by the controller running as the
// installed ServiceAccount, must reach Ready.
func TestInstallPathsReachReady(t *testing.T) {
	for _, path := range []string{"helm", "manifests"} {
		t.Run(path, func(t *testing.T) {
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
			go func() { _ = testenv.SimulateDeployments(ctx, k8s, nil) }()
			ns := install.Defaults().Namespace
			start := time.Now()
			switch path {
			case "helm":
				flags := genericclioptions.NewConfigFlags(false)
				kc := writeKubeconfig(t, env.Config)
				flags.KubeConfig, flags.Namespace = &kc, &ns
				cfg := &action.Configuration{}
				if err := cfg.Init(flags, ns, "secret", t.Logf); err != nil {
					t.Fatal(err)
				}
				inst := action.NewInstall(cfg)
				inst.ReleaseName, inst.Namespace, inst.CreateNamespace, inst.Timeout = "runnerfleet", ns, true, time.Minute
				rel, err := inst.Run(loadChart(t), nil)
				if err != nil {
					t.Fatalf("helm install: %v", err)
				}
				t.Logf("helm install: release %s revision %d %s", rel.Name, rel.Version, rel.Info.Status)
			case "manifests":
				applyYAML(ctx, t, env.Client, charts.InstallYAML())
				// envtest's kube-apiserver (1.37) serves them.
				applyYAML(ctx, t, env.Client, charts.AdmissionPoliciesYAML())
			}
			for _, kind := range []client.Object{&corev1.ServiceAccount{}, &corev1.Service{}} {
				if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.Name}, kind); err != nil {
					t.Fatalf("%T after the install: %v", kind, err)
				}
			}
			// The chart asked the API server whether it serves
			// MutatingAdmissionPolicy (it does), and installed the policy.
			for _, kind := range []client.Object{&admissionregistrationv1.MutatingAdmissionPolicy{}, &admissionregistrationv1.MutatingAdmissionPolicyBinding{}} {
				if err := env.Client.Get(ctx, client.ObjectKey{Name: install.FinalizerPolicyName}, kind); err != nil {
					t.Fatalf("%T after the install: %v", kind, err)
				}
			}
			runInstalledController(ctx, t, env, ns)
			var sets []client.ObjectKey
			for _, f := range []string{"runnerclass.yaml", "runnerset.yaml"} {
				sets = append(sets, applyFile(ctx, t, env.Client, filepath.Join("..", "examples", "local", f))...)
			}
			waitReady(ctx, t, env.Client, sets)
			t.Logf("%s: install to Ready in %.1fs", path, time.Since(start).Seconds())
			// The controller held its Lease in the install's namespace, as the installed Role allows.
			lease := &unstructured.Unstructured{}
			lease.SetAPIVersion("coordination.k8s.io/v1")
			lease.SetKind("Lease")
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "runnerset-controller.runnerfleet.dev"}, lease); err != nil {
				t.Errorf("no leader election Lease: %v", err)
			}
		})
	}
}
