package stackconfig

import (
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/internal/imageref"
	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/policy"
	"github.com/runnerfleet/runnerfleet/runnerset/rbac"
)

// Key is the stack config key the whole fleet is read from
// (runnerfleet:fleet in Pulumi.<stack>.yaml).
const Key = "fleet"

// Root is the path every message names keys from.
var Root = field.NewPath("runnerfleet:fleet")

// Platform says where the fleet runs.
type Platform string

const (
	// PlatformLocal is the local control plane (fleet up --stack local).
	PlatformLocal Platform = "local"
	// PlatformEKS is Amazon EKS with Karpenter.
	PlatformEKS Platform = "eks"
	// PlatformGKE is Google GKE with ComputeClasses.
	PlatformGKE Platform = "gke"
)

// Fleet is the whole stack config.
type Fleet struct {
	// Platform is local, eks or gke.
	Platform Platform `json:"platform"`
	// ClusterName names the cluster and prefixes every cloud name derived
	// from it (IAM roles, node pools); default runnerfleet-<stack>.
	ClusterName string `json:"clusterName,omitempty"`
	// GitLabURL is the GitLab instance the runners serve.
	GitLabURL string `json:"gitlabURL"`

	Local *Local `json:"local,omitempty"`
	AWS   *AWS   `json:"aws,omitempty"`
	GCP   *GCP   `json:"gcp,omitempty"`

	// Capacity is the fleet-wide capacity policy of the RunnerClass.
	Capacity Capacity `json:"capacity,omitempty"`
	// Identity lists the cloud identities teams may use, beyond the ones
	// this program creates for them.
	Identity v1alpha1.IdentityPolicy `json:"identity,omitempty"`
	// Cache is the job cache bucket.
	Cache Cache `json:"cache,omitempty"`
	// Controller is the runnerset-controller deployment.
	Controller Controller `json:"controller,omitempty"`
	// Defaults are the RunnerClass defaults.
	Defaults Defaults `json:"defaults,omitempty"`
	// Teams get a namespace, a RunnerSet, and (in the cloud) an identity.
	Teams []Team `json:"teams,omitempty"`
	// SharedFleets are the platform's own shared runners on GCE VMs (gke).
	SharedFleets []fleetspec.SharedFleet `json:"sharedFleets,omitempty"`
	// Alerting is where the shared fleets' alerts go; required with them.
	Alerting *fleetspec.Alerting `json:"alerting,omitempty"`
	// CIIdentity is what lets the deploy pipeline's GitLab ID tokens, of
	// the named projects and branches only, be exchanged for cloud
	// credentials (docs/tasks/deploy-from-gitlab-ci.md).
	CIIdentity *CIIdentity `json:"ciIdentity,omitempty"`
	// Prometheus is the Prometheus that scrapes the managers (with the
	// scrape config or PodMonitor runnerfleet ships): the RunnerClass's
	// spec.prometheus, where KEDA reads running jobs and queue times for
	// teams with managers.autoscale or overflow. Required by those on eks
	// and gke; the local stack sets its own.
	Prometheus *Prometheus `json:"prometheus,omitempty"`
	// OverflowOf names the stack whose teams this stack's overflow teams
	// take jobs from (another region's cluster): docs/concepts/autoscaling.md.
	OverflowOf *OverflowOf `json:"overflowOf,omitempty"`
	// Cost is the price table the cost rules turn node-seconds and
	// VM-seconds into money with: its entries are added to the default
	// prices (runnerset/cost), an entry replacing the default of its
	// instance type (docs/operations/cost.md).
	Cost *cost.Table `json:"cost,omitempty"`
}

// Prometheus is where the stack's managers' metrics are read.
type Prometheus struct {
	// Address is the Prometheus HTTP API as KEDA in this cluster reaches
	// it, such as http://prometheus-operated.monitoring:9090.
	Address string `json:"address"`
	// RemoteAddress is the same Prometheus as another region's KEDA
	// reaches it (an internal load balancer over the regions' peering):
	// set it to let other stacks' overflow teams (overflowOf) follow this
	// stack's queue. The program exports it with the teams.
	RemoteAddress string `json:"remoteAddress,omitempty"`
}

// OverflowOf is the primary stack of a stack of overflow teams.
type OverflowOf struct {
	// Stack is the primary's stack, organization/project/stack, read
	// through a StackReference: its teams (namespace, name, tags) and its
	// prometheus.remoteAddress.
	Stack string `json:"stack"`
}

// PrimaryOutput is the output a stack exports when it can be a primary
// (prometheus.remoteAddress is set): its teams and that address, read by
// the stacks whose overflowOf names it.
const PrimaryOutput = "overflowPrimary"

// PrimaryTeams is PrimaryOutput's value.
type PrimaryTeams struct {
	PrometheusAddress string        `json:"prometheusAddress"`
	Teams             []PrimaryTeam `json:"teams"`
}

// PrimaryTeam is a team of a primary stack.
type PrimaryTeam struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Tags      []string `json:"tags"`
}

// Primary is what the stack exports as PrimaryOutput; nil when it sets no
// prometheus.remoteAddress.
func (f *Fleet) Primary() *PrimaryTeams {
	if f.Prometheus == nil || f.Prometheus.RemoteAddress == "" {
		return nil
	}
	out := &PrimaryTeams{PrometheusAddress: f.Prometheus.RemoteAddress, Teams: []PrimaryTeam{}}
	for _, t := range f.Teams {
		out.Teams = append(out.Teams, PrimaryTeam{Namespace: t.Namespace, Name: t.Name, Tags: t.Tags})
	}
	return out
}

// CheckPrimary judges the overflow teams of an overflowOf stack against the
// primary stack's teams: each overflow's primary must be a team there, in
// the same namespace, with the same tags. Errors name the key and the fix.
func (f *Fleet) CheckPrimary(primary *PrimaryTeams) field.ErrorList {
	var errs field.ErrorList
	if f.OverflowOf == nil {
		return nil
	}
	if primary == nil || primary.PrometheusAddress == "" {
		return field.ErrorList{field.Invalid(Root.Child("overflowOf", "stack"), f.OverflowOf.Stack,
			"the stack exports no "+PrimaryOutput+": set prometheus.remoteAddress in that stack (its Prometheus as this region's KEDA reaches it) and run pulumi up there first")}
	}
	for i, t := range f.Teams {
		if t.Overflow == nil {
			continue
		}
		p := Root.Child("teams").Index(i).Child("overflow", "primary")
		var found *PrimaryTeam
		for j := range primary.Teams {
			if pt := &primary.Teams[j]; pt.Namespace == t.Namespace && pt.Name == t.Overflow.Primary {
				found = pt
			}
		}
		switch {
		case found == nil:
			errs = append(errs, field.NotFound(p, fmt.Sprintf("%s/%s is not a team of stack %s; name a team of that stack in namespace %s", t.Namespace, t.Overflow.Primary, f.OverflowOf.Stack, t.Namespace)))
		case !sameTags(found.Tags, t.Tags):
			errs = append(errs, field.Invalid(p, t.Overflow.Primary, fmt.Sprintf("its tags in stack %s are %v, this team's %v: an overflow takes the same jobs, so give it the same tags", f.OverflowOf.Stack, found.Tags, t.Tags)))
		}
	}
	return errs
}

func sameTags(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// Local is the local control plane.
type Local struct {
	// Kubeconfig is the path of the local control plane's kubeconfig; fleet
	// up sets it. Default: $KUBECONFIG.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// ChartRepository is the Helm chart repository the local platform's
	// shared fleets take their managers' chart from: a loopback one
	// (localstack/chartrepo, a stand-in for the gitlab-runner chart), as
	// nothing reaches the chart's own. Required with sharedFleets.
	ChartRepository string `json:"chartRepository,omitempty"`
}

// Capacity is the fleet-wide capacity policy.
type Capacity struct {
	// AllowOnDemand lets teams ask for on-demand job capacity; without it
	// all job capacity is spot. Managers always run on on-demand nodes
	// (aws.systemNodes, gcp.systemNodes), whatever it says.
	AllowOnDemand bool `json:"allowOnDemand,omitempty"`
	// MaxConcurrency caps managers × concurrent of any one RunnerSet.
	MaxConcurrency *int32 `json:"maxConcurrency,omitempty"`
	// AllowPrivileged lets teams run privileged job containers.
	AllowPrivileged bool `json:"allowPrivileged,omitempty"`
	// NodePools is the RunnerClass's spec.nodePools: a Karpenter NodePool
	// per team (mode perTag, the default), one the teams share (shared),
	// or shared once more than sharedAbove teams use the class (auto).
	// eks and local only: GKE's ComputeClass is per team.
	NodePools *v1alpha1.NodePoolSettings `json:"nodePools,omitempty"`
}

// Cache is the job cache bucket (S3 on EKS, GCS on GKE).
type Cache struct {
	// ExpireDays deletes cache objects older than this; default 14.
	ExpireDays int `json:"expireDays,omitempty"`
}

// Controller is the runnerset-controller deployment.
type Controller struct {
	// Image is the controller image on eks and gke, a repository with a tag
	// or a digest (a release's digests.json pins it: repository@sha256:…);
	// default the release's (runnerset/install.Defaults).
	Image string `json:"image,omitempty"`
	// Replicas, with leader election; default 2.
	Replicas int32 `json:"replicas,omitempty"`
	// Namespace, default runnerfleet-system.
	Namespace string `json:"namespace,omitempty"`
	// Monitoring declares, beside the controller, what the chart's
	// monitoring values do (runnerset/install builds both): for a cluster
	// that runs the Prometheus operator and Grafana's dashboard sidecar.
	Monitoring ControllerMonitoring `json:"monitoring,omitempty"`
}

// ControllerMonitoring says which monitoring objects the stack declares.
// Each needs its consumer in the cluster: the operator's CRDs for the
// ServiceMonitors and the PrometheusRule, Grafana's sidecar for the
// dashboards' ConfigMaps. The local stack runs its own Prometheus instead.
type ControllerMonitoring struct {
	// ServiceMonitors: a ServiceMonitor for the controller's metrics and a
	// PodMonitor for every RunnerSet's managers.
	ServiceMonitors bool `json:"serviceMonitors,omitempty"`
	// PrometheusRule with the team runners' alert rules.
	PrometheusRule bool `json:"prometheusRule,omitempty"`
	// Dashboards as ConfigMaps labelled for Grafana's sidecar.
	Dashboards bool `json:"dashboards,omitempty"`
	// Labels your Prometheus and Grafana select these objects by, for
	// example release: kube-prometheus-stack.
	Labels map[string]string `json:"labels,omitempty"`
}

// Any reports whether any monitoring object is declared.
func (m ControllerMonitoring) Any() bool {
	return m.ServiceMonitors || m.PrometheusRule || m.Dashboards
}

// Defaults are the RunnerClass defaults teams inherit.
type Defaults struct {
	ManagerImage v1alpha1.ImageReference `json:"managerImage,omitempty"`
	HelperImage  v1alpha1.ImageReference `json:"helperImage,omitempty"`
	JobImage     v1alpha1.ImageReference `json:"jobImage,omitempty"`
}

// Team is one team's runner: a namespace and a RunnerSet in it.
type Team struct {
	// Namespace is the team's namespace, created if missing.
	Namespace string `json:"namespace"`
	// Name is the RunnerSet's name.
	Name string `json:"name"`
	// Tags are the runner's tags (the RunnerSet's spec.tags).
	Tags []string `json:"tags"`
	// TokenConfigKey names the stack config secret holding the team's
	// runner token (glrt-…): pulumi config set --secret <key> glrt-…
	// The program writes it into a Secret; it is encrypted in the state.
	TokenConfigKey string `json:"tokenConfigKey,omitempty"`
	// TokenSecretRef uses a Secret that already exists in the namespace.
	TokenSecretRef *v1alpha1.SecretKeyRef `json:"tokenSecretRef,omitempty"`
	// Runner has the controller create the runner through the GitLab API;
	// APITokenConfigKey then names the config secret with the API token.
	Runner            *v1alpha1.RunnerRegistration `json:"runner,omitempty"`
	APITokenConfigKey string                       `json:"apiTokenConfigKey,omitempty"`

	Managers v1alpha1.ManagerSpec  `json:"managers,omitempty"`
	Jobs     TeamJobs              `json:"jobs,omitempty"`
	Capacity v1alpha1.CapacitySpec `json:"capacity,omitempty"`

	// Identity creates a cloud identity (IAM role or Google service
	// account) that the team's job pods run as; default true on eks and gke.
	Identity *bool `json:"identity,omitempty"`

	// Overflow makes the team's RunnerSet the overflow of another team
	// with the same tags (spec.overflow): of this stack, or, with
	// overflowOf, of that stack in another region.
	Overflow *v1alpha1.OverflowSpec `json:"overflow,omitempty"`
	// Region names the region the team stands for on the local stack (one
	// machine is one cluster), shown by fleet status beside its jobs; local
	// only: a cloud stack's region is its cluster's.
	Region string `json:"region,omitempty"`
}

// TeamJobs are the job pod settings of a team; the identity is the
// program's to set.
type TeamJobs struct {
	Image      v1alpha1.ImageReference `json:"image,omitempty"`
	Privileged bool                    `json:"privileged,omitempty"`
	Resources  v1alpha1.JobResources   `json:"resources,omitempty"`
}

// TokenSecretName is the Secret the program writes the team's runner
// token (tokenConfigKey) to.
func (t Team) TokenSecretName() string { return naming.Join(t.Name, "gitlab-token") }

// APITokenSecretName is the Secret the program writes the team's GitLab API
// token (apiTokenConfigKey) to.
func (t Team) APITokenSecretName() string { return naming.Join(t.Name, "gitlab-api-token") }

// WantsIdentity reports whether the team gets a cloud identity.
func (t Team) WantsIdentity(p Platform) bool {
	if p == PlatformLocal {
		return false
	}
	return t.Identity == nil || *t.Identity
}

// Decode reads the fleet from the stack config's JSON and validates it for
// the stack, returning every problem at once.
func Decode(raw []byte, stack string) (*Fleet, error) {
	var f Fleet
	errs, decoded := Strict(raw, &f, Root)
	if !decoded {
		return nil, asError(errs)
	}
	f.setDefaults(stack)
	if errs = append(errs, f.Validate()...); len(errs) > 0 {
		return nil, asError(errs)
	}
	return &f, nil
}

// Error lists every problem of a stack config.
type Error struct {
	List field.ErrorList
	// Extra are problems found outside the fleet object (config secrets).
	Extra []string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the stack config has %d problem(s); nothing was created:", len(e.List)+len(e.Extra))
	for _, x := range e.List {
		b.WriteString("\n  - ")
		b.WriteString(x.Error())
	}
	for _, x := range e.Extra {
		b.WriteString("\n  - ")
		b.WriteString(x)
	}
	return b.String()
}

func asError(errs field.ErrorList) error { return &Error{List: errs} }

// AsError is errs as the error Decode returns for a refused stack config.
func AsError(errs field.ErrorList) error { return asError(errs) }

// Autoscales reports whether a team's managers are scaled by KEDA
// (managers.autoscale or overflow).
func (f *Fleet) Autoscales() bool {
	for _, t := range f.Teams {
		if t.Managers.Autoscale != nil || t.Overflow != nil {
			return true
		}
	}
	return false
}

func (f *Fleet) setDefaults(stack string) {
	if f.ClusterName == "" {
		f.ClusterName = "runnerfleet-" + stack
	}
	if f.Cache.ExpireDays == 0 {
		f.Cache.ExpireDays = 14
	}
	if f.Controller.Replicas == 0 {
		f.Controller.Replicas = 2
	}
	if f.Controller.Namespace == "" {
		f.Controller.Namespace = "runnerfleet-system"
	}
	if f.AWS != nil {
		f.AWS.setDefaults()
	}
	if f.GCP != nil {
		f.GCP.setDefaults()
	}
	if f.CIIdentity != nil {
		f.CIIdentity.setDefaults(f)
	}
}

var clusterName = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$`)

// Validate checks the whole fleet.
func (f *Fleet) Validate() field.ErrorList {
	var errs field.ErrorList
	p := Root
	switch f.Platform {
	case PlatformLocal:
		if f.AWS != nil || f.GCP != nil {
			errs = append(errs, field.Forbidden(p.Child("platform"), "platform local takes no aws or gcp section; remove them or set platform to eks or gke"))
		}
		if f.Controller.Monitoring.Any() {
			errs = append(errs, field.Forbidden(p.Child("controller", "monitoring"), "the local stack runs the controller as a process and its own Prometheus with the same scrape and rules (fleet status shows its address); remove controller.monitoring"))
		}
	case PlatformEKS:
		if f.AWS == nil {
			errs = append(errs, field.Required(p.Child("aws"), "platform eks needs an aws section with at least region and zones"))
		} else {
			errs = append(errs, f.AWS.Validate(p.Child("aws"))...)
		}
		if f.GCP != nil {
			errs = append(errs, field.Forbidden(p.Child("gcp"), "platform eks takes no gcp section"))
		}
	case PlatformGKE:
		if f.GCP == nil {
			errs = append(errs, field.Required(p.Child("gcp"), "platform gke needs a gcp section with at least project and region"))
		} else {
			errs = append(errs, f.GCP.Validate(p.Child("gcp"))...)
			errs = append(errs, ValidateGKETeams(f)...)
		}
		if f.AWS != nil {
			errs = append(errs, field.Forbidden(p.Child("aws"), "platform gke takes no aws section"))
		}
	case "":
		errs = append(errs, field.Required(p.Child("platform"), "set platform to local, eks or gke"))
	default:
		errs = append(errs, field.NotSupported(p.Child("platform"), f.Platform, []Platform{PlatformLocal, PlatformEKS, PlatformGKE}))
	}
	if !clusterName.MatchString(f.ClusterName) {
		errs = append(errs, field.Invalid(p.Child("clusterName"), f.ClusterName, "lower-case letters, digits and '-', starting with a letter, at most 40 characters (it prefixes IAM role and node pool names)"))
	}
	if e := validateURL(p.Child("gitlabURL"), f.GitLabURL); e != nil {
		errs = append(errs, e)
	}
	if m := f.Capacity.MaxConcurrency; m != nil && *m < 1 {
		errs = append(errs, field.Invalid(p.Child("capacity", "maxConcurrency"), *m, "at least 1: the most managers × concurrent jobs one RunnerSet may run"))
	}
	errs = append(errs, f.validateNodePools(p.Child("capacity", "nodePools"))...)
	if why := reservedNamespace(f.Controller.Namespace, f); why != "" && f.Controller.Namespace != "" {
		errs = append(errs, field.Invalid(p.Child("controller", "namespace"), f.Controller.Namespace, "the namespace "+why+"; the stack creates the controller's namespace and deletes it on destroy, so use one of its own (default runnerfleet-system)"))
	}
	if f.Cache.ExpireDays < 1 || f.Cache.ExpireDays > 3650 {
		errs = append(errs, field.Invalid(p.Child("cache", "expireDays"), f.Cache.ExpireDays, "between 1 and 3650 days: cache objects must expire"))
	}
	if f.Controller.Image != "" {
		if err := imageref.Check(f.Controller.Image, version.Image(rbac.Name)); err != nil {
			errs = append(errs, field.Invalid(p.Child("controller", "image"), f.Controller.Image, err.Error()+", or leave it out for the release's"))
		}
	}
	if f.Controller.Replicas < 1 || f.Controller.Replicas > 5 {
		errs = append(errs, field.Invalid(p.Child("controller", "replicas"), f.Controller.Replicas, "between 1 and 5 (one leader, the others stand by)"))
	}
	for _, m := range validation.IsDNS1123Label(f.Controller.Namespace) {
		errs = append(errs, field.Invalid(p.Child("controller", "namespace"), f.Controller.Namespace, m))
	}
	errs = append(errs, validatePatterns(p.Child("identity", "awsRoleARNPatterns"), f.Identity.AWSRoleARNPatterns, "arn:", "arn:aws:iam::123456789012:role/ci-{namespace}.*")...)
	errs = append(errs, validatePatterns(p.Child("identity", "gcpServiceAccountPatterns"), f.Identity.GCPServiceAccountPatterns, "", "ci-{namespace}@my-project.iam.gserviceaccount.com")...)

	errs = append(errs, f.validateAutoscaling(p)...)
	errs = append(errs, f.validateSharedFleets(p.Child("sharedFleets"))...)
	errs = append(errs, f.validateAlerting(p.Child("alerting"))...)
	if f.CIIdentity != nil {
		errs = append(errs, f.CIIdentity.validate(p.Child("ciIdentity"), f)...)
	}
	if f.Cost != nil {
		errs = append(errs, f.Cost.Validate(p.Child("cost"))...)
	}

	// What the RunnerClass will hold, judged by its CRD as admission will.
	classes, err := crds.ValidatorFor("runnerclasses.runnerfleet.dev")
	if err != nil {
		return append(errs, field.InternalError(p, err))
	}
	errs = append(errs, embeddedErrors(classes, f.RunnerClass(), p, classKeys, errs)...)
	sets, err := crds.ValidatorFor("runnersets.runnerfleet.dev")
	if err != nil {
		return append(errs, field.InternalError(p, err))
	}
	// The teams' RunnerSets differ in their names and tags and seldom in
	// more: what they share is judged once.
	teams := sets.Batch()

	seen := map[string]int{}
	tags := map[string]int{}
	// A team's jobs namespace is the controller's to create: one the stack
	// creates for something else would stop that RunnerSet with
	// JobsNamespaceTaken.
	owned := map[string]string{f.Controller.Namespace: "the runnerset-controller's namespace (controller.namespace)"}
	for i, t := range f.Teams {
		owned[t.Namespace] = fmt.Sprintf("teams[%d]'s namespace", i)
	}
	for i, s := range f.SharedFleets {
		if s.Namespace != "" {
			owned[s.Namespace] = fmt.Sprintf("sharedFleets[%d]'s namespace", i)
		}
	}
	for i, t := range f.Teams {
		if jobs := naming.For(t.Namespace, t.Name).JobsNamespace(); owned[jobs] != "" {
			errs = append(errs, field.Invalid(p.Child("teams").Index(i), t.Namespace+"/"+t.Name, fmt.Sprintf(
				"its jobs run in namespace %s, which is %s; rename the team's RunnerSet or that namespace", jobs, owned[jobs])))
		}
	}
	// Each team is judged on its own, so the teams are judged on every
	// core; their problems are listed in the teams' order.
	teamErrs := make([]field.ErrorList, len(f.Teams))
	forEach(len(f.Teams), func(i int) {
		t := f.Teams[i]
		tp := p.Child("teams").Index(i)
		te := t.validate(tp, f)
		// The team's RunnerSet, judged by its CRD as admission will: what
		// fails there fails here, before any resource is declared.
		teamErrs[i] = append(te, embeddedErrors(teams, t.RunnerSet(f.ClusterName, t.TokenSecretName(), t.APITokenSecretName()), tp, teamKeys, te)...)
	})
	for i, t := range f.Teams {
		tp := p.Child("teams").Index(i)
		errs = append(errs, teamErrs[i]...)
		key := t.Namespace + "/" + t.Name
		if j, ok := seen[key]; ok {
			errs = append(errs, field.Duplicate(tp, fmt.Sprintf("%s: the same RunnerSet as teams[%d]; give it another name or namespace", key, j)))
		}
		seen[key] = i
		for _, tag := range t.Tags {
			if j, ok := tags[tag]; ok && j != i && !f.overflowPair(i, j) {
				errs = append(errs, field.Duplicate(tp.Child("tags"), fmt.Sprintf("tag %q is also teams[%d]'s: a tag must lead to one team's runner", tag, j)))
			}
			tags[tag] = i
		}
	}
	return errs
}

func validatePatterns(p *field.Path, patterns []string, prefix, example string) field.ErrorList {
	var errs field.ErrorList
	for i, pat := range patterns {
		if !strings.Contains(pat, policy.Placeholder) {
			errs = append(errs, field.Invalid(p.Index(i), pat, "every identity pattern must contain {namespace}, so that a team can only use its own identities; for example "+example))
		} else if err := policy.ValidatePattern(pat); err != nil {
			// The same rule the controller and the RunnerClass CRD apply.
			errs = append(errs, field.Invalid(p.Index(i), pat, err.Error()))
		}
		if prefix != "" && !strings.HasPrefix(pat, prefix) {
			errs = append(errs, field.Invalid(p.Index(i), pat, "must start with "+prefix+", for example "+example))
		}
	}
	return errs
}

var configKey = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// reservedNamespace says why the stack may not own a namespace: the stack
// creates its teams' namespaces and deletes them with everything in them on
// destroy, so it must never adopt one the cluster or another part owns.
func reservedNamespace(ns string, f *Fleet) string {
	switch {
	case ns == "default" || strings.HasPrefix(ns, "kube-"):
		return "belongs to Kubernetes"
	case ns == fleetspec.MonitoringNamespace && len(f.SharedFleets) > 0:
		return "is the shared fleets' central monitoring namespace"
	}
	// A shared fleet's own namespace is checked with the shared fleets.
	return ""
}

func (t Team) validate(p *field.Path, f *Fleet) field.ErrorList {
	var errs field.ErrorList
	for _, m := range validation.IsDNS1123Label(t.Namespace) {
		errs = append(errs, field.Invalid(p.Child("namespace"), t.Namespace, m))
	}
	if why := reservedNamespace(t.Namespace, f); why != "" {
		errs = append(errs, field.Invalid(p.Child("namespace"), t.Namespace, "the namespace "+why+"; the stack owns its teams' namespaces and deletes them on destroy, so give the team a namespace of its own"))
	} else if t.Namespace == f.Controller.Namespace {
		errs = append(errs, field.Invalid(p.Child("namespace"), t.Namespace, "the runnerset-controller's namespace (controller.namespace): a team there would share it with the controller and its permissions; give the team a namespace of its own"))
	}
	for i, tag := range t.Tags {
		if strings.TrimSpace(tag) != tag || tag == "" || strings.Contains(tag, ",") {
			errs = append(errs, field.Invalid(p.Child("tags").Index(i), tag, "a tag is a non-empty word without commas or surrounding spaces, for example team-a"))
		}
	}
	if t.TokenSecretRef != nil && t.TokenSecretRef.Name == "" {
		errs = append(errs, field.Required(p.Child("tokenSecretRef", "name"), "the name of the Secret in the team's namespace that holds the runner token"))
	}
	if t.APITokenConfigKey != "" && !configKey.MatchString(t.APITokenConfigKey) {
		errs = append(errs, field.Invalid(p.Child("apiTokenConfigKey"), t.APITokenConfigKey, "a config key name such as gitlabAPIToken (letters, digits, '-' and '_'), set with pulumi config set --secret"))
	}
	if r := t.Runner; r != nil {
		rp := p.Child("runner")
		switch r.Type {
		case v1alpha1.RunnerTypeInstance:
		case v1alpha1.RunnerTypeGroup:
			if r.GroupID == nil {
				errs = append(errs, field.Required(rp.Child("groupID"), "a group runner needs the group's numeric ID"))
			}
		case v1alpha1.RunnerTypeProject:
			if r.ProjectID == nil {
				errs = append(errs, field.Required(rp.Child("projectID"), "a project runner needs the project's numeric ID"))
			}
		default:
			errs = append(errs, field.NotSupported(rp.Child("type"), r.Type, []v1alpha1.RunnerType{v1alpha1.RunnerTypeInstance, v1alpha1.RunnerTypeGroup, v1alpha1.RunnerTypeProject}))
		}
		if t.APITokenConfigKey != "" && r.APITokenSecretRef.Name != "" {
			errs = append(errs, field.Forbidden(rp.Child("apiTokenSecretRef"), "give either apiTokenConfigKey (the stack writes the Secret) or runner.apiTokenSecretRef (an existing Secret), not both"))
		}
	}
	for _, m := range validation.IsDNS1123Label(t.Name) {
		errs = append(errs, field.Invalid(p.Child("name"), t.Name, m))
	}
	if len(t.Tags) == 0 {
		errs = append(errs, field.Required(p.Child("tags"), "at least one tag: jobs choose this runner by tag"))
	}
	sources := 0
	if t.TokenConfigKey != "" {
		sources++
		if !configKey.MatchString(t.TokenConfigKey) {
			errs = append(errs, field.Invalid(p.Child("tokenConfigKey"), t.TokenConfigKey, "a config key name such as teamABuildToken (letters, digits, '-' and '_'), set with pulumi config set --secret"))
		}
	}
	if t.TokenSecretRef != nil {
		sources++
	}
	if t.Runner != nil {
		sources++
		if t.APITokenConfigKey == "" && t.Runner.APITokenSecretRef.Name == "" {
			errs = append(errs, field.Required(p.Child("apiTokenConfigKey"), "runner creates the runner through the GitLab API: name the config secret holding an API token with create_runner scope"))
		}
	} else if t.APITokenConfigKey != "" {
		errs = append(errs, field.Forbidden(p.Child("apiTokenConfigKey"), "only with runner; remove it or add a runner section"))
	}
	if sources != 1 {
		errs = append(errs, field.Invalid(p, sources, "give exactly one of tokenConfigKey (a runner token in a config secret), tokenSecretRef (an existing Secret) or runner (created through the GitLab API)"))
	}
	for i, ct := range t.Capacity.CapacityTypes {
		if ct == v1alpha1.CapacityTypeOnDemand && !f.Capacity.AllowOnDemand {
			errs = append(errs, field.Forbidden(p.Child("capacity", "capacityTypes").Index(i), "on-demand capacity is not allowed in this stack; remove it, or set capacity.allowOnDemand: true at the top of the fleet"))
		}
	}
	if t.Jobs.Privileged && !f.Capacity.AllowPrivileged {
		errs = append(errs, field.Forbidden(p.Child("jobs", "privileged"), "privileged jobs are not allowed in this stack; remove it, or set capacity.allowPrivileged: true"))
	}
	if t.Identity != nil && *t.Identity && f.Platform == PlatformLocal {
		errs = append(errs, field.Forbidden(p.Child("identity"), "the local stack has no cloud identities; remove it"))
	}
	return errs
}

// forEach calls do(i) for every i in [0, n), from as many goroutines as
// the process has cores, and returns when every call has returned.
func forEach(n int, do func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			do(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				do(i)
			}
		})
	}
	wg.Wait()
}

// overflowPair reports whether teams i and j are an overflow and its
// primary in this stack, which share their tags by design.
func (f *Fleet) overflowPair(i, j int) bool {
	a, b := f.Teams[i], f.Teams[j]
	if a.Namespace != b.Namespace || f.OverflowOf != nil {
		return false
	}
	return a.Overflow != nil && a.Overflow.Primary == b.Name || b.Overflow != nil && b.Overflow.Primary == a.Name
}

// validateAutoscaling judges prometheus, overflowOf and the teams'
// overflow and region keys.
func (f *Fleet) validateAutoscaling(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	scaled := -1
	for i, t := range f.Teams {
		if t.Managers.Autoscale != nil || t.Overflow != nil {
			scaled = i
		}
	}
	switch {
	case f.Platform == PlatformLocal && f.Prometheus != nil:
		errs = append(errs, field.Forbidden(p.Child("prometheus"), "the local stack's RunnerClass names the Prometheus fleet up starts; remove prometheus"))
	case f.Platform != PlatformLocal && f.Prometheus == nil && scaled >= 0:
		errs = append(errs, field.Required(p.Child("prometheus", "address"), fmt.Sprintf(
			"teams[%d] autoscales its managers: KEDA reads their running jobs and queue times from the Prometheus that scrapes them; set prometheus.address, such as http://prometheus-operated.monitoring:9090", scaled)))
	case f.Prometheus != nil:
		if e := validateURL(p.Child("prometheus", "address"), f.Prometheus.Address); e != nil {
			errs = append(errs, e)
		}
		if f.Prometheus.RemoteAddress != "" {
			if e := validateURL(p.Child("prometheus", "remoteAddress"), f.Prometheus.RemoteAddress); e != nil {
				errs = append(errs, e)
			}
		}
	}
	if o := f.OverflowOf; o != nil {
		if parts := strings.Split(o.Stack, "/"); len(parts) != 3 || slices.Contains(parts, "") {
			errs = append(errs, field.Invalid(p.Child("overflowOf", "stack"), o.Stack, "the primary's stack as organization/project/stack, such as acme/runnerfleet/eks-eu-west-1"))
		}
		if f.Platform == PlatformLocal {
			errs = append(errs, field.Forbidden(p.Child("overflowOf"), "the local stack is one cluster on one machine: declare the overflow as a team of this stack (teams[].overflow) instead"))
		}
	}
	for i, t := range f.Teams {
		tp := p.Child("teams").Index(i)
		if t.Region != "" {
			if f.Platform != PlatformLocal {
				errs = append(errs, field.Forbidden(tp.Child("region"), "a cloud stack's teams run in its cluster's region; remove region (put an overflow in another region's stack, with overflowOf)"))
			}
			for _, m := range validation.IsDNS1123Label(t.Region) {
				errs = append(errs, field.Invalid(tp.Child("region"), t.Region, m))
			}
		}
		o := t.Overflow
		if o == nil {
			continue
		}
		op := tp.Child("overflow")
		if f.OverflowOf != nil {
			if o.Prometheus != nil {
				errs = append(errs, field.Forbidden(op.Child("prometheus"), "with overflowOf the program sets it to the primary stack's prometheus.remoteAddress; remove it"))
			}
			continue
		}
		var primary *Team
		for j := range f.Teams {
			if f.Teams[j].Namespace == t.Namespace && f.Teams[j].Name == o.Primary && j != i {
				primary = &f.Teams[j]
			}
		}
		switch {
		case primary == nil:
			errs = append(errs, field.NotFound(op.Child("primary"), fmt.Sprintf("%s/%s is not a team of this stack: name a team in namespace %s with the same tags, or set overflowOf to the stack of a primary in another region", t.Namespace, o.Primary, t.Namespace)))
		case !sameTags(primary.Tags, t.Tags):
			errs = append(errs, field.Invalid(op.Child("primary"), o.Primary, fmt.Sprintf("its tags are %v, this team's %v: an overflow takes the same jobs, so give it the same tags", primary.Tags, t.Tags)))
		case primary.Overflow != nil:
			errs = append(errs, field.Invalid(op.Child("primary"), o.Primary, "that team is an overflow itself: name the team whose jobs wait"))
		}
	}
	return errs
}

// JSON returns the fleet as JSON, for exports and tests.
func (f *Fleet) JSON() string {
	b, _ := json.Marshal(f)
	return string(b)
}

// validateNodePools judges capacity.nodePools, naming the key and the fix
// (the RunnerClass CRD judges it again as admission will, but speaks of
// spec.nodePools).
func (f *Fleet) validateNodePools(p *field.Path) field.ErrorList {
	np := f.Capacity.NodePools
	if np == nil {
		return nil
	}
	var errs field.ErrorList
	modes := []v1alpha1.NodePoolMode{v1alpha1.NodePoolModePerTag, v1alpha1.NodePoolModeShared, v1alpha1.NodePoolModeAuto}
	switch {
	case np.Mode != "" && !slices.Contains(modes, np.Mode):
		errs = append(errs, field.NotSupported(p.Child("mode"), np.Mode, modes))
	case f.Platform == PlatformGKE && np.ModeOrDefault() != v1alpha1.NodePoolModePerTag:
		errs = append(errs, field.Invalid(p.Child("mode"), np.Mode, "platform gke gives each team a ComputeClass of its own, which teams cannot share: set capacity.nodePools.mode to perTag or remove capacity.nodePools"))
	}
	if n := np.SharedAbove; n != nil {
		switch {
		case np.Mode != v1alpha1.NodePoolModeAuto:
			errs = append(errs, field.Invalid(p.Child("sharedAbove"), *n, "applies only to mode auto: set capacity.nodePools.mode to auto, or remove sharedAbove"))
		case *n < 1 || *n > 100000:
			errs = append(errs, field.Invalid(p.Child("sharedAbove"), *n, "between 1 and 100000: the number of teams above which they share one NodePool"))
		}
	}
	return errs
}
