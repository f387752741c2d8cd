package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// KEDA, as `hack/tools.sh keda` builds it into the assets directory: the
// operator (ScaledObject and ScaledJob controllers, activation 0 <-> 1, the
// HPA it writes for 1..N) and its metrics adapter, the
// external.metrics.k8s.io API server the HPA controller reads KEDA's
// metrics from. Both run as processes of this machine, like Karpenter.
const (
	KEDAOperator = "keda-operator"
	// KEDAMetricsAPIServer is KEDA's metrics adapter (its binary is
	// keda-adapter; KEDA's deployments call it keda-metrics-apiserver).
	KEDAMetricsAPIServer = "keda-metrics-apiserver"

	kedaOperatorBinary = "keda-operator"
	kedaAdapterBinary  = "keda-adapter"
	// kedaCRDsDir holds KEDA's CRDs as its module ships them
	// (config/crd/bases), from the same version as the binaries.
	kedaCRDsDir = "keda-crds"
	// KEDANamespace is where KEDA's processes say they run (POD_NAMESPACE)
	// and keep their cluster-wide objects' secrets
	// (KEDA_CLUSTER_OBJECT_NAMESPACE), and where the adapter's Service is.
	KEDANamespace = "kube-system"
	// ExternalMetricsAPIService is the APIService the adapter serves.
	ExternalMetricsAPIService = "v1beta1.external.metrics.k8s.io"
)

// kedaAssets are the files of the assets directory KEDA needs.
var kedaAssets = []string{kedaOperatorBinary, kedaAdapterBinary, kedaCRDsDir}

// KEDACRDs reads KEDA's CRDs (ScaledObject, ScaledJob, the trigger
// authentications and the cloud event sources) from an assets directory of
// `hack/tools.sh local`.
func KEDACRDs(assets string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dir := filepath.Join(assets, kedaCRDsDir)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no KEDA CRDs in %s: run hack/tools.sh local and use the directory it prints", dir)
	}
	slices.Sort(files)
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("reading KEDA's CRD %s: %w", f, err)
		}
		if crd.Kind != "CustomResourceDefinition" || crd.Name == "" {
			return nil, fmt.Errorf("%s is not a CRD", f)
		}
		out = append(out, crd)
	}
	return out, nil
}

// kedaCertDir holds the certificate KEDA's operator and adapter share: the
// operator's gRPC metrics service and the adapter's client of it
// authenticate each other with it (mutual TLS, KEDA's ca.crt, tls.crt and
// tls.key), and the adapter serves the external metrics API with it.
func kedaCertDir(dir string) string { return filepath.Join(dir, "pki", "keda") }

// kedaAdapterServerName is the name kube-apiserver checks the adapter's
// certificate for: <service>.<namespace>.svc of the APIService's Service.
func kedaAdapterServerName() string { return KEDAMetricsAPIServer + "." + KEDANamespace + ".svc" }

// ensureKEDACerts writes ca.crt (the cluster CA), tls.crt and tls.key into
// the KEDA certificate directory unless they are there.
func ensureKEDACerts(pki PKI, dir string) error {
	certDir := kedaCertDir(dir)
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	ca, err := os.ReadFile(pki.Path(caCertFile))
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(certDir, "ca.crt"), ca, 0o644); err != nil {
		return err
	}
	return issueCert(pki, certSpec{
		cn:     KEDAOperator,
		usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		dns:    []string{"localhost", kedaAdapterServerName(), KEDAOperator + "." + KEDANamespace + ".svc"},
		ips:    []net.IP{net.ParseIP("127.0.0.1")},
	}, filepath.Join(certDir, "tls"))
}

// ensureKEDA installs KEDA's CRDs and starts whichever of its operator and
// adapter does not run, then registers the adapter as the external metrics
// API. The binaries and CRDs come from the cluster's assets directory; a
// cluster started before KEDA was part of `hack/tools.sh local` gets the
// directory it prints now.
func (c *Cluster) ensureKEDA(ctx context.Context, opts Options) error {
	if err := buildKEDA(c.State.Assets, opts); err != nil {
		return err
	}
	if missingAssets(c.State.Assets, kedaAssets) != "" {
		assets, err := resolveAssets(opts)
		if err != nil {
			return err
		}
		if m := missingAssets(assets, kedaAssets); m != "" {
			return fmt.Errorf("%s is missing from %s: run hack/tools.sh keda, then hack/tools.sh local, and use the directory it prints", m, assets)
		}
		st, err := ReadState(c.Dir)
		if err != nil || st == nil {
			return errors.Join(err, errors.New("the cluster state disappeared"))
		}
		st.Assets = assets
		if err := writeState(c.Dir, st); err != nil {
			return err
		}
		c.State = st
	}
	crds, err := KEDACRDs(c.State.Assets)
	if err != nil {
		return err
	}
	start := time.Now()
	for _, crd := range crds {
		if err := c.applyCRD(ctx, crd); err != nil {
			return err
		}
	}
	fmt.Fprintf(opts.Log, "Installed KEDA's %d CRDs %.1fs\n", len(crds), time.Since(start).Seconds())
	pki, err := EnsurePKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	if err := ensureKEDACerts(pki, c.Dir); err != nil {
		return fmt.Errorf("KEDA's certificate: %w", err)
	}
	grpcAddr := c.State.Endpoints[KEDAOperator]
	if c.Running(KEDAOperator) == 0 {
		if grpcAddr, err = c.startKEDAOperator(ctx, opts.StartTimeout, opts.Log); err != nil {
			return err
		}
		// An adapter of an earlier operator dials its old port.
		if err := c.StopProcess(KEDAMetricsAPIServer, opts.StopTimeout); err != nil {
			return err
		}
	}
	if c.Running(KEDAMetricsAPIServer) == 0 {
		if err := c.startKEDAAdapter(ctx, grpcAddr, opts.StartTimeout, opts.Log); err != nil {
			return err
		}
	}
	port, err := endpointPort(c.State.Endpoints[KEDAMetricsAPIServer])
	if err != nil {
		return fmt.Errorf("the endpoint of %s: %w", KEDAMetricsAPIServer, err)
	}
	start = time.Now()
	if err := c.registerExternalMetrics(ctx, pki, port, opts.StartTimeout); err != nil {
		return err
	}
	fmt.Fprintf(opts.Log, "APIService %s Available %.1fs\n", ExternalMetricsAPIService, time.Since(start).Seconds())
	return nil
}

// missingAssets names the first of files missing from dir, "" when none is.
func missingAssets(dir string, files []string) string {
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return f
		}
	}
	return ""
}

// kedaEnv is what both KEDA processes read from their environment; their
// KUBECONFIG, inside the state directory, marks them as this cluster's
// (see running).
func (c *Cluster) kedaEnv() []string {
	return []string{
		"KUBECONFIG=" + c.Kubeconfig,
		"WATCH_NAMESPACE=", // every namespace
		"POD_NAMESPACE=" + KEDANamespace,
		"KEDA_CLUSTER_OBJECT_NAMESPACE=" + KEDANamespace,
	}
}

// startKEDAOperator runs KEDA's operator on ports picked free, on 127.0.0.1
// only, and returns the address of its gRPC metrics service. No leader
// election (one operator), no certificate rotation and no patching of
// webhooks or APIServices: this package writes the certificates and the
// APIService.
func (c *Cluster) startKEDAOperator(ctx context.Context, timeout time.Duration, log io.Writer) (string, error) {
	ports, err := freePorts(3)
	if err != nil {
		return "", err
	}
	metrics, probe, grpc := ports[0], ports[1], ports[2]
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", probe)
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", grpc)
	plain := &http.Client{Timeout: 5 * time.Second}
	p := Process{
		Name: KEDAOperator,
		Path: filepath.Join(c.State.Assets, kedaOperatorBinary),
		Args: []string{
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics),
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe),
			"--metrics-service-bind-address=" + grpcAddr,
			"--cert-dir=" + kedaCertDir(c.Dir),
			"--leader-elect=false",
			"--enable-cert-rotation=false",
			"--enable-webhook-patching=false",
			"--enable-apiservice-patching=false",
			"--zap-log-level=info",
		},
		Env:      c.kedaEnv(),
		Endpoint: grpcAddr,
		Ready: func(ctx context.Context) error {
			if err := httpOK(ctx, plain, readyz); err != nil {
				return err
			}
			// The gRPC service the adapter dials.
			conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", grpcAddr)
			if err != nil {
				return err
			}
			return conn.Close()
		},
	}
	start := time.Now()
	pid, err := c.StartProcess(ctx, p, timeout, ports...)
	if err != nil {
		return "", fmt.Errorf("starting KEDA's operator (its log: %s): %w", LogFile(c.Dir, KEDAOperator), err)
	}
	fmt.Fprintf(log, "Started %-23s pid %-7d %-28s %.1fs\n", p.Name, pid, p.Endpoint, time.Since(start).Seconds())
	return grpcAddr, nil
}

// startKEDAAdapter runs KEDA's metrics adapter: the external metrics API on
// 127.0.0.1, served with the KEDA certificate, authenticating and
// authorizing its callers through kube-apiserver as an aggregated API
// server does. Its own /metrics server binds every interface (it has no
// setting for the address), on a port picked free.
func (c *Cluster) startKEDAAdapter(ctx context.Context, grpcAddr string, timeout time.Duration, log io.Writer) error {
	if grpcAddr == "" {
		return fmt.Errorf("no address of %s's gRPC metrics service in %s", KEDAOperator, statePath(c.Dir))
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	secure, metrics := ports[0], ports[1]
	certDir := kedaCertDir(c.Dir)
	url := fmt.Sprintf("https://127.0.0.1:%d", secure)
	hc, err := caClient(filepath.Join(certDir, "ca.crt"))
	if err != nil {
		return err
	}
	p := Process{
		Name: KEDAMetricsAPIServer,
		Path: filepath.Join(c.State.Assets, kedaAdapterBinary),
		Args: []string{
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", secure),
			"--cert-dir=" + certDir,
			"--tls-cert-file=" + filepath.Join(certDir, "tls.crt"),
			"--tls-private-key-file=" + filepath.Join(certDir, "tls.key"),
			"--lister-kubeconfig=" + c.Kubeconfig,
			"--authentication-kubeconfig=" + c.Kubeconfig,
			"--authorization-kubeconfig=" + c.Kubeconfig,
			"--metrics-service-address=" + grpcAddr,
			fmt.Sprintf("--port=%d", metrics),
			"--zap-log-level=info",
		},
		Env:      c.kedaEnv(),
		Endpoint: url,
		Ready:    func(ctx context.Context) error { return httpOK(ctx, hc, url+"/readyz") },
	}
	start := time.Now()
	pid, err := c.StartProcess(ctx, p, timeout, ports...)
	if err != nil {
		return fmt.Errorf("starting KEDA's metrics adapter (its log: %s): %w", LogFile(c.Dir, KEDAMetricsAPIServer), err)
	}
	fmt.Fprintf(log, "Started %-23s pid %-7d %-28s %.1fs\n", p.Name, pid, p.Endpoint, time.Since(start).Seconds())
	return nil
}

// registerExternalMetrics points the APIService of external.metrics.k8s.io
// at the adapter and waits until kube-apiserver serves it. The
// Service is an ExternalName one naming 127.0.0.1: kube-apiserver proxies
// an APIService to https://<externalName>:<port>, so it reaches the
// adapter on this machine with no Endpoints (which refuse loopback
// addresses) and no service proxy, and checks the adapter's certificate
// for <service>.<namespace>.svc against the cluster CA.
func (c *Cluster) registerExternalMetrics(ctx context.Context, pki PKI, port int, timeout time.Duration) error {
	ca, err := os.ReadFile(pki.Path(caCertFile))
	if err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: KEDAMetricsAPIServer, Namespace: KEDANamespace},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "127.0.0.1",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port)}},
		},
	}
	live := &corev1.Service{}
	switch err := c.Client.Get(ctx, client.ObjectKeyFromObject(svc), live); {
	case apierrors.IsNotFound(err):
		if err := c.Client.Create(ctx, svc); err != nil {
			return fmt.Errorf("creating Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	case err != nil:
		return err
	default:
		live.Spec.Type, live.Spec.ExternalName, live.Spec.Ports = svc.Spec.Type, svc.Spec.ExternalName, svc.Spec.Ports
		live.Spec.ClusterIP, live.Spec.ClusterIPs, live.Spec.IPFamilies, live.Spec.IPFamilyPolicy = "", nil, nil, nil
		if err := c.Client.Update(ctx, live); err != nil {
			return fmt.Errorf("updating Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	}
	as := externalMetricsAPIService(ca, port)
	old := externalMetricsAPIService(nil, 0)
	switch err := c.Client.Get(ctx, client.ObjectKeyFromObject(as), old); {
	case apierrors.IsNotFound(err):
		if err := c.Client.Create(ctx, as); err != nil {
			return fmt.Errorf("creating APIService %s: %w", ExternalMetricsAPIService, err)
		}
	case err != nil:
		return err
	default:
		as.SetResourceVersion(old.GetResourceVersion())
		if err := c.Client.Update(ctx, as); err != nil {
			return fmt.Errorf("updating APIService %s: %w", ExternalMetricsAPIService, err)
		}
	}
	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		return err
	}
	var why string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got := externalMetricsAPIService(nil, 0)
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
			why = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Available" && m["status"] != "True" {
				why = fmt.Sprintf("%v: %v", m["reason"], m["message"])
				return false, nil
			}
		}
		// Available may still be the condition of the adapter before
		// (another port): ask the API through kube-apiserver.
		if err := httpOK(ctx, hc, c.Server+"/apis/external.metrics.k8s.io/v1beta1"); err != nil {
			why = err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s is not Available after %s (%s): see %s and %s", ExternalMetricsAPIService, timeout, why,
			LogFile(c.Dir, KEDAMetricsAPIServer), LogFile(c.Dir, APIServer))
	}
	return nil
}

// externalMetricsAPIService is the APIService of the external metrics API,
// served by the adapter's Service (registerExternalMetrics).
func externalMetricsAPIService(caBundle []byte, port int) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	u.SetName(ExternalMetricsAPIService)
	if caBundle != nil {
		u.Object["spec"] = map[string]any{
			"group":                "external.metrics.k8s.io",
			"version":              "v1beta1",
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
			"caBundle":             base64.StdEncoding.EncodeToString(caBundle),
			"service": map[string]any{
				"name":      KEDAMetricsAPIServer,
				"namespace": KEDANamespace,
				"port":      int64(port),
			},
		}
	}
	return u
}

// caClient is an HTTPS client that trusts the CA of caFile only.
func caClient(caFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

// freePorts picks n distinct free ports.
func freePorts(n int) ([]int, error) {
	var out []int
	for len(out) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// endpointPort is the port of an endpoint URL or host:port.
func endpointPort(endpoint string) (int, error) {
	hostport := endpoint
	if i := strings.Index(hostport, "://"); i >= 0 {
		hostport = hostport[i+3:]
	}
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return 0, err
	}
	var port int
	if _, err := fmt.Sscan(p, &port); err != nil || port <= 0 {
		return 0, fmt.Errorf("no port in %q", endpoint)
	}
	return port, nil
}
