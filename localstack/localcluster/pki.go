package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The files of the cluster's PKI, under <dir>/pki. Keys are ECDSA P-256,
// written 0600; everything is generated in Go, with no openssl.
const (
	caCertFile        = "ca.crt"        // the root CA: signs serving and client certs, kube-root-ca.crt
	caKeyFile         = "ca.key"        // also the CSR signer of kube-controller-manager
	apiserverCertFile = "apiserver.crt" // kube-apiserver's serving cert
	apiserverKeyFile  = "apiserver.key" //
	adminCertFile     = "admin.crt"     // client cert of the admin kubeconfig (O=system:masters)
	adminKeyFile      = "admin.key"     //
	serviceAccountKey = "sa.key"        // signs ServiceAccount tokens (kube-apiserver, kube-controller-manager)
	serviceAccountPub = "sa.pub"        // verifies them
	// The aggregation layer's request headers have a CA of their own, so
	// that no client certificate of the cluster CA can pose as the proxy.
	frontProxyCACert   = "front-proxy-ca.crt"
	frontProxyCAKey    = "front-proxy-ca.key"
	frontProxyCert     = "front-proxy-client.crt" // kube-apiserver proxies to extension API servers with it
	frontProxyKey      = "front-proxy-client.key"
	frontProxyUser     = "front-proxy-client"
	adminUser          = "runnerfleet-admin"
	serviceClusterCIDR = "10.96.0.0/16" // --service-cluster-ip-range
	kubernetesService  = "10.96.0.1"    // the first address of it: the kubernetes Service
	// kubernetesServicePort is the kubernetes Service's port, which the
	// kubelet tells pods as KUBERNETES_SERVICE_PORT.
	kubernetesServicePort = 443
	certValidity          = 5 * 365 * 24 * time.Hour
)

var pkiFiles = []string{caCertFile, caKeyFile, apiserverCertFile, apiserverKeyFile, adminCertFile, adminKeyFile,
	serviceAccountKey, serviceAccountPub, frontProxyCACert, frontProxyCAKey, frontProxyCert, frontProxyKey}

// PKI is where the cluster's certificates and keys are.
type PKI struct{ Dir string }

// Path returns the path of one PKI file.
func (p PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

// EnsurePKI generates the cluster's PKI into dir unless every file is there
// already, so that a restarted cluster keeps the kubeconfig it handed out.
// A partial PKI (an interrupted run) is generated anew.
func EnsurePKI(dir string) (PKI, error) {
	p := PKI{Dir: dir}
	complete := true
	for _, f := range pkiFiles {
		if _, err := os.Stat(p.Path(f)); err != nil {
			complete = false
			break
		}
	}
	if complete {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, fmt.Errorf("creating PKI directory: %w", err)
	}

	caKey, err := newKey()
	if err != nil {
		return p, err
	}
	now := time.Now().Add(-time.Hour) // tolerate a little clock skew between processes
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "runnerfleet-local-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caCert, caDER, err := sign(caTmpl, caKey, nil, nil)
	if err != nil {
		return p, fmt.Errorf("creating the CA: %w", err)
	}

	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   now,
		NotAfter:    now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(kubernetesService)},
	}
	servingKey, err := newKey()
	if err != nil {
		return p, err
	}
	_, servingDER, err := sign(serving, servingKey, caCert, caKey)
	if err != nil {
		return p, fmt.Errorf("creating the kube-apiserver serving certificate: %w", err)
	}

	admin := &x509.Certificate{
		// system:masters is bound to cluster-admin by the bootstrap RBAC policy.
		Subject:     pkix.Name{CommonName: adminUser, Organization: []string{"system:masters"}},
		NotBefore:   now,
		NotAfter:    now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	adminKey, err := newKey()
	if err != nil {
		return p, err
	}
	_, adminDER, err := sign(admin, adminKey, caCert, caKey)
	if err != nil {
		return p, fmt.Errorf("creating the admin client certificate: %w", err)
	}

	// The front proxy: kube-apiserver, kube-controller-manager and
	// kube-scheduler read its CA from kube-system/extension-apiserver-authentication.
	fpCAKey, err := newKey()
	if err != nil {
		return p, err
	}
	fpCA, fpCADER, err := sign(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "runnerfleet-local-front-proxy-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, fpCAKey, nil, nil)
	if err != nil {
		return p, fmt.Errorf("creating the front-proxy CA: %w", err)
	}
	fpKey, err := newKey()
	if err != nil {
		return p, err
	}
	_, fpDER, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: frontProxyUser},
		NotBefore:   now,
		NotAfter:    now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, fpKey, fpCA, fpCAKey)
	if err != nil {
		return p, fmt.Errorf("creating the front-proxy client certificate: %w", err)
	}

	saKey, err := newKey()
	if err != nil {
		return p, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return p, fmt.Errorf("encoding the service account public key: %w", err)
	}

	files := []struct {
		name string
		typ  string
		der  []byte
		key  crypto.Signer
	}{
		{caCertFile, "CERTIFICATE", caDER, nil},
		{caKeyFile, "", nil, caKey},
		{apiserverCertFile, "CERTIFICATE", servingDER, nil},
		{apiserverKeyFile, "", nil, servingKey},
		{adminCertFile, "CERTIFICATE", adminDER, nil},
		{adminKeyFile, "", nil, adminKey},
		{serviceAccountKey, "", nil, saKey},
		{serviceAccountPub, "PUBLIC KEY", saPub, nil},
		{frontProxyCACert, "CERTIFICATE", fpCADER, nil},
		{frontProxyCAKey, "", nil, fpCAKey},
		{frontProxyCert, "CERTIFICATE", fpDER, nil},
		{frontProxyKey, "", nil, fpKey},
	}
	for _, f := range files {
		typ, der, mode := f.typ, f.der, os.FileMode(0o644)
		if f.key != nil {
			der, err = x509.MarshalPKCS8PrivateKey(f.key)
			if err != nil {
				return p, fmt.Errorf("encoding %s: %w", f.name, err)
			}
			typ, mode = "PRIVATE KEY", 0o600
		}
		if err := writeFileAtomic(p.Path(f.name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
			return p, err
		}
	}
	return p, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a key: %w", err)
	}
	return k, nil
}

// sign signs tmpl with the parent's key, or self-signs it when parent is nil.
func sign(tmpl *x509.Certificate, key *ecdsa.PrivateKey, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, []byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, der, err
}

// LoadCertificate reads the first certificate of a PEM file.
func LoadCertificate(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New(path + ": no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// writeFileAtomic writes b to path through a temporary file and a rename, so
// that a reader never sees half a file.
func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
