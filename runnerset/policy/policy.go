// Package policy decides whether a RunnerClass allows what a RunnerSet asks
// for. The answer carries a condition reason and a message that tells the
// team what to change.
package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// Violation is why a RunnerClass refuses a RunnerSet.
type Violation struct {
	Reason  string // a v1alpha1.Reason* constant
	Message string
}

func (v *Violation) Error() string { return v.Message }

// Check returns nil when class allows rs, otherwise the first violation.
func Check(rs *v1alpha1.RunnerSet, class *v1alpha1.RunnerClass) *Violation {
	p := class.Spec.Policy
	allowed := p.AllowedCapacityTypesOrDefault()
	for _, ct := range rs.Spec.Capacity.CapacityTypesOrDefault() {
		if !slices.Contains(allowed, ct) {
			return &Violation{v1alpha1.ReasonCapacityTypeForbidden, fmt.Sprintf(
				"spec.capacity.capacityTypes: RunnerClass %s allows only %s; remove %q or ask the platform team to allow it",
				class.Name, join(allowed), ct)}
		}
	}
	if rs.Spec.Jobs.Privileged && !p.AllowPrivileged {
		return &Violation{v1alpha1.ReasonPrivilegedForbidden, fmt.Sprintf(
			"spec.jobs.privileged: RunnerClass %s does not allow privileged jobs; set it to false or use a class with policy.allowPrivileged",
			class.Name)}
	}
	if p.MaxConcurrency != nil {
		total := rs.Spec.Managers.ReplicasOrDefault() * rs.Spec.Managers.ConcurrentOrDefault()
		if total > *p.MaxConcurrency {
			return &Violation{v1alpha1.ReasonConcurrencyTooHigh, fmt.Sprintf(
				"spec.managers: replicas × concurrent is %d but RunnerClass %s allows at most %d; lower managers.replicas or managers.concurrent",
				total, class.Name, *p.MaxConcurrency)}
		}
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

func identityViolation(class *v1alpha1.RunnerClass, field, value, ns string, patterns []string) *Violation {
	if len(patterns) == 0 {
		return &Violation{v1alpha1.ReasonIdentityForbidden, fmt.Sprintf(
			"spec.jobs.identity.%s: RunnerClass %s allows no %s identities; remove spec.jobs.identity or ask the platform team to add a pattern",
			field, class.Name, field)}
	}
	want := make([]string, len(patterns))
	for i, p := range patterns {
		want[i] = strings.ReplaceAll(p, "{namespace}", ns)
	}
	return &Violation{v1alpha1.ReasonIdentityForbidden, fmt.Sprintf(
		"spec.jobs.identity.%s: %q is not allowed in namespace %s by RunnerClass %s; use one matching %s",
		field, value, ns, class.Name, strings.Join(want, " or "))}
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

// Match reports whether value matches pattern, in which {namespace} stands
// for namespace and * for any run of characters other than ':', '/' and '@'.
// A pattern without {namespace} matches nothing: it would let one team use
// another's identity.
func Match(pattern, namespace, value string) bool {
	if !strings.Contains(pattern, "{namespace}") || namespace == "" {
		return false
	}
	var re strings.Builder
	re.WriteString("^")
	for i, part := range strings.Split(pattern, "{namespace}") {
		if i > 0 {
			re.WriteString(regexp.QuoteMeta(namespace))
		}
		for j, lit := range strings.Split(part, "*") {
			if j > 0 {
				re.WriteString(`[^:/@]*`)
			}
			re.WriteString(regexp.QuoteMeta(lit))
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
