package stackconfig

import (
	"net/url"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DefaultCIAudience is the aud the deploy template's AWS ID token carries
// (ci/runnerfleet.gitlab-ci.yml, id_tokens RUNNERFLEET_AWS_ID_TOKEN).
const DefaultCIAudience = "sts.amazonaws.com"

// CIIdentity is the identity the deploy pipeline (ci/runnerfleet.gitlab-ci.yml)
// runs with: the stack declares what lets GitLab's OIDC ID tokens of the
// named projects and branches, and of nothing else, be exchanged for cloud
// credentials, so that no long-lived key sits in a CI/CD variable.
type CIIdentity struct {
	// Issuer is the GitLab instance's URL as its ID tokens name it (iss),
	// https only; default gitlabURL.
	Issuer string `json:"issuer,omitempty"`
	// Audience is the aud the pipeline's AWS ID token carries; default
	// sts.amazonaws.com, the template's (GCP's is its provider's name).
	Audience string `json:"audience,omitempty"`
	// Projects are the GitLab projects, and their branches, whose pipelines
	// may deploy; at least one, no wildcards.
	Projects []CIProject `json:"projects,omitempty"`
	// AWS declares an IAM OIDC provider for the issuer and a role the
	// pipeline assumes (platform eks).
	AWS *CIIdentityAWS `json:"aws,omitempty"`
	// GCP declares a Workload Identity pool with an OIDC provider for the
	// issuer and lets it impersonate a service account (platform gke).
	GCP *CIIdentityGCP `json:"gcp,omitempty"`
}

// CIIdentityGCP is the GCP side of the pipeline's identity.
type CIIdentityGCP struct {
	// PoolID is the Workload Identity pool's ID in gcp.project; default
	// clusterName (4 to 32 of a-z, 0-9 and -).
	PoolID string `json:"poolID,omitempty"`
	// ProviderID is the pool's OIDC provider's ID; default gitlab.
	ProviderID string `json:"providerID,omitempty"`
	// ServiceAccount is the email of the service account the pipeline
	// impersonates (RUNNERFLEET_GCP_SERVICE_ACCOUNT): what a deploy may do
	// is its roles.
	ServiceAccount string `json:"serviceAccount,omitempty"`
}

// CIProject is a GitLab project whose pipelines on the branches may deploy.
type CIProject struct {
	// Path is the project's full path, for example platform/runner-stacks.
	Path string `json:"path"`
	// Branches the pipelines run on, for example main; at least one.
	Branches []string `json:"branches,omitempty"`
}

// CIIdentityAWS is the AWS side of the pipeline's identity.
type CIIdentityAWS struct {
	// RoleName is the IAM role's name (the pipeline's RUNNERFLEET_AWS_ROLE_ARN
	// is the stack output ciIdentity.awsRoleArn); default <clusterName>-deploy.
	RoleName string `json:"roleName,omitempty"`
	// PolicyARNs are the managed policies attached to the role: what a deploy
	// may do; at least one.
	PolicyARNs []string `json:"policyARNs,omitempty"`
}

// Subjects are the sub claims GitLab puts in the ID tokens of the projects'
// branch pipelines, in GitLab's documented format.
func (c *CIIdentity) Subjects() []string {
	var out []string
	for _, p := range c.Projects {
		for _, b := range p.Branches {
			out = append(out, "project_path:"+p.Path+":ref_type:branch:ref:"+b)
		}
	}
	return out
}

// IssuerHost is the issuer without its scheme: the prefix of the condition
// keys of an IAM trust policy (host/path:sub).
func (c *CIIdentity) IssuerHost() string {
	return strings.TrimSuffix(strings.TrimPrefix(c.Issuer, "https://"), "/")
}

func (c *CIIdentity) setDefaults(f *Fleet) {
	if c.Issuer == "" {
		c.Issuer = strings.TrimSuffix(f.GitLabURL, "/")
	}
	if c.Audience == "" {
		c.Audience = DefaultCIAudience
	}
	if c.AWS != nil && c.AWS.RoleName == "" {
		c.AWS.RoleName = f.ClusterName + "-deploy"
	}
	if c.GCP != nil {
		if c.GCP.PoolID == "" {
			c.GCP.PoolID = f.ClusterName
		}
		if c.GCP.ProviderID == "" {
			c.GCP.ProviderID = "gitlab"
		}
	}
}

var (
	ciProjectPath = regexp.MustCompile(`^[A-Za-z0-9_.][A-Za-z0-9_.-]*(/[A-Za-z0-9_.][A-Za-z0-9_.-]*)+$`)
	iamRoleName   = regexp.MustCompile(`^[\w+=,.@-]{1,64}$`)
	wifID         = regexp.MustCompile(`^[a-z0-9-]{4,32}$`)
	saEmail       = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]@[a-z0-9.-]+\.iam\.gserviceaccount\.com$`)
	policyARN     = regexp.MustCompile(`^arn:aws[a-z-]*:iam::(aws|[0-9]{12}):policy/[\w+=,.@/-]+$`)
)

// validate checks the section; wildcards anywhere in a subject are refused,
// since a trust policy that matched them would let other projects' or
// branches' pipelines deploy.
func (c *CIIdentity) validate(p *field.Path, f *Fleet) field.ErrorList {
	var errs field.ErrorList
	if u, err := url.Parse(c.Issuer); err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(c.Issuer, " \t\r\n") {
		errs = append(errs, field.Invalid(p.Child("issuer"), c.Issuer, "the GitLab instance's https URL, as its ID tokens' iss names it (for example https://gitlab.example.com): AWS and GCP fetch the issuer's keys over https only"))
	}
	if c.Audience == "" || strings.ContainsAny(c.Audience, "*? \t\r\n") {
		errs = append(errs, field.Invalid(p.Child("audience"), c.Audience, "one audience, no wildcards (the template's is sts.amazonaws.com)"))
	}
	if len(c.Projects) == 0 {
		errs = append(errs, field.Required(p.Child("projects"), "name the GitLab project(s) whose pipelines may deploy (path: group/project, branches: [main]); without them any project of the instance could assume the role"))
	}
	for i, pr := range c.Projects {
		pp := p.Child("projects").Index(i)
		if !ciProjectPath.MatchString(pr.Path) {
			errs = append(errs, field.Invalid(pp.Child("path"), pr.Path, "a project's full path, group/project (no wildcards): the trust matches it exactly"))
		}
		if len(pr.Branches) == 0 {
			errs = append(errs, field.Required(pp.Child("branches"), "name the branch(es) whose pipelines may deploy, for example [main]; merge-request pipelines must not"))
		}
		for j, b := range pr.Branches {
			if b == "" || strings.ContainsAny(b, "*?[ \t\r\n:\"'\\") {
				errs = append(errs, field.Invalid(pp.Child("branches").Index(j), b, "a branch name, no wildcards: the trust matches it exactly"))
			}
		}
	}
	if c.GCP != nil {
		errs = append(errs, c.GCP.validate(p.Child("gcp"), f)...)
	}
	if c.AWS == nil {
		if c.GCP == nil {
			errs = append(errs, field.Required(p, "say what to create: aws (platform eks) or gcp (platform gke)"))
		}
		return errs
	}
	ap := p.Child("aws")
	if f.Platform != PlatformEKS {
		errs = append(errs, field.Forbidden(ap, "the AWS deploy role is declared through the eks platform's provider: use it on a stack with platform eks"))
	}
	if !iamRoleName.MatchString(c.AWS.RoleName) {
		errs = append(errs, field.Invalid(ap.Child("roleName"), c.AWS.RoleName, "an IAM role name: at most 64 of letters, digits and +=,.@_-"))
	}
	if len(c.AWS.PolicyARNs) == 0 {
		errs = append(errs, field.Required(ap.Child("policyARNs"), "the managed policies a deploy may use, for example arn:aws:iam::aws:policy/AdministratorAccess or your own"))
	}
	for i, a := range c.AWS.PolicyARNs {
		if !policyARN.MatchString(a) {
			errs = append(errs, field.Invalid(ap.Child("policyARNs").Index(i), a, "a managed policy's ARN, for example arn:aws:iam::123456789012:policy/runnerfleet-deploy"))
		}
	}
	return errs
}

func (g *CIIdentityGCP) validate(p *field.Path, f *Fleet) field.ErrorList {
	var errs field.ErrorList
	if f.Platform != PlatformGKE {
		errs = append(errs, field.Forbidden(p, "the Workload Identity pool is declared through the gke platform's provider: use it on a stack with platform gke"))
	}
	for _, id := range []struct{ key, v string }{{"poolID", g.PoolID}, {"providerID", g.ProviderID}} {
		if !wifID.MatchString(id.v) || strings.HasPrefix(id.v, "gcp-") {
			errs = append(errs, field.Invalid(p.Child(id.key), id.v, "4 to 32 of a-z, 0-9 and -, not starting with gcp-"))
		}
	}
	if !saEmail.MatchString(g.ServiceAccount) {
		errs = append(errs, field.Invalid(p.Child("serviceAccount"), g.ServiceAccount, "the deploy service account's email, for example runnerfleet-deploy@my-project.iam.gserviceaccount.com"))
	}
	return errs
}
