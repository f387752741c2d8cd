package localcluster

// The API server's audit log of the requests that take things away: a pod,
// node or namespace deleted, a pod evicted, a NodeClaim deleted. A job pod
// that vanishes under a running job names there who deleted it and with
// which client (user and user agent), which no process's own log says when
// the deleter is not one of ours. Nothing else is logged: reads and writes
// that keep things are not what a lost job asks about, and a busy cluster
// would fill the disk.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/yaml"
)

// AuditLog is the name of the API server's audit log: LogFile(dir, AuditLog).
const AuditLog = "kube-apiserver-audit"

// auditPolicyFile is the policy kube-apiserver reads, in the state directory.
const auditPolicyFile = "audit-policy.yaml"

// AuditPolicy is what the local API server logs: deletions and evictions of
// pods, deletions of nodes, namespaces and Karpenter's NodeClaims, at
// Metadata level (who, what, when, the answer; never a body), once each
// (when the answer is sent).
func AuditPolicy() *auditv1.Policy {
	return &auditv1.Policy{
		TypeMeta:   metav1.TypeMeta{APIVersion: auditv1.SchemeGroupVersion.String(), Kind: "Policy"},
		OmitStages: []auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseStarted},
		Rules: []auditv1.PolicyRule{
			{
				Level: auditv1.LevelMetadata,
				Verbs: []string{"delete", "deletecollection"},
				Resources: []auditv1.GroupResources{
					{Group: "", Resources: []string{"pods", "nodes", "namespaces"}},
					{Group: "karpenter.sh", Resources: []string{"nodeclaims"}},
				},
			},
			{
				Level:     auditv1.LevelMetadata,
				Verbs:     []string{"create"},
				Resources: []auditv1.GroupResources{{Group: "", Resources: []string{"pods/eviction"}}},
			},
			{Level: auditv1.LevelNone},
		},
	}
}

// auditArgs are kube-apiserver's flags for AuditPolicy, written into dir.
func auditArgs(dir string) ([]string, error) {
	b, err := yaml.Marshal(AuditPolicy())
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, auditPolicyFile)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, fmt.Errorf("writing the API server's audit policy: %w", err)
	}
	return []string{
		"--audit-policy-file=" + path,
		"--audit-log-path=" + LogFile(dir, AuditLog),
		"--audit-log-format=json",
		"--audit-log-maxsize=100", // MB; then one rotated file is kept
		"--audit-log-maxbackup=1",
	}, nil
}

// Deletions returns the audit log's lines (one per request, oldest first)
// whose object is named by one of names: when, what was asked, by whom,
// with which client and what the API server answered.
func Deletions(dir string, names []string) ([]string, error) {
	fh, err := os.Open(LogFile(dir, AuditLog))
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var out []string
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.ObjectRef == nil || !slices.Contains(names, ev.ObjectRef.Name) {
			continue
		}
		out = append(out, formatAuditEvent(&ev))
	}
	return out, sc.Err()
}

func formatAuditEvent(ev *auditv1.Event) string {
	r := ev.ObjectRef
	what := r.Resource
	if r.Subresource != "" {
		what += "/" + r.Subresource
	}
	if r.APIGroup != "" {
		what += "." + r.APIGroup
	}
	obj := r.Name
	if r.Namespace != "" {
		obj = r.Namespace + "/" + r.Name
	}
	code := int32(0)
	if ev.ResponseStatus != nil {
		code = ev.ResponseStatus.Code
	}
	by := ev.User.Username
	if ev.ImpersonatedUser != nil {
		by += " as " + ev.ImpersonatedUser.Username
	}
	return fmt.Sprintf("%s %s %s %s by %s (%s): %d",
		ev.StageTimestamp.UTC().Format("15:04:05.000"), ev.Verb, what, obj, by, strings.TrimSpace(ev.UserAgent), code)
}
