package localcluster

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// The policy file is read by kube-apiserver's own loader (which validates
// it) and judged by its own rule evaluator: deletions and evictions are
// logged with their metadata, everything else not at all.
func TestTheAuditPolicyLogsWhatTakesThingsAwayAndNothingElse(t *testing.T) {
	dir := t.TempDir()
	args, err := auditArgs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(args, " "), "--audit-log-path="+LogFile(dir, AuditLog)) {
		t.Errorf("flags %v do not write the audit log to %s", args, LogFile(dir, AuditLog))
	}
	p, err := policy.LoadPolicyFromFile(filepath.Join(dir, auditPolicyFile))
	if err != nil {
		t.Fatalf("kube-apiserver's loader refuses the policy: %v", err)
	}
	eval := policy.NewPolicyRuleEvaluator(p)
	u := &user.DefaultInfo{Name: "system:serviceaccount:x:y"}
	for _, c := range []struct {
		verb, group, resource, sub string
		want                       auditinternal.Level
	}{
		{"delete", "", "pods", "", auditinternal.LevelMetadata},
		{"deletecollection", "", "pods", "", auditinternal.LevelMetadata},
		{"create", "", "pods", "eviction", auditinternal.LevelMetadata},
		{"delete", "", "nodes", "", auditinternal.LevelMetadata},
		{"delete", "", "namespaces", "", auditinternal.LevelMetadata},
		{"delete", "karpenter.sh", "nodeclaims", "", auditinternal.LevelMetadata},
		{"create", "", "pods", "", auditinternal.LevelNone},
		{"get", "", "pods", "", auditinternal.LevelNone},
		{"patch", "", "pods", "status", auditinternal.LevelNone},
		{"delete", "", "secrets", "", auditinternal.LevelNone},
		{"delete", "", "pods", "status", auditinternal.LevelNone},
	} {
		got := eval.EvaluatePolicyRule(authorizer.AttributesRecord{
			User: u, Verb: c.verb, APIGroup: c.group, Resource: c.resource, Subresource: c.sub,
			Namespace: "ns", Name: "n", ResourceRequest: true,
		})
		if got.Level != c.want {
			t.Errorf("%s %s/%s (group %q): level %s, want %s", c.verb, c.resource, c.sub, c.group, got.Level, c.want)
		}
	}
}

func TestDeletionsNameWhoDeletedAPodAndWithWhat(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(LogsDir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	event := func(name, verb, sub, username, agent string, code int32) string {
		ev := auditv1.Event{
			TypeMeta:       metav1.TypeMeta{APIVersion: "audit.k8s.io/v1", Kind: "Event"},
			Level:          auditv1.LevelMetadata,
			AuditID:        types.UID("id-" + name),
			Stage:          auditv1.StageResponseComplete,
			Verb:           verb,
			User:           authnv1.UserInfo{Username: username},
			UserAgent:      agent,
			ObjectRef:      &auditv1.ObjectReference{Resource: "pods", Subresource: sub, Namespace: "team-jobs", Name: name},
			ResponseStatus: &metav1.Status{Code: code},
			StageTimestamp: metav1.NewMicroTime(metav1.Now().Time),
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	lines := []string{
		event("runner-a-job-1-x", "delete", "", "system:serviceaccount:team:build-manager", "gitlab-runner/standin", 200),
		"not json",
		event("runner-b-job-2-y", "create", "eviction", "system:serviceaccount:karpenter:karpenter", "karpenter", 201),
		event("other", "delete", "", "admin", "kubectl", 200),
	}
	if err := os.WriteFile(LogFile(dir, AuditLog), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Deletions(dir, []string{"runner-a-job-1-x", "runner-b-job-2-y"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("want 2 lines, got %q", got)
	}
	for i, want := range []string{
		"delete pods team-jobs/runner-a-job-1-x by system:serviceaccount:team:build-manager (gitlab-runner/standin): 200",
		"create pods/eviction team-jobs/runner-b-job-2-y by system:serviceaccount:karpenter:karpenter (karpenter): 201",
	} {
		if !strings.HasSuffix(got[i], want) {
			t.Errorf("line %d: %q, want it to end with %q", i, got[i], want)
		}
	}
}
