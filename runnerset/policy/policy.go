// Package policy decides whether a RunnerClass allows what a RunnerSet asks
// for. The answer carries a condition reason and a message that tells the
// team what to change.
package policy

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// Check returns nil when class allows rs, otherwise the first violation.
func Check(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass) *v1alpha1.Failure {
	p := class.Spec.Policy
	allowed := p.AllowedCapacityTypesOrDefault()
	for _, ct := range rs.Spec.Capacity.CapacityTypesOrDefault() {
		if !slices.Contains(allowed, ct) {
			return v1alpha1.Failf(v1alpha1.ReasonCapacityTypeForbidden,
				"spec.capacity.capacityTypes: RunnerClass %s allows only %s; remove %q or ask the platform team to allow it",
				class.Name, join(allowed), ct)
		}
	}
	if rs.Spec.Jobs.Privileged && !p.AllowPrivileged {
		return v1alpha1.Failf(v1alpha1.ReasonPrivilegedForbidden,
			"spec.jobs.privileged: RunnerClass %s does not allow privileged jobs; set it to false or use a class with policy.allowPrivileged",
			class.Name)
	}
	if p.MaxConcurrency != nil {
		// An autoscaled RunnerSet is judged at its most managers.
		total := rs.Spec.Managers.MaxManagers() * rs.Spec.Managers.ConcurrentOrDefault()
		if total > *p.MaxConcurrency {
			field := strings.TrimPrefix(rs.Spec.Managers.MaxManagersField(), "spec.")
			return v1alpha1.Failf(v1alpha1.ReasonConcurrencyTooHigh,
				"spec.managers: %s × concurrent is %d but RunnerClass %s allows at most %d; lower %s or managers.concurrent",
				strings.TrimPrefix(field, "managers."), total, class.Name, *p.MaxConcurrency, field)
		}
	}
	if v := checkJobsNamespace(rs, class); v != nil {
		return v
	}
	if v := checkJobSettings(rs, class); v != nil {
		return v
	}
	if id := rs.Spec.Jobs.Identity; id != nil {
		if id.AWSRoleARN != "" && !AnyMatch(p.Identity.AWSRoleARNPatterns, rs.Namespace, id.AWSRoleARN) {
			return identityViolation(class, "awsRoleARN", id.AWSRoleARN, rs.Namespace, p.Identity.AWSRoleARNPatterns)
		}
		if id.GCPServiceAccount != "" && !AnyMatch(p.Identity.GCPServiceAccountPatterns, rs.Namespace, id.GCPServiceAccount) {
			return identityViolation(class, "gcpServiceAccount", id.GCPServiceAccount, rs.Namespace, p.Identity.GCPServiceAccountPatterns)
		}
	}
	return nil
}

// checkJobsNamespace judges a jobs namespace the team named: never the
// RunnerSet's own namespace (where the managers' job rights would reach
// the API token and every other Secret of the team), and only one the
// class's policy.jobNamespaces allow for this namespace.
func checkJobsNamespace(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass) *v1alpha1.Failure {
	jn := rs.Spec.Jobs.Namespace
	if jn == "" {
		return nil
	}
	derived := rs.Names().WithJobs("").JobsNamespace()
	if jn == rs.Namespace {
		return v1alpha1.Failf(v1alpha1.ReasonJobsNamespaceForbidden,
			"spec.jobs.namespace: %q is the RunnerSet's own namespace, where the managers' rights over job pods and Secrets would reach the team's Secrets (the GitLab API token among them); "+
				"recreate the RunnerSet without spec.jobs.namespace to use %s", jn, derived)
	}
	patterns := class.Spec.Policy.JobNamespaces
	for _, p := range patterns {
		if ValidateJobNamespacePattern(p) == nil && matchUnchecked(p, rs.Namespace, jn) {
			return nil
		}
	}
	msg := fmt.Sprintf("spec.jobs.namespace: %q is not allowed in namespace %s by RunnerClass %s", jn, rs.Namespace, class.Name)
	var want []string
	for _, p := range patterns {
		if ValidateJobNamespacePattern(p) == nil {
			want = append(want, strings.ReplaceAll(p, Placeholder, rs.Namespace))
		}
	}
	if len(want) > 0 {
		msg += "; recreate the RunnerSet with one matching " + strings.Join(want, " or ") + ", or without spec.jobs.namespace to use " + derived
	} else {
		msg += " (its policy.jobNamespaces allows none); recreate the RunnerSet without spec.jobs.namespace to use " + derived
	}
	return &v1alpha1.Failure{Reason: v1alpha1.ReasonJobsNamespaceForbidden, Message: msg}
}

// JobNamespacePattern is what a policy.jobNamespaces pattern must be, as
// the CRD's CEL rule has it verbatim (a test checks): {namespace} once, and
// otherwise only what a namespace name holds and '?'. Without '*' the
// namespace's extent in a value is fixed by the pattern's length, so no
// value matches one pattern for two namespaces.
const JobNamespacePattern = `^[-a-z0-9?]*[{]namespace[}][-a-z0-9?]*$`

var jobNamespacePattern = regexp.MustCompile(JobNamespacePattern)

// ValidateJobNamespacePattern says why pattern cannot be a jobs namespace
// pattern, or returns nil.
func ValidateJobNamespacePattern(pattern string) error {
	if !jobNamespacePattern.MatchString(pattern) {
		return fmt.Errorf("%q is not a jobs namespace pattern: it holds %s once and otherwise only lower-case letters, digits, '-' and '?', for example ci-%s", pattern, Placeholder, Placeholder)
	}
	return nil
}

func identityViolation(class *v1alpha1.RunnerClass, field, value, ns string, patterns []string) *v1alpha1.Failure {
	if len(patterns) == 0 {
		return v1alpha1.Failf(v1alpha1.ReasonIdentityForbidden,
			"spec.jobs.identity.%s: RunnerClass %s allows no %s identities; remove spec.jobs.identity or ask the platform team to add a pattern",
			field, class.Name, field)
	}
	var want, bad []string
	for _, p := range patterns {
		if err := ValidatePattern(p); err != nil {
			bad = append(bad, err.Error())
			continue
		}
		want = append(want, strings.ReplaceAll(p, Placeholder, ns))
	}
	msg := fmt.Sprintf("spec.jobs.identity.%s: %q is not allowed in namespace %s by RunnerClass %s", field, value, ns, class.Name)
	if len(want) > 0 {
		msg += "; use one matching " + strings.Join(want, " or ")
	}
	if len(bad) > 0 {
		msg += "; the class's patterns " + strings.Join(bad, "; ") + ": ask the platform team to fix them"
	}
	return &v1alpha1.Failure{Reason: v1alpha1.ReasonIdentityForbidden, Message: msg}
}

// AnyMatch reports whether value matches one of patterns for namespace.
func AnyMatch(patterns []string, namespace, value string) bool {
	for _, p := range patterns {
		if Match(p, namespace, value) {
			return true
		}
	}
	return false
}

// Placeholder stands for the RunnerSet's namespace in an identity pattern.
const Placeholder = "{namespace}"

// An identity pattern must tell every namespace's identities apart: under
// "ci-{namespace}-*", namespace x may use ci-x-b-build, which namespace x-b
// may use too. So the namespace must be pinned on one side and bounded on
// the other. PatternPinnedLeft and PatternPinnedRight say how, as regular
// expressions the CRD's CEL rules use verbatim (a test checks), so the API
// server, the controller and the Pulumi program judge a pattern alike:
//
//   - pinned on the left: no '*' between the last ':', '/' or '@' (which '*'
//     never matches) or the start, and {namespace}; and after {namespace},
//     before any '*', a character a namespace cannot hold ('.', '_', '/',
//     '@', …) or the end, with only letters, digits, '-' and '?' between;
//   - or the mirror image: no '*' between {namespace} and the next ':', '/'
//     or '@' or the end; and before {namespace}, after any '*', a
//     character a namespace cannot hold or the start, with only letters,
//     digits, '-' and '?' between.
//
// Either way the namespace's extent in a value is fixed, so no value
// matches for two namespaces.
const (
	PatternPinnedLeft  = `^(.*[:/@])?[^*:/@]*[{]namespace[}][-a-z0-9?]*([^-a-z0-9?*{].*)?$`
	PatternPinnedRight = `^(.*[^-a-z0-9?*}])?[-a-z0-9?]*[{]namespace[}][^*:/@]*([:/@].*)?$`
)

var (
	pinnedLeft  = regexp.MustCompile(PatternPinnedLeft)
	pinnedRight = regexp.MustCompile(PatternPinnedRight)
)

// ValidatePattern says why pattern cannot be an identity pattern, or
// returns nil.
func ValidatePattern(pattern string) error {
	switch n := strings.Count(pattern, Placeholder); {
	case n == 0:
		return fmt.Errorf("%q does not contain %s, so it would let every team use the same identities", pattern, Placeholder)
	case n > 1:
		return fmt.Errorf("%q contains %s more than once; use it once", pattern, Placeholder)
	}
	if !pinnedLeft.MatchString(pattern) && !pinnedRight.MatchString(pattern) {
		return fmt.Errorf("%q cannot tell namespace x from x-b: a '*' may run into or out of the namespace; "+
			"end the namespace with a character a namespace cannot hold (for example ci-{namespace}.* for a role name, "+
			"role/ci/{namespace}/* for a role path), or use '?' (one letter or digit) for a fixed-length suffix ({namespace}-??????@…)", pattern)
	}
	return nil
}

// Match reports whether value matches pattern, in which {namespace} stands
// for namespace, * for any run of characters other than ':', '/' and '@',
// and ? for one lower-case letter or digit. A pattern ValidatePattern
// refuses matches nothing: it would let one team use another's identity.
func Match(pattern, namespace, value string) bool {
	if ValidatePattern(pattern) != nil || namespace == "" {
		return false
	}
	return matchUnchecked(pattern, namespace, value)
}

// matchUnchecked is Match without ValidatePattern: what the policy did
// before ambiguous patterns were refused (the tests' negative control).
func matchUnchecked(pattern, namespace, value string) bool {
	var re strings.Builder
	re.WriteString("^")
	for i, part := range strings.Split(pattern, Placeholder) {
		if i > 0 {
			re.WriteString(regexp.QuoteMeta(namespace))
		}
		for _, c := range part {
			switch c {
			case '*':
				re.WriteString(`[^:/@]*`)
			case '?':
				re.WriteString(`[a-z0-9]`)
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
	}
	re.WriteString("$")
	ok, err := regexp.MatchString(re.String(), value)
	return err == nil && ok
}

func join(cts []v1alpha1.CapacityType) string {
	s := make([]string, len(cts))
	for i, c := range cts {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// checkJobSettings judges what of spec.jobs a class may refuse: the kinds
// of volumes and the host paths, the helper image and configOverride.
func checkJobSettings(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass) *v1alpha1.Failure {
	p := class.Spec.Policy
	j := rs.Spec.Jobs
	v := j.Volumes
	kinds := p.Volumes.AllowedKindsOrDefault()
	used := []struct {
		kind  v1alpha1.VolumeKind
		field string
		n     int
	}{
		{v1alpha1.VolumeKindConfigMap, "configMaps", len(v.ConfigMaps)},
		{v1alpha1.VolumeKindSecret, "secrets", len(v.Secrets)},
		{v1alpha1.VolumeKindEmptyDir, "emptyDirs", len(v.EmptyDirs)},
		{v1alpha1.VolumeKindPVC, "pvcs", len(v.PVCs)},
		{v1alpha1.VolumeKindHostPath, "hostPaths", len(v.HostPaths)},
	}
	for _, u := range used {
		if u.n > 0 && !slices.Contains(kinds, u.kind) {
			return v1alpha1.Failf(v1alpha1.ReasonVolumeKindForbidden,
				"spec.jobs.volumes.%s: RunnerClass %s does not allow %s volumes (policy.volumes.allowedKinds: %s); remove them or ask the platform team to allow the kind",
				u.field, class.Name, u.kind, joinKinds(kinds))
		}
	}
	for _, h := range v.HostPaths {
		if !HostPathAllowed(p.Volumes.HostPathPrefixes, h.HostPath) {
			allowed := "none"
			if len(p.Volumes.HostPathPrefixes) > 0 {
				allowed = strings.Join(p.Volumes.HostPathPrefixes, ", ")
			}
			return v1alpha1.Failf(v1alpha1.ReasonHostPathForbidden,
				"spec.jobs.volumes.hostPaths[%s].hostPath: %q is not under a directory RunnerClass %s allows (policy.volumes.hostPathPrefixes: %s); use a path under one of them, or an emptyDir or pvc volume",
				h.Name, h.HostPath, class.Name, allowed)
		}
	}
	if j.HelperImage != "" && !p.AllowHelperImage {
		return v1alpha1.Failf(v1alpha1.ReasonHelperImageForbidden,
			"spec.jobs.helperImage: RunnerClass %s does not let RunnerSets choose the helper image (policy.allowHelperImage); remove it to use the class's, or ask the platform team to allow it",
			class.Name)
	}
	if j.ConfigOverride != "" && !p.AllowConfigOverrideOrDefault() {
		return v1alpha1.Failf(v1alpha1.ReasonConfigOverrideForbidden,
			"spec.jobs.configOverride: RunnerClass %s allows no config override (policy.allowConfigOverride: false); remove it, or use the fields of spec.jobs",
			class.Name)
	}
	return nil
}

// HostPathAllowed reports whether the node directory p, cleaned, is one of
// prefixes or lies below one. "/var/cache/ci" allows /var/cache/ci/go, not
// /var/cache/cigar, nor /var/cache/ci/../../etc.
func HostPathAllowed(prefixes []string, p string) bool {
	if !path.IsAbs(p) {
		return false
	}
	p = path.Clean(p)
	for _, pre := range prefixes {
		if !path.IsAbs(pre) {
			continue
		}
		pre = path.Clean(pre)
		if pre == "/" {
			continue // the CRD refuses it; the whole node is never a prefix
		}
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

func joinKinds(kinds []v1alpha1.VolumeKind) string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}
