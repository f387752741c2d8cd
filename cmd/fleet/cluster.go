package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/infra/kube"
	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/stacks"
)

// fieldOwner is fleet's server-side apply field manager.
const fieldOwner = "fleet"

// clusterStack installs a stack into a cluster the user already has (kind,
// minikube, EKS, GKE): runnerfleet's CRDs, the controller as the chart
// installs it, the stack's RunnerClass and its teams, all server-side
// applied, after checking that every one of them may be written.
type clusterStack struct {
	name           string
	config         []byte
	kubeconfig     string
	context        string
	configFlag     string // --config as given
	stdout, stderr io.Writer
}

func newClusterStack(c common, stdout, stderr io.Writer) (*clusterStack, error) {
	b, err := stackConfigBytes(c)
	if err != nil {
		return nil, err
	}
	return &clusterStack{name: c.stack, config: b, kubeconfig: c.kubeconfig, context: c.context, configFlag: c.config, stdout: stdout, stderr: stderr}, nil
}

// command is a fleet command on this stack in this cluster.
func (s *clusterStack) command(verb string, more ...string) string {
	args := []string{verb, "--stack", s.name}
	if s.configFlag != "" {
		args = append(args, "--config", s.configFlag)
	}
	args = append(args, "--kubeconfig", s.kubeconfig)
	if s.context != "" {
		args = append(args, "--context", s.context)
	}
	return commandLine(append(args, more...)...)
}

// stackConfigBytes is --config, else the stack's config compiled into fleet.
func stackConfigBytes(c common) ([]byte, error) {
	if c.config != "" {
		b, err := os.ReadFile(c.config)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		return b, nil
	}
	return stacks.Config(c.stack)
}

// stackValues are a stack config file's fleet and its plain config values;
// secure holds the keys whose values are Pulumi secrets.
type stackValues struct {
	fleet  *stackconfig.Fleet
	plain  map[string]string
	secure map[string]bool
}

func parseStack(name string, b []byte) (*stackValues, error) {
	config, err := stackconfig.StackFile(b)
	if err != nil {
		return nil, fmt.Errorf("the %s stack config: %w", name, err)
	}
	raw, ok := config["runnerfleet:"+stackconfig.Key]
	if !ok {
		return nil, fmt.Errorf("the %s stack config has no runnerfleet:%s (see stacks/README.md)", name, stackconfig.Key)
	}
	f, err := stackconfig.Decode(raw, name)
	if err != nil {
		return nil, err
	}
	v := &stackValues{fleet: f, plain: map[string]string{}, secure: map[string]bool{}}
	for k, r := range config {
		key, ok := strings.CutPrefix(k, "runnerfleet:")
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(r, &s) == nil {
			v.plain[key] = s
			continue
		}
		var sec struct {
			Secure string `json:"secure"`
		}
		if json.Unmarshal(r, &sec) == nil && sec.Secure != "" {
			v.secure[key] = true
		}
	}
	return v, nil
}

// connect loads the kubeconfig and checks that the cluster answers.
func (s *clusterStack) connect(ctx context.Context) (*rest.Config, client.Client, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: s.kubeconfig}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: s.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		if s.context != "" {
			return nil, nil, fmt.Errorf("--kubeconfig %s --context %s: %w (contexts: %s)", s.kubeconfig, s.context, err, strings.Join(kubeContexts(s.kubeconfig), ", "))
		}
		return nil, nil, fmt.Errorf("--kubeconfig %s: %w", s.kubeconfig, err)
	}
	probe := rest.CopyConfig(cfg)
	probe.Timeout = 15 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(probe)
	if err != nil {
		return nil, nil, err
	}
	if _, err := dc.ServerVersion(); err != nil {
		return nil, nil, fmt.Errorf("the cluster at %s (kubeconfig %s%s) does not answer: %w; check the kubeconfig's server, your network (VPN, a private endpoint) and your credentials; nothing was changed",
			cfg.Host, s.kubeconfig, ctxNote(s.context), err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme()})
	if err != nil {
		return nil, nil, err
	}
	return cfg, c, nil
}

func ctxNote(c string) string {
	if c == "" {
		return ""
	}
	return ", context " + c
}

// kubeContexts lists the contexts of a kubeconfig (completion, errors).
func kubeContexts(path string) []string {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	if path == "" {
		rules = clientcmd.NewDefaultClientConfigLoadingRules()
	}
	cfg, err := rules.Load()
	if err != nil {
		return nil
	}
	var out []string
	for n := range cfg.Contexts {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (s *clusterStack) labels() map[string]string {
	return map[string]string{resources.LabelManagedBy: fieldOwner, naming.LabelStack: s.name}
}

// plan is every object fleet up applies, in order: the stack's one plan
// (kube.PlanStack, which the program declares too) with the controller in
// the cluster, each team's token Secrets filled from the stack config.
// existing says whether a Secret is in the cluster already (for tokens the
// stack config keeps encrypted).
// admissionPolicies says whether the API server serves
// MutatingAdmissionPolicy (install.AdmissionPolicies).
func (s *clusterStack) plan(v *stackValues, image string, admissionPolicies bool, existing func(ns, name string) bool) ([]client.Object, error) {
	f := v.fleet
	if err := s.supported(v); err != nil {
		return nil, err
	}
	p, err := kube.PlanStack(kube.PlanArgs{Fleet: f, Labels: s.labels(), Image: image, AdmissionPolicies: admissionPolicies,
		Cluster: &kube.Cluster{Class: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}, InCluster: true}})
	if err != nil {
		return nil, err
	}
	// A Secret whose token the stack config does not hold in plain text
	// is left as it is in the cluster, or named as missing.
	drop := map[client.Object]bool{}
	var missing []string
	for i, tp := range p.Teams { // the stack config's teams, in order
		t := tp.Team
		for _, sec := range tp.Secrets {
			if val, ok := v.plain[sec.Key]; ok {
				sec.Secret.StringData = map[string]string{"token": val}
				continue
			}
			drop[sec.Secret] = true
			if existing(t.Namespace, sec.Secret.Name) {
				continue
			}
			how := "is not set"
			if v.secure[sec.Key] {
				how = "is a Pulumi secret, which fleet cannot decrypt outside Pulumi"
			}
			missing = append(missing, fmt.Sprintf("%s.teams[%d].%s: runnerfleet:%s %s: create the Secret yourself: kubectl -n %s create secret generic %s --from-literal=token=…",
				stackconfig.Root, i, sec.Field, sec.Key, how, t.Namespace, sec.Secret.Name))
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, errors.New(strings.Join(missing, "\n"))
	}
	var out []client.Object
	for _, o := range p.All() {
		if !drop[o] {
			out = append(out, o)
		}
	}
	return out, nil
}

// supported refuses stacks whose RunnerClass needs what only their platform
// creates.
func (s *clusterStack) supported(v *stackValues) error {
	f := v.fleet
	if f.Platform != stackconfig.PlatformLocal {
		return fmt.Errorf("stack %s is on platform %s, whose RunnerClass names what its platform creates (the node role and cache bucket on eks, the team identities on eks and gke): install its controller with fleet up --kubeconfig on a local-platform stack config, the chart or the manifests, and apply a RunnerClass written for your cluster (examples/%s/runnerclass.yaml); or create the whole platform with pulumi up --stack %s",
			s.name, f.Platform, map[stackconfig.Platform]string{stackconfig.PlatformEKS: "eks", stackconfig.PlatformGKE: "gke"}[f.Platform], s.name)
	}
	return nil
}

// resourceOf maps an object to its API resource: runnerfleet's kinds from
// their CRDs (they may not be installed yet), the others through discovery.
func resourceOf(c client.Client, obj client.Object) (schema.GroupVersionResource, bool, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Group == v1alpha1.GroupVersion.Group {
		defs, err := crds.CRDs()
		if err != nil {
			return schema.GroupVersionResource{}, false, err
		}
		for _, d := range defs {
			if d.Spec.Names.Kind == gvk.Kind {
				return gvk.GroupVersion().WithResource(d.Spec.Names.Plural), d.Spec.Scope == apiextensionsv1.NamespaceScoped, nil
			}
		}
	}
	m, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return schema.GroupVersionResource{}, false, err
	}
	return m.Resource, m.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// servesAdmissionPolicies asks the API server's discovery whether it serves
// install.AdmissionPolicyKind (Kubernetes 1.36 and later): only then does
// fleet up install the drain finalizer's policy; without it the controller
// adds the finalizer itself.
func servesAdmissionPolicies(c client.Client) (bool, error) {
	_, err := c.RESTMapper().RESTMapping(install.AdmissionPolicyKind.GroupKind(), install.AdmissionPolicyKind.Version)
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("asking the API server whether it serves %s: %w", install.AdmissionPolicyKind, err)
	}
	return true, nil
}

// preflight asks the API server whether every write of objs is allowed, and
// whether the ClusterRole's grants are the user's to give, and names every
// missing permission at once.
func preflight(ctx context.Context, c client.Client, objs []client.Object) error {
	var need []perm
	seen := map[perm]bool{}
	add := func(p perm) {
		if !seen[p] {
			seen[p] = true
			need = append(need, p)
		}
	}
	var role *rbacv1.ClusterRole
	for _, o := range objs {
		gvr, namespaced, err := resourceOf(c, o)
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
		ns := ""
		if namespaced {
			ns = o.GetNamespace()
		}
		for _, verb := range []string{"get", "create", "patch"} {
			add(perm{verb, gvr.Group, gvr.Resource, ns})
		}
		if r, ok := o.(*rbacv1.ClusterRole); ok {
			role = r
		}
	}
	allowed := func(p perm) (bool, error) {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: p.verb, Group: p.group, Resource: p.resource, Namespace: p.ns}}}
		if err := c.Create(ctx, r); err != nil {
			return false, fmt.Errorf("asking the API server what you may do (SelfSubjectAccessReview): %w", err)
		}
		return r.Status.Allowed, nil
	}
	var denied []string
	for _, p := range need {
		ok, err := allowed(p)
		if err != nil {
			return err
		}
		if !ok {
			denied = append(denied, p.String())
		}
	}
	// RBAC lets a user create a ClusterRole, and bind it, only with what it
	// grants, unless the user may escalate and bind.
	if role != nil {
		esc, err := allowed(perm{"escalate", rbacv1.GroupName, "clusterroles", ""})
		if err != nil {
			return err
		}
		bind, err := allowed(perm{"bind", rbacv1.GroupName, "clusterroles", ""})
		if err != nil {
			return err
		}
		if !esc || !bind {
			for _, rule := range role.Rules {
				for _, g := range rule.APIGroups {
					for _, res := range rule.Resources {
						for _, verb := range rule.Verbs {
							p := perm{verb, g, res, ""}
							ok, err := allowed(p)
							if err != nil {
								return err
							}
							if !ok {
								denied = append(denied, p.String()+fmt.Sprintf(" (granted by ClusterRole %s: you may only grant what you hold, or need escalate and bind on clusterroles)", role.Name))
							}
						}
					}
				}
			}
		}
	}
	if len(denied) > 0 {
		return fmt.Errorf("forbidden: the kubeconfig's user may not install the stack; nothing was changed. Missing permissions:\n  %s", strings.Join(denied, "\n  "))
	}
	return nil
}

// perm is one verb on one resource, in a namespace or cluster-wide.
type perm struct{ verb, group, resource, ns string }

func (p perm) String() string {
	res := p.resource
	if p.group != "" {
		res += "." + p.group
	}
	where := "cluster-wide"
	if p.ns != "" {
		where = "in namespace " + p.ns
	}
	return fmt.Sprintf("%s %s %s", p.verb, res, where)
}

// toUnstructured turns a typed object into what server-side apply sends.
func toUnstructured(o client.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	u := &unstructured.Unstructured{Object: m}
	u.SetCreationTimestamp(metav1.Time{})
	return u, nil
}

func apply(ctx context.Context, c client.Client, o client.Object, opts ...client.PatchOption) error {
	u, err := toUnstructured(o)
	if err != nil {
		return err
	}
	opts = append([]client.PatchOption{client.FieldOwner(fieldOwner), client.ForceOwnership, client.FieldValidation("Strict")}, opts...)
	if err := c.Patch(ctx, u, client.Apply, opts...); err != nil {
		return fmt.Errorf("%s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, name(o.GetNamespace(), o.GetName()), err)
	}
	return nil
}

// applySettled applies o, and tries again for install.SettleTimeout while
// the API server settles after the CRDs and the admission policy were
// applied (install.Settling).
func applySettled(ctx context.Context, c client.Client, o client.Object) error {
	for deadline := time.Now().Add(install.SettleTimeout); ; {
		err := apply(ctx, c, o)
		if err == nil {
			return nil
		}
		if !install.Settling(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (s *clusterStack) Up(ctx context.Context, o upOptions) error {
	start := time.Now()
	v, err := parseStack(s.name, s.config)
	if err != nil {
		return err
	}
	if err := s.supported(v); err != nil {
		return err
	}
	_, c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	exists := func(ns, n string) bool {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &corev1.Secret{}) == nil
	}
	policies, err := servesAdmissionPolicies(c)
	if err != nil {
		return err
	}
	objs, err := s.plan(v, o.image, policies, exists)
	if err != nil {
		return err
	}
	if err := preflight(ctx, c, objs); err != nil {
		return err
	}
	// A server-side dry run of what the API server knows already (the
	// CRDs, and runnerfleet's kinds once their CRDs are there) finds what
	// admission or validation would refuse before anything is written.
	for _, obj := range objs {
		err := apply(ctx, c, obj, client.DryRunAll)
		if err != nil && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("the API server refuses %w; nothing was changed", err)
		}
	}
	fmt.Fprintf(s.stderr, "Installing the %s stack into the cluster of %s%s\n", s.name, s.kubeconfig, ctxNote(s.context))
	var sets []client.ObjectKey
	for _, obj := range objs {
		if err := applySettled(ctx, c, obj); err != nil {
			return err
		}
		switch obj.(type) {
		case *apiextensionsv1.CustomResourceDefinition:
			if err := waitEstablished(ctx, c, obj.GetName()); err != nil {
				return err
			}
		case *v1alpha1.RunnerSet:
			sets = append(sets, client.ObjectKeyFromObject(obj))
		}
	}
	// runnerfleet's kinds are new to the client's REST mapper now.
	fmt.Fprintf(s.stderr, "Applied %d objects; waiting for %d RunnerSets to be Ready\n", len(objs), len(sets))
	w := newReadyWait(c, sets, o.timeout, s.stderr)
	ns := v.fleet.Controller.Namespace
	w.controllerDown = func(ctx context.Context) string { return deploymentDown(ctx, c, ns) }
	w.hint = func() string {
		return fmt.Sprintf("; see kubectl describe runnerset, and the controller: kubectl -n %s get pods -l %s=%s", ns, install.NameLabel, install.Name)
	}
	w.status, w.again, w.down = s.command("status"), s.command("up", "--timeout", "10m"), s.command("down")
	if err := w.wait(ctx); err != nil {
		return err
	}
	fmt.Fprintf(s.stderr, "The %s stack is up (%.1fs)\n\n", s.name, time.Since(start).Seconds())
	return s.Status(ctx, statusOptions{output: "table"})
}

func waitEstablished(ctx context.Context, c client.Client, n string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: n}, crd); err == nil {
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s not Established after a minute", n)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *clusterStack) Status(ctx context.Context, o statusOptions) error {
	cfg, c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	rep := statusReport{Stack: s.name, Cluster: s.kubeconfig + ctxNote(s.context)}
	if rep.RunnerSets, err = runnerSetRows(ctx, c); err != nil {
		return err
	}
	v, err := parseStack(s.name, s.config)
	if err != nil {
		return err
	}
	d := install.Deployment(install.Options{Namespace: v.fleet.Controller.Namespace})
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err == nil {
		rep.Controller = &controllerStatus{Namespace: d.Namespace, Image: d.Spec.Template.Spec.Containers[0].Image,
			Ready: fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, ptrInt(d.Spec.Replicas))}
	}
	if len(v.fleet.SharedFleets) > 0 {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		if rep.SharedFleets, err = sharedFleetStatuses(ctx, c, jobReader{cs: cs}, v.fleet.SharedFleets, time.Now()); err != nil {
			return err
		}
	}
	if o.output == "json" {
		return printJSON(s.stdout, rep)
	}
	printRunnerSetTable(s.stdout, rep.RunnerSets)
	if rep.Controller != nil {
		fmt.Fprintf(s.stdout, "\nController: %s in %s, %s ready\n", rep.Controller.Image, rep.Controller.Namespace, rep.Controller.Ready)
	} else {
		fmt.Fprintf(s.stdout, "\nController: not installed in %s (fleet up --kubeconfig %s)\n", v.fleet.Controller.Namespace, s.kubeconfig)
	}
	printSharedFleets(s.stdout, rep.SharedFleets)
	return nil
}

func ptrInt(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// Down deletes the stack's RunnerSets while the controller still runs and
// waits until they are gone (drained, runners deleted, capacity released),
// saying what it waits for, then deletes the RunnerClass, the Secrets and
// the controller. The CRDs and the namespaces stay: deleting a CRD deletes
// every RunnerSet of the cluster, also those fleet did not create.
func (s *clusterStack) Down(ctx context.Context, o downOptions) error {
	v, err := parseStack(s.name, s.config)
	if err != nil {
		return err
	}
	cfg, c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	ns := v.fleet.Controller.Namespace
	d := newDrainer(c, s.stderr, o)
	d.sel = []client.ListOption{client.MatchingLabels(s.labels())}
	d.controllerDown = func(ctx context.Context) string { return deploymentDown(ctx, c, ns) }
	d.again, d.force = s.command("down"), s.command("down", "--force")
	d.kept = fmt.Sprintf("The controller and the rest of the stack stay in the cluster at %s", cfg.Host)
	if err := d.run(ctx, o.force); err != nil {
		return err
	}
	sel := client.MatchingLabels(s.labels())
	var rest []client.Object
	classes := &v1alpha1.RunnerClassList{}
	if err := c.List(ctx, classes, sel); err == nil {
		for i := range classes.Items {
			rest = append(rest, &classes.Items[i])
		}
	}
	secrets := &corev1.SecretList{}
	if err := c.List(ctx, secrets, sel); err != nil {
		return err
	}
	for i := range secrets.Items {
		rest = append(rest, &secrets.Items[i])
	}
	opts := install.Defaults()
	opts.Namespace = ns
	ctrlObjs, err := install.Objects(opts)
	if err != nil {
		return err
	}
	rest = append(rest, ctrlObjs...)
	rest = append(rest, install.AdmissionPolicies(opts)...) // no match on an API server that does not serve them
	deleted := 0
	for _, obj := range rest {
		err := c.Delete(ctx, obj)
		switch {
		case err == nil:
			deleted++
		case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		default:
			return fmt.Errorf("deleting %s %s: %w\n(run %s again once that is fixed)", obj.GetObjectKind().GroupVersionKind().Kind, name(obj.GetNamespace(), obj.GetName()), err, s.command("down"))
		}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	hasAPI := c.Get(ctx, client.ObjectKey{Name: "runnersets." + v1alpha1.GroupVersion.Group}, crd) == nil
	if deleted == 0 && !hasAPI {
		fmt.Fprintf(s.stderr, "Nothing of the %s stack is in the cluster at %s (kubeconfig %s%s): no RunnerSet API, no controller in %s. If the stack is in another cluster, run fleet down with its --kubeconfig and --context (contexts here: %s)\n",
			s.name, cfg.Host, s.kubeconfig, ctxNote(s.context), ns, strings.Join(kubeContexts(s.kubeconfig), ", "))
		return nil
	}
	fmt.Fprintf(s.stderr, "The %s stack is down (%d objects deleted); runnerfleet's CRDs and the namespaces stay (kubectl delete crd runnersets.runnerfleet.dev runnerclasses.runnerfleet.dev removes the API)\n", s.name, deleted)
	return nil
}
