package infra_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/runnerfleet/runnerfleet/infra"
	"github.com/runnerfleet/runnerfleet/infra/infratest"
	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/stacks"
)

// The program declares exactly the stack's one plan (kube.PlanStack, which
// fleet up --kubeconfig applies too), for every committed stack: no
// Kubernetes object of the Fleet component comes from anywhere else, and
// none of the plan is left out.
func TestTheProgramDeclaresTheStacksPlan(t *testing.T) {
	if got := stacks.Names(); len(got) < 3 {
		t.Fatalf("stacks: %v, want the committed stacks", got)
	}
	for _, stack := range stacks.Names() {
		t.Run(stack, func(t *testing.T) {
			secrets, ok := stackSecrets[stack]
			if !ok {
				t.Fatalf("no secrets for stack %s in stackSecrets: add its config secrets", stack)
			}
			m := infratest.NewMocks(t)
			cfg, secretKeys := stackConfig(t, stack, secrets)
			opts := infra.Options{}
			f := decodeStack(t, stack)
			if f.Platform == stackconfig.PlatformLocal {
				opts.Kubeconfig = kubeconfig(t)
			}
			if err := infratest.Run(m, stack, cfg, secretKeys, infra.ProgramWith(opts)); err != nil {
				t.Fatal(err)
			}
			declared := FleetObjects(m)
			p, err := kube.PlanStack(kube.PlanArgs{Fleet: f, Cluster: &kube.Cluster{InCluster: f.Platform != stackconfig.PlatformLocal},
				Labels: kube.Labels(stack), ManagerPool: true})
			if err != nil {
				t.Fatal(err)
			}
			var planned []string
			for _, o := range p.All() {
				planned = append(planned, objectKey(o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName()))
			}
			sort.Strings(planned)
			if !slices.Equal(declared, planned) {
				t.Errorf("the program declares\n  %s\nthe plan has\n  %s", strings.Join(declared, "\n  "), strings.Join(planned, "\n  "))
			}
			if len(planned) < 6 {
				t.Errorf("the plan of %s has %d objects: %v", stack, len(planned), planned)
			}
		})
	}
}

// FleetObjects are the Kubernetes objects the program declares under its
// Fleet component, as sorted "Kind namespace/name".
func FleetObjects(m *infratest.Mocks) []string {
	var out []string
	for _, r := range m.Resources() {
		i := strings.LastIndex(r.Parent, "::")
		if !r.Custom || !strings.HasPrefix(r.Token, "kubernetes:") || i < 0 || !strings.HasSuffix(r.Parent[:i], "runnerfleet:kube:Fleet") {
			continue // not a Kubernetes object of the Fleet component
		}
		kind := r.Token[strings.LastIndex(r.Token, ":")+1:]
		str := func(path string) string {
			if v := r.Input(path); v.IsString() {
				return v.StringValue()
			}
			return ""
		}
		out = append(out, objectKey(kind, str("metadata.namespace"), str("metadata.name")))
	}
	sort.Strings(out)
	return out
}

func objectKey(kind, ns, name string) string { return fmt.Sprintf("%s %s/%s", kind, ns, name) }

func decodeStack(t *testing.T, stack string) *stackconfig.Fleet {
	t.Helper()
	b, err := stacks.Config(stack)
	if err != nil {
		t.Fatal(err)
	}
	config, err := stackconfig.StackFile(b)
	if err != nil {
		t.Fatal(err)
	}
	f, err := stackconfig.Decode(config["runnerfleet:"+stackconfig.Key], stack)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A stack whose controller.image is pinned by digest runs the controller
// at that digest: the plan the program declares and fleet up applies takes
// the reference as the stack config gives it.
func TestAPinnedControllerImageReachesTheDeployment(t *testing.T) {
	f := decodeStack(t, "gke-shared")
	f.Controller.Image = "europe-west1-docker.pkg.dev/ci-platform-example/runnerfleet/runnerset-controller@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	p, err := kube.PlanStack(kube.PlanArgs{Fleet: f, Cluster: &kube.Cluster{InCluster: true}, Labels: kube.Labels("gke-shared"), ManagerPool: true})
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, o := range p.Controller {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == kube.ControllerName {
			for _, c := range d.Spec.Template.Spec.Containers {
				images = append(images, c.Image)
			}
		}
	}
	if len(images) != 1 || images[0] != f.Controller.Image {
		t.Errorf("the controller's Deployment runs %v, want %s", images, f.Controller.Image)
	}
}
