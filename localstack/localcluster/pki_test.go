package localcluster

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func pool(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	ca, err := LoadCertificate(path)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AddCert(ca)
	return p
}

func TestPKIServingCertIsValidForEveryNameClientsUse(t *testing.T) {
	p, err := EnsurePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := LoadCertificate(p.Path(apiserverCertFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := pool(t, p.Path(caCertFile))
	for _, name := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", kubernetesService} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate is not valid for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the serving certificate also authenticates clients; it should only serve")
	}
}

func TestPKIAdminIsAClusterAdminClientAndNotAProxy(t *testing.T) {
	p, err := EnsurePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := LoadCertificate(p.Path(adminCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if admin.Subject.CommonName != adminUser || !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin subject = %v, want CN=%s O=system:masters", admin.Subject, adminUser)
	}
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool(t, p.Path(caCertFile)), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate does not chain to the cluster CA as a client: %v", err)
	}
	// The request-header CA is a different one: the admin certificate must
	// not be accepted as the front proxy, nor the proxy's as a client.
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool(t, p.Path(frontProxyCACert)), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the admin certificate chains to the front-proxy CA")
	}
	proxy, err := LoadCertificate(p.Path(frontProxyCert))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.Verify(x509.VerifyOptions{Roots: pool(t, p.Path(frontProxyCACert)), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("front-proxy client does not chain to its CA: %v", err)
	}
	if _, err := proxy.Verify(x509.VerifyOptions{Roots: pool(t, p.Path(caCertFile)), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the front-proxy client certificate chains to the cluster CA")
	}
}

func TestPKIKeysArePrivateAndParse(t *testing.T) {
	p, err := EnsurePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range pkiFiles {
		fi, err := os.Stat(p.Path(f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".key") && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	// The service-account pair: kube-apiserver signs with one, verifies with the other.
	if _, err := tls.LoadX509KeyPair(p.Path(apiserverCertFile), p.Path(apiserverKeyFile)); err != nil {
		t.Errorf("serving key pair: %v", err)
	}
	if _, err := tls.LoadX509KeyPair(p.Path(adminCertFile), p.Path(adminKeyFile)); err != nil {
		t.Errorf("admin key pair: %v", err)
	}
	b, _ := os.ReadFile(p.Path(serviceAccountPub))
	if !bytes.Contains(b, []byte("BEGIN PUBLIC KEY")) {
		t.Errorf("%s is not a PEM public key", serviceAccountPub)
	}
}

func TestPKIIsKeptAcrossRunsAndRegeneratedWhenPartial(t *testing.T) {
	dir := t.TempDir()
	p, err := EnsurePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(p.Path(caCertFile))
	if _, err := EnsurePKI(dir); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(p.Path(caCertFile))
	if !bytes.Equal(before, after) {
		t.Fatal("a second run replaced a complete PKI: kubeconfigs handed out would stop working")
	}
	if err := os.Remove(p.Path(adminKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsurePKI(dir); err != nil {
		t.Fatal(err)
	}
	regenerated, _ := os.ReadFile(p.Path(caCertFile))
	if bytes.Equal(before, regenerated) {
		t.Fatal("a partial PKI was kept; the admin key no longer matches anything")
	}
	if _, err := tls.LoadX509KeyPair(p.Path(adminCertFile), p.Path(adminKeyFile)); err != nil {
		t.Fatalf("regenerated admin key pair: %v", err)
	}
}

// The kubeconfig written for the cluster authenticates a TLS server that
// serves kube-apiserver's certificate and asks for client certificates of
// the cluster CA, as kube-apiserver does.
func TestKubeconfigTalksToTheAPIServerCertificate(t *testing.T) {
	dir := t.TempDir()
	p, err := EnsurePKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.LoadX509KeyPair(p.Path(apiserverCertFile), p.Path(apiserverKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	var user string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.TLS.PeerCertificates[0]
		user = c.Subject.CommonName + "/" + strings.Join(c.Subject.Organization, ",")
		_, _ = w.Write([]byte("ok"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool(t, p.Path(caCertFile))}
	srv.StartTLS()
	defer srv.Close()
	if err := writeKubeconfig(dir, "test", srv.Listener.Addr().(*net.TCPAddr).Port, p); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(KubeconfigPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600: it holds the admin key", fi.Mode().Perm())
	}
	raw, err := clientcmd.LoadFromFile(KubeconfigPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if raw.CurrentContext != "runnerfleet-test" {
		t.Errorf("current context %q, want runnerfleet-test", raw.CurrentContext)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", KubeconfigPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + "/readyz")
	if err != nil {
		t.Fatalf("kubeconfig cannot reach a server with the apiserver certificate: %v", err)
	}
	resp.Body.Close()
	if user != adminUser+"/system:masters" {
		t.Errorf("server saw client %q, want %s/system:masters", user, adminUser)
	}
}

// KEDA's operator and adapter share one certificate: the operator serves its
// gRPC metrics service with it on 127.0.0.1 and the adapter authenticates
// to it with it (mutual TLS), and kube-apiserver checks it, against the
// APIService's caBundle (the cluster CA), for the name of the adapter's
// Service.
func TestKEDACertificateServesTheAdapterAndTheOperatorAndAuthenticatesTheAdapter(t *testing.T) {
	dir := t.TempDir()
	p, err := EnsurePKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ensureKEDACerts(p, dir); err != nil {
		t.Fatal(err)
	}
	certDir := kedaCertDir(dir)
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if _, err := os.Stat(filepath.Join(certDir, f)); err != nil {
			t.Fatalf("KEDA reads %s from its certificate directory: %v", f, err)
		}
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	cert, err := LoadCertificate(filepath.Join(certDir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := pool(t, filepath.Join(certDir, "ca.crt"))
	for _, name := range []string{kedaAdapterServerName(), "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("KEDA's certificate does not serve %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("KEDA's certificate does not authenticate the adapter to the operator: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(t, p.Path(caCertFile)), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("KEDA's ca.crt is not the cluster CA the APIService's caBundle holds: %v", err)
	}
}
