package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// What fleet down waits for while a stack's RunnerSets drain, and what it
// says when it stops: which RunnerSets are left, which of their manager and
// job pods hold them and how long each pod's grace has left, whether the
// controller that removes the finalizer runs, and the command to go on or
// to force (naming the jobs forcing fails).

const (
	// drainPoll is how often fleet down looks, drainEvery how often at
	// most it prints what changed.
	drainPoll  = time.Second
	drainEvery = 10 * time.Second
	// drainRepeat: an unchanged report is printed again after this.
	drainRepeat = time.Minute
	// controllerGone: a controller that has not run for this long is
	// reported as down, and the wait stops (a restart takes less).
	controllerGone = time.Minute
	// forceWait is how long fleet down --force lets a running controller
	// release the runner and its capacity once the pods are gone, before it
	// removes the finalizer itself.
	forceWait = 2 * time.Minute
)

// exitStopped is fleet's exit code when it stopped waiting with RunnerSets
// left; the message names them and the command to go on.
const exitStopped = 3

// stoppedError: fleet stopped waiting. The message says what is left and
// what to run next.
type stoppedError struct{ msg string }

func (e *stoppedError) Error() string { return e.msg }

// progName is how the user ran fleet, for the commands fleet suggests
// (bin/fleet from a checkout's make down).
var progName = "fleet"

// commandLine is a command to suggest, its arguments quoted for a shell
// where they need it.
func commandLine(args ...string) string {
	out := []string{progName}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"$`\\|&;<>()*?[]#~") {
			a = strconv.Quote(a)
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

// drainer deletes a stack's RunnerSets and waits until they are gone,
// saying what it waits for.
type drainer struct {
	c   client.Client
	sel []client.ListOption // the stack's RunnerSets
	log io.Writer

	now   func() time.Time
	sleep func(context.Context, time.Duration) error

	poll    time.Duration // how often it looks
	every   time.Duration // a change is printed at most this often
	repeat  time.Duration // an unchanged report is printed again after this
	stall   time.Duration // it stops when nothing changed for this long and no pod is within its grace
	timeout time.Duration // it stops after this long in any case

	// controllerDown says why the controller does not run, "" while it
	// runs (or when that cannot be told).
	controllerDown func(context.Context) string
	// jobStates, when not nil, gives GitLab's state of jobs by ID (the
	// local stack's loopback GitLab).
	jobStates func(context.Context) map[string]string
	// notes, when not nil, are more facts about what holds the drain (the
	// local stack's node).
	notes func(context.Context) []string

	// again continues the wait; force forces it; kept says what stays
	// running when fleet down stops.
	again, force, kept string
}

func newDrainer(c client.Client, log io.Writer, o downOptions) *drainer {
	return &drainer{
		c: c, log: log, now: time.Now, sleep: sleepCtx,
		poll: drainPoll, every: drainEvery, repeat: drainRepeat, stall: o.stall, timeout: o.timeout,
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// drainView is what holds the drain at one moment.
type drainView struct {
	at         time.Time
	noAPI      bool // the cluster has no RunnerSet CRD
	sets       []setView
	controller string // why the controller does not run; "" while it runs
	notes      []string
	jobStates  map[string]string
}

type setView struct {
	rs       *v1alpha1.RunnerSet
	managers []podView
	jobs     []podView
}

type podView struct {
	pod  *corev1.Pod
	node string // what is wrong with the pod's node, "" when nothing is
}

// look reads the stack's RunnerSets and the pods that hold them: the ones
// the controller's finalize waits for (its podsLeft), in the RunnerSet's
// namespace and in its own jobs namespace.
func (d *drainer) look(ctx context.Context) (*drainView, error) {
	v := &drainView{}
	list := &v1alpha1.RunnerSetList{}
	if err := d.c.List(ctx, list, d.sel...); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			v.noAPI, v.at = true, d.now()
			return v, nil
		}
		return nil, fmt.Errorf("listing the stack's RunnerSets: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return client.ObjectKeyFromObject(&list.Items[i]).String() < client.ObjectKeyFromObject(&list.Items[j]).String()
	})
	nodes := map[string]string{}
	for i := range list.Items {
		rs := &list.Items[i]
		sv := setView{rs: rs}
		namespaces := []string{rs.Namespace}
		if jobs := rs.Names().JobsNamespace(); jobs != rs.Namespace && d.ownJobsNamespace(ctx, rs, jobs) {
			namespaces = append(namespaces, jobs)
		}
		for _, ns := range namespaces {
			pods := &corev1.PodList{}
			if err := d.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{resources.LabelRunnerSet: rs.Name}); err != nil {
				return nil, fmt.Errorf("listing the pods of RunnerSet %s in %s: %w", client.ObjectKeyFromObject(rs), ns, err)
			}
			for j := range pods.Items {
				p := &pods.Items[j]
				pv := podView{pod: p, node: d.nodeTrouble(ctx, p.Spec.NodeName, nodes)}
				if p.Labels[resources.LabelComponent] == resources.ComponentManager {
					sv.managers = append(sv.managers, pv)
				} else {
					sv.jobs = append(sv.jobs, pv)
				}
			}
		}
		v.sets = append(v.sets, sv)
	}
	if len(v.sets) > 0 {
		if d.controllerDown != nil {
			v.controller = d.controllerDown(ctx)
		}
		if d.notes != nil {
			v.notes = d.notes(ctx)
		}
		if d.jobStates != nil {
			v.jobStates = d.jobStates(ctx)
		}
	}
	v.at = d.now()
	return v, nil
}

// ownJobsNamespace: the jobs namespace is the one runnerfleet made for rs
// (the controller leaves pods of anyone else's namespace alone).
func (d *drainer) ownJobsNamespace(ctx context.Context, rs *v1alpha1.RunnerSet, name string) bool {
	ns := &corev1.Namespace{}
	if err := d.c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return false
	}
	return ns.Labels[resources.LabelOwnerNamespace] == rs.Namespace && ns.Labels[resources.LabelOwnerName] == rs.Name
}

// nodeTrouble says what is wrong with node n: gone, or not Ready (its
// kubelet cannot confirm that a pod stopped). seen caches the answers of
// one look.
func (d *drainer) nodeTrouble(ctx context.Context, n string, seen map[string]string) string {
	if n == "" {
		return ""
	}
	if t, ok := seen[n]; ok {
		return t
	}
	node := &corev1.Node{}
	t := ""
	switch err := d.c.Get(ctx, client.ObjectKey{Name: n}, node); {
	case apierrors.IsNotFound(err):
		t = fmt.Sprintf("node %s no longer exists", n)
	case err != nil:
	default:
		t = fmt.Sprintf("node %s has no Ready condition", n)
		for _, c := range node.Status.Conditions {
			if c.Type != corev1.NodeReady {
				continue
			}
			t = ""
			if c.Status != corev1.ConditionTrue {
				t = fmt.Sprintf("node %s is not Ready (%s: %s) since %s", n, c.Reason, c.Message, c.LastTransitionTime.UTC().Format(time.RFC3339))
			}
		}
	}
	seen[n] = t
	return t
}

// graceLeft is how long pod p may still take to stop, and its whole grace.
// The API server sets a deleted pod's deletionTimestamp to the time of the
// request plus the grace (deletionGracePeriodSeconds, the pod's
// terminationGracePeriodSeconds unless the request gave another), after
// which the kubelet kills it: the grace ends at the deletionTimestamp.
func graceLeft(p *corev1.Pod, now time.Time) (left, grace time.Duration, deleting bool) {
	if p.DeletionTimestamp == nil {
		if s := p.Spec.TerminationGracePeriodSeconds; s != nil {
			grace = time.Duration(*s) * time.Second
		}
		return 0, grace, false
	}
	if s := p.DeletionGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * time.Second
	} else if s := p.Spec.TerminationGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * time.Second
	}
	return p.DeletionTimestamp.Sub(now), grace, true
}

// withinGrace: some pod is still within its grace, or the controller will
// still delete orphaned job pods, so something may change.
func (v *drainView) withinGrace() bool {
	return v.longestGrace() > 0
}

// longestGrace is the most grace any pod has left, or the longest any
// RunnerSet's orphaned job pods have before the controller deletes them;
// 0 when none has.
func (v *drainView) longestGrace() time.Duration {
	longest := time.Duration(0)
	for _, s := range v.sets {
		for _, p := range append(append([]podView{}, s.managers...), s.jobs...) {
			if left, _, deleting := graceLeft(p.pod, v.at); deleting && left > longest {
				longest = left
			}
		}
		if left := orphansLeft(s.rs, v.at); left > longest {
			longest = left
		}
	}
	return longest
}

// orphansLeft is how long the controller still waits before it deletes the
// job pods no manager of rs is left to delete (status.orphanedJobPodsSince
// plus spec.managers.orphanedJobGracePeriod), 0 when it waits for none.
func orphansLeft(rs *v1alpha1.RunnerSet, now time.Time) time.Duration {
	if rs == nil || rs.Status.OrphanedJobPodsSince == nil {
		return 0
	}
	return max(0, rs.Status.OrphanedJobPodsSince.Add(rs.Spec.Managers.OrphanedJobGracePeriodOrDefault()).Sub(now))
}

// key is what the view says, without the figures that change with the
// clock: a new key is a change worth printing.
func (v *drainView) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "controller=%s\n", v.controller)
	for _, n := range v.notes {
		fmt.Fprintln(&b, n)
	}
	for _, s := range v.sets {
		fmt.Fprintf(&b, "%s %v %v %s\n", client.ObjectKeyFromObject(s.rs), s.rs.DeletionTimestamp != nil, s.rs.Finalizers, readyOf(s.rs))
		for _, p := range append(append([]podView{}, s.managers...), s.jobs...) {
			fmt.Fprintf(&b, " %s/%s %s %v %s %s\n", p.pod.Namespace, p.pod.Name, p.pod.Status.Phase, p.pod.DeletionTimestamp != nil, p.pod.Spec.NodeName, p.node)
		}
	}
	return b.String()
}

func readyOf(rs *v1alpha1.RunnerSet) string {
	if c := meta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		return fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
	}
	return "no Ready condition yet"
}

func dur(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	return d.Round(time.Second).String()
}

// lines describe the view, a RunnerSet a line and each of its pods a line
// below it.
func (v *drainView) lines() []string {
	var out []string
	for _, s := range v.sets {
		rs := s.rs
		line := "RunnerSet " + client.ObjectKeyFromObject(rs).String() + ": "
		if rs.DeletionTimestamp != nil {
			line += "deleting for " + dur(v.at.Sub(rs.DeletionTimestamp.Time))
		} else {
			line += "not deleted yet"
		}
		var foreign []string
		for _, f := range rs.Finalizers {
			if f != controller.Finalizer {
				foreign = append(foreign, f)
			}
		}
		if slices.Contains(rs.Finalizers, controller.Finalizer) {
			line += ", held by the controller's finalizer " + controller.Finalizer
		}
		if len(foreign) > 0 {
			line += fmt.Sprintf(", held by finalizer %s, which runnerfleet does not own: whoever added it must remove it", strings.Join(foreign, ", "))
		}
		out = append(out, line+"; "+readyOf(rs))
		for _, p := range s.managers {
			out = append(out, "  "+v.managerLine(p))
		}
		for _, p := range s.jobs {
			out = append(out, "  "+v.jobLine(s, p))
		}
		if len(s.managers)+len(s.jobs) == 0 && rs.DeletionTimestamp != nil && slices.Contains(rs.Finalizers, controller.Finalizer) {
			out = append(out, "  no manager or job pod is left: the controller releases the runner in GitLab and its capacity, then removes the finalizer")
		}
	}
	if v.controller != "" {
		out = append(out, "The controller does not run: "+v.controller+"; nothing removes the finalizer "+controller.Finalizer)
	}
	out = append(out, v.notes...)
	return out
}

func (v *drainView) managerLine(p podView) string {
	pod := p.pod
	line := fmt.Sprintf("manager pod %s/%s", pod.Namespace, pod.Name)
	if pod.Spec.NodeName != "" {
		line += " on node " + pod.Spec.NodeName
	}
	left, grace, deleting := graceLeft(pod, v.at)
	switch {
	case !deleting:
		line += fmt.Sprintf(": %s, not asked to stop yet (grace %s)", pod.Status.Phase, dur(grace))
	case left > 0:
		line += fmt.Sprintf(": stopping, %s of its %s grace left", dur(left), dur(grace))
	default:
		line += fmt.Sprintf(": past its %s grace by %s", dur(grace), dur(left))
		if p.node == "" {
			line += " (its kubelet has not confirmed that it stopped)"
		}
	}
	if p.node != "" {
		line += "; " + p.node + ": nothing confirms that the pod stopped"
	}
	return line
}

func (v *drainView) jobLine(s setView, p podView) string {
	pod := p.pod
	line := fmt.Sprintf("job pod %s/%s (%s)", pod.Namespace, pod.Name, v.jobOf(pod))
	if pod.Spec.NodeName != "" {
		line += " on node " + pod.Spec.NodeName
	}
	started := pod.CreationTimestamp.Time
	if pod.Status.StartTime != nil {
		started = pod.Status.StartTime.Time
	}
	line += ": " + string(pod.Status.Phase)
	if !started.IsZero() {
		line += " for " + dur(v.at.Sub(started))
	}
	if left, grace, deleting := graceLeft(pod, v.at); deleting {
		if left > 0 {
			line += fmt.Sprintf(", stopping, %s of its %s grace left", dur(left), dur(grace))
		} else {
			line += fmt.Sprintf(", past its %s grace by %s", dur(grace), dur(left))
		}
	} else if !s.managerRuns(v.at) {
		line += fmt.Sprintf("; no manager of %s is left to end it", client.ObjectKeyFromObject(s.rs))
	}
	if p.node != "" {
		line += "; " + p.node
	}
	return line
}

// managerRuns: some manager pod of the set is not past its grace.
func (s setView) managerRuns(now time.Time) bool {
	for _, m := range s.managers {
		if left, _, deleting := graceLeft(m.pod, now); !deleting || left > 0 {
			return true
		}
	}
	return false
}

// The kubernetes executor labels and annotates a job pod with its job (the
// local stack's stand-in labels it with the ID).
const (
	jobIDKey   = naming.LabelGitLabJobID
	jobNameKey = naming.LabelGitLabJobName
	jobURLKey  = naming.LabelGitLabJobURL
)

func jobID(p *corev1.Pod) string {
	if id := p.Labels[jobIDKey]; id != "" {
		return id
	}
	return p.Annotations[jobIDKey]
}

// jobOf names the GitLab job of a job pod: its ID, name, URL and, where
// GitLab can be asked, its state.
func (v *drainView) jobOf(p *corev1.Pod) string {
	id := jobID(p)
	if id == "" {
		return "job unknown: the pod carries no " + jobIDKey
	}
	s := "job " + id
	var more []string
	if n := p.Annotations[jobNameKey]; n != "" {
		more = append(more, n)
	}
	if u := p.Annotations[jobURLKey]; u != "" {
		more = append(more, u)
	}
	if st, ok := v.jobStates[id]; ok {
		more = append(more, st+" in GitLab")
	}
	return strings.Join(append([]string{s}, more...), ", ")
}

// jobEnded: GitLab says the job ended, so deleting its pod loses nothing.
func (v *drainView) jobEnded(p *corev1.Pod) bool {
	switch v.jobStates[jobID(p)] {
	case "success", "failed", "canceled", "skipped":
		return true
	}
	return false
}

// cost says what fleet down --force does and what it costs: the jobs that
// fail, named.
func (v *drainView) cost() string {
	var fail, ended, managers []string
	for _, s := range v.sets {
		for _, p := range s.jobs {
			j := fmt.Sprintf("%s (pod %s/%s)", v.jobOf(p.pod), p.pod.Namespace, p.pod.Name)
			if v.jobEnded(p.pod) {
				ended = append(ended, j)
			} else {
				fail = append(fail, j)
			}
		}
		for _, p := range s.managers {
			managers = append(managers, p.pod.Namespace+"/"+p.pod.Name)
		}
	}
	var parts []string
	switch len(fail) {
	case 0:
		parts = append(parts, "no running job fails")
	case 1:
		parts = append(parts, "this job fails: "+fail[0])
	default:
		parts = append(parts, fmt.Sprintf("these %d jobs fail: %s", len(fail), strings.Join(fail, "; ")))
	}
	if len(ended) > 0 {
		parts = append(parts, "the pods of jobs that already ended are deleted (nothing lost): "+strings.Join(ended, "; "))
	}
	if len(managers) > 0 {
		parts = append(parts, "manager pods are killed without their grace: "+strings.Join(managers, ", "))
	}
	parts = append(parts, fmt.Sprintf("a RunnerSet the controller does not release within %s loses its finalizer %s: its runner may stay registered in GitLab, its capacity and jobs namespace stay (fleet down names them)", forceWait, controller.Finalizer))
	return strings.Join(parts, "; ")
}

// stopped is the error fleet down ends with when it stops waiting: why,
// what is left, and the commands to go on and to force.
func (d *drainer) stopped(v *drainView, start time.Time, why string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "fleet down stopped after %s: %s. Left:\n", dur(v.at.Sub(start)), why)
	for _, l := range v.lines() {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	if d.kept != "" {
		fmt.Fprintf(&b, "%s.\n", d.kept)
	}
	fmt.Fprintf(&b, "Next, either:\n  %s\n      waits again (the controller keeps draining meanwhile)\n  %s\n      forces it now: %s",
		d.again, d.force, v.cost())
	return &stoppedError{msg: b.String()}
}

func (d *drainer) print(v *drainView, start time.Time) {
	n := len(v.sets)
	fmt.Fprintf(d.log, "Waiting for %d RunnerSet%s to drain (%s):\n", n, plural(n), dur(v.at.Sub(start)))
	for _, l := range v.lines() {
		fmt.Fprintf(d.log, "  %s\n", l)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// run deletes the stack's RunnerSets and waits until they are gone, or
// forces them to go. It returns nil when none is left.
func (d *drainer) run(ctx context.Context, force bool) error {
	v, err := d.look(ctx)
	if err != nil {
		return err
	}
	if v.noAPI {
		fmt.Fprintf(d.log, "No RunnerSet API in the cluster (CRD runnersets.%s is not installed): no RunnerSet to drain\n", v1alpha1.GroupVersion.Group)
		return nil
	}
	if len(v.sets) == 0 {
		return nil
	}
	if force {
		return d.forceDrain(ctx, v)
	}
	for _, s := range v.sets {
		if err := d.deleteSet(ctx, s.rs); err != nil {
			return err
		}
	}
	return d.wait(ctx)
}

func (d *drainer) deleteSet(ctx context.Context, rs *v1alpha1.RunnerSet) error {
	if rs.DeletionTimestamp != nil {
		return nil
	}
	if err := client.IgnoreNotFound(d.c.Delete(ctx, rs)); err != nil {
		return fmt.Errorf("deleting RunnerSet %s: %w", client.ObjectKeyFromObject(rs), err)
	}
	fmt.Fprintf(d.log, "Deleting RunnerSet %s (its managers drain first)\n", client.ObjectKeyFromObject(rs))
	return nil
}

// wait waits until the stack's RunnerSets are gone, printing what holds
// them every d.every when it changed, and every d.repeat when it did not.
// It stops when the controller has not run for controllerGone, when nothing
// changed for d.stall while no pod is within its grace, after d.timeout, or
// when interrupted; the error says what is left and what to run next.
func (d *drainer) wait(ctx context.Context) error {
	start := d.now()
	var lastKey, printedKey string
	var lastPrint, lastChange, downSince time.Time
	for {
		v, err := d.look(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return &stoppedError{msg: fmt.Sprintf("fleet down was interrupted while RunnerSets drained. %s.\nNext: %s", d.kept, d.again)}
			}
			return fmt.Errorf("%w\n%s; next: %s", err, d.kept, d.again)
		}
		if v.noAPI || len(v.sets) == 0 {
			fmt.Fprintf(d.log, "The stack's RunnerSets are gone (%s)\n", dur(v.at.Sub(start)))
			return nil
		}
		now := v.at
		k := v.key()
		if k != lastKey {
			lastKey, lastChange = k, now
		}
		if lastPrint.IsZero() || (k != printedKey && now.Sub(lastPrint) >= d.every) || now.Sub(lastPrint) >= d.repeat {
			printedKey, lastPrint = k, now
			d.print(v, start)
		}
		if v.controller == "" {
			downSince = time.Time{}
		} else if downSince.IsZero() {
			downSince = now
		}
		why := ""
		switch {
		case !downSince.IsZero() && now.Sub(downSince) >= controllerGone && v.heldByController():
			why = fmt.Sprintf("the controller has not run for %s (%s), so the finalizer %s can never be removed", dur(now.Sub(downSince)), v.controller, controller.Finalizer)
		case now.Sub(lastChange) >= d.stall && !v.withinGrace():
			why = fmt.Sprintf("nothing changed for %s and no pod is within its grace", dur(now.Sub(lastChange)))
		case now.Sub(start) >= d.timeout:
			why = fmt.Sprintf("the RunnerSets still drain after %s (--timeout)", dur(d.timeout))
			if left := v.longestGrace(); left > 0 {
				why += fmt.Sprintf("; a pod has %s of its grace left: %s --timeout %s waits for it", dur(left), d.again, dur(left+time.Minute))
			}
		}
		if why != "" {
			return d.stopped(v, start, why)
		}
		if err := d.sleep(ctx, d.poll); err != nil {
			return d.stopped(v, start, "interrupted")
		}
	}
}

// heldByController: some RunnerSet waits for the controller's finalizer.
func (v *drainView) heldByController() bool {
	for _, s := range v.sets {
		if slices.Contains(s.rs.Finalizers, controller.Finalizer) {
			return true
		}
	}
	return false
}

// forceDrain says what forcing costs, deletes the RunnerSets, stops their
// managers from coming back, deletes their manager and job pods at once,
// lets a running controller release them, and removes the finalizers of
// those still there after forceWait.
func (d *drainer) forceDrain(ctx context.Context, v *drainView) error {
	fmt.Fprintf(d.log, "Forcing fleet down of %d RunnerSet%s: %s\n", len(v.sets), plural(len(v.sets)), v.cost())
	for _, s := range v.sets {
		if err := d.deleteSet(ctx, s.rs); err != nil {
			return err
		}
		// The controller scales the managers to zero first thing; a
		// controller that does not run has not, and the ReplicaSet would
		// start a new manager for every pod deleted here.
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.rs.Namespace, Name: naming.For(s.rs.Namespace, s.rs.Name).Managers()}}
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))
		if err := client.IgnoreNotFound(d.c.Patch(ctx, dep, patch)); err != nil {
			return fmt.Errorf("scaling the managers of RunnerSet %s to zero: %w", client.ObjectKeyFromObject(s.rs), err)
		}
		for _, p := range append(append([]podView{}, s.managers...), s.jobs...) {
			if err := client.IgnoreNotFound(d.c.Delete(ctx, p.pod, client.GracePeriodSeconds(0))); err != nil {
				return fmt.Errorf("deleting pod %s/%s: %w", p.pod.Namespace, p.pod.Name, err)
			}
			if p.pod.Labels[resources.LabelComponent] == resources.ComponentManager {
				fmt.Fprintf(d.log, "Deleted manager pod %s/%s at once\n", p.pod.Namespace, p.pod.Name)
			} else {
				fmt.Fprintf(d.log, "Deleted job pod %s/%s (%s) at once\n", p.pod.Namespace, p.pod.Name, v.jobOf(p.pod))
			}
		}
	}
	if why := d.controllerState(ctx); why == "" {
		fmt.Fprintf(d.log, "Letting the controller release the runners and their capacity (up to %s)\n", forceWait)
		w := *d
		w.stall, w.timeout = min(d.stall, forceWait), forceWait
		if err := w.wait(ctx); err == nil {
			return nil
		} else if ctx.Err() != nil {
			return err
		}
	} else {
		fmt.Fprintf(d.log, "The controller does not run (%s): removing the finalizers\n", why)
	}
	left, err := d.look(ctx)
	if err != nil {
		return err
	}
	for _, s := range left.sets {
		rs := s.rs
		finalizers := strings.Join(rs.Finalizers, ", ")
		if finalizers == "" {
			continue
		}
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		if err := client.IgnoreNotFound(d.c.Patch(ctx, rs, patch)); err != nil {
			return fmt.Errorf("removing the finalizers of RunnerSet %s: %w", client.ObjectKeyFromObject(rs), err)
		}
		fmt.Fprintf(d.log, "Removed the finalizers %s of RunnerSet %s. Left behind: %s\n",
			finalizers, client.ObjectKeyFromObject(rs), leftBehind(rs))
	}
	return nil
}

// leftBehind names what the controller would have removed after the drain
// and how to remove it by hand.
func leftBehind(rs *v1alpha1.RunnerSet) string {
	var out []string
	if rs.Status.RunnerID != 0 {
		out = append(out, fmt.Sprintf("runner %d may stay registered in GitLab %s (delete it there: Admin Area > CI/CD > Runners, or DELETE /api/v4/runners/%d)",
			rs.Status.RunnerID, v1alpha1.Effective(rs, nil).GitLabURL, rs.Status.RunnerID))
	}
	capName := naming.For(rs.Namespace, rs.Name).Capacity()
	out = append(out, fmt.Sprintf("its capacity %s (kubectl delete nodepools,ec2nodeclasses,kwoknodeclasses,computeclasses -l %s=%s,%s=%s)",
		dashIfEmpty(rs.Status.Capacity, capName), resources.LabelOwnerNamespace, rs.Namespace, resources.LabelOwnerName, rs.Name))
	out = append(out, fmt.Sprintf("its jobs namespace %s (kubectl delete namespace %s)", rs.Names().JobsNamespace(), rs.Names().JobsNamespace()))
	return strings.Join(out, "; ")
}

func dashIfEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (d *drainer) controllerState(ctx context.Context) string {
	if d.controllerDown == nil {
		return ""
	}
	return d.controllerDown(ctx)
}

// deploymentDown says why the controller's Deployment in namespace ns
// runs no controller: it is missing or scaled to zero, or it has no ready
// replica and its pods fail (a crash loop, an image that cannot be pulled, a
// pod no node takes) or there are none. "" while a replica is ready, while
// its pods are still starting, or when that cannot be told.
func deploymentDown(ctx context.Context, c client.Client, ns string) string {
	dep := install.Deployment(install.Options{Namespace: ns})
	err := c.Get(ctx, client.ObjectKeyFromObject(dep), dep)
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("there is no Deployment %s/%s", ns, install.Name)
	}
	if err != nil || dep.Status.ReadyReplicas > 0 {
		return ""
	}
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	why := fmt.Sprintf("Deployment %s/%s has 0 of %d ready replicas", ns, install.Name, want)
	describe := fmt.Sprintf(" (kubectl -n %s describe deployment %s)", ns, install.Name)
	if want == 0 {
		return why + describe
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(install.Selector())); err != nil {
		return ""
	}
	if len(pods.Items) == 0 {
		return why + " and no pod" + describe
	}
	var failing []string
	for _, p := range pods.Items {
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && failingReasons[w.Reason] {
				failing = append(failing, fmt.Sprintf("pod %s: %s %s", p.Name, w.Reason, w.Message))
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				failing = append(failing, fmt.Sprintf("pod %s: not scheduled: %s", p.Name, cond.Message))
			}
		}
	}
	if len(failing) == 0 {
		return "" // starting
	}
	return why + "; " + strings.Join(failing, "; ") + describe
}

// failingReasons are the waiting reasons of a container that will not start
// by itself.
var failingReasons = map[string]bool{
	"CrashLoopBackOff": true, "ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}
