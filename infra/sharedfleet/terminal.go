package sharedfleet

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

// annotationExternalDNSHostname has external-dns point a manager's
// terminal hostname at its load balancer.
const annotationExternalDNSHostname = "external-dns.alpha.kubernetes.io/hostname"

// passthrough makes a manager's session Service its dedicated TCP
// passthrough load balancer, the only way in to its session server: the
// load balancer admits only webTerminal.allowedCIDRs (loadBalancerSourceRanges,
// which GKE turns into the load balancer's firewall rule), and passes the
// client's address through to the pod (externalTrafficPolicy Local), so
// that the managers' NetworkPolicy can admit those ranges and nothing
// else. TLS is never terminated in between: the session server pins its
// own certificate. No ingress controller is involved (ingress-nginx, which
// this replaced, applies no source range to a passthrough host).
func passthrough(svc *corev1.Service, host string, w *fleetspec.WebTerminal) {
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.LoadBalancerSourceRanges = slices.Clone(w.AllowedCIDRs)
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[annotationExternalDNSHostname] = host
}
