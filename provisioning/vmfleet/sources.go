package vmfleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Kubernetes labels and annotations of managers that run in a cluster (the
// shared fleet's Helm releases): infra/sharedfleet writes them, KubeSource
// reads them.
const (
	// PodLabelManager names the manager on its pods and Deployment: the
	// Helm release, the same name as the VMs' LabelManager.
	PodLabelManager = naming.LabelRelease
	// AnnotationIdleTime on a manager's pods is the longest IdleTime of
	// its config.toml, a Go duration: fleet gc refuses a grace below it.
	AnnotationIdleTime = naming.AnnotationIdleTime
	// PodLabelIncarnation on a manager's pods names the incarnation of a
	// manager whose docker+machine state lives on a volume of its own (the
	// volume's claim): every pod that mounts it is that incarnation. Pods
	// without it are incarnations of their own (IncarnationOfPod).
	PodLabelIncarnation = naming.LabelIncarnation
)

// KubeSource proves Kubernetes-hosted managers: every pod labelled
// PodLabelManager is an incarnation of its manager (terminating pods
// included: they drain and still own their VMs), and every Deployment so
// labelled proves the manager's name for VMs that carry no incarnation.
type KubeSource struct {
	Client client.Reader
	// Namespaces to look in; empty: every namespace.
	Namespaces []string
	// Where names the cluster in messages (the kubeconfig context).
	Where string
}

func (s *KubeSource) Host() string { return HostKubernetes }

func (s *KubeSource) Describe() string {
	ns := "every namespace"
	if len(s.Namespaces) > 0 {
		ns = "namespaces " + strings.Join(s.Namespaces, ", ")
	}
	return fmt.Sprintf("pods and Deployments labelled %s in %s of %s", PodLabelManager, ns, s.Where)
}

func (s *KubeSource) Managers(ctx context.Context) ([]Manager, error) {
	namespaces := s.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	var out []Manager
	for _, ns := range namespaces {
		opts := []client.ListOption{client.HasLabels{PodLabelManager}}
		if ns != "" {
			opts = append(opts, client.InNamespace(ns))
		}
		var pods corev1.PodList
		if err := s.Client.List(ctx, &pods, opts...); err != nil {
			return nil, fmt.Errorf("listing manager pods: %w", err)
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue // its containers are gone, and its state with them
			}
			m := Manager{Name: p.Labels[PodLabelManager], Incarnation: IncarnationOfPod(p.Name)}
			if inc := p.Labels[PodLabelIncarnation]; inc != "" {
				m.Incarnation = inc
			}
			if v := p.Annotations[AnnotationIdleTime]; v != "" {
				d, err := time.ParseDuration(v)
				if err != nil {
					return nil, fmt.Errorf("pod %s/%s: annotation %s=%q is not a duration", p.Namespace, p.Name, AnnotationIdleTime, v)
				}
				m.IdleTime = d
			}
			out = append(out, m)
		}
		var deps appsv1.DeploymentList
		if err := s.Client.List(ctx, &deps, opts...); err != nil {
			return nil, fmt.Errorf("listing manager Deployments: %w", err)
		}
		for _, d := range deps.Items {
			out = append(out, Manager{Name: d.Labels[PodLabelManager]})
		}
	}
	return out, nil
}

// VMSource proves VM-hosted managers: the running VMs labelled
// LabelRole=RoleManager, by name. Their docker+machine state is on their
// boot disk, which lives as long as the VM, so the name is the identity.
type VMSource struct {
	Compute providers.Compute
}

func (s *VMSource) Host() string { return HostVM }

func (s *VMSource) Describe() string {
	return fmt.Sprintf("VMs labelled %s=%s", LabelRole, RoleManager)
}

func (s *VMSource) Managers(ctx context.Context) ([]Manager, error) {
	vms, err := s.Compute.ListInstances(ctx, map[string]string{LabelRole: RoleManager})
	if err != nil {
		return nil, fmt.Errorf("listing manager VMs: %w", err)
	}
	var out []Manager
	for _, vm := range vms {
		if vm.State == providers.StateTerminated {
			continue
		}
		out = append(out, Manager{Name: vm.Name, Incarnation: AnyIncarnation})
	}
	return out, nil
}

// AnyIncarnation as a Manager's Incarnation proves every VM of its name owned.
const AnyIncarnation = "*"
