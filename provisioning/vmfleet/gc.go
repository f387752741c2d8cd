package vmfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
)

// LabelManager is on every autoscaled VM (docker+machine or fleeting): the
// name of the manager that created it.
const LabelManager = "runnerfleet-manager"

// GC finds what a fleet leaves behind: autoscaled VMs whose manager no
// longer exists, open spot requests without an instance, and manager images
// beyond the newest Keep of each family. It deletes them only with Apply.
type GC struct {
	Compute providers.Compute
	// Autoscaled selects the autoscaled VMs, for example
	// {"runnerfleet-autoscaled": "true"}.
	Autoscaled map[string]string
	// NamePattern also marks a VM as autoscaled when it has no manager
	// label; its first submatch names the manager (docker+machine names
	// VMs runner-<token>-<manager>-<timestamp>-<n>).
	NamePattern *regexp.Regexp
	// Managers returns the managers that exist now.
	Managers func(ctx context.Context) (map[string]bool, error)
	// Grace spares VMs younger than this, which a manager may be creating; default 1h.
	Grace time.Duration
	// ImageFamilies whose images are pruned, keeping the newest Keep and any in use.
	ImageFamilies []string
	Keep          int
	Apply         bool
	Progress      io.Writer
	Now           func() time.Time
}

// Plan is what GC found, and with Apply, deleted.
type Plan struct {
	VMs          []string
	SpotRequests []string
	Images       []string
	Applied      bool
}

// Run finds, and with Apply deletes, what the fleet left behind.
func (g *GC) Run(ctx context.Context) (Plan, error) {
	if g.Grace == 0 {
		g.Grace = time.Hour
	}
	if g.Progress == nil {
		g.Progress = io.Discard
	}
	if g.Now == nil {
		g.Now = time.Now
	}
	if g.Keep < 1 && len(g.ImageFamilies) > 0 {
		return Plan{}, errors.New("gc: keep must be at least 1: the newest image of a family is what new VMs boot from")
	}
	plan := Plan{Applied: g.Apply}
	verb := "would delete"
	if g.Apply {
		verb = "deleting"
	}
	managers, err := g.Managers(ctx)
	if err != nil {
		return plan, fmt.Errorf("listing the managers: %w", err)
	}
	vms, err := g.Compute.ListInstances(ctx, g.Autoscaled)
	if err != nil {
		return plan, fmt.Errorf("listing autoscaled VMs: %w", err)
	}
	inUse := map[string]bool{}
	var errs []error
	for _, vm := range vms {
		inUse[vm.Image] = true
		owner := vm.Labels[LabelManager]
		if owner == "" && g.NamePattern != nil {
			if m := g.NamePattern.FindStringSubmatch(vm.Name); len(m) > 1 {
				owner = m[1]
			}
		}
		switch {
		case owner == "":
			fmt.Fprintf(g.Progress, "keep %s: no %s label and no name match, so no owner to check\n", vm.Name, LabelManager)
			continue
		case managers[owner]:
			continue
		case g.Now().Sub(vm.CreatedAt) < g.Grace:
			fmt.Fprintf(g.Progress, "keep %s: manager %s is gone but the VM is younger than %s\n", vm.Name, owner, g.Grace)
			continue
		}
		fmt.Fprintf(g.Progress, "%s VM %s (%s): its manager %s no longer exists, created %s ago\n", verb, vm.Name, vm.Zone, owner, g.Now().Sub(vm.CreatedAt).Round(time.Minute))
		plan.VMs = append(plan.VMs, vm.Name)
		if g.Apply {
			if err := g.Compute.DeleteInstance(ctx, vm.Zone, vm.Name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if spot, ok := g.Compute.(providers.SpotRequests); ok {
		ids, err := spot.ListOrphanSpotRequests(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing spot requests: %w", err))
		}
		for _, id := range ids {
			fmt.Fprintf(g.Progress, "%s spot request %s: open without an instance\n", verb, id)
		}
		plan.SpotRequests = ids
		if g.Apply && len(ids) > 0 {
			if err := spot.CancelSpotRequests(ctx, ids); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Images any instance boots from, managers included, are in use.
	all, err := g.Compute.ListInstances(ctx, nil)
	if err != nil {
		errs = append(errs, fmt.Errorf("listing instances: %w", err))
	}
	for _, i := range all {
		inUse[i.Image] = true
	}
	for _, fam := range g.ImageFamilies {
		imgs, err := g.Compute.ListImages(ctx, fam)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing images of %s: %w", fam, err))
			continue
		}
		sort.Slice(imgs, func(a, b int) bool { return imgs[a].CreatedAt.After(imgs[b].CreatedAt) })
		for n, img := range imgs {
			if n < g.Keep {
				continue
			}
			if inUse[img.Name] || inUse[img.ID] {
				fmt.Fprintf(g.Progress, "keep image %s: beyond the newest %d of %s but still in use\n", img.Name, g.Keep, fam)
				continue
			}
			fmt.Fprintf(g.Progress, "%s image %s (%s, created %s)\n", verb, img.Name, fam, img.CreatedAt.Format(time.DateOnly))
			plan.Images = append(plan.Images, img.Name)
			if g.Apply {
				if err := g.Compute.DeleteImage(ctx, img.Name); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if !g.Apply {
		fmt.Fprintf(g.Progress, "dry run: %d VMs, %d spot requests, %d images would go; rerun with --apply to delete them\n",
			len(plan.VMs), len(plan.SpotRequests), len(plan.Images))
	}
	return plan, errors.Join(errs...)
}
