package sharedfleet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// GCScope is the project and the zones, sorted, fleet gc of fleet s covers:
// where its groups run VMs, and its retiredZones, where VMs they ran may
// still be. The platform grants gc's account there only.
func GCScope(s fleetspec.SharedFleet) (project string, zones []string, err error) {
	projects := map[string][]string{}
	for _, g := range s.Groups {
		if !slices.Contains(projects[g.Project], g.Zone) {
			projects[g.Project] = append(projects[g.Project], g.Zone)
		}
	}
	if len(projects) != 1 {
		return "", nil, fmt.Errorf("fleet gc covers one GCP project per fleet; fleet %s's groups use %d", s.Name, len(projects))
	}
	for k := range projects {
		project = k
	}
	zones = projects[project]
	for _, z := range s.RetiredZones {
		if !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	slices.Sort(zones)
	return project, zones, nil
}

// GCPlan is a fleet's gc, which runs `fleet gc --apply` in the fleet's
// namespace on GCSchedule, as its own ServiceAccount: it reads the
// managers' pods and Deployments there (and nothing else), and records its
// result as an Event. Its cloud identity is its own Google service account
// (GCAccountID), bound to that ServiceAccount alone through Workload
// Identity; infra/sharedfleet grants it (CloudPlan.GC) what gc does to the fleet's
// VMs and nothing else, and never the managers' account, which creates VMs.
type GCPlan struct {
	ServiceAccount *corev1.ServiceAccount
	Role           *rbacv1.Role
	Binding        *rbacv1.RoleBinding
	CronJob        *batchv1.CronJob
}

// maxGCAccountNamespace is as much of the namespace as a Google service
// account ID holds (at most 30 characters) beside "gc-" and "-<6 hex>".
const maxGCAccountNamespace = 30 - len("gc-") - 1 - 6

// GCAccountID is the account ID of the Google service account fleet gc of
// the fleet in namespace acts as on GKE cluster: "gc-<namespace>-<hash>",
// the namespace cut to fit, the hash the first 6 hex digits of the SHA-256
// of "<cluster>/<namespace>", which keeps apart fleets whose cut
// namespaces agree and clusters that share a project.
func GCAccountID(cluster, namespace string) string {
	sum := sha256.Sum256([]byte(cluster + "/" + namespace))
	ns := namespace
	if len(ns) > maxGCAccountNamespace {
		ns = strings.TrimRight(ns[:maxGCAccountNamespace], "-")
	}
	return "gc-" + ns + "-" + hex.EncodeToString(sum[:])[:6]
}

// GCAccountEmail is the email of GCAccountID in project.
func GCAccountEmail(project, cluster, namespace string) string {
	return GCAccountID(cluster, namespace) + "@" + project + ".iam.gserviceaccount.com"
}

// planGC builds the fleet's gc objects. They run the fleet's gc image
// (sharedFleets[].images.gc; by default the release's fleet image, which
// make image builds; its entrypoint is the fleet binary).
// account is the Google service account gc acts as (CloudPlan.GC).
func planGC(p *FleetPlan, account string) (*GCPlan, error) {
	if account == "" {
		return nil, fmt.Errorf("fleet gc of shared fleet %s has no cloud identity: the platform declares none for namespace %s (shared fleets run on gke, whose platform does)", p.Spec.Name, p.Namespace)
	}
	image := p.Spec.Images.OrDefault().GC
	name := GCName(p.Namespace)
	labels := map[string]string{naming.LabelName: "fleet-gc", resources.LabelManagedBy: resources.ManagedBy}
	grace := p.Monitoring.GCGrace()
	project, zones, err := GCScope(p.Spec)
	if err != nil {
		return nil, err
	}
	args := []string{"gc", "--apply", "-o", "json",
		"--provider", "gce", "--project", project, "--zones", strings.Join(zones, ","),
		"--source", vmfleet.HostKubernetes, "--namespace", p.Namespace,
		"--grace", grace.String(),
		"--event-cronjob", name,
	}
	sel := vmfleet.FleetSelector(p.Namespace)
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		args = append(args, "--autoscaled", k+"="+sel[k])
	}
	sa := &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace, Labels: labels},
	}
	sa.Annotations = map[string]string{naming.AnnotationWorkloadIdentity: account}
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace, Labels: labels},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"list"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
		},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: p.Namespace}},
	}
	cj := &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace, Labels: labels},
		Spec: batchv1.CronJobSpec{
			Schedule:                   GCSchedule(),
			ConcurrencyPolicy:          batchv1.ForbidConcurrent,
			SuccessfulJobsHistoryLimit: ptr.To[int32](3),
			FailedJobsHistoryLimit:     ptr.To[int32](3),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				BackoffLimit:          ptr.To[int32](0),
				ActiveDeadlineSeconds: ptr.To[int64](600),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: name,
						RestartPolicy:      corev1.RestartPolicyNever,
						SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532)},
						Containers: []corev1.Container{{
							Name: "fleet-gc", Image: image, Args: args,
							Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}},
							SecurityContext: &corev1.SecurityContext{
								AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
								Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							},
						}},
					},
				},
			}},
		},
	}
	return &GCPlan{ServiceAccount: sa, Role: role, Binding: binding, CronJob: cj}, nil
}
