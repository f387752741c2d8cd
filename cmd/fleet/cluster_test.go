package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

func kubeconfigFor(t *testing.T, cfg *rest.Config, impersonate string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Impersonate: impersonate}
	kc.Contexts["ci"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "ci"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// startInstalledController runs the controller as the ServiceAccount fleet
// up installed, once its Deployment exists (envtest runs no pods).
func startInstalledController(ctx context.Context, t *testing.T, env *testenv.Env, ns string) {
	ctrl.SetLogger(logr.Discard())
	d := install.Deployment(install.Options{Namespace: ns})
	for env.Client.Get(ctx, client.ObjectKeyFromObject(d), &appsv1.Deployment{}) != nil {
		if ctx.Err() != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", ns, install.Name),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	hc, _ := rest.HTTPClientFor(cfg)
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		t.Error(err)
		return
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme, Cache: controller.CacheOptions(env.Scheme, mapper),
		Metrics: metricsserver.Options{BindAddress: "0"}, Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Error(err)
		return
	}
	if err := controller.Register(ctx, mgr, controller.NewControllers(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(controller.Name))...); err != nil {
		t.Error(err)
		return
	}
	go func() { _ = mgr.Start(ctx) }()
}

// fleet up --kubeconfig installs the local stack into an existing cluster
// (a real kube-apiserver) from any directory, its RunnerSet becomes Ready,
// fleet status -o json shows it, and fleet down drains and removes it.
func TestUpKubeconfigInstallsIntoAnExistingCluster(t *testing.T) {
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
	kc := kubeconfigFor(t, env.Config, "")
	t.Chdir(t.TempDir()) // no checkout around: the stack config is compiled in
	go startInstalledController(ctx, t, env, "runnerfleet-system")

	var out, errOut bytes.Buffer
	start := time.Now()
	if err := run(ctx, []string{"up", "--stack", "local", "--kubeconfig", kc, "--context", "ci", "--timeout", "2m"}, &out, &errOut); err != nil {
		t.Fatalf("fleet up --kubeconfig: %v\n%s", err, errOut.String())
	}
	t.Logf("fleet up --kubeconfig: install to Ready in %.1fs", time.Since(start).Seconds())
	rs := &v1alpha1.RunnerSet{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "build"}, rs); err != nil || !rs.IsReady() {
		t.Fatalf("RunnerSet team-a/build: %v %+v", err, rs.Status.Conditions)
	}
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "runnerfleet-system", Name: install.Name}, d); err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != install.Defaults().Image {
		t.Errorf("controller image %s, want the release's %s", img, install.Defaults().Image)
	}
	// envtest's kube-apiserver (1.37) serves MutatingAdmissionPolicy, as
	// its discovery told fleet up: the drain finalizer's policy is in.
	policies := []client.Object{&admissionregistrationv1.MutatingAdmissionPolicy{}, &admissionregistrationv1.MutatingAdmissionPolicyBinding{}}
	for _, p := range policies {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: install.FinalizerPolicyName}, p); err != nil {
			t.Errorf("%T after fleet up: %v", p, err)
		}
	}

	out.Reset()
	if err := run(ctx, []string{"status", "--kubeconfig", kc, "-o", "json"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var rep statusReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, out.String())
	}
	if len(rep.RunnerSets) != 1 || rep.RunnerSets[0].Ready != "True" || rep.Controller == nil || rep.Controller.Namespace != "runnerfleet-system" {
		t.Errorf("status -o json: %s", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"status", "--kubeconfig", kc}, &out, &errOut); err != nil || !strings.Contains(out.String(), "team-a") {
		t.Errorf("status table: %v\n%s", err, out.String())
	}

	if err := run(ctx, []string{"down", "--kubeconfig", kc, "--timeout", "2m"}, &out, &errOut); err != nil {
		t.Fatalf("fleet down --kubeconfig: %v\n%s", err, errOut.String())
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rs), rs); !apierrors.IsNotFound(err) {
		t.Errorf("the RunnerSet after fleet down: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), d); !apierrors.IsNotFound(err) {
		t.Errorf("the controller after fleet down: %v", err)
	}
	for _, p := range policies {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: install.FinalizerPolicyName}, p); !apierrors.IsNotFound(err) {
			t.Errorf("%T after fleet down: %v", p, err)
		}
	}
}

// A cluster that does not answer, or a user who may not install, is named
// with what is wrong, and nothing is changed.
func TestUpKubeconfigRefusesUnreachableAndForbiddenClusters(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()

	dead := rest.CopyConfig(env.Config)
	dead.Host = "https://127.0.0.1:1"
	var out, errOut bytes.Buffer
	err = run(ctx, []string{"up", "--kubeconfig", kubeconfigFor(t, dead, "")}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "does not answer") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("unreachable: %v", err)
	}

	err = run(ctx, []string{"up", "--kubeconfig", kubeconfigFor(t, env.Config, "alice")}, &out, &errOut)
	for _, want := range []string{"forbidden", "nothing was changed", "create customresourcedefinitions.apiextensions.k8s.io cluster-wide",
		"patch deployments.apps in namespace runnerfleet-system", "create runnersets.runnerfleet.dev in namespace team-a"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("forbidden: the error does not say %q:\n%v", want, err)
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "runnerfleet-system"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused install created the controller's namespace: %v", err)
	}

	err = run(ctx, []string{"up", "--kubeconfig", kubeconfigFor(t, env.Config, ""), "--context", "nope"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "ci") {
		t.Errorf("an unknown context: %v, want the contexts listed", err)
	}
}

// fleet up --image refuses a reference it cannot parse, naming the flag,
// before it reads a kubeconfig; a pinned one passes on to the cluster.
func TestUpRefusesAnUnparseableImage(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, img := range []string{"runnerset-controller:v1", "ghcr.io/runnerfleet/runnerset-controller@sha256:0123"} {
		err := run(context.Background(), []string{"up", "--kubeconfig", "/nonexistent", "--image", img}, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), `--image "`+img+`" is not an image reference`) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("fleet up --image %s: %v", img, err)
		}
	}
	pinned := "ghcr.io/runnerfleet/runnerset-controller@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	err := run(context.Background(), []string{"up", "--kubeconfig", "/nonexistent", "--image", pinned}, &out, &errOut)
	if err == nil || strings.Contains(err.Error(), "--image") {
		t.Errorf("fleet up --image %s with no kubeconfig: %v, want the kubeconfig's error", pinned, err)
	}
}

func TestUnknownStackListsTheStacks(t *testing.T) {
	var out, errOut bytes.Buffer
	// A cloud stack's RunnerClass names what its platform creates: refused
	// before fleet touches the cluster.
	err0 := run(context.Background(), []string{"up", "--stack", "eks-dev", "--kubeconfig", "/nonexistent"}, &out, &errOut)
	if err0 == nil || !strings.Contains(err0.Error(), "platform eks") || !strings.Contains(err0.Error(), "examples/eks/runnerclass.yaml") {
		t.Errorf("fleet up --stack eks-dev --kubeconfig: %v", err0)
	}
	err := run(context.Background(), []string{"status", "--stack", "prod"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `no stack "prod"`) || !strings.Contains(err.Error(), "eks-dev, gke-shared, local") {
		t.Errorf("fleet status --stack prod: %v", err)
	}
}

func TestVersionAndHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, &out, &errOut); err != nil || !strings.HasPrefix(out.String(), "fleet v") {
		t.Errorf("fleet --version: %v %q", err, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"help", "up"}, &out, &errOut); err != nil || !strings.Contains(out.String(), "--kubeconfig") || !strings.Contains(out.String(), "Examples:") {
		t.Errorf("fleet help up: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"completion", "bash"}, &out, &errOut); err != nil || !strings.Contains(out.String(), "__start_fleet") {
		t.Errorf("fleet completion bash: %v", err)
	}
	if err := run(context.Background(), []string{"status", "-o", "yaml"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "table or json") {
		t.Errorf("status -o yaml: %v", err)
	}
}
