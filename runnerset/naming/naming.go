// Package naming derives every name runnerfleet gives to an object from the
// RunnerSet it serves. The controller, the capacity builders and the Pulumi
// program all call it, so that an IAM trust policy written by Pulumi and the
// ServiceAccount written by the controller always agree.
package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxLength is the longest name this package returns: the limit of a DNS-1123
// label, of a label value and, with room to spare, of an IAM role name (64).
const MaxLength = 63

// Runner names the objects of one RunnerSet.
type Runner struct {
	Namespace string
	Name      string
}

// For returns the names of the RunnerSet namespace/name.
func For(namespace, name string) Runner { return Runner{Namespace: namespace, Name: name} }

// ManagerServiceAccount is the ServiceAccount the manager pods run as.
func (r Runner) ManagerServiceAccount() string { return Join(r.Name, "manager") }

// ManagerRole is the Role (and RoleBinding) that lets managers create job pods.
func (r Runner) ManagerRole() string { return Join(r.Name, "manager") }

// Managers is the manager Deployment and its PodDisruptionBudget.
func (r Runner) Managers() string { return Join(r.Name, "manager") }

// Config is the ConfigMap holding config.toml.
func (r Runner) Config() string { return Join(r.Name, "config") }

// JobServiceAccount is the ServiceAccount job pods run as; IRSA and Workload
// Identity trust exactly system:serviceaccount:<Namespace>:<JobServiceAccount>
// (and the manager's, ManagerServiceAccountSubject, which signs cache URLs).
func (r Runner) JobServiceAccount() string { return Join(r.Name, "job") }

// Capacity names the cluster-scoped capacity of this RunnerSet (NodePool,
// EC2NodeClass, ComputeClass): unique across namespaces.
func (r Runner) Capacity() string { return Join("rf", r.Namespace, r.Name) }

// IAMRole is the name of the IAM role a platform creates for this RunnerSet's
// jobs in cluster (GCPServiceAccountID names the Google service account).
func (r Runner) IAMRole(cluster string) string { return Join(cluster, r.Namespace, r.Name, "job") }

// MaxGCPNamespace is the longest namespace whose RunnerSets can have a
// Google service account from GCPServiceAccountID: account IDs are at most 30
// characters, and the namespace is followed by '-' and a 6-digit hash.
const MaxGCPNamespace = 30 - 1 - gcpHashLength

const gcpHashLength = 6

// GCPServiceAccountID is the account ID (the part of the email before '@')
// of the Google service account a platform creates for this RunnerSet's jobs
// in cluster: "<namespace>-<hash>", the hash being the first 6 hex digits of
// the SHA-256 of "<cluster>/<namespace>/<name>". The hash keeps apart the
// RunnerSets of one namespace, and clusters that share a project.
//
// The namespace comes first so that one RunnerClass pattern,
// "{namespace}-*@<project>.iam.gserviceaccount.com", allows each namespace
// its own accounts. That pattern cannot tell namespace "a" from "a-b" (the '*'
// may span "b-<hash>"); the Workload Identity binding on each account, which
// names exactly one Kubernetes ServiceAccount, is what keeps namespaces apart.
//
// Account IDs are 6 to 30 characters of [a-z][-a-z0-9]*[a-z0-9], so the
// namespace must start with a letter and be at most MaxGCPNamespace
// characters long; for any other namespace the ID returned is not a valid
// account ID, and callers must refuse the RunnerSet before using it.
func (r Runner) GCPServiceAccountID(cluster string) string {
	sum := sha256.Sum256([]byte(cluster + "/" + r.Namespace + "/" + r.Name))
	return r.Namespace + "-" + hex.EncodeToString(sum[:])[:gcpHashLength]
}

// ServiceAccountSubject is the Kubernetes subject of job pods, as IRSA trust
// policies and Workload Identity bindings name it.
func (r Runner) ServiceAccountSubject() string {
	return "system:serviceaccount:" + r.Namespace + ":" + r.JobServiceAccount()
}

// ManagerServiceAccountSubject is the Kubernetes subject of the manager
// pods. They sign the job cache's URLs, so a job identity that the cache
// uses trusts this subject too.
func (r Runner) ManagerServiceAccountSubject() string {
	return "system:serviceaccount:" + r.Namespace + ":" + r.ManagerServiceAccount()
}

// Join joins parts with '-' into a name of at most MaxLength characters. A
// name that would be longer is cut and given a hash of the whole, so that two
// long names that differ only at the end stay distinct.
func Join(parts ...string) string {
	full := strings.Join(parts, "-")
	if len(full) <= MaxLength {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	suffix := hex.EncodeToString(sum[:])[:8]
	head := strings.TrimRight(full[:MaxLength-len(suffix)-1], "-.")
	return head + "-" + suffix
}

// RunnerToken is the Secret holding the token of a runner the controller
// created in GitLab.
func (r Runner) RunnerToken() string { return Join(r.Name, "runner-token") }
