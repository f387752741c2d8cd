// Command runnerset-controller runs the RunnerSet controller. It only wires
// flags, the logger, the scheme and the controllers together.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "runnerset-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr    string
		metricsSecure  bool
		metricsCertDir string
		probeAddr      string
		leaderElection bool
		leaderNS       string
		qps            float64
		burst          int
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", fmt.Sprintf(":%d", install.MetricsPort), "address of the Prometheus metrics endpoint; 0 turns it off")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "serve metrics over TLS to callers the API server authenticates and authorizes for GET /metrics; false serves plain HTTP to anyone, only for a localhost bind address")
	flag.StringVar(&metricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for the metrics endpoint; empty makes a self-signed certificate")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.BoolVar(&leaderElection, "leader-elect", true, "elect a leader, so that only one replica reconciles at a time")
	flag.StringVar(&leaderNS, "leader-election-namespace", "", "namespace of the leader election Lease (default: the pod's namespace)")
	flag.Float64Var(&qps, "kube-api-qps", controller.DefaultQPS, "queries per second to the API server")
	flag.IntVar(&burst, "kube-api-burst", controller.DefaultBurst, "burst of queries to the API server")
	showVersion := flag.Bool("version", false, "print the version and exit")
	opts := zap.Options{Development: false, TimeEncoder: zapcore.ISO8601TimeEncoder}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println(version.String("runnerset-controller"))
		return nil
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := capacity.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	// The capacity kinds this cluster has decide what the controller caches and watches.
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return fmt.Errorf("discovering the API server's kinds: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		MapperProvider:          func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mapper, nil },
		Cache:                   controller.CacheOptions(scheme, mapper),
		Metrics:                 metrics.Serving{BindAddress: metricsAddr, Secure: metricsSecure, CertDir: metricsCertDir}.Options(),
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElection,
		LeaderElectionID:        "runnerset-controller.runnerfleet.dev",
		LeaderElectionNamespace: leaderNS,
		// A new leader starts reconciling as soon as the old one stops.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := register(ctx, mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.Info("Starting runnerset-controller", "version", version.Get())
	return mgr.Start(ctx)
}

// register adds to mgr every controller controller.NewControllers lists
// (the RunnerSet and the RunnerClass controller), each on its own, and the
// fleet metrics' Collector.
func register(ctx context.Context, mgr ctrl.Manager) error {
	controllers := controller.NewControllers(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(controller.Name))
	if err := controller.Register(ctx, mgr, controllers...); err != nil {
		return err
	}
	if err := metrics.Register(mgr, controller.CapacityKinds()); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	return nil
}
