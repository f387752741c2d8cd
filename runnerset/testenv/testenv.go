// Package testenv starts a real kube-apiserver and etcd (envtest) with the
// runnerfleet CRDs installed, for the tests and benchmarks of every package.
// The binaries come from hack/tools.sh, which builds them from the Go module
// proxy into a cache outside the repository the first time; a test never
// skips because they are missing.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	awsapis "github.com/aws/karpenter-provider-aws/pkg/apis"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"

	"github.com/runnerfleet/runnerfleet/internal/checkout"
	"github.com/runnerfleet/runnerfleet/internal/gomod"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	"github.com/runnerfleet/runnerfleet/runnerset/crds/gke"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme
	env    *envtest.Environment
}

// Scheme returns a scheme with the Kubernetes and runnerfleet types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := capacity.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Option changes how the control plane starts.
type Option func(*envtest.Environment)

// WithCRDs installs more CRDs beside runnerfleet's own.
func WithCRDs(extra ...*apiextensionsv1.CustomResourceDefinition) Option {
	return func(e *envtest.Environment) { e.CRDs = append(e.CRDs, extra...) }
}

// Start starts etcd and kube-apiserver and installs the CRDs.
func Start(opts ...Option) (*Env, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	own, err := crds.CRDs()
	if err != nil {
		return nil, err
	}
	// Karpenter's CRDs as its modules ship them: the AWS provider's set
	// (NodePool, NodeClaim, NodeOverlay with AWS's extra rules, and
	// EC2NodeClass) and the KWOKNodeClass, so every capacity object the
	// project writes is judged by the real schema.
	for _, c := range append(append([]*apiextensionsv1.CustomResourceDefinition{}, awsapis.CRDs...), kwokapis.CRDs...) {
		own = append(own, c.DeepCopy())
	}
	// GKE's ComputeClass, with the schema GKE serves (runnerset/crds/gke).
	cc, err := gke.ComputeClassCRD()
	if err != nil {
		return nil, err
	}
	own = append(own, cc)
	e := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDs:                     own,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	for _, o := range opts {
		o(e)
	}
	cfg, err := e.Start()
	if err != nil {
		// Start may fail after the control plane came up (a CRD the API
		// server refuses): stop what runs, or it outlives the test.
		_ = e.Stop()
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	s := Scheme()
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		_ = e.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, Scheme: s, env: e}, nil
}

// KEDAVersion's CRDs are read from KEDA's own module, as it ships them:
// the release whose ScaledObject the controller writes, and the one
// hack/keda/go.mod pins, whose operator and metrics adapter the local
// stack runs (TestKEDAVersionIsHackKEDAs keeps the two the same).
const KEDAVersion = resources.KEDAVersion

// KEDACRDs returns KEDA's ScaledObject CRD, from its module source.
func KEDACRDs(ctx context.Context) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dir, err := gomod.Download(ctx, "github.com/kedacore/keda/v2", KEDAVersion)
	if err != nil {
		return nil, fmt.Errorf("KEDA's CRDs: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config", "crd", "bases", "keda.sh_scaledobjects.yaml"))
	if err != nil {
		return nil, fmt.Errorf("KEDA's CRDs: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		return nil, fmt.Errorf("KEDA's ScaledObject CRD: %w", err)
	}
	return []*apiextensionsv1.CustomResourceDefinition{crd}, nil
}

// prometheusOperatorAPIs is the module of the Prometheus operator's Go
// types; its CRDs are read from the operator's main module at the same
// version, the one go.mod requires.
const prometheusOperatorAPIs = "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring"

// PrometheusOperatorVersion is the version of the Prometheus operator's
// types this binary was built with (go.mod's).
func PrometheusOperatorVersion() (string, error) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", fmt.Errorf("no build info: cannot tell the Prometheus operator's version")
	}
	for _, d := range bi.Deps {
		if d.Path == prometheusOperatorAPIs {
			if d.Replace != nil {
				d = d.Replace
			}
			return d.Version, nil
		}
	}
	return "", fmt.Errorf("%s is not a dependency of this binary", prometheusOperatorAPIs)
}

// PrometheusOperatorCRDs returns the Prometheus operator's CRDs of the
// given plural names (servicemonitors, podmonitors, prometheusrules) as
// its main module ships them, at the version of the types go.mod requires.
func PrometheusOperatorCRDs(ctx context.Context, plurals ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	v, err := PrometheusOperatorVersion()
	if err != nil {
		return nil, err
	}
	dir, err := gomod.Download(ctx, "github.com/prometheus-operator/prometheus-operator", v)
	if err != nil {
		return nil, fmt.Errorf("the Prometheus operator's CRDs: %w", err)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, p := range plurals {
		b, err := os.ReadFile(filepath.Join(dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+p+".yaml"))
		if err != nil {
			return nil, fmt.Errorf("the Prometheus operator's %s CRD: %w", p, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, crd); err != nil {
			return nil, fmt.Errorf("the Prometheus operator's %s CRD: %w", p, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// Stop stops kube-apiserver, then etcd.
func (e *Env) Stop() error { return e.env.Stop() }

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsErr  error
)

// Assets returns the directory holding etcd and kube-apiserver: the
// KUBEBUILDER_ASSETS environment variable when set, otherwise what
// hack/tools.sh envtest builds or finds in its cache.
func Assets() (string, error) {
	assetsOnce.Do(func() {
		if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
			assetsDir = d
			return
		}
		root, err := checkout.Root()
		if err != nil {
			assetsErr = err
			return
		}
		cmd := exec.Command(filepath.Join(root, "hack", "tools.sh"), "envtest")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			assetsErr = fmt.Errorf("building the control plane with hack/tools.sh envtest: %w", err)
			return
		}
		assetsDir = strings.TrimSpace(string(out))
	})
	return assetsDir, assetsErr
}

// SimulateDeployments stands in for the Deployment controller and the
// kubelets, which envtest does not run: every Deployment whose status lags its
// spec gets the status a healthy rollout would reach, unless skip says to
// leave it alone (skip may be nil). It returns when ctx ends.
func SimulateDeployments(ctx context.Context, c client.WithWatch, skip func(*appsv1.Deployment) bool) error {
	for ctx.Err() == nil {
		list := &appsv1.DeploymentList{}
		w, err := c.Watch(ctx, list)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || !d.DeletionTimestamp.IsZero() || (skip != nil && skip(d)) {
				continue
			}
			if err := MarkAvailable(ctx, c, d); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "testenv: marking Deployment %s/%s available: %v\n", d.Namespace, d.Name, err)
			}
		}
		w.Stop()
	}
	return nil
}

// MarkAvailable gives d the status of a finished, healthy rollout, unless it
// has it already.
func MarkAvailable(ctx context.Context, c client.Client, d *appsv1.Deployment) error {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	if st.ObservedGeneration == d.Generation && st.Replicas == want && st.UpdatedReplicas == want &&
		st.ReadyReplicas == want && st.AvailableReplicas == want {
		return nil
	}
	patch := client.MergeFrom(d.DeepCopy())
	d.Status.ObservedGeneration = d.Generation
	d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = want, want, want, want
	return client.IgnoreNotFound(c.Status().Patch(ctx, d, patch))
}

// StartControllers runs the real kube-controller-manager beside the API
// server with only the named controllers (for example "namespace" and
// "garbagecollector": envtest runs none, so a deleted namespace would stay
// Terminating forever). It serves nothing and elects no leader; stop ends
// it and waits for it to exit.
func (e *Env) StartControllers(controllers ...string) (stop func(), err error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "testenv-kcm-")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(kubeconfigFor(e.Config), kubeconfig); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	var out syncWriter
	cmd := exec.Command(filepath.Join(assets, "kube-controller-manager"),
		"--kubeconfig="+kubeconfig,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--concurrent-namespace-syncs=5",
	)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("kube-controller-manager exited at once (%v):\n%s", err, out.String())
	case <-time.After(2 * time.Second):
	}
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = os.RemoveAll(dir)
	}, nil
}

// kubeconfigFor turns the envtest admin's rest.Config into a kubeconfig.
func kubeconfigFor(cfg *rest.Config) clientcmdapi.Config {
	k := clientcmdapi.NewConfig()
	k.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	k.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	k.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	k.CurrentContext = "envtest"
	return *k
}

// syncWriter collects a process's output for an error message.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() < 1<<16 {
		w.b.Write(p)
	}
	return len(p), nil
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
