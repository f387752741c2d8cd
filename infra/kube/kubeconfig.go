package kube

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// Kubeconfig is the kubeconfig of a cloud cluster the program created:
// one cluster, one context and one user, all named Cluster, whose token a
// client-go credential plugin (Exec) gets with the caller's credentials.
// EKS and GKE build theirs here; they differ only in Server's form and in
// the plugin.
type Kubeconfig struct {
	// Platform names the cloud's cluster service in the error of a
	// cluster with no endpoint yet ("EKS", "GKE").
	Platform string
	Cluster  string
	// Server is the API server's URL; CAData its CA certificate, base64
	// PEM as both clouds report it.
	Server, CAData string
	Exec           Exec
}

// Exec is the credential plugin of a Kubeconfig's user
// (client.authentication.k8s.io/v1beta1), never interactive.
type Exec struct {
	Command string
	Args    []string
	// ProvideClusterInfo hands the plugin the cluster's server and CA.
	ProvideClusterInfo bool
	// InstallHint is what kubectl prints when Command is missing.
	InstallHint string
}

// JSON is k as JSON, the form EKS stacks have always had. Both forms are
// kept so that no deployed stack's Kubernetes provider sees its kubeconfig
// change.
func (k Kubeconfig) JSON() (string, error) { return k.encode(json.Marshal) }

// YAML is k as YAML, the form GKE stacks have always had.
func (k Kubeconfig) YAML() (string, error) { return k.encode(yaml.Marshal) }

func (k Kubeconfig) encode(marshal func(any) ([]byte, error)) (string, error) {
	if k.Server == "" || k.CAData == "" {
		return "", fmt.Errorf("%s cluster %s has no endpoint or certificate authority yet", k.Platform, k.Cluster)
	}
	exec := map[string]any{
		"apiVersion":      "client.authentication.k8s.io/v1beta1",
		"command":         k.Exec.Command,
		"interactiveMode": "Never",
	}
	if len(k.Exec.Args) > 0 {
		exec["args"] = k.Exec.Args
	}
	if k.Exec.ProvideClusterInfo {
		exec["provideClusterInfo"] = true
	}
	if k.Exec.InstallHint != "" {
		exec["installHint"] = k.Exec.InstallHint
	}
	b, err := marshal(map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": k.Cluster,
		"clusters": []any{map[string]any{"name": k.Cluster, "cluster": map[string]any{
			"server":                     k.Server,
			"certificate-authority-data": k.CAData,
		}}},
		"contexts": []any{map[string]any{"name": k.Cluster, "context": map[string]any{"cluster": k.Cluster, "user": k.Cluster}}},
		"users":    []any{map[string]any{"name": k.Cluster, "user": map[string]any{"exec": exec}}},
	})
	return string(b), err
}
