package resources

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

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
	d := Deployment(r, "gitlab-runner:v19.4.0", "abc", "team-a-build-j6")
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

func TestTheManagersReadConfigOnlyFromTheControllersSecretWithoutAShell(t *testing.T) {
	d := Deployment(rs(), "img", "h", "team-a-build-j6")
	pod := d.Spec.Template.Spec
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		if len(c.Env) > 0 || len(c.EnvFrom) > 0 {
			t.Errorf("container %s gets environment; the token must reach it only through config.toml", c.Name)
		}
	}
	// The team's Secret (build-token) is mounted nowhere: only the config
	// Secret the controller writes after validating the token.
	var secrets []string
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secrets = append(secrets, v.Secret.SecretName)
		}
		if v.ConfigMap != nil || v.Projected != nil {
			t.Errorf("volume %s: config.toml comes from the controller's Secret only", v.Name)
		}
	}
	if len(secrets) != 1 || secrets[0] != "build-config" {
		t.Errorf("the pod mounts Secrets %v, want only build-config", secrets)
	}
	init := pod.InitContainers[0]
	if init.Command[0] != "cp" || len(init.Command) != 3 || len(init.Args) > 0 {
		t.Errorf("the init container must copy config.toml without a shell: %q", init.Command)
	}
}

// hostileTokens could each rewrite config.toml if the token were put in by
// text substitution (sed, a template): a sed delimiter with commands, an
// ampersand, a newline with a new key, TOML quotes, a new table.
var hostileTokens = []string{
	"glrt-abc|;s|https://gitlab.example.com|https://evil.example.com",
	"glrt-&&&",
	"glrt-ok\nurl = \"https://evil.example.com\"",
	"glrt-ok\n",
	"glrt-\"\nurl = \"https://evil.example.com\"\n#",
	"glrt-'''\n[[runners]]\nurl = 'https://evil.example.com'",
	`glrt-\"; executor = "shell`,
}

func TestAnyTokenChangesOnlyTheTokenOfConfigToml(t *testing.T) {
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := runnerconfig.ForRunnerSet(rs(), nil, runnerconfig.JobPlacement{})
	cfg.Runners[0].URL = "https://gitlab.example.com"
	template, err := runnerconfig.Render(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if _, err := toml.Decode(string(template), &want); err != nil {
		t.Fatal(err)
	}
	for _, tok := range hostileTokens {
		out, err := runnerconfig.Render(runnerconfig.WithToken(cfg, tok))
		if err != nil {
			t.Fatalf("%q: %v", tok, err)
		}
		s := ConfigSecret(rs(), out, ConfigHash(template, tok))
		body := s.Data[ConfigKey]
		if err := schema.Check(body); err != nil {
			t.Errorf("%q: gitlab-runner would not accept config.toml: %v", tok, err)
		}
		var got map[string]any
		if _, err := toml.Decode(string(body), &got); err != nil {
			t.Fatalf("%q: config.toml does not parse: %v", tok, err)
		}
		runners := got["runners"].([]map[string]any)
		if len(runners) != 1 || runners[0]["token"] != tok {
			t.Fatalf("%q: the token read back is %q (%d runners)", tok, runners[0]["token"], len(runners))
		}
		runners[0]["token"] = runnerconfig.TokenPlaceholder
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q changed more than the token:\n%s", tok, body)
		}
		if strings.Contains(fmt.Sprint(s.Annotations, s.Labels), "glrt") {
			t.Errorf("%q: the token shows in the Secret's metadata: %v", tok, s.Annotations)
		}
	}
}

// TestSedSubstitutionWasInjectable is the negative control: the old init
// container's sed "s|placeholder|${RUNNER_TOKEN}|", run on the same
// config.toml, lets the first hostile token rewrite url.
func TestSedSubstitutionWasInjectable(t *testing.T) {
	cfg := runnerconfig.ForRunnerSet(rs(), nil, runnerconfig.JobPlacement{})
	cfg.Runners[0].URL = "https://gitlab.example.com"
	template, _ := runnerconfig.Render(cfg)
	cmd := exec.Command("/bin/sh", "-c", `sed "s|`+runnerconfig.TokenPlaceholder+`|${RUNNER_TOKEN}|"`)
	cmd.Env = append(os.Environ(), "RUNNER_TOKEN="+hostileTokens[0])
	cmd.Stdin = strings.NewReader(string(template))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sed: %v", err)
	}
	if !strings.Contains(string(out), "evil.example.com") {
		t.Fatalf("sed was not injectable after all:\n%s", out)
	}
}

func TestManagerContainersAreLockedDown(t *testing.T) {
	d := Deployment(rs(), "img", "h", "team-a-build-j6")
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

func TestManagersJobRightsAreOnlyInTheJobsNamespace(t *testing.T) {
	allowed := map[string]bool{}
	for _, r := range ExecutorRules() {
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
			t.Errorf("the executor's rules grant %s, which the executor does not need", never)
		}
	}
	// A RoleBinding (never a ClusterRoleBinding) confines the executor's
	// ClusterRole to the jobs namespace.
	b := ManagerExecutorRoleBinding(rs(), "team-a-build-j6")
	if s := b.Subjects[0]; b.Namespace != "team-a-build-j6" || s.Namespace != "team-a" || s.Name != "build-manager" || len(b.Subjects) != 1 {
		t.Errorf("jobs RoleBinding %s binds %+v", b.Namespace, b.Subjects)
	}
	if b.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ExecutorClusterRole}) {
		t.Errorf("jobs RoleBinding refers to %+v", b.RoleRef)
	}

	// In the team's namespace only while the old layout drains: the
	// executor's rules, and the config Secret by name it always had.
	legacy := LegacyManagerRole(rs())
	if legacy.Namespace != "team-a" || len(legacy.Rules) != 1+len(ExecutorRules()) {
		t.Fatalf("team Role in %q: %+v", legacy.Namespace, legacy.Rules)
	}
	if r := legacy.Rules[0]; !slices.Equal(r.Resources, []string{"secrets"}) || !slices.Equal(r.ResourceNames, []string{"build-config"}) || !slices.Equal(r.Verbs, []string{"get"}) {
		t.Errorf("team Role rule %+v, want get on Secret build-config", r)
	}
	if b := LegacyManagerRoleBinding(rs()); b.Namespace != "team-a" || b.RoleRef.Name != legacy.Name || b.Subjects[0].Name != "build-manager" {
		t.Errorf("team RoleBinding %s binds %+v to %+v", b.Namespace, b.Subjects, b.RoleRef)
	}
}

func TestTheJobsNamespaceIsLabelledAsTheRunnerSetsAndHeldToBaseline(t *testing.T) {
	r := rs()
	ns := JobsNamespace(r, "team-a-build-j6")
	l := ns.Labels
	if l[LabelOwnerNamespace] != "team-a" || l[LabelOwnerName] != "build" || l[LabelManagedBy] != ManagedBy {
		t.Errorf("labels %v", l)
	}
	if l[LabelPodSecurityEnforce] != "baseline" {
		t.Errorf("pod security %q, want baseline", l[LabelPodSecurityEnforce])
	}
	r.Spec.Jobs.Privileged = true
	if got := JobsNamespace(r, "x").Labels[LabelPodSecurityEnforce]; got != "privileged" {
		t.Errorf("privileged jobs get pod security %q", got)
	}
	np := JobsNetworkPolicy(rs(), "team-a-build-j6")
	if np.Namespace != "team-a-build-j6" || len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 ||
		np.Spec.Ingress[0].From[0].NamespaceSelector != nil || np.Spec.Ingress[0].From[0].PodSelector == nil {
		t.Errorf("NetworkPolicy must admit only pods of its own namespace: %+v", np.Spec)
	}
}

func TestJobServiceAccountCarriesOnlyTheIdentityAsked(t *testing.T) {
	r := rs()
	if sa := JobServiceAccount(r, "team-a-build-j6"); sa.Annotations[AnnotationIRSA] != "" || sa.Annotations[AnnotationWorkloadIdentity] != "" {
		t.Errorf("identity without asking: %v", sa.Annotations)
	}
	r.Spec.Jobs.Identity = &v1alpha1.JobIdentity{GCPServiceAccount: "ci@p.iam.gserviceaccount.com"}
	sa := JobServiceAccount(r, "team-a-build-j6")
	if sa.Annotations[AnnotationWorkloadIdentity] != "ci@p.iam.gserviceaccount.com" || sa.Annotations[AnnotationIRSA] != "" {
		t.Errorf("annotations %v", sa.Annotations)
	}
	if *sa.AutomountServiceAccountToken {
		t.Error("job pods get a Kubernetes API token")
	}
}

func TestManagerServiceAccountCarriesTheJobIdentityOnlyForACloudCache(t *testing.T) {
	const arn = "arn:aws:iam::123456789012:role/ci/team-a/build"
	const gsa = "team-a-1a2b3c@p.iam.gserviceaccount.com"
	s3 := &v1alpha1.CacheSpec{Type: v1alpha1.CacheTypeS3, Bucket: "ci-cache", Region: "eu-west-1"}
	gcs := &v1alpha1.CacheSpec{Type: v1alpha1.CacheTypeGCS, Bucket: "ci-cache"}
	aws := &v1alpha1.JobIdentity{AWSRoleARN: arn}
	gcp := &v1alpha1.JobIdentity{GCPServiceAccount: gsa}
	classWith := func(c *v1alpha1.CacheSpec) *v1alpha1.RunnerClass {
		return &v1alpha1.RunnerClass{Spec: v1alpha1.RunnerClassSpec{Defaults: v1alpha1.RunnerClassDefaults{Cache: c}}}
	}
	for _, tc := range []struct {
		name      string
		identity  *v1alpha1.JobIdentity
		own       *v1alpha1.CacheSpec
		class     *v1alpha1.RunnerClass
		key, want string // "" key: no identity annotation at all
	}{
		{name: "S3 cache of the RunnerSet", identity: aws, own: s3, key: AnnotationIRSA, want: arn},
		{name: "S3 cache of the class", identity: aws, class: classWith(s3), key: AnnotationIRSA, want: arn},
		{name: "GCS cache of the RunnerSet", identity: gcp, own: gcs, key: AnnotationWorkloadIdentity, want: gsa},
		{name: "GCS cache of the class", identity: gcp, class: classWith(gcs), key: AnnotationWorkloadIdentity, want: gsa},
		{name: "no cache", identity: aws, class: classWith(nil)},
		{name: "no class", identity: aws},
		{name: "a cache but no identity", own: s3, class: classWith(s3)},
		{name: "an identity the cache does not use", identity: gcp, own: s3},
		{name: "the RunnerSet's cache wins over the class's", identity: aws, own: gcs, class: classWith(s3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rs()
			r.Spec.Jobs.Identity, r.Spec.Cache = tc.identity, tc.own
			sa := ManagerServiceAccountFor(r, v1alpha1.Effective(r, tc.class))
			for _, k := range []string{AnnotationIRSA, AnnotationWorkloadIdentity} {
				want := ""
				if k == tc.key {
					want = tc.want
				}
				if got := sa.Annotations[k]; got != want {
					t.Errorf("manager ServiceAccount %s = %q, want %q", k, got, want)
				}
			}
			if tc.key != "" {
				// The identity is the job's own, the one the class's policy allowed.
				if job := JobServiceAccount(r, "team-a-build-j6"); job.Annotations[tc.key] != sa.Annotations[tc.key] {
					t.Errorf("manager %s %q, job %q", tc.key, sa.Annotations[tc.key], job.Annotations[tc.key])
				}
			}
			if sa.Name != "build-manager" || sa.AutomountServiceAccountToken != nil {
				t.Errorf("manager ServiceAccount %s, automount %v: the managers need their Kubernetes token", sa.Name, sa.AutomountServiceAccountToken)
			}
		})
	}
	// Without its class, only the RunnerSet's own cache counts.
	r := rs()
	r.Spec.Jobs.Identity = aws
	if a := ManagerServiceAccountFor(r, v1alpha1.Effective(r, nil)).Annotations; a[AnnotationIRSA] != "" {
		t.Errorf("no cache, yet the manager ServiceAccount has %v", a)
	}
	r.Spec.Cache = s3
	if got := ManagerServiceAccountFor(r, v1alpha1.Effective(r, nil)).Annotations[AnnotationIRSA]; got != arn {
		t.Errorf("manager ServiceAccount IRSA annotation %q with the RunnerSet's own S3 cache, want %q", got, arn)
	}
}

func TestManagersRollWhenTheJobIdentityChanges(t *testing.T) {
	r := rs()
	if _, ok := Deployment(r, "img", "h", "team-a-build-j6").Spec.Template.Annotations[AnnotationIdentityHash]; ok {
		t.Error("identity hash on the managers of a RunnerSet without an identity")
	}
	r.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: "arn:aws:iam::123456789012:role/ci/team-a/build"}
	a := Deployment(r, "img", "h", "team-a-build-j6").Spec.Template.Annotations[AnnotationIdentityHash]
	r.Spec.Jobs.Identity = &v1alpha1.JobIdentity{AWSRoleARN: "arn:aws:iam::123456789012:role/ci/team-a/other"}
	b := Deployment(r, "img", "h", "team-a-build-j6").Spec.Template.Annotations[AnnotationIdentityHash]
	if a == "" || b == "" || a == b {
		t.Errorf("identity hashes %q and %q: a new role would not reach running managers", a, b)
	}
}

func TestSpecHashChangesWithTheSpecOnly(t *testing.T) {
	a := Deployment(rs(), "img", "h1", "team-a-build-j6")
	b := Deployment(rs(), "img", "h1", "team-a-build-j6")
	c := Deployment(rs(), "img", "h2", "team-a-build-j6")
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
		JobServiceAccount(r, "team-a-build-j6"), ManagerServiceAccountFor(r, v1alpha1.Effective(r, nil)), LegacyManagerRole(r), LegacyManagerRoleBinding(r),
		ManagerExecutorRoleBinding(r, "j"), JobsNamespace(r, "j"), JobsNetworkPolicy(r, "j"),
		ConfigSecret(r, nil, "h"), Deployment(r, "i", "h", "team-a-build-j6"), PodDisruptionBudget(r),
	} {
		if o.GetLabels()[LabelManagedBy] != ManagedBy || o.GetLabels()[LabelRunnerSet] != "build" {
			t.Errorf("%T labels %v", o, o.GetLabels())
		}
	}
}

// The cluster autoscaler evicts the pods of a node it scales down with at
// most 10 minutes of grace, whatever terminationGracePeriodSeconds says: a
// manager draining a 3h job must keep its node (safe-to-evict "false").
func TestManagerPodsKeepTheirNodeFromTheClusterAutoscaler(t *testing.T) {
	d := Deployment(rs(), "gitlab-runner:v19.4.0", "abc", "team-a-build-j6")
	if got, ok := d.Spec.Template.Annotations[AnnotationSafeToEvict]; !ok || got != "false" {
		t.Errorf("manager pod template %s = %q (set %v), want \"false\"", AnnotationSafeToEvict, got, ok)
	}
	if AnnotationSafeToEvict != "cluster-autoscaler.kubernetes.io/safe-to-evict" {
		t.Errorf("key %q is not the cluster autoscaler's", AnnotationSafeToEvict)
	}
}

// The managers' NetworkPolicy selects exactly the RunnerSet's manager pods
// and admits pods of any namespace but a jobs namespace: the monitoring's,
// the team's own, never a job's (of this RunnerSet or another team's).
func TestManagersNetworkPolicyAdmitsNoJobsNamespace(t *testing.T) {
	r := rs()
	np := ManagersNetworkPolicy(r)
	if np.Namespace != r.Namespace || len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Fatalf("want an ingress policy in %s: %+v", r.Namespace, np)
	}
	pods, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl := Deployment(r, "img", "hash", "team-a-build-j6").Spec.Template.Labels; !pods.Matches(labels.Set(tmpl)) {
		t.Errorf("the policy does not select the manager pods (%v): %s", tmpl, pods)
	}
	other := rs()
	other.Name = "deploy"
	if tmpl := Deployment(other, "img", "hash", "team-a-deploy-j6").Spec.Template.Labels; pods.Matches(labels.Set(tmpl)) {
		t.Errorf("the policy selects another RunnerSet's managers (%v)", tmpl)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || np.Spec.Ingress[0].From[0].PodSelector != nil ||
		np.Spec.Ingress[0].From[0].IPBlock != nil || len(np.Spec.Ingress[0].Ports) != 0 {
		t.Fatalf("want one rule admitting whole namespaces on every port: %+v", np.Spec.Ingress)
	}
	from, err := metav1.LabelSelectorAsSelector(np.Spec.Ingress[0].From[0].NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, jobs := range []*corev1.Namespace{JobsNamespace(r, "team-a-build-j6"), JobsNamespace(other, "team-a-deploy-j6"), JobsNamespace(&v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "build"}}, "team-b-build-j6")} {
		if from.Matches(labels.Set(jobs.Labels)) {
			t.Errorf("jobs namespace %s (%v) may reach the managers", jobs.Name, jobs.Labels)
		}
	}
	for _, ns := range []map[string]string{{}, {"kubernetes.io/metadata.name": "monitoring"}, {"kubernetes.io/metadata.name": "team-a"}} {
		if !from.Matches(labels.Set(ns)) {
			t.Errorf("a namespace labelled %v may not reach the managers", ns)
		}
	}
}
