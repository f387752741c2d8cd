package aws

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// PolicyDocument is an IAM policy document.
type PolicyDocument struct {
	Version   string      `json:"Version"`
	Statement []Statement `json:"Statement"`
}

// Statement is one statement of a policy document.
type Statement struct {
	Sid       string         `json:"Sid,omitempty"`
	Effect    string         `json:"Effect"`
	Principal map[string]any `json:"Principal,omitempty"`
	Action    []string       `json:"Action"`
	Resource  []string       `json:"Resource,omitempty"`
	// Condition maps an operator (StringEquals, Null, …) to keys and values.
	Condition map[string]map[string]any `json:"Condition,omitempty"`
}

func policy(statements ...Statement) PolicyDocument {
	return PolicyDocument{Version: "2012-10-17", Statement: statements}
}

// String is the document as compact JSON (IAM counts every character
// against its size limits).
func (d PolicyDocument) String() string {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err) // only strings, slices and maps of them
	}
	return string(b)
}

// serviceTrust lets AWS services assume a role.
func serviceTrust(actions []string, services ...string) string {
	return policy(Statement{
		Effect:    "Allow",
		Principal: map[string]any{"Service": services},
		Action:    actions,
	}).String()
}

// Audience is the audience of the tokens EKS projects for IRSA.
const Audience = "sts.amazonaws.com"

// IRSATrust is the trust policy of a role that exactly the given Kubernetes
// service accounts (one or more "system:serviceaccount:<ns>:<name>") may
// assume through the cluster's OIDC provider: only
// sts:AssumeRoleWithWebIdentity, and StringEquals (never StringLike) on
// both the token's subject and its audience. Several subjects are a list,
// which StringEquals matches when the subject equals any one of them.
func IRSATrust(oidcProviderARN, issuerHost string, subjects ...string) string {
	return webIdentityTrust(oidcProviderARN, issuerHost, Audience, subjects)
}

// webIdentityTrust allows only sts:AssumeRoleWithWebIdentity through the
// OIDC provider, with StringEquals on the token's subject (one of subjects)
// and its audience: the trust of IRSA roles and of the CI's deploy role.
func webIdentityTrust(oidcProviderARN, issuerHost, audience string, subjects []string) string {
	var sub any = subjects
	if len(subjects) == 1 {
		sub = subjects[0]
	}
	return policy(Statement{
		Effect:    "Allow",
		Principal: map[string]any{"Federated": oidcProviderARN},
		Action:    []string{"sts:AssumeRoleWithWebIdentity"},
		Condition: map[string]map[string]any{"StringEquals": {
			issuerHost + ":sub": sub,
			issuerHost + ":aud": audience,
		}},
	}).String()
}

// irsaTrust is IRSATrust of the cluster's OIDC provider, as an output.
func irsaTrust(c *Cluster, subjects ...string) pulumi.StringOutput {
	return pulumi.All(c.OIDCProviderArn, c.IssuerHost).ApplyT(func(v []any) (string, error) {
		arn, host := v[0].(string), v[1].(string)
		if arn == "" || host == "" {
			return "", fmt.Errorf("the cluster's OIDC provider is not known yet (arn %q, issuer %q)", arn, host)
		}
		if len(subjects) == 0 {
			return "", fmt.Errorf("an IRSA trust needs at least one subject")
		}
		return IRSATrust(arn, host, subjects...), nil
	}).(pulumi.StringOutput)
}

// accountOf is the account ID in an ARN.
func accountOf(arn string) (string, error) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) < 6 || parts[4] == "" {
		return "", fmt.Errorf("no account in ARN %q", arn)
	}
	return parts[4], nil
}
