//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// TestAReclaimedJobNodeFailsItsJobAndIsRecorded takes a job's node away
// under its running job, as a spot reclaim does (the instance goes, and
// the Node object with it, whatever its finalizers: Karpenter's kwok
// provider's instance is the Node itself), on the real node's stack: the
// manager (the stand-in, on the real node) fails the job in GitLab as
// gitlab-runner does when its pod is gone (runner_system_failure); the
// real kube-controller-manager's PodGC marks the orphaned pod
// (DisruptionTarget, DeletionByPodGC) and deletes it; and the controller
// records it: a Warning Event JobInterrupted on the RunnerSet naming the
// pod and the node, and runnerfleet_jobs_interrupted_total +1. The
// RunnerSet retries interrupted jobs (spec.jobs.retryOnInterruption): the
// controller retries the lost job through GitLab's API, once, and the
// retry runs on a new node to success.
func TestAReclaimedJobNodeFailsItsJobAndIsRecorded(t *testing.T) {
	onRealNode(t)
	e := startNodeEnv(t)
	ctx := context.Background()
	tm := e.newTeam("reclaim", 1, 1, 2*time.Minute)
	e.collectOnFailure(t, tm)
	// The team's API token: a member (Developer) of the jobs' project.
	e.gl.AddUser("glpat-reclaim-retry", gitlabserver.User{Scopes: []string{gitlabserver.ScopeAPI}, Projects: []int64{gitlabserver.DefaultProject}})
	create(t, e.c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: "retry-token"}, Data: map[string][]byte{"token": []byte("glpat-reclaim-retry")}})
	patchRS := client.MergeFrom(tm.rs.DeepCopy())
	tm.rs.Spec.Jobs.RetryOnInterruption = &v1alpha1.RetryOnInterruption{MaxRetries: 1, APITokenSecretRef: &v1alpha1.SecretKeyRef{Name: "retry-token"}}
	if err := e.c.Patch(ctx, tm.rs, patchRS); err != nil {
		t.Fatal(err)
	}
	e.waitManagers(tm, 1, 4*time.Minute)
	scrape := e.metricsScraper(t)
	series := regexp.MustCompile(fmt.Sprintf(`(?m)^%s\{namespace="%s",reason="DeletionByPodGC",runnerset="%s"\} (\S+)$`,
		metrics.JobsInterruptedTotal, tm.ns, tm.rs.Name))
	counted := func() (float64, error) {
		body, err := scrape()
		if err != nil {
			return 0, err
		}
		m := series.FindStringSubmatch(body)
		if m == nil {
			return 0, nil
		}
		return strconv.ParseFloat(m[1], 64)
	}
	if n, err := counted(); err != nil || n != 0 {
		t.Fatalf("before any reclaim the controller counts %v interrupted jobs (%v)", n, err)
	}

	// Long enough to be running when its node goes (the stand-in counts
	// it from its pod's start), short enough for its retry to end.
	ids := e.queue(tm, 1, 2*time.Minute)
	e.waitInPods(tm, 1, 3*time.Minute)
	jobsNS := naming.For(tm.ns, tm.rs.Name).JobsNamespace()
	var pod corev1.Pod
	waitFor(t, time.Minute, "the job's pod Running on a Karpenter node", func() error {
		pods := &corev1.PodList{}
		if err := e.c.List(ctx, pods, client.InNamespace(jobsNS), client.MatchingLabels{resources.LabelComponent: resources.ComponentJob}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" && p.Spec.NodeName != localcluster.NodeName {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%d job pods, none Running on a Karpenter node", len(pods.Items))
	})

	// The reclaim: the node goes under the running job.
	node := &corev1.Node{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Finalizers = nil
	if err := e.c.Patch(ctx, node, patch); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, node); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	reclaimed := time.Now()
	t.Logf("node %s deleted under job %d's pod %s/%s", node.Name, ids[0], pod.Namespace, pod.Name)

	// GitLab: the job fails as a system failure, as gitlab-runner's
	// kubernetes executor fails a job whose pod is gone.
	var job gitlabserver.Job
	waitFor(t, 4*time.Minute, fmt.Sprintf("job %d failed in GitLab", ids[0]), func() error {
		for _, j := range e.jobsOf(tm) {
			if j.ID == ids[0] {
				job = j
			}
		}
		if job.State != gitlabserver.JobFailed {
			return fmt.Errorf("job %d is %s", ids[0], job.State)
		}
		return nil
	})
	if job.FailureReason != "runner_system_failure" {
		t.Errorf("job %d failed with %q, want runner_system_failure; trace:\n%s", job.ID, job.FailureReason, job.Trace)
	}
	t.Logf("job %d failed (%s) %.0f s after the reclaim: %s", job.ID, job.FailureReason, time.Since(reclaimed).Seconds(),
		strings.TrimSpace(string(job.Trace[strings.LastIndex(strings.TrimRight(string(job.Trace), "\n"), "\n")+1:])))

	// The controller: one Event on the RunnerSet naming pod and node, and
	// the counter, once PodGC has taken the orphaned pod.
	waitFor(t, 3*time.Minute, "a JobInterrupted Event on the RunnerSet naming the pod and node", func() error {
		list := &eventsv1.EventList{}
		if err := e.c.List(ctx, list, client.InNamespace(tm.ns)); err != nil {
			return err
		}
		for _, ev := range list.Items {
			if ev.Reason == v1alpha1.ReasonJobInterrupted && ev.Type == corev1.EventTypeWarning && ev.Regarding.Kind == "RunnerSet" && ev.Regarding.Name == tm.rs.Name &&
				strings.Contains(ev.Note, pod.Namespace+"/"+pod.Name) && strings.Contains(ev.Note, "node "+node.Name) && strings.Contains(ev.Note, "DeletionByPodGC") {
				t.Logf("Event %s %.0f s after the reclaim: %s", ev.Reason, time.Since(reclaimed).Seconds(), ev.Note)
				return nil
			}
		}
		return fmt.Errorf("none among %d Events of %s", len(list.Items), tm.ns)
	})
	waitFor(t, time.Minute, "runnerfleet_jobs_interrupted_total{reason=DeletionByPodGC} at 1", func() error {
		n, err := counted()
		if err != nil || n != 1 {
			return fmt.Errorf("%v (%v)", n, err)
		}
		return nil
	})

	// The retry: one new job, a retry of the lost one, taken by the
	// manager, run on a node Karpenter brings, succeeded.
	var retry gitlabserver.Job
	waitFor(t, 8*time.Minute, fmt.Sprintf("the retry of job %d succeeded", ids[0]), func() error {
		var retries []gitlabserver.Job
		for _, j := range e.jobsOf(tm) {
			if j.RetryOf == ids[0] {
				retries = append(retries, j)
			}
		}
		if len(retries) != 1 {
			return fmt.Errorf("%d retries of job %d", len(retries), ids[0])
		}
		if retry = retries[0]; retry.State != gitlabserver.JobSuccess {
			return fmt.Errorf("the retry, job %d, is %s", retry.ID, retry.State)
		}
		return nil
	})
	t.Logf("job %d retried as job %d, which succeeded %.0f s after the reclaim", ids[0], retry.ID, time.Since(reclaimed).Seconds())
	if n := len(e.jobsOf(tm)); n != 2 {
		t.Errorf("%d jobs of the team in GitLab, want the lost one and its one retry", n)
	}
	cur := &v1alpha1.RunnerSet{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(tm.rs), cur); err != nil {
		t.Fatal(err)
	}
	if len(cur.Status.JobRetries) != 1 || cur.Status.JobRetries[0].State != v1alpha1.JobRetryRetried || cur.Status.JobRetries[0].RetriedAs != retry.ID {
		t.Errorf("status.jobRetries %+v, want job %d Retried as %d", cur.Status.JobRetries, ids[0], retry.ID)
	}
}

// metricsScraper returns a function that scrapes the controller's metrics
// as a Prometheus allowed to would: a ServiceAccount bound to the
// install's metrics reader ClusterRole, its token, TLS to the port the
// controller was started on.
func (e *nodeEnv) metricsScraper(t *testing.T) func() (string, error) {
	t.Helper()
	ctx := context.Background()
	st, err := localcluster.ReadState(e.state)
	if err != nil || st == nil || len(st.ExtraPorts[localcluster.Controller]) == 0 {
		t.Fatalf("the controller's metrics port is not in the cluster's state (%v)", err)
	}
	port := st.ExtraPorts[localcluster.Controller][0]
	role := install.MetricsReaderRole(install.Defaults())
	create(t, e.c, role)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "scraper"}}
	create(t, e.c, sa)
	create(t, e.c, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}},
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", e.cl.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The controller's certificate is self-signed (no --metrics-cert-dir).
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return func() (string, error) {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+tok.Status.Token)
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("GET /metrics: %s: %s", resp.Status, body)
		}
		return string(body), err
	}
}
