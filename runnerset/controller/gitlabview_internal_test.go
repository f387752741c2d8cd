package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
)

func manager(id, status string, created, contacted time.Time) gitlab.RunnerManager {
	return gitlab.RunnerManager{SystemID: id, Status: status, CreatedAt: &created, ContactedAt: &contacted}
}

func systemIDs(ms []gitlab.RunnerManager) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.SystemID)
	}
	slices.Sort(out)
	return out
}

// A manager record goes only when GitLab says nobody uses it and it is
// older than every live manager pod: a live pod's record, offline or not,
// and a record still in use, stay (each case below is the negative control
// of one rule of staleManagers).
func TestStaleManagersAreOnlyThoseOfPodsThatNoLongerExist(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	created := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0.Add(-48 * time.Hour))},
		Spec: v1alpha1.RunnerSetSpec{GitLab: v1alpha1.GitLabSpec{Runner: &v1alpha1.RunnerRegistration{Type: v1alpha1.RunnerTypeGroup}}}}
	brought := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0.Add(-48 * time.Hour))},
		Spec: v1alpha1.RunnerSetSpec{GitLab: v1alpha1.GitLabSpec{TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "t"}}}}
	livePod := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)}}
	managers := []gitlab.RunnerManager{
		// A pod of yesterday, gone: offline, first seen before every live pod.
		manager("r_deadpod0000", gitlab.StatusOffline, t0.Add(-24*time.Hour), t0.Add(-3*time.Hour)),
		// One gone for a week.
		manager("r_stalepod000", gitlab.StatusStale, t0.Add(-40*time.Hour), t0.Add(-40*time.Hour)),
		// The live pod's, offline (it cannot reach GitLab): first seen after the pod was created.
		manager("r_livepod0000", gitlab.StatusOffline, t0.Add(time.Minute), t0.Add(time.Minute)),
		// Within the clock skew of the live pod's creation: kept.
		manager("r_skewed00000", gitlab.StatusOffline, t0.Add(-managerClockSkew/2), t0.Add(-managerClockSkew/2)),
		// Old but online: a system_id several pods share, in use.
		manager("s_shared00000", gitlab.StatusOnline, t0.Add(-24*time.Hour), t0),
		// The controller's own token checks.
		manager(gitlab.SystemID, gitlab.StatusOffline, t0.Add(-24*time.Hour), t0.Add(-3*time.Hour)),
		// First seen before the RunnerSet existed.
		manager("r_before00000", gitlab.StatusOffline, t0.Add(-72*time.Hour), t0.Add(-71*time.Hour)),
	}
	for _, tc := range []struct {
		name string
		rs   *v1alpha1.RunnerSet
		pods []metav1.PartialObjectMetadata
		want []string
	}{
		{"created runner, a live pod", created, []metav1.PartialObjectMetadata{livePod}, []string{"r_before00000", "r_deadpod0000", "r_stalepod000"}},
		{"created runner, no pod left", created, nil, []string{"r_before00000", "r_deadpod0000", "r_livepod0000", "r_skewed00000", "r_stalepod000"}},
		{"a team's token: nothing from before the RunnerSet", brought, []metav1.PartialObjectMetadata{livePod}, []string{"r_deadpod0000", "r_stalepod000"}},
	} {
		if got := systemIDs(staleManagers(tc.rs, managers, tc.pods, false)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.want)
		}
	}
	// Before the pods are read: what may go, a superset, and never what is in use.
	if got := systemIDs(staleManagers(created, managers, nil, true)); slices.Contains(got, "s_shared00000") || slices.Contains(got, gitlab.SystemID) || len(got) != 5 {
		t.Errorf("candidates before the pods are read: %v", got)
	}
}

func TestTagDiffNamesMissingAndExtraTags(t *testing.T) {
	missing, extra := tagDiff([]string{"team-a", "gpu", "linux"}, []string{"linux", " team-a ", "docker", "docker"})
	if !slices.Equal(missing, []string{"gpu"}) || !slices.Equal(extra, []string{"docker"}) {
		t.Errorf("missing %v extra %v", missing, extra)
	}
	if m, e := tagDiff([]string{"b", "a"}, []string{"a", "b"}); len(m)+len(e) != 0 {
		t.Errorf("the same tags in another order differ: %v %v", m, e)
	}
}

// RunnerOnline follows GitLab's status of the managers, leaves the
// controller's own token checks out, and its message holds nothing that
// changes while GitLab's view does not.
func TestRunnerOnlineFromManagersStatus(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name     string
		replicas int32
		// autoscaled: spec.managers.autoscale is set, and replicas is
		// the count KEDA set (status.desiredManagers), not spec's.
		autoscaled bool
		managers   []gitlab.RunnerManager
		status     metav1.ConditionStatus
		reason     string
	}{
		{"one online", 1, false, []gitlab.RunnerManager{manager("r_a", gitlab.StatusOffline, now, now.Add(-3*time.Hour)), manager("r_b", gitlab.StatusOnline, now, now)}, metav1.ConditionTrue, v1alpha1.ReasonOnline},
		{"only the controller online", 1, false, []gitlab.RunnerManager{manager(gitlab.SystemID, gitlab.StatusOnline, now, now)}, metav1.ConditionFalse, v1alpha1.ReasonNeverContacted},
		{"offline", 1, false, []gitlab.RunnerManager{manager("r_a", gitlab.StatusOffline, now, now.Add(-3*time.Hour)), manager("r_b", gitlab.StatusStale, now, now.Add(-200*time.Hour))}, metav1.ConditionFalse, v1alpha1.ReasonOffline},
		{"stale", 1, false, []gitlab.RunnerManager{manager("r_b", gitlab.StatusStale, now, now.Add(-200*time.Hour))}, metav1.ConditionFalse, v1alpha1.ReasonStale},
		{"none", 1, false, nil, metav1.ConditionFalse, v1alpha1.ReasonNeverContacted},
		{"scaled to zero", 0, false, []gitlab.RunnerManager{manager("r_a", gitlab.StatusOffline, now, now.Add(-3*time.Hour))}, metav1.ConditionFalse, v1alpha1.ReasonScaledToZero},
		{"scaled to zero by KEDA", 0, true, []gitlab.RunnerManager{manager("r_a", gitlab.StatusOffline, now, now.Add(-3*time.Hour))}, metav1.ConditionFalse, v1alpha1.ReasonScaledToZero},
		{"scaled up by KEDA, replicas 0 ignored", 2, true, []gitlab.RunnerManager{manager("r_a", gitlab.StatusOffline, now, now.Add(-3*time.Hour))}, metav1.ConditionFalse, v1alpha1.ReasonOffline},
	} {
		rs := &v1alpha1.RunnerSet{}
		rs.Spec.Managers.Replicas = &tc.replicas
		if tc.autoscaled {
			rs.Spec.Managers.Replicas = ptr.To[int32](0)
			rs.Spec.Managers.Autoscale = &v1alpha1.ManagerAutoscale{MinReplicas: 0, MaxReplicas: 3, TargetRunningJobs: 2}
			rs.Status.DesiredManagers = tc.replicas
		}
		online(rs, 42, tc.managers, "https://gitlab.example.com")
		c := meta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionRunnerOnline)
		if c == nil || c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("%s: %+v, want %s %s", tc.name, c, tc.status, tc.reason)
			continue
		}
		if !strings.Contains(c.Message, "runner 42") {
			t.Errorf("%s: message does not name the runner: %s", tc.name, c.Message)
		}
		if tc.status == metav1.ConditionTrue && strings.Contains(c.Message, now.UTC().Format("2006")) {
			t.Errorf("%s: an online runner's message carries a time, which would change (a status write) at every read: %s", tc.name, c.Message)
		}
	}
}
