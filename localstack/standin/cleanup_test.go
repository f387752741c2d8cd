package standin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
)

// flakyKube is a Kubernetes API for one job pod that refuses its first
// deletions, and notes what GitLab knew of the job when the deletion was
// finally taken.
type flakyKube struct {
	srv *gitlabserver.Server
	// refuse is how many DELETEs are answered 403 before one is taken: a
	// refusal the client does not send again by itself (a 5xx it does,
	// apiTries times), so what is tested is the manager's own retry.
	refuse  int
	mu      sync.Mutex
	created string
	deletes int
	deleted bool
	// jobAtDelete is the job's state in GitLab when the pod's deletion was
	// taken.
	jobAtDelete string
}

func (k *flakyKube) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	const prefix = "/api/v1/namespaces/jobs/pods"
	switch {
	case r.Method == http.MethodPost && r.URL.Path == prefix:
		k.created = "runner-team-job-1-abcde"
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"name": k.created}})
	case r.Method == http.MethodGet && r.URL.Path == prefix+"/"+k.created && !k.deleted:
		_ = json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"name": k.created}, "status": map[string]any{"phase": "Running"}})
	case r.Method == http.MethodDelete && r.URL.Path == prefix+"/"+k.created && !k.deleted:
		k.deletes++
		if k.deletes <= k.refuse {
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(map[string]any{"message": "pods is forbidden: the manager's RoleBinding is being replaced"})
			return
		}
		k.deleted = true
		k.jobAtDelete = k.srv.Jobs()[0].State
		_ = json.NewEncoder(w).Encode(map[string]any{})
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"message": r.Method + " " + r.URL.Path + " not found"})
	}
}

// Issue 32: a manager must not exit leaving its job pod behind. It deletes
// the pod before it reports the job (as gitlab-runner's executor cleans up
// before the final update), so that a manager stopped in between leaves no
// pod that only it would have deleted; and it retries a deletion the API
// server refuses instead of exiting with the pod still there. Without the
// fix the pod's deletion came after the report (jobAtDelete "success") and
// a refused deletion was logged and dropped: the manager exited on SIGQUIT
// with its pod Running.
func TestAManagerDeletesItsJobPodBeforeReportingAndExitsOnlyAfter(t *testing.T) {
	for _, refuse := range []int{0, 2} {
		t.Run(fmt.Sprintf("deletion refused %d times", refuse), func(t *testing.T) { deletesBeforeReporting(t, refuse) })
	}
}

func deletesBeforeReporting(t *testing.T, refuse int) {
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	rn := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"team"}})
	kube := &flakyKube{srv: srv, refuse: refuse}
	api := httptest.NewServer(kube)
	t.Cleanup(api.Close)
	cfg := &Config{Concurrent: 1, CheckInterval: 1, Runners: []Runner{{
		Name: "team", URL: srv.URL(), Token: rn.Token, Executor: "kubernetes",
		Kubernetes: &Kubernetes{Namespace: "jobs", PollTimeout: 10},
	}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, sigs: make(chan os.Signal, 4), log: &syncBuffer{}, exit: make(chan int, 1), exited: make(chan struct{})}
	go func() {
		f.exit <- Run(context.Background(), Options{Config: cfg, SystemID: "s_test", Signals: f.sigs, Log: f.log, Listener: ln,
			Kube: &Kube{Server: api.URL, HTTP: api.Client()}})
		close(f.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-f.exited:
		default:
			f.sigs <- syscall.SIGTERM
			<-f.exited
		}
	})

	srv.QueueJob([]string{"team"}, 500*time.Millisecond)
	f.waitJobs(t, "the job is in its script", func(j []gitlabserver.Job) bool {
		return len(j) == 1 && strings.Contains(string(j[0].Trace), "$ sleep")
	})
	// The graceful stop a manager pod's preStop hook sends: the job
	// finishes, then the manager exits.
	f.sigs <- syscall.SIGQUIT
	select {
	case code := <-f.exit:
		if code != ExitDrained {
			t.Errorf("exit code %d, want %d", code, ExitDrained)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the manager did not exit\nlog:\n%s", f.log.String())
	}

	kube.mu.Lock()
	defer kube.mu.Unlock()
	if !kube.deleted {
		t.Fatalf("the manager exited with its job pod not deleted (%d deletions tried)\nlog:\n%s", kube.deletes, f.log.String())
	}
	if kube.deletes != kube.refuse+1 {
		t.Errorf("%d deletions, want %d: the refused ones retried until one was taken", kube.deletes, kube.refuse+1)
	}
	if kube.jobAtDelete != gitlabserver.JobRunning {
		t.Errorf("when its pod's deletion was taken the job was already %q in GitLab: the result went before the pod", kube.jobAtDelete)
	}
	if j := srv.Jobs()[0]; j.State != gitlabserver.JobSuccess {
		t.Errorf("the job is %s, want %s", j.State, gitlabserver.JobSuccess)
	}
	if refuse > 0 && !strings.Contains(f.log.String(), "(attempt 1)") {
		t.Errorf("the refused deletion is not in the log:\n%s", f.log.String())
	}
}
