// Package vmfleet runs the operations of manager groups that live on VMs
// (Windows managers, for example): blue/green rotation with no job lost, and
// garbage collection of the VMs, spot requests and images a fleet leaves
// behind. Everything it knows it reads from the cloud's labels, so an
// interrupted run is resumed by running it again.
package vmfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
)

// Labels of manager VMs.
const (
	LabelGroup      = "runnerfleet-group"      // the manager group
	LabelColor      = "runnerfleet-color"      // blue or green
	LabelGeneration = "runnerfleet-generation" // grows by one per rotation
	LabelRole       = "runnerfleet-role"       // "manager"
	RoleManager     = "manager"
)

// RunnerTokenSecretMetadataKey is the instance metadata key in which fleet
// rotate --stack names a VM group's runner token secret (Secret Manager,
// projects/<project>/secrets/<id>) to the new VMs: the image's startup
// reads its latest version as the VM's service account, the only one
// that may, and writes the token into gitlab-runner's config.toml.
const RunnerTokenSecretMetadataKey = "runnerfleet-runner-token-secret"

// Rotation is one blue/green rotation of a manager group.
type Rotation struct {
	Compute providers.Compute
	// Group names the manager group: its VMs carry LabelGroup=Group.
	Group string
	// Prefix of the VM names, for example wsrm for Windows shared runner managers.
	Prefix string
	// Template is the new color's VMs: image, machine type, zone, metadata.
	// Name and the rotation labels are filled in.
	Template providers.InstanceSpec
	// Zones, when set, spread the new color: its n-th VM goes to
	// Zones[(n-1) % len(Zones)] rather than Template.Zone.
	Zones []string
	// Count of new managers; default: as many as the old color has.
	Count int
	// Healthy reports whether a new VM serves; default: it is running. A
	// real check asks its runner (metrics endpoint, GitLab's contacted_at).
	Healthy func(ctx context.Context, inst providers.Instance) error
	// HealthTimeout bounds the wait for the new color; default 15m.
	HealthTimeout time.Duration
	// Settle is how long every new VM must stay healthy, without a failed
	// check, before the old color is asked to drain; default 0 (one
	// healthy check).
	Settle time.Duration
	// DrainTimeout bounds the wait for the old color's jobs; default 2h.
	DrainTimeout time.Duration
	// Poll is the interval of every wait; default 10s.
	Poll time.Duration
	// Progress receives a line per step and per change.
	Progress io.Writer
	// Notify is called once at the end, on success and on failure.
	Notify func(ctx context.Context, r Report)
	Now    func() time.Time
}

// Report is the outcome of a rotation.
type Report struct {
	Group    string        `json:"group"`
	From     string        `json:"from"`
	To       string        `json:"to"`
	Result   string        `json:"result"`         // succeeded, failed, timeout
	Step     string        `json:"step,omitempty"` // where one that did not succeed stopped (Step*)
	Message  string        `json:"message"`
	Created  []string      `json:"created,omitempty"`
	Deleted  []string      `json:"deleted,omitempty"`
	Waiting  []string      `json:"waiting,omitempty"` // old VMs still running jobs
	Duration time.Duration `json:"durationNanos"`
}

// The steps of a rotation, as Report.Step names them.
const (
	StepList    = "list the group's VMs"
	StepCreate  = "create the new color"
	StepHealthy = "wait for the new color to be healthy"
	StepDrain   = "ask the old color to drain"
	StepDelete  = "delete the drained old VMs"
)

// ErrTimeout is wrapped when the old color still runs jobs at DrainTimeout.
var ErrTimeout = errors.New("drain timed out")

func (r *Rotation) defaults() {
	if r.HealthTimeout == 0 {
		r.HealthTimeout = 15 * time.Minute
	}
	if r.DrainTimeout == 0 {
		r.DrainTimeout = 2 * time.Hour
	}
	if r.Poll == 0 {
		r.Poll = 10 * time.Second
	}
	if r.Progress == nil {
		r.Progress = io.Discard
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Healthy == nil {
		r.Healthy = func(_ context.Context, inst providers.Instance) error {
			if inst.State != providers.StateRunning {
				return fmt.Errorf("%s is %s", inst.Name, inst.State)
			}
			return nil
		}
	}
}

func (r *Rotation) say(format string, args ...any) {
	fmt.Fprintf(r.Progress, "%s  %s\n", r.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func generation(inst providers.Instance) int {
	g, _ := strconv.Atoi(inst.Labels[LabelGeneration])
	return g
}

// Run rotates the group: it brings up the new color and waits until it is
// healthy, asks the old color to drain, waits until the old VMs' runners
// have finished their jobs and exited, and deletes them. The old VMs drain
// in parallel, so a rotation takes about as long as the longest running job.
// A VM that still runs jobs is never deleted. Run again after any failure or
// interruption: it picks up where the cloud's labels say it stopped.
func (r *Rotation) Run(ctx context.Context) (rep Report, err error) {
	r.defaults()
	start := r.Now()
	rep = Report{Group: r.Group}
	defer func() {
		rep.Duration = r.Now().Sub(start)
		switch {
		case err == nil:
			rep.Result = "succeeded"
		case errors.Is(err, ErrTimeout):
			rep.Result = "timeout"
		default:
			rep.Result = "failed"
		}
		if err == nil {
			rep.Step = ""
		}
		if rep.Message == "" && err != nil {
			rep.Message = err.Error()
		}
		if r.Notify != nil {
			r.Notify(ctx, rep)
		}
	}()

	rep.Step = StepList
	all, err := r.Compute.ListInstances(ctx, map[string]string{LabelGroup: r.Group})
	if err != nil {
		return rep, fmt.Errorf("listing the VMs of group %s: %w", r.Group, err)
	}
	all = slices.DeleteFunc(all, func(i providers.Instance) bool { return i.State == providers.StateTerminated })
	if len(all) == 0 {
		return rep, fmt.Errorf("group %s does not exist: no VM carries the label %s=%s (check --group, or create the group's first color)", r.Group, LabelGroup, r.Group)
	}
	// The newest generation is the new color when a rotation was cut short
	// and the template's image is what it runs; otherwise it is the old one.
	top := 0
	for _, i := range all {
		top = max(top, generation(i))
	}
	var newest, older []providers.Instance
	for _, i := range all {
		if generation(i) == top {
			newest = append(newest, i)
		} else {
			older = append(older, i)
		}
	}
	var old, fresh []providers.Instance
	nextGen := top + 1
	if len(older) == 0 && sameImage(newest, r.Template.Image) && (r.Count == 0 || r.Count == len(newest)) {
		rep.From, rep.To = colorOf(newest), colorOf(newest)
		rep.Message = fmt.Sprintf("group %s already runs %s on all %d VMs: nothing to rotate", r.Group, r.Template.Image, len(newest))
		r.say("%s", rep.Message)
		return rep, nil
	}
	if len(older) > 0 && sameImage(newest, r.Template.Image) {
		old, fresh, nextGen = older, newest, top
		r.say("Resuming the rotation of %s to generation %d: %d new and %d old VMs found", r.Group, top, len(newest), len(older))
	} else {
		old = all
	}
	oldColor := colorOf(old)
	newColor := "green"
	if oldColor == "green" {
		newColor = "blue"
	}
	rep.From, rep.To = oldColor, newColor
	count := r.Count
	if count == 0 {
		count = len(old)
	}

	// 1. The new color.
	rep.Step = StepCreate
	have := map[string]bool{}
	for _, i := range fresh {
		have[i.Name] = true
	}
	for n := 1; n <= count; n++ {
		name := fmt.Sprintf("%s-%s-%d", r.Prefix, newColor, n)
		if have[name] {
			continue
		}
		spec := r.Template
		spec.Name = name
		if len(r.Zones) > 0 {
			spec.Zone = r.Zones[(n-1)%len(r.Zones)]
		}
		spec.Labels = maps.Clone(r.Template.Labels)
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[LabelGroup] = r.Group
		spec.Labels[LabelColor] = newColor
		spec.Labels[LabelGeneration] = strconv.Itoa(nextGen)
		spec.Labels[LabelRole] = RoleManager
		r.say("Creating %s (%s, image %s, zone %s)", name, newColor, spec.Image, spec.Zone)
		inst, err := r.Compute.CreateInstance(ctx, spec)
		if err != nil {
			return rep, fmt.Errorf("creating %s: %w (the old color keeps serving; rerun to continue)", name, err)
		}
		fresh = append(fresh, inst)
		rep.Created = append(rep.Created, name)
	}

	// 2. Wait until it serves. The old color is not touched before.
	rep.Step = StepHealthy
	everHealthy, err := r.waitHealthy(ctx, fresh)
	if err != nil {
		if ctx.Err() != nil {
			return rep, fmt.Errorf("interrupted while waiting for the new %s VMs: %w; the old %s VMs keep serving; rerun to continue", newColor, err, oldColor)
		}
		// A new VM that never passed a check never took a job: it goes.
		// One that passed once may have taken one: it stays, for a rerun.
		var kept []string
		for _, f := range fresh {
			if everHealthy[f.Name] {
				kept = append(kept, f.Name)
				continue
			}
			if derr := r.Compute.DeleteInstance(ctx, f.Zone, f.Name); derr != nil {
				kept = append(kept, f.Name)
				r.say("Deleting the unhealthy %s failed: %v", f.Name, derr)
				continue
			}
			r.say("Deleted %s: it never became healthy", f.Name)
			rep.Deleted = append(rep.Deleted, f.Name)
		}
		msg := fmt.Sprintf("the new %s VMs never became healthy: %v; the old %s VMs keep serving and were not asked to drain", newColor, err, oldColor)
		if len(kept) > 0 {
			msg += fmt.Sprintf("; %s passed a check once and may run jobs, so they were kept: rerun to wait for them", strings.Join(kept, ", "))
		} else {
			msg += "; the new VMs were deleted: fix the image and rerun"
		}
		rep.Message = msg
		return rep, errors.New(msg)
	}
	r.say("New color %s is healthy: %s", newColor, names(fresh))

	// 3. Drain the old color, all at once.
	rep.Step = StepDrain
	for _, i := range old {
		if err := r.Compute.RequestDrain(ctx, i.Zone, i.Name); err != nil {
			return rep, fmt.Errorf("asking %s to drain: %w (rerun to continue)", i.Name, err)
		}
	}
	r.say("Asked %d old %s VMs to drain: %s", len(old), oldColor, names(old))

	// 4. Delete each old VM as soon as its runner has exited.
	rep.Step = StepDelete
	deadline := r.Now().Add(r.DrainTimeout)
	left := slices.Clone(old)
	last := map[string]providers.DrainState{}
	for len(left) > 0 {
		var still []providers.Instance
		var mu sync.Mutex
		var wg sync.WaitGroup
		var errs []error
		for _, i := range left {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := r.Compute.DrainState(ctx, i.Zone, i.Name)
				if errors.Is(err, providers.ErrNotFound) {
					return // gone already
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("reading the drain state of %s: %w", i.Name, err))
					still = append(still, i)
					mu.Unlock()
					return
				}
				mu.Lock()
				if prev, ok := last[i.Name]; !ok || prev.Phase != st.Phase || prev.JobsLeft != st.JobsLeft {
					r.say("%s: %s, %d jobs left", i.Name, phaseWord(st.Phase), st.JobsLeft)
					last[i.Name] = st
				}
				mu.Unlock()
				if st.Phase != providers.DrainDone {
					mu.Lock()
					still = append(still, i)
					mu.Unlock()
					return
				}
				err = r.Compute.DeleteInstance(ctx, i.Zone, i.Name)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("deleting %s: %w", i.Name, err))
					still = append(still, i)
					return
				}
				r.say("Deleted %s: its runner finished its jobs", i.Name)
				rep.Deleted = append(rep.Deleted, i.Name)
			}()
		}
		wg.Wait()
		left = still
		if len(left) == 0 {
			break
		}
		if r.Now().After(deadline) {
			rep.Waiting = names(left)
			jobs := 0
			for _, i := range left {
				jobs += last[i.Name].JobsLeft
			}
			msg := fmt.Sprintf("after %s, %s still run %d jobs and were not deleted; rerun fleet rotate to keep waiting", r.DrainTimeout, strings.Join(rep.Waiting, ", "), jobs)
			r.say("Timeout: %s", msg)
			rep.Message = msg
			return rep, fmt.Errorf("%w: %s", ErrTimeout, msg)
		}
		if err := errors.Join(errs...); err != nil {
			r.say("Retrying after: %v", err)
		}
		select {
		case <-ctx.Done():
			return rep, fmt.Errorf("interrupted while %s drain: %w; rerun to continue", strings.Join(names(left), ", "), ctx.Err())
		case <-time.After(r.Poll):
		}
	}
	sort.Strings(rep.Deleted)
	rep.Message = fmt.Sprintf("rotated %s from %s to %s: %d new VMs serve, %d old VMs drained and deleted", r.Group, oldColor, newColor, len(fresh), len(old))
	r.say("%s", rep.Message)
	return rep, nil
}

// waitHealthy waits until every fresh VM has passed every check for Settle.
// It returns which VMs ever passed one.
func (r *Rotation) waitHealthy(ctx context.Context, fresh []providers.Instance) (map[string]bool, error) {
	deadline := r.Now().Add(r.HealthTimeout)
	ever := map[string]bool{}
	since := map[string]time.Time{}
	for {
		cur, err := r.Compute.ListInstances(ctx, map[string]string{LabelGroup: r.Group})
		if err != nil {
			return ever, err
		}
		byName := map[string]providers.Instance{}
		for _, i := range cur {
			byName[i.Name] = i
		}
		var bad []string
		now := r.Now()
		for _, f := range fresh {
			i, ok := byName[f.Name]
			if !ok {
				bad = append(bad, f.Name+" is gone")
				delete(since, f.Name)
				continue
			}
			if err := r.Healthy(ctx, i); err != nil {
				if _, was := since[f.Name]; was {
					r.say("%s is unhealthy again: %v", f.Name, err)
				}
				bad = append(bad, err.Error())
				delete(since, f.Name)
				continue
			}
			ever[f.Name] = true
			if _, ok := since[f.Name]; !ok {
				since[f.Name] = now
				r.say("%s is healthy", f.Name)
			}
			if settled := now.Sub(since[f.Name]); settled < r.Settle {
				bad = append(bad, fmt.Sprintf("%s healthy for %s of the settle time %s", f.Name, settled.Round(time.Second), r.Settle))
			}
		}
		if len(bad) == 0 {
			return ever, nil
		}
		if r.Now().After(deadline) {
			return ever, fmt.Errorf("after %s: %s", r.HealthTimeout, strings.Join(bad, "; "))
		}
		select {
		case <-ctx.Done():
			return ever, ctx.Err()
		case <-time.After(r.Poll):
		}
	}
}

func sameImage(insts []providers.Instance, image string) bool {
	if image == "" {
		return false
	}
	for _, i := range insts {
		if i.Image != image && !strings.HasSuffix(i.Image, "/"+image) && !strings.HasSuffix(image, "/"+i.Image) {
			return false
		}
	}
	return true
}

func colorOf(insts []providers.Instance) string {
	for _, i := range insts {
		if c := i.Labels[LabelColor]; c != "" {
			return c
		}
	}
	return "blue"
}

func names(insts []providers.Instance) []string {
	out := make([]string, len(insts))
	for i, inst := range insts {
		out[i] = inst.Name
	}
	sort.Strings(out)
	return out
}

func phaseWord(p providers.DrainPhase) string {
	if p == providers.DrainNone {
		return "drain requested"
	}
	return string(p)
}
