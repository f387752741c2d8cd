package metrics

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Serving is how the controller serves /metrics.
type Serving struct {
	// BindAddress of the endpoint, ":8443"; "0" turns it off.
	BindAddress string
	// Secure serves TLS and lets in only callers whose bearer token the API
	// server authenticates (TokenReview) and authorizes to get the
	// non-resource URL /metrics (SubjectAccessReview), as kubebuilder
	// projects do. Off, it serves plain HTTP to anyone who reaches it: only
	// for a bind address on localhost.
	Secure bool
	// CertDir holds tls.crt and tls.key (a cert-manager Certificate's
	// Secret, mounted); empty, the controller makes a self-signed
	// certificate at start.
	CertDir string
}

// Options are controller-runtime's metrics server options for s.
func (s Serving) Options() metricsserver.Options {
	o := metricsserver.Options{BindAddress: s.BindAddress}
	if s.Secure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		o.CertDir = s.CertDir
	}
	return o
}

// Register adds the fleet Collector and the Nodes collector of mgr to
// controller-runtime's registry, beside the counters: they read mgr's
// cache, and export only while mgr leads.
func Register(mgr ctrl.Manager, capacityKinds []schema.GroupVersionKind) error {
	if err := ctrlmetrics.Registry.Register(&Nodes{Reader: mgr.GetCache(), Elected: mgr.Elected()}); err != nil {
		return err
	}
	return ctrlmetrics.Registry.Register(&Collector{
		Reader:        mgr.GetCache(),
		Mapper:        mgr.GetRESTMapper(),
		CapacityKinds: capacityKinds,
		Elected:       mgr.Elected(),
		Expiries:      TokenExpiries,
	})
}
