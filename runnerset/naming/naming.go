// Package naming derives every name runnerfleet gives to an object from the
// RunnerSet it serves. The controller, the capacity builders and the Pulumi
// program all call it, so that an IAM trust policy written by Pulumi and the
// ServiceAccount written by the controller always agree.
package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// MaxLength is the longest name this package returns: the limit of a DNS-1123
// label, of a label value and, with room to spare, of an IAM role name (64).
const MaxLength = 63

// Runner names the objects of one RunnerSet.
type Runner struct {
	Namespace string
	Name      string
	// Jobs is the jobs namespace the team named (spec.jobs.namespace), ""
	// for the one derived from Namespace and Name (DerivedJobsNamespace).
	Jobs string
}

// For returns the names of the RunnerSet namespace/name, whose jobs run in
// the namespace derived from it.
func For(namespace, name string) Runner { return Runner{Namespace: namespace, Name: name} }

// WithJobs returns r with its jobs in namespace jobs; "" keeps the derived one.
func (r Runner) WithJobs(jobs string) Runner { r.Jobs = jobs; return r }

// JobsNamespace is the namespace the RunnerSet's job pods, their
// ServiceAccount and their per-job Secrets live in: the one the team named,
// or DerivedJobsNamespace.
func (r Runner) JobsNamespace() string {
	if r.Jobs != "" {
		return r.Jobs
	}
	return DerivedJobsNamespace(r.Namespace, r.Name)
}

// DerivedJobsNamespace is the jobs namespace of RunnerSet namespace/name:
// "<namespace>-<name>-j<n>", n being the length of namespace. A namespace
// name cannot hold '.', so, unlike Scoped, the split is told by the length:
// reading n from the end gives the namespace back, then the name, so no two
// RunnerSets share one (team-a-b/c is "team-a-b-c-j8", team-a/b-c
// "team-a-b-c-j6").
//
// A result that would not be a DNS-1123 label (longer than MaxLength, or a
// RunnerSet name holding '.') is cut, its '.' turned into '-', and ends in
// '-' and a hash of the pair instead: hex digits hold no 'j', so a cut name
// never equals an uncut one, and two cut names are equal only if their
// hashes are.
func DerivedJobsNamespace(namespace, name string) string {
	full := namespace + "-" + name + "-j" + strconv.Itoa(len(namespace))
	if len(full) <= MaxLength && !strings.Contains(name, ".") {
		return full
	}
	sum := sha256.Sum256([]byte("jobs\x00" + namespace + "\x00" + name))
	h := hex.EncodeToString(sum[:])[:hashLength]
	head := strings.ReplaceAll(namespace+"-"+name, ".", "-")
	if len(head) > MaxLength-len(h)-1 {
		head = head[:MaxLength-len(h)-1]
	}
	return strings.TrimRight(head, "-") + "-" + h
}

// ManagerServiceAccount is the ServiceAccount the manager pods run as.
func (r Runner) ManagerServiceAccount() string { return Join(r.Name, "manager") }

// ManagerRole is the managers' Role and RoleBinding of earlier versions
// (in the team's namespace, and in the jobs namespace before the
// executor's ClusterRole), which the controller deletes.
func (r Runner) ManagerRole() string { return Join(r.Name, "manager") }

// ManagerExecutorBinding is the RoleBinding in the jobs namespace that
// grants the managers the executor's ClusterRole there.
func (r Runner) ManagerExecutorBinding() string { return Join(r.Name, "executor") }

// JobsNetworkPolicy is the NetworkPolicy of the jobs namespace.
func (r Runner) JobsNetworkPolicy() string { return Join(r.Name, "jobs") }

// Managers is the manager Deployment, its PodDisruptionBudget and its
// NetworkPolicy.
func (r Runner) Managers() string { return Join(r.Name, "manager") }

// Config is the Secret holding config.toml, the one Secret of the team's
// namespace the managers may read.
func (r Runner) Config() string { return Join(r.Name, "config") }

// JobServiceAccount is the ServiceAccount job pods run as, in
// JobsNamespace; IRSA and Workload Identity trust exactly
// system:serviceaccount:<JobsNamespace>:<JobServiceAccount> (and the
// manager's, ManagerServiceAccountSubject, which signs cache URLs).
func (r Runner) JobServiceAccount() string { return Join(r.Name, "job") }

// Capacity names the cluster-scoped capacity of this RunnerSet (NodePool,
// EC2NodeClass, ComputeClass), "rf-<namespace>.<name>": unique across
// namespaces (see Scoped).
func (r Runner) Capacity() string { return Scoped(MaxLength, "rf-", r.Namespace, r.Name, "") }

// ClassCapacity is the name of what the RunnerSets of RunnerClass class
// share of their capacity, the Karpenter node class and, when its tags
// share one (spec.nodePools), the NodePool: "rfclass-<class>",
// cut and given a hash of the class's name beyond MaxLength. It never
// equals a Capacity name, which starts with "rf-".
func ClassCapacity(class string) string {
	full := "rfclass-" + class
	if len(full) <= MaxLength {
		return full
	}
	sum := sha256.Sum256([]byte("rfclass\x00" + class))
	h := hex.EncodeToString(sum[:])[:hashLength]
	head := strings.ReplaceAll(full, ".", "-")[:MaxLength-len(h)-1]
	return strings.TrimRight(head, "-") + "-" + h
}

// IAMRole is the name of the IAM role a platform creates for this RunnerSet's
// jobs in cluster, "<cluster>.<namespace>.<name>-job": unique across
// namespaces and, as cluster names hold no '.', across the clusters of an
// account (see Scoped). GCPServiceAccountID names the Google service account.
func (r Runner) IAMRole(cluster string) string {
	return Scoped(MaxLength, cluster+".", r.Namespace, r.Name, "-job")
}

// Scoped is the one name of (namespace, name) in a scope wider than a
// namespace (the cluster, a cloud account), at most limit characters:
// prefix, namespace, '.', name, suffix. Namespaces cannot hold a '.', so
// the first '.' after prefix ends the namespace and no two (namespace,
// name) pairs share a name: team-a-b/c is "rf-team-a-b.c", team-a/b-c is
// "rf-team-a.b-c". Joining both with '-' would not tell them apart.
//
// A name that would be longer than limit is cut, its '.' turned into '-',
// and given a hash of the whole tuple. Such a name holds no '.', so it can
// never equal an uncut one; two cut names are equal only if their hashes
// are (hashLength hex digits of SHA-256).
//
// The result is a DNS-1123 subdomain, a label value and an IAM name for
// every prefix and suffix of those characters: lower-case letters,
// digits, '-' and '.'.
func Scoped(limit int, prefix, namespace, name, suffix string) string {
	full := prefix + namespace + "." + name + suffix
	if len(full) <= limit {
		return full
	}
	sum := sha256.Sum256([]byte(prefix + "\x00" + namespace + "\x00" + name + "\x00" + suffix))
	h := hex.EncodeToString(sum[:])[:hashLength]
	head := strings.ReplaceAll(full, ".", "-")[:limit-len(h)-1]
	return strings.TrimRight(head, "-") + "-" + h
}

// hashLength is how many hex digits of a hash a cut name carries.
const hashLength = 10

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
// "{namespace}-??????@<project>.iam.gserviceaccount.com"
// (GCPServiceAccountIDPattern), allows each namespace exactly its own
// accounts: the fixed-length hash tells namespace "a" from "a-b". The
// Workload Identity binding on each account, which names exactly one
// Kubernetes ServiceAccount, keeps namespaces apart besides.
//
// Account IDs are 6 to 30 characters of [a-z][-a-z0-9]*[a-z0-9], so the
// namespace must start with a letter and be at most MaxGCPNamespace
// characters long; for any other namespace the ID returned is not a valid
// account ID, and callers must refuse the RunnerSet before using it.
func (r Runner) GCPServiceAccountID(cluster string) string {
	sum := sha256.Sum256([]byte(cluster + "/" + r.Namespace + "/" + r.Name))
	return r.Namespace + "-" + hex.EncodeToString(sum[:])[:gcpHashLength]
}

// GCPServiceAccountIDPattern is what matches every GCPServiceAccountID of
// namespace in an identity pattern: the namespace, '-' and one '?' (a
// letter or digit) per digit of the hash, so that namespace "a" cannot
// match "a-b-<hash>" of namespace "a-b".
func GCPServiceAccountIDPattern(namespace string) string {
	return namespace + "-" + strings.Repeat("?", gcpHashLength)
}

// ServiceAccountSubject is the Kubernetes subject of job pods, as IRSA trust
// policies and Workload Identity bindings name it: the job ServiceAccount
// lives in the jobs namespace, never in the team's.
func (r Runner) ServiceAccountSubject() string {
	return "system:serviceaccount:" + r.JobsNamespace() + ":" + r.JobServiceAccount()
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
