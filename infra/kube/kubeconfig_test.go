package kube

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// Both encodings are kubeconfigs client-go loads to the same cluster,
// context and credential plugin.
func TestKubeconfigLoadsInClientGoInBothEncodings(t *testing.T) {
	k := Kubeconfig{Platform: "EKS", Cluster: "prod", Server: "https://203.0.113.10", CAData: "Q0E=", Exec: Exec{
		Command: "aws", Args: []string{"eks", "get-token"}, ProvideClusterInfo: true, InstallHint: "install the AWS CLI",
	}}
	for name, encode := range map[string]func() (string, error){"JSON": k.JSON, "YAML": k.YAML} {
		s, err := encode()
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.Load([]byte(s))
		if err != nil {
			t.Fatalf("%s: client-go cannot load it: %v\n%s", name, err, s)
		}
		if err := clientcmd.Validate(*cfg); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		c, ctx, u := cfg.Clusters["prod"], cfg.Contexts["prod"], cfg.AuthInfos["prod"]
		if cfg.CurrentContext != "prod" || c == nil || ctx == nil || u == nil || u.Exec == nil {
			t.Fatalf("%s: %+v", name, cfg)
		}
		if c.Server != k.Server || string(c.CertificateAuthorityData) != "CA" || ctx.Cluster != "prod" || ctx.AuthInfo != "prod" {
			t.Errorf("%s: cluster %+v, context %+v", name, c, ctx)
		}
		e := u.Exec
		if e.APIVersion != "client.authentication.k8s.io/v1beta1" || e.Command != "aws" || !slices.Equal(e.Args, k.Exec.Args) ||
			!e.ProvideClusterInfo || e.InstallHint != k.Exec.InstallHint || e.InteractiveMode != "Never" {
			t.Errorf("%s: exec %+v", name, e)
		}
	}
}

func TestAKubeconfigOfAClusterWithNoEndpointYetIsAnError(t *testing.T) {
	for _, k := range []Kubeconfig{
		{Platform: "GKE", Cluster: "c", CAData: "Q0E="},
		{Platform: "GKE", Cluster: "c", Server: "https://203.0.113.10"},
	} {
		if _, err := k.YAML(); err == nil || !strings.Contains(err.Error(), "GKE cluster c has no endpoint") {
			t.Errorf("%+v: %v", k, err)
		}
	}
}
