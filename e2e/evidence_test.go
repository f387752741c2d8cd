//go:build e2e

package e2e

// Evidence for the real-node proofs: what a lost job leaves behind, kept
// while it still exists. The kubelet deletes a pod's log files with the pod,
// and a job pod is deleted as soon as its job ends, so both are recorded as
// they happen: every pod's life as the API server reports it (a watch), and
// every container log of the real node (read from the kubelet's log
// directory while the pod exists). Events outlive their pods by an hour, and
// the control plane's own logs stay in the state directory; both are read
// when a job is found lost.
//
// For each lost job the test output then holds: the job as the loopback
// GitLab saw it, with its trace; the log, life and events of the manager
// that took it; the life and events of its job pod(s); and the lines of
// Karpenter, kwok, kube-controller-manager, kube-scheduler and the kubelet
// that name those pods or the nodes they ran on. A subtest that fails for
// another reason (a rollout that never ends) logs its team's managers the
// same way (collectOnFailure), as cluster-api's test framework collects a
// cluster's logs after a failed spec.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
)

// jobIDLabel is the label the kubernetes executor (and the stand-in) puts
// on a job's pod: the job's ID.
const jobIDLabel = "job.runner.gitlab.com/id"

// evidenceProcesses are the control plane's and the node's processes whose
// logs may say what happened to a job pod or its node.
var evidenceProcesses = []string{localcluster.Karpenter, localcluster.Kwok, localcluster.ControllerManager, localcluster.Scheduler, localcluster.Kubelet}

// evidenceLines caps the lines of one process log quoted for one job.
const evidenceLines = 40

// recorder keeps what the cluster deletes: pods' lives and the real node's
// container logs.
type recorder struct {
	mu sync.Mutex
	// lives holds each pod's states, by "namespace/name", in order; a state
	// is recorded only when it differs from the one before.
	lives map[string][]podMoment
	// jobPods names the pods of each job, by the job's ID label.
	jobPods map[string][]string
	// logs holds the real node's container logs, by "namespace/name", then
	// by "<container>/<n>.log", as last read.
	logs map[string]map[string][]byte
}

type podMoment struct {
	at    time.Time
	what  string // ADDED, MODIFIED or DELETED
	state string
}

func newRecorder() *recorder {
	return &recorder{lives: map[string][]podMoment{}, jobPods: map[string][]string{}, logs: map[string]map[string][]byte{}}
}

// watchPods records every pod's life until stop is closed.
func (r *recorder) watchPods(t *testing.T, cl *localcluster.Cluster, stop <-chan struct{}) {
	cs, err := kubernetes.NewForConfig(cl.Config)
	if err != nil {
		t.Fatal(err)
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Core().V1().Pods().Informer()
	note := func(what string, obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			r.notePod(what, p)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { note("ADDED", obj) },
		UpdateFunc: func(_, obj any) { note("MODIFIED", obj) },
		DeleteFunc: func(obj any) { note("DELETED", obj) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("the pod watch of the evidence recorder never synced")
	}
}

func (r *recorder) notePod(what string, p *corev1.Pod) {
	key := p.Namespace + "/" + p.Name
	state := podLife(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	life := r.lives[key]
	if what != "DELETED" && len(life) > 0 && life[len(life)-1].state == state {
		return
	}
	if len(life) == 0 {
		if id := p.Labels[jobIDLabel]; id != "" {
			r.jobPods[id] = append(r.jobPods[id], key)
		}
	}
	r.lives[key] = append(life, podMoment{at: time.Now(), what: what, state: state})
}

// podLife is one line of a pod's state: phase, node, deletion, readiness,
// every container's state and the reason the pod gives.
func podLife(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s node=%q", p.Status.Phase, p.Spec.NodeName)
	if p.DeletionTimestamp != nil {
		grace := int64(-1)
		if p.DeletionGracePeriodSeconds != nil {
			grace = *p.DeletionGracePeriodSeconds
		}
		fmt.Fprintf(&b, " deleting(at %s, grace %ds)", p.DeletionTimestamp.UTC().Format(time.RFC3339), grace)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue || c.Type == corev1.DisruptionTarget {
			fmt.Fprintf(&b, " %s=%s", c.Type, c.Status)
			if c.Reason != "" {
				fmt.Fprintf(&b, "(%s: %s)", c.Reason, c.Message)
			}
		}
	}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		switch s := cs.State; {
		case s.Running != nil:
			fmt.Fprintf(&b, " %s:running", cs.Name)
		case s.Waiting != nil:
			fmt.Fprintf(&b, " %s:waiting(%s)", cs.Name, s.Waiting.Reason)
		case s.Terminated != nil:
			fmt.Fprintf(&b, " %s:exited(%d %s)", cs.Name, s.Terminated.ExitCode, s.Terminated.Reason)
		}
		if cs.RestartCount > 0 {
			fmt.Fprintf(&b, " restarts=%d", cs.RestartCount)
		}
	}
	if p.Status.Reason != "" || p.Status.Message != "" {
		fmt.Fprintf(&b, " reason=%q message=%q", p.Status.Reason, p.Status.Message)
	}
	return b.String()
}

// readNodeLogs copies every container log of the real node; it calls line
// for each line of the managers' logs.
func (r *recorder) readNodeLogs(state string, line func(ns, pod, text string)) {
	files, _ := filepath.Glob(filepath.Join(localcluster.PodLogsDir(state), "*", "*", "*.log"))
	for _, f := range files {
		// <ns>_<pod>_<uid>/<container>/<n>.log
		container := filepath.Base(filepath.Dir(f))
		nsPod := strings.SplitN(filepath.Base(filepath.Dir(filepath.Dir(f))), "_", 3)
		if len(nsPod) < 2 {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			continue
		}
		key := nsPod[0] + "/" + nsPod[1]
		r.mu.Lock()
		if r.logs[key] == nil {
			r.logs[key] = map[string][]byte{}
		}
		r.logs[key][container+"/"+filepath.Base(f)] = b
		r.mu.Unlock()
		if container != "manager" {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line(nsPod[0], nsPod[1], sc.Text())
		}
	}
}

// podLog is everything the pod's containers wrote, file by file.
func (r *recorder) podLog(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	files := r.logs[key]
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "    == %s\n", n)
		for _, l := range strings.Split(strings.TrimRight(string(files[n]), "\n"), "\n") {
			b.WriteString("    " + criMessage(l) + "\n")
		}
	}
	return b.String()
}

// criMessage drops a CRI log line's stream and tag ("<time> stderr F msg"
// becomes "<time> msg").
func criMessage(l string) string {
	f := strings.SplitN(l, " ", 4)
	if len(f) == 4 && (f[1] == "stdout" || f[1] == "stderr") {
		return f[0] + " " + f[3]
	}
	return l
}

func (r *recorder) life(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, m := range r.lives[key] {
		fmt.Fprintf(&b, "    %s %-8s %s\n", m.at.UTC().Format("15:04:05.000"), m.what, m.state)
	}
	if b.Len() == 0 {
		return "    (never seen)\n"
	}
	return b.String()
}

// nodes lists the nodes a pod was seen on.
func (r *recorder) nodes(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.lives[key] {
		if _, after, ok := strings.Cut(m.state, `node="`); ok {
			if n, _, _ := strings.Cut(after, `"`); n != "" && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

func (r *recorder) podsOfJob(id int64) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.jobPods[fmt.Sprint(id)])
}

// events lists the events of one object, oldest first.
func events(c client.Client, ns, name string) string {
	list := &corev1.EventList{}
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		return fmt.Sprintf("    (listing events: %v)\n", err)
	}
	var evs []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == name {
			evs = append(evs, ev)
		}
	}
	when := func(ev corev1.Event) time.Time {
		if !ev.LastTimestamp.IsZero() {
			return ev.LastTimestamp.Time
		}
		if !ev.EventTime.IsZero() {
			return ev.EventTime.Time
		}
		return ev.CreationTimestamp.Time
	}
	sort.SliceStable(evs, func(i, j int) bool { return when(evs[i]).Before(when(evs[j])) })
	var b strings.Builder
	for _, ev := range evs {
		from := ev.Source.Component
		if from == "" {
			from = ev.ReportingController
		}
		fmt.Fprintf(&b, "    %s %s %s (%s, x%d): %s\n", when(ev).UTC().Format("15:04:05"), ev.Type, ev.Reason, from, max(ev.Count, 1), ev.Message)
	}
	if b.Len() == 0 {
		return "    (none)\n"
	}
	return b.String()
}

// mentions returns the last evidenceLines lines of a process's log that
// contain any of words.
func mentions(state, process string, words []string) string {
	fh, err := os.Open(localcluster.LogFile(state, process))
	if err != nil {
		return ""
	}
	defer fh.Close()
	var hits []string
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(l, w) }) {
			hits = append(hits, l)
		}
	}
	var b strings.Builder
	if len(hits) > evidenceLines {
		fmt.Fprintf(&b, "    (%d earlier lines left out)\n", len(hits)-evidenceLines)
		hits = hits[len(hits)-evidenceLines:]
	}
	for _, l := range hits {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// lostJob is a job of a team that did not run to success as it should
// have, and why.
type lostJob struct {
	id      int64
	problem string
}

func problems(lost []lostJob) []string {
	out := make([]string, len(lost))
	for i, l := range lost {
		out[i] = l.problem
	}
	return out
}

// evidence is everything kept about job id: the job, its manager's log,
// life and events, its pods' lives and events, and what the control
// plane's logs say about those pods and their nodes.
func (e *nodeEnv) evidence(tm *team, id int64) string {
	e.readLogs()
	var job *gitlabserver.Job
	for _, j := range e.gl.Jobs() {
		if j.ID == id {
			job = &j
			break
		}
	}
	var b strings.Builder
	if job == nil {
		fmt.Fprintf(&b, "job %d: not in the loopback GitLab\n", id)
		return b.String()
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("15:04:05.000")
	}
	fmt.Fprintf(&b, "=== evidence for job %d (tags %v, %s): state %s %s, manager %q; queued %s, picked %s, finished %s\n",
		job.ID, job.Tags, job.Duration, job.State, job.FailureReason, job.SystemID, ts(job.QueuedAt), ts(job.PickedAt), ts(job.FinishedAt))
	b.WriteString("  trace:\n")
	for _, l := range strings.Split(strings.TrimRight(string(job.Trace), "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	if pod, ok := strings.CutPrefix(job.SystemID, "s_"); ok {
		key := tm.ns + "/" + pod
		fmt.Fprintf(&b, "  manager pod %s, its log:\n%s", key, e.rec.podLog(key))
		fmt.Fprintf(&b, "  manager pod %s, its life:\n%s", key, e.rec.life(key))
		fmt.Fprintf(&b, "  manager pod %s, its events:\n%s", key, events(e.c, tm.ns, pod))
	}
	words := []string{}
	pods := e.rec.podsOfJob(id)
	if len(pods) == 0 {
		b.WriteString("  job pod: none was ever seen\n")
	}
	for _, key := range pods {
		ns, name, _ := strings.Cut(key, "/")
		fmt.Fprintf(&b, "  job pod %s, its life:\n%s", key, e.rec.life(key))
		fmt.Fprintf(&b, "  job pod %s, its events:\n%s", key, events(e.c, ns, name))
		words = append(words, name)
		for _, n := range e.rec.nodes(key) {
			if !slices.Contains(words, n) {
				words = append(words, n)
			}
		}
	}
	if len(words) > 0 {
		// Who deleted or evicted the pods or their nodes, and with what
		// client: the API server's audit log (localcluster.AuditPolicy).
		if lines, err := localcluster.Deletions(e.state, words); err != nil {
			fmt.Fprintf(&b, "  the API server's audit log: %v\n", err)
		} else if len(lines) > 0 {
			fmt.Fprintf(&b, "  the API server's audit log of deletions naming %s:\n    %s\n", strings.Join(words, ", "), strings.Join(lines, "\n    "))
		}
		for _, p := range evidenceProcesses {
			if m := mentions(e.state, p, words); m != "" {
				fmt.Fprintf(&b, "  %s's log lines naming %s:\n%s", p, strings.Join(words, ", "), m)
			}
		}
	}
	return b.String()
}

// logEvidence logs the evidence of every lost job.
func (e *nodeEnv) logEvidence(t *testing.T, tm *team, lost []lostJob) {
	t.Helper()
	seen := map[int64]bool{}
	for _, l := range lost {
		if seen[l.id] {
			continue
		}
		seen[l.id] = true
		t.Log(e.evidence(tm, l.id))
	}
}

// expectNoLostJob waits for tm's jobs to end and fails t with every lost
// job and its evidence.
func (e *nodeEnv) expectNoLostJob(t *testing.T, tm *team, timeout time.Duration, during string) {
	t.Helper()
	lost := e.lostJobs(tm, timeout)
	if len(lost) == 0 {
		return
	}
	t.Errorf("jobs lost %s:\n  %s", during, strings.Join(problems(lost), "\n  "))
	e.logEvidence(t, tm, lost)
}

// collectOnFailure logs, when t has failed, the team's managers (log, life,
// events) and every job of the team that did not succeed, whatever failed.
func (e *nodeEnv) collectOnFailure(t *testing.T, tm *team) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		e.readLogs()
		var b strings.Builder
		fmt.Fprintf(&b, "=== %s failed: what the managers of %s left\n", t.Name(), tm.ns)
		e.rec.mu.Lock()
		var keys []string
		for key := range e.rec.lives {
			if strings.HasPrefix(key, tm.ns+"/") {
				keys = append(keys, key)
			}
		}
		e.rec.mu.Unlock()
		sort.Strings(keys)
		for _, key := range keys {
			_, name, _ := strings.Cut(key, "/")
			fmt.Fprintf(&b, "  pod %s, its life:\n%s", key, e.rec.life(key))
			fmt.Fprintf(&b, "  pod %s, its events:\n%s", key, events(e.c, tm.ns, name))
			if l := e.rec.podLog(key); l != "" {
				fmt.Fprintf(&b, "  pod %s, its log:\n%s", key, l)
			}
		}
		for _, j := range e.jobsOf(tm) {
			if j.State != gitlabserver.JobSuccess {
				b.WriteString(e.evidence(tm, j.ID))
			}
		}
		t.Log(b.String())
	})
}
