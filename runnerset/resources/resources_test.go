package resources

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

var tokenRef = v1alpha1.SecretKeyRef{Name: "build-token", Key: "tok"}

func rs() *v1alpha1.RunnerSet {
	return &v1alpha1.RunnerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"},
		Spec: v1alpha1.RunnerSetSpec{
			Tags:   []string{"team-a"},
			GitLab: v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "build-token", Key: "tok"}},
		},
	}
}

func TestDeploymentDrainsInsteadOfKilling(t *testing.T) {
	r := rs()
	r.Spec.Managers.ShutdownTimeout = &metav1.Duration{Duration: 90 * time.Minute}
	r.Spec.Managers.Replicas = ptr.To[int32](3)
	d := Deployment(r, "gitlab-runner:v19.4.0", "abc", tokenRef)
	pod := d.Spec.Template.Spec
	if got := *pod.TerminationGracePeriodSeconds; got != 5400 {
		t.Errorf("terminationGracePeriodSeconds = %d, want 5400 (the shutdown timeout)", got)
	}
	pre := strings.Join(pod.Containers[0].Lifecycle.PreStop.Exec.Command, " ")
	if !strings.Contains(pre, "kill -QUIT 1") || !strings.Contains(pre, "while kill -0 1") {
		t.Errorf("preStop must send SIGQUIT and wait for the runner to exit: %q", pre)
	}
	if s := d.Spec.Strategy.RollingUpdate; s.MaxUnavailable.IntValue() != 0 || s.MaxSurge.IntValue() != 1 {
		t.Errorf("rollout may drop capacity: %+v", s)
	}
	if *d.Spec.Replicas != 3 || d.Spec.Template.Annotations[AnnotationConfigHash] != "abc" {
		t.Errorf("replicas %d, hash %q", *d.Spec.Replicas, d.Spec.Template.Annotations[AnnotationConfigHash])
	}
	if pod.OS == nil || pod.OS.Name != corev1.Linux {
		t.Error("pod OS unset")
	}
}

func TestTheTokenReachesOnlyTheInitContainerThroughItsSecret(t *testing.T) {
	d := Deployment(rs(), "img", "h", tokenRef)
	init := d.Spec.Template.Spec.InitContainers[0]
	ref := init.Env[0].ValueFrom.SecretKeyRef
	if ref.Name != "build-token" || ref.Key != "tok" {
		t.Errorf("token source %+v", ref)
	}
	script := strings.Join(init.Command, " ")
	if !strings.Contains(script, runnerconfig.TokenPlaceholder) || !strings.Contains(script, "umask 077") {
		t.Errorf("init script: %q", script)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if len(c.Env) > 0 || len(c.EnvFrom) > 0 {
			t.Errorf("container %s gets environment; the token must reach it only through config.toml", c.Name)
		}
	}
}

func TestManagerContainersAreLockedDown(t *testing.T) {
	d := Deployment(rs(), "img", "h", tokenRef)
	pod := d.Spec.Template.Spec
	if !*pod.SecurityContext.RunAsNonRoot {
		t.Error("manager may run as root")
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		sc := c.SecurityContext
		if *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s: %+v", c.Name, sc)
		}
	}
}

func TestManagerRoleIsNamespacedAndLeastPrivilege(t *testing.T) {
	role := ManagerRole(rs())
	if role.Namespace != "team-a" {
		t.Errorf("role namespace %q", role.Namespace)
	}
	allowed := map[string]bool{}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				allowed[res+":"+v] = true
				if v == "*" || res == "*" {
					t.Errorf("wildcard in %+v", r)
				}
			}
		}
		if len(r.APIGroups) != 1 || r.APIGroups[0] != "" {
			t.Errorf("rule outside the core group: %+v", r)
		}
	}
	for _, need := range []string{"pods:create", "pods:delete", "pods:watch", "pods/exec:create", "pods/attach:create", "pods/log:get", "secrets:create"} {
		if !allowed[need] {
			t.Errorf("the kubernetes executor needs %s", need)
		}
	}
	for _, never := range []string{"secrets:list", "secrets:watch", "pods:update", "nodes:get", "serviceaccounts:create"} {
		if allowed[never] {
			t.Errorf("manager Role grants %s, which the executor does not need", never)
		}
	}
}

func TestJobServiceAccountCarriesOnlyTheIdentityAsked(t *testing.T) {
	r := rs()
	if sa := JobServiceAccount(r); sa.Annotations[AnnotationIRSA] != "" || sa.Annotations[AnnotationWorkloadIdentity] != "" {
		t.Errorf("identity without asking: %v", sa.Annotations)
	}
	r.Spec.Jobs.Identity = &v1alpha1.JobIdentity{GCPServiceAccount: "ci@p.iam.gserviceaccount.com"}
	sa := JobServiceAccount(r)
	if sa.Annotations[AnnotationWorkloadIdentity] != "ci@p.iam.gserviceaccount.com" || sa.Annotations[AnnotationIRSA] != "" {
		t.Errorf("annotations %v", sa.Annotations)
	}
	if *sa.AutomountServiceAccountToken {
		t.Error("job pods get a Kubernetes API token")
	}
}

func TestSpecHashChangesWithTheSpecOnly(t *testing.T) {
	a := Deployment(rs(), "img", "h1", tokenRef)
	b := Deployment(rs(), "img", "h1", tokenRef)
	c := Deployment(rs(), "img", "h2", tokenRef)
	if SpecHash(a) == "" || SpecHash(a) != SpecHash(b) {
		t.Errorf("equal specs, hashes %q %q", SpecHash(a), SpecHash(b))
	}
	if SpecHash(a) == SpecHash(c) {
		t.Error("different config hash, same spec hash")
	}
}

func TestConfigHashRollsOnTokenChangeWithoutRevealingIt(t *testing.T) {
	cfg := []byte("concurrent = 1\n")
	h1, h2 := ConfigHash(cfg, "glrt-one"), ConfigHash(cfg, "glrt-two")
	if h1 == h2 {
		t.Error("a token change would not roll the managers")
	}
	if h1 != ConfigHash(cfg, "glrt-one") {
		t.Error("ConfigHash is not deterministic")
	}
	if strings.Contains(h1, "glrt") || len(h1) != 16 {
		t.Errorf("hash %q", h1)
	}
}

func TestObjectsAreLabelledForTheFilteredCache(t *testing.T) {
	r := rs()
	for _, o := range []interface{ GetLabels() map[string]string }{
		JobServiceAccount(r), ManagerServiceAccount(r), ManagerRole(r), ManagerRoleBinding(r),
		ConfigMap(r, nil), Deployment(r, "i", "h", tokenRef), PodDisruptionBudget(r),
	} {
		if o.GetLabels()[LabelManagedBy] != ManagedBy || o.GetLabels()[LabelRunnerSet] != "build" {
			t.Errorf("%T labels %v", o, o.GetLabels())
		}
	}
}
