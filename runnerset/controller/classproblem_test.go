package controller

import (
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// A class admitted before a rule existed (or by a server without the CRD's
// CEL rules) is not accepted, and the condition names the field.
func TestAClassWithAnUnusableSettingIsNotAccepted(t *testing.T) {
	for name, tc := range map[string]struct {
		mut          func(*v1alpha1.RunnerClass)
		reason, want string
	}{
		"identity pattern that lets x use x-b's roles": {
			func(c *v1alpha1.RunnerClass) {
				c.Spec.Policy.Identity.AWSRoleARNPatterns = []string{"arn:aws:iam::123456789012:role/ci-{namespace}-*"}
			}, v1alpha1.ReasonInvalidIdentityPattern, "spec.policy.identity.awsRoleARNPatterns",
		},
		"job image that is no reference": {
			func(c *v1alpha1.RunnerClass) { c.Spec.Defaults.JobImage = "Alpine:Latest!" },
			v1alpha1.ReasonInvalidImage, "spec.defaults.jobImage",
		},
	} {
		c := &v1alpha1.RunnerClass{Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
		if reason, _ := classProblem(c); reason != "" {
			t.Fatalf("a plain class: %s", reason)
		}
		tc.mut(c)
		reason, msg := classProblem(c)
		if reason != tc.reason || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %s %q, want %s naming %s", name, reason, msg, tc.reason, tc.want)
		}
	}
}
