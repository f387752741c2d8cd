package vmfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcenames"
)

// NoteOrphanedSince is the note (providers.Compute.Note) fleet gc --apply
// leaves on a VM the first time it finds the VM's manager absent: the time
// it did, RFC 3339. The VM is deleted only once the note is older than the
// grace, so a manager must be proven absent for that long. gc removes the
// note when the manager is back.
const NoteOrphanedSince = "orphaned-since"

// Manager is a manager a source proved to exist.
type Manager struct {
	Name string
	// Incarnation is the incarnation that exists. "" proves only the
	// name: VMs that carry no incarnation are owned, others are not.
	// AnyIncarnation proves every VM of the name owned.
	Incarnation string
	// IdleTime is the longest IdleTime of its config, if the source knows.
	IdleTime time.Duration
}

// Source tells which managers of one kind of host exist.
type Source interface {
	// Host is the host whose managers it knows (HostKubernetes, HostVM).
	Host() string
	// Describe says what the source looked at, for messages.
	Describe() string
	// Managers lists the managers that exist now. An error means the
	// source could not tell: its managers are unknown, never absent.
	Managers(ctx context.Context) ([]Manager, error)
}

// GC finds what a fleet leaves behind: autoscaled VMs whose manager is
// proven absent, open spot requests without an instance, and manager images
// beyond the newest Keep of each family. It deletes them only with Apply.
//
// A VM is deleted only when all of these hold:
//   - its labels (or its docker+machine name) name its manager;
//   - the source for the manager's host answered, and the manager, or the
//     incarnation of it that created the VM, is not among its managers;
//   - a previous --apply run noted it orphaned more than Grace ago, and
//     the manager stayed absent since;
//   - it runs no job: it is stopped, or its job reporter said, less than
//     JobReportMaxAge ago, that no job container runs on it;
//   - no managed instance group or Auto Scaling group owns it (such a
//     group would re-create it).
type GC struct {
	Compute providers.Compute
	// Autoscaled selects the autoscaled VMs; default {LabelAutoscaled: "true"}.
	Autoscaled map[string]string
	// Sources prove managers exist, one per host kind. With Apply, every
	// source must answer.
	Sources []Source
	// Grace is how long a manager must be proven absent; default 1h.
	Grace time.Duration
	// JobReportMaxAge is how old a job report may be to prove a VM idle;
	// default 5m.
	JobReportMaxAge time.Duration
	// ImageFamilies whose images are pruned, keeping the newest Keep, any
	// a VM boots from, and KeepImages.
	ImageFamilies []string
	Keep          int
	// KeepImages are never pruned: the image each group is expected to
	// boot (ImageName of its inputs), which a rotation may not have
	// reached yet.
	KeepImages []string
	// ImageUsers lists the VMs whose images are in use; default Compute.
	// Images are the project's (GCE) or the region's (EC2), so it must
	// cover every zone: a Compute narrowed to some zones would not see a
	// VM in another that boots an image of the family.
	ImageUsers providers.Compute
	Apply      bool
	// Parallelism bounds concurrent cloud calls per VM; default 8.
	Parallelism int
	Progress    io.Writer
	Now         func() time.Time
}

// Verdicts of a VM.
const (
	VerdictOwned      = "owned"       // its manager exists
	VerdictUnowned    = "unowned"     // nothing names its manager
	VerdictGroup      = "group"       // an instance group owns it
	VerdictUnknown    = "unknown"     // the source of its manager did not answer or is not configured
	VerdictYoung      = "young"       // its manager is absent, but the VM is younger than the grace
	VerdictNoted      = "noted"       // its manager is absent: noted now (or would be), waiting for the grace
	VerdictWaiting    = "waiting"     // its manager is absent since the note, for less than the grace
	VerdictBusy       = "busy"        // orphaned, but it runs a job or cannot be proven idle
	VerdictDelete     = "delete"      // orphaned and idle: deleted (or would be)
	VerdictDeleteFail = "delete-fail" // orphaned and idle, but the delete failed
)

// VMRow is one autoscaled VM as gc judged it.
type VMRow struct {
	Name        string        `json:"name"`
	Zone        string        `json:"zone"`
	Manager     string        `json:"manager,omitempty"`
	Incarnation string        `json:"incarnation,omitempty"`
	Host        string        `json:"host,omitempty"`
	State       string        `json:"state"`
	Age         time.Duration `json:"ageNanos"`
	// AbsentFor is how long its manager has been proven absent.
	AbsentFor time.Duration `json:"absentForNanos,omitempty"`
	Verdict   string        `json:"verdict"`
	Reason    string        `json:"reason"`
	Deleted   bool          `json:"deleted,omitempty"`
}

// Plan is what GC found, and with Apply, did.
type Plan struct {
	Applied bool    `json:"applied"`
	Rows    []VMRow `json:"vms"`
	// VMs are the VMs deleted (Apply) or that would be.
	VMs          []string `json:"deleted"`
	SpotRequests []string `json:"spotRequests,omitempty"`
	Images       []string `json:"images,omitempty"`
	// Sources says, per host, what its source answered.
	Sources map[string]string `json:"sources"`
}

// Count is how many rows have verdict v.
func (p Plan) Count(v string) int {
	n := 0
	for _, r := range p.Rows {
		if r.Verdict == v {
			n++
		}
	}
	return n
}

// Orphans are the VMs proven orphaned that are still there: busy, noted,
// waiting, or whose deletion failed — what the OrphanedVMs alert counts.
func (p Plan) Orphans() int {
	n := 0
	for _, r := range p.Rows {
		switch r.Verdict {
		case VerdictBusy, VerdictNoted, VerdictWaiting, VerdictDeleteFail:
			n++
		case VerdictDelete:
			if !r.Deleted {
				n++
			}
		}
	}
	return n
}

// ErrSourceUnavailable is wrapped when --apply is refused because a source
// did not answer.
var ErrSourceUnavailable = errors.New("a manager source did not answer")

func (g *GC) defaults() {
	if g.Grace == 0 {
		g.Grace = time.Hour
	}
	if g.JobReportMaxAge == 0 {
		g.JobReportMaxAge = 5 * time.Minute
	}
	if g.Parallelism == 0 {
		g.Parallelism = 8
	}
	if g.Progress == nil {
		g.Progress = io.Discard
	}
	if g.Now == nil {
		g.Now = time.Now
	}
	if len(g.Autoscaled) == 0 {
		g.Autoscaled = map[string]string{LabelAutoscaled: "true"}
	}
}

// known is what the sources said.
type known struct {
	answered map[string]bool                       // host → its source answered
	names    map[string]map[string]map[string]bool // host → manager → incarnations ("" for any)
	idle     map[string]time.Duration              // manager → longest idle time
}

func (k known) has(host, manager string) (present bool, incs map[string]bool) {
	incs, ok := k.names[host][manager]
	return ok, incs
}

// Run finds, and with Apply deletes, what the fleet left behind.
func (g *GC) Run(ctx context.Context) (Plan, error) {
	g.defaults()
	plan := Plan{Applied: g.Apply, Sources: map[string]string{}}
	if g.Keep < 1 && len(g.ImageFamilies) > 0 {
		return plan, errors.New("gc: keep must be at least 1: the newest image of a family is what new VMs boot from")
	}
	if len(g.Sources) == 0 {
		return plan, errors.New("gc: no manager source: without one every VM would look orphaned")
	}
	k := known{answered: map[string]bool{}, names: map[string]map[string]map[string]bool{}, idle: map[string]time.Duration{}}
	var unavailable []string
	for _, s := range g.Sources {
		ms, err := s.Managers(ctx)
		if err != nil {
			plan.Sources[s.Host()] = "unavailable: " + err.Error()
			unavailable = append(unavailable, fmt.Sprintf("%s (%s): %v", s.Host(), s.Describe(), err))
			continue
		}
		k.answered[s.Host()] = true
		if k.names[s.Host()] == nil {
			k.names[s.Host()] = map[string]map[string]bool{}
		}
		for _, m := range ms {
			if k.names[s.Host()][m.Name] == nil {
				k.names[s.Host()][m.Name] = map[string]bool{}
			}
			k.names[s.Host()][m.Name][m.Incarnation] = true
			k.idle[m.Name] = max(k.idle[m.Name], m.IdleTime)
		}
		plan.Sources[s.Host()] = fmt.Sprintf("%d managers (%s)", len(ms), s.Describe())
	}
	if g.Apply && len(unavailable) > 0 {
		return plan, fmt.Errorf("%w, so its managers are unknown, not gone; nothing was deleted: %s", ErrSourceUnavailable, strings.Join(unavailable, "; "))
	}
	for m, idle := range k.idle {
		if idle > g.Grace {
			return plan, fmt.Errorf("--grace %s is below manager %s's IdleTime %s: a manager leaves a VM idle that long; use --grace %s or more", g.Grace, m, idle, idle.Round(time.Minute))
		}
	}

	vms, err := g.Compute.ListInstances(ctx, g.Autoscaled)
	if err != nil {
		return plan, fmt.Errorf("listing autoscaled VMs: %w", err)
	}
	now := g.Now()
	plan.Rows = make([]VMRow, len(vms))
	inUse := map[string]bool{}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, g.Parallelism)
	)
	for i, vm := range vms {
		inUse[vm.Image] = true
		row := g.classify(vm, k, now)
		plan.Rows[i] = row
		if !g.needsCalls(row, vm) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := g.act(ctx, vm, &plan.Rows[i], now); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, r := range plan.Rows {
		if r.Verdict == VerdictDelete {
			plan.VMs = append(plan.VMs, r.Name)
		}
	}
	sort.Strings(plan.VMs)

	if spot, ok := g.Compute.(providers.SpotRequests); ok {
		ids, err := spot.ListOrphanSpotRequests(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing spot requests: %w", err))
		}
		plan.SpotRequests = ids
		if g.Apply && len(ids) > 0 {
			if err := spot.CancelSpotRequests(ctx, ids); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(g.ImageFamilies) > 0 {
		imgs, err := g.images(ctx, inUse)
		errs = append(errs, err)
		plan.Images = imgs
	}
	return plan, errors.Join(errs...)
}

// classify judges a VM from what is known without further calls. Orphans
// past the grace come out VerdictDelete and are checked for jobs by act.
func (g *GC) classify(vm providers.Instance, k known, now time.Time) VMRow {
	row := VMRow{Name: vm.Name, Zone: vm.Zone, State: string(vm.State), Age: now.Sub(vm.CreatedAt)}
	if vm.ManagedBy != "" {
		row.Verdict, row.Reason = VerdictGroup, "owned by "+vm.ManagedBy+", which would re-create it"
		return row
	}
	o, ok := OwnerOf(vm)
	if !ok {
		row.Verdict, row.Reason = VerdictUnowned, fmt.Sprintf("no %s label and not a docker+machine name: no owner to check", LabelManager)
		return row
	}
	row.Manager, row.Incarnation, row.Host = o.Manager, o.Incarnation, o.Host
	hosts := []string{o.Host}
	if o.Host == "" {
		hosts = []string{HostKubernetes, HostVM}
	}
	for _, h := range hosts {
		present, incs := k.has(h, o.Manager)
		if !present {
			continue
		}
		if o.Incarnation == "" || incs[AnyIncarnation] || incs[o.Incarnation] {
			row.Verdict, row.Reason = VerdictOwned, fmt.Sprintf("manager %s exists (%s)", o.Manager, h)
			return row
		}
	}
	for _, h := range hosts {
		if !k.answered[h] {
			row.Verdict, row.Reason = VerdictUnknown, fmt.Sprintf("no answer about %s managers (add or fix --source %s): manager %s may exist", h, h, o.Manager)
			return row
		}
	}
	absent := fmt.Sprintf("manager %s does not exist", o.Manager)
	if present, _ := k.has(o.Host, o.Manager); present || (o.Host == "" && (k.names[HostKubernetes][o.Manager] != nil || k.names[HostVM][o.Manager] != nil)) {
		absent = fmt.Sprintf("manager %s runs, but not incarnation %s that created the VM (its state is gone)", o.Manager, o.Incarnation)
	}
	if row.Age < g.Grace {
		row.Verdict, row.Reason = VerdictYoung, absent+"; the VM is younger than the grace "+g.Grace.String()
		return row
	}
	since, err := time.Parse(time.RFC3339, vm.Notes[NoteOrphanedSince])
	if err != nil {
		row.Verdict, row.Reason = VerdictNoted, absent+"; noting it orphaned now, deleted after "+g.Grace.String()+" more if its manager stays absent"
		return row
	}
	row.AbsentFor = now.Sub(since)
	if row.AbsentFor < g.Grace {
		row.Verdict, row.Reason = VerdictWaiting, fmt.Sprintf("%s, for %s of the grace %s", absent, row.AbsentFor.Round(time.Second), g.Grace)
		return row
	}
	row.Verdict, row.Reason = VerdictDelete, fmt.Sprintf("%s for %s", absent, row.AbsentFor.Round(time.Minute))
	return row
}

// needsCalls: the VM needs a note written or removed, or a job check.
func (g *GC) needsCalls(r VMRow, vm providers.Instance) bool {
	switch r.Verdict {
	case VerdictDelete:
		return true
	case VerdictNoted:
		return g.Apply
	case VerdictOwned:
		return g.Apply && vm.Notes[NoteOrphanedSince] != ""
	}
	return false
}

// act writes notes, checks for jobs and deletes, as the verdict says.
func (g *GC) act(ctx context.Context, vm providers.Instance, r *VMRow, now time.Time) error {
	switch r.Verdict {
	case VerdictOwned:
		if err := g.Compute.Note(ctx, vm.Zone, vm.Name, NoteOrphanedSince, ""); err != nil {
			return fmt.Errorf("removing the orphan note of %s: %w", vm.Name, err)
		}
		return nil
	case VerdictNoted:
		if err := g.Compute.Note(ctx, vm.Zone, vm.Name, NoteOrphanedSince, now.UTC().Format(time.RFC3339)); err != nil {
			return fmt.Errorf("noting %s orphaned: %w", vm.Name, err)
		}
		return nil
	}
	// VerdictDelete: prove it runs no job.
	switch vm.State {
	case providers.StateStopped, providers.StateTerminated:
		r.Reason += "; it is " + string(vm.State) + ", so it runs no job"
	default:
		rep, err := g.Compute.JobReport(ctx, vm.Zone, vm.Name)
		switch {
		case errors.Is(err, providers.ErrNotFound):
			r.Verdict, r.Reason = VerdictOwned, "gone already"
			return nil
		case err != nil:
			r.Verdict, r.Reason = VerdictBusy, r.Reason+"; its job report could not be read: "+err.Error()
			return nil
		case !rep.Found:
			r.Verdict, r.Reason = VerdictBusy, r.Reason+"; it has no job report (fleet-agent --report-jobs), so it may run a job: kept"
			return nil
		case now.Sub(rep.UpdatedAt) > g.JobReportMaxAge:
			r.Verdict, r.Reason = VerdictBusy, fmt.Sprintf("%s; its last job report is %s old (over %s), so it may run a job: kept", r.Reason, now.Sub(rep.UpdatedAt).Round(time.Second), g.JobReportMaxAge)
			return nil
		case rep.Jobs > 0:
			r.Verdict, r.Reason = VerdictBusy, fmt.Sprintf("%s; it runs %d jobs: kept", r.Reason, rep.Jobs)
			return nil
		}
		r.Reason += fmt.Sprintf("; its job reporter saw no job container %s ago", now.Sub(rep.UpdatedAt).Round(time.Second))
	}
	if !g.Apply {
		return nil
	}
	if err := g.Compute.DeleteInstance(ctx, vm.Zone, vm.Name); err != nil {
		r.Verdict, r.Reason = VerdictDeleteFail, r.Reason+"; deleting failed: "+err.Error()
		return fmt.Errorf("deleting %s: %w", vm.Name, err)
	}
	r.Deleted = true
	return nil
}

// images prunes the image families.
func (g *GC) images(ctx context.Context, inUse map[string]bool) ([]string, error) {
	var errs []error
	users := g.ImageUsers
	if users == nil {
		users = g.Compute
	}
	// Images any instance boots from, managers included, are in use.
	all, err := users.ListInstances(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w (no image was deleted)", err)
	}
	var unknown []string
	byFamily := map[string][]string{} // family → VMs that boot "the newest of the family"
	for _, i := range all {
		inUse[i.Image] = true
		if fam, ok := familyRef(i.Image); ok {
			byFamily[fam] = append(byFamily[fam], i.Name)
		}
		if i.Image == "" && i.Labels[LabelRole] == RoleManager && i.State != providers.StateTerminated {
			unknown = append(unknown, i.Name)
		}
	}
	if len(unknown) > 0 {
		// A manager VM boots an image of some family, but which one is
		// not known: any image may be the one it needs to restart.
		sort.Strings(unknown)
		return nil, fmt.Errorf("manager VMs %s do not say which image they boot (on GCE the metadata %s, which the VMs fleet rotate creates carry), so any image may be in use and no image was deleted: rotate the group, or set the metadata to the image the VM boots", strings.Join(unknown, ", "), gcenames.ImageMetadataKey)
	}
	for _, name := range g.KeepImages {
		inUse[name] = true
	}
	var out []string
	for _, fam := range g.ImageFamilies {
		if vms := byFamily[fam]; len(vms) > 0 {
			// Booted from the family: the image they got is not known.
			errs = append(errs, fmt.Errorf("VMs %s boot from image family %s, not from an image of it, so which of its images they use is not known: no image of %s was deleted; boot named images (fleet rotate does)", strings.Join(vms, ", "), fam, fam))
			continue
		}
		imgs, err := g.Compute.ListImages(ctx, fam)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing images of %s: %w", fam, err))
			continue
		}
		sort.Slice(imgs, func(a, b int) bool { return imgs[a].CreatedAt.After(imgs[b].CreatedAt) })
		for n, img := range imgs {
			if n < g.Keep || inUse[img.Name] || inUse[img.ID] {
				continue
			}
			out = append(out, img.Name)
			if g.Apply {
				if err := g.Compute.DeleteImage(ctx, img.Name); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return out, errors.Join(errs...)
}

// familyRef is the family an image reference names instead of an image
// (GCE: family/F, projects/P/global/images/family/F).
func familyRef(ref string) (string, bool) {
	if f, ok := strings.CutPrefix(ref, "family/"); ok {
		return f, true
	}
	if i := strings.LastIndex(ref, "/images/family/"); i >= 0 {
		return ref[i+len("/images/family/"):], true
	}
	return "", false
}

// WriteTable writes the plan as a table a person can check.
func (p Plan) WriteTable(w io.Writer) {
	tw := newTable(w, "VM", "ZONE", "MANAGER", "INCARNATION", "AGE", "ABSENT", "VERDICT", "REASON")
	for _, r := range p.Rows {
		absent := "-"
		if r.AbsentFor > 0 {
			absent = r.AbsentFor.Round(time.Minute).String()
		}
		verdict := r.Verdict
		if r.Verdict == VerdictDelete && !p.Applied {
			verdict = "would-delete"
		}
		if r.Deleted {
			verdict = "deleted"
		}
		tw.row(r.Name, r.Zone, dash(r.Manager), dash(r.Incarnation), r.Age.Round(time.Minute).String(), absent, verdict, r.Reason)
	}
	tw.flush()
	for _, h := range sortedKeys(p.Sources) {
		fmt.Fprintf(w, "source %s: %s\n", h, p.Sources[h])
	}
	for _, id := range p.SpotRequests {
		fmt.Fprintf(w, "spot request %s: open without an instance%s\n", id, map[bool]string{true: ", cancelled", false: ", would be cancelled"}[p.Applied])
	}
	for _, img := range p.Images {
		fmt.Fprintf(w, "image %s: beyond the newest of its family and unused%s\n", img, map[bool]string{true: ", deleted", false: ", would be deleted"}[p.Applied])
	}
	if !p.Applied {
		fmt.Fprintf(w, "dry run: %d VMs, %d spot requests, %d images would go, %d VMs would be noted orphaned; rerun with --apply to do it\n",
			len(p.VMs), len(p.SpotRequests), len(p.Images), p.Count(VerdictNoted))
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
