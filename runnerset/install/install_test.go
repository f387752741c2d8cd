package install_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/rbac"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

func TestDefaultsInstallTheReleaseHardened(t *testing.T) {
	objs, err := install.Objects(install.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var d *appsv1.Deployment
	executor := false
	for _, o := range objs {
		kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind)
		if o.GetObjectKind().GroupVersionKind().Kind == "" {
			t.Errorf("%T has no TypeMeta", o)
		}
		if x, ok := o.(*appsv1.Deployment); ok {
			d = x
		}
		if cr, ok := o.(*rbacv1.ClusterRole); ok && cr.Name == install.Name {
			want, _ := rbac.ClusterRole()
			if !equality.Semantic.DeepEqual(cr.Rules, want.Rules) {
				t.Error("the ClusterRole's rules are not the generated ones")
			}
		}
		if cr, ok := o.(*rbacv1.ClusterRole); ok && cr.Name == resources.ExecutorClusterRole {
			executor = true
			if !equality.Semantic.DeepEqual(cr.Rules, resources.ExecutorRules()) {
				t.Error("the executor's ClusterRole does not hold resources.ExecutorRules")
			}
		}
	}
	if want := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ClusterRole", "ClusterRole", "Deployment", "Service", "PodDisruptionBudget"}; !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
	if !executor {
		t.Errorf("no ClusterRole %s: the managers could not run jobs", resources.ExecutorClusterRole)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "ghcr.io/runnerfleet/runnerset-controller:"+version.Tag {
		t.Errorf("image %s, want the release's", c.Image)
	}
	if !slices.Contains(c.Args, "--leader-elect=true") || *d.Spec.Replicas != 2 {
		t.Errorf("args %v replicas %d: want leader election and two replicas", c.Args, *d.Spec.Replicas)
	}
	ps := d.Spec.Template.Spec.SecurityContext
	if !*ps.RunAsNonRoot || *c.SecurityContext.AllowPrivilegeEscalation || !*c.SecurityContext.ReadOnlyRootFilesystem ||
		!slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("the controller is not hardened: %+v %+v", ps, c.SecurityContext)
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %v", c.Resources)
	}
}

func TestOptionsRefusedByName(t *testing.T) {
	for name, tc := range map[string]struct {
		mut  func(*install.Options)
		want string
	}{
		"namespace": {func(o *install.Options) { o.Namespace = "Runner_Fleet" }, "namespace"},
		"image":     {func(o *install.Options) { o.Image = "" }, "image"},
		"replicas":  {func(o *install.Options) { o.Replicas = 0 }, "replicas"},
		"log level": {func(o *install.Options) { o.LogLevel = "verbose" }, "logLevel"},
	} {
		o := install.Defaults()
		tc.mut(&o)
		if _, err := install.Objects(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, tc.want)
		}
	}
}

// Options never share maps or slices with what they build.
func TestObjectsDoNotAlias(t *testing.T) {
	o := install.Defaults()
	o.NodeSelector = map[string]string{"pool": "system"}
	o.Labels = map[string]string{"team": "platform"}
	objs, err := install.Objects(o)
	if err != nil {
		t.Fatal(err)
	}
	o.NodeSelector["pool"] = "spot"
	o.Labels["team"] = "other"
	for _, obj := range objs {
		if obj.GetLabels()["team"] != "platform" {
			t.Errorf("%T labels follow the options", obj)
		}
		if d, ok := obj.(*appsv1.Deployment); ok && d.Spec.Template.Spec.NodeSelector["pool"] != "system" {
			t.Error("the Deployment's node selector follows the options")
		}
	}
}

// The errors an API server returns while it settles after an install are
// the ones installers apply again on, and no others: a RunnerSet the API
// server refuses for what it says stays refused.
func TestSettlingIsTheAPIServersTransientRefusalsOnly(t *testing.T) {
	kind := v1alpha1.GroupVersion.WithKind("RunnerSet")
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"kind not served yet", &meta.NoKindMatchError{GroupKind: kind.GroupKind(), SearchedVersions: []string{kind.Version}}, true},
		// What kube-apiserver's MutatingAdmissionPolicy dispatcher returns
		// before it has the new kind's schema.
		{"policy dispatcher without the kind", fmt.Errorf("RunnerSet team-a/build: %w", apierrors.NewServiceUnavailable("Resource kind "+kind.String()+" not found. There can be a delay between when CustomResourceDefinitions are created and when they are available.")), true},
		{"invalid", apierrors.NewInvalid(kind.GroupKind(), "build", nil), false},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Group: kind.Group, Resource: "runnersets"}, "build", fmt.Errorf("no")), false},
		{"other", fmt.Errorf("connection refused"), false},
	} {
		if got := install.Settling(c.err); got != c.want {
			t.Errorf("%s: Settling(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
