package vmfleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
)

// CheckRunnerTags compares the tags runner id carries in GitLab (have)
// with the group's (want, from vmimage.GroupTags): a version tag that names
// another version than osVersion, a missing tag or an extra one is an
// error that says which.
func CheckRunnerTags(id int64, os, osVersion string, have, want []string) error {
	var wrongVersion, missing, extra []string
	for _, t := range have {
		if v, ok := vmimage.VersionOfTag(os, t); ok && v != osVersion {
			wrongVersion = append(wrongVersion, t)
		} else if !slices.Contains(want, t) {
			extra = append(extra, t)
		}
	}
	for _, t := range want {
		if !slices.Contains(have, t) {
			missing = append(missing, t)
		}
	}
	var problems []string
	if len(wrongVersion) > 0 {
		problems = append(problems, fmt.Sprintf("it carries %s, but the image is %s %s (%s)", strings.Join(wrongVersion, ", "), os, osVersion, vmimage.KeyOSVersion))
	}
	if len(missing) > 0 {
		problems = append(problems, "it lacks "+strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		problems = append(problems, "it carries "+strings.Join(extra, ", ")+", which the group does not declare")
	}
	if len(problems) == 0 {
		return nil
	}
	return &vmimage.InputError{Key: vmimage.TagsKey, Problem: fmt.Sprintf("runner %d's tags in GitLab are %s, the group's are %s: %s; set the runner's tags in GitLab to the group's, or declare its tags in the group", id, list(have), list(want), strings.Join(problems, "; "))}
}

func list(tags []string) string {
	if len(tags) == 0 {
		return "none"
	}
	return "[" + strings.Join(tags, ", ") + "]"
}

// RunnerMarker is in the description of the runner GroupRunner creates for
// a group, so that a rerun finds it instead of creating another.
func RunnerMarker(group string) string { return "[runnerfleet-vm-group=" + group + "]" }

// GroupRunner is the GitLab runner a VM group's managers authenticate as
// (an instance runner): created with the group's tags, or adopted after
// its tags in GitLab are checked.
type GroupRunner struct {
	API gitlab.Client
	// RunnerTags reads a runner's tags from GitLab (gitlab.GetRunner).
	RunnerTags func(ctx context.Context, id int64) ([]string, error)
	Group      string
	// OS and OSVersion are the image's (ImageInputs), Tags the group's
	// (GroupTags).
	OS, OSVersion string
	Tags          []string
	// ID is the runner to adopt; 0 adopts the runner marked as the
	// group's, or creates it.
	ID int64
}

// Ensure returns the group's runner: the one of ID, or the one marked as
// the group's, once its tags are the group's; or a new one with the
// group's tags, whose token is returned (nil for an adopted runner: its
// token is never reset here).
func (g GroupRunner) Ensure(ctx context.Context) (int64, *gitlab.Token, error) {
	if len(g.Tags) == 0 {
		return 0, nil, errors.New("a VM group's runner needs its tags (GroupTags)")
	}
	id := g.ID
	if id == 0 {
		ids, err := g.API.FindRunners(ctx, gitlab.Scope{Type: "instance"}, RunnerMarker(g.Group))
		if err != nil {
			return 0, nil, fmt.Errorf("looking for the runner of group %s: %w", g.Group, err)
		}
		switch len(ids) {
		case 0:
			tok, err := g.API.CreateRunner(ctx, gitlab.CreateOptions{
				Scope:       gitlab.Scope{Type: "instance"},
				Description: fmt.Sprintf("%s managers of VM group %s %s", g.OS, g.Group, RunnerMarker(g.Group)),
				Tags:        g.Tags,
			})
			if err != nil {
				return 0, nil, fmt.Errorf("creating the runner of group %s: %w", g.Group, err)
			}
			return tok.RunnerID, tok, nil
		case 1:
			id = ids[0]
		default:
			return 0, nil, fmt.Errorf("runners %v are all marked %s: delete the ones the group's managers do not use, or name the one to adopt", ids, RunnerMarker(g.Group))
		}
	}
	have, err := g.RunnerTags(ctx, id)
	if err != nil {
		return 0, nil, fmt.Errorf("reading the tags of runner %d: %w", id, err)
	}
	if err := CheckRunnerTags(id, g.OS, g.OSVersion, have, g.Tags); err != nil {
		return 0, nil, err
	}
	return id, nil, nil
}
