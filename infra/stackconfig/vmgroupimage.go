package stackconfig

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
)

// VMGroupImageInputs are the inputs of group g's image (nil without
// imageInputs): the stack's imageInputs, with the OS and its version the
// group's os and windowsVersion (imageInputs.osVersion for linux).
func VMGroupImageInputs(g fleetspec.VMGroup) *vmimage.Inputs {
	ii := g.ImageInputs
	if ii == nil {
		return nil
	}
	in := &vmimage.Inputs{Family: ii.Family, OS: g.OS, OSVersion: vmGroupOSVersion(g), RunnerVersion: ii.RunnerVersion,
		AgentVersion: ii.AgentVersion, RunnerConfig: []byte(ii.RunnerConfig)}
	if len(ii.Files) > 0 {
		in.Files = map[string][]byte{}
		for _, n := range slices.Sorted(maps.Keys(ii.Files)) {
			in.Files[n] = []byte(ii.Files[n])
		}
	}
	return in
}

// vmGroupOSVersion is the version of g's OS its tags and image name:
// windowsVersion, or a linux group's imageInputs.osVersion.
func vmGroupOSVersion(g fleetspec.VMGroup) string {
	if g.IsWindows() {
		return g.WindowsVersion
	}
	if g.ImageInputs != nil {
		return g.ImageInputs.OSVersion
	}
	return ""
}

// imageInputKey is the stack key of an image input (vmimage.InputError.Key)
// of group g at p.
func imageInputKey(g fleetspec.VMGroup, p *field.Path, key string) *field.Path {
	ip := p.Child("imageInputs")
	switch key {
	case vmimage.KeyOS:
		return p.Child("os")
	case vmimage.KeyOSVersion:
		if g.IsWindows() {
			return p.Child("windowsVersion")
		}
		return ip.Child("osVersion")
	case vmimage.KeyFamily:
		return ip.Child("family")
	case vmimage.KeyRunnerVersion:
		return ip.Child("runnerVersion")
	case vmimage.KeyAgentVersion:
		return ip.Child("agentVersion")
	case vmimage.KeyRunnerConfig:
		return ip.Child("runnerConfig")
	case vmimage.KeyFile:
		return ip.Child("files")
	case vmimage.TagsKey:
		return p.Child("tags")
	}
	return ip
}

// inputError is err (a vmimage.InputError) at the stack key it names.
func inputError(g fleetspec.VMGroup, p *field.Path, err error) *field.Error {
	var ie *vmimage.InputError
	if errors.As(err, &ie) {
		return field.Invalid(imageInputKey(g, p, ie.Key), field.OmitValueType{}, ie.Problem)
	}
	return field.Invalid(p.Child("imageInputs"), field.OmitValueType{}, err.Error())
}

// resolveVMGroupImage names group g's image from its imageInputs (its
// image, when left out, is that name; given, it must be that name) and
// fills its tags (default <os> and <os>-<version>, sorted), refusing a
// version tag that disagrees with the group's version. It runs only when
// os and its version are valid (validateVMGroup reports them otherwise).
func resolveVMGroupImage(g *fleetspec.VMGroup, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if g.ImageInputs != nil && g.IsWindows() && g.ImageInputs.OSVersion != "" {
		errs = append(errs, field.Forbidden(p.Child("imageInputs", "osVersion"), "a windows group's image runs its windowsVersion ("+g.WindowsVersion+"); remove it"))
	}
	version := vmGroupOSVersion(*g)
	if g.ImageInputs == nil && !g.IsWindows() {
		// A linux group without imageInputs names no version: its tags
		// are what it declares.
		return errs
	}
	if g.ImageInputs != nil {
		in := VMGroupImageInputs(*g)
		name, err := vmimage.Name(*in)
		switch {
		case err != nil:
			// The inputs' version may be the tags' too: one error is enough.
			return append(errs, inputError(*g, p, err))
		case g.Image == "":
			g.Image = name
		case g.Image != name:
			errs = append(errs, field.Invalid(p.Child("image"), g.Image, fmt.Sprintf(
				"is not the image its imageInputs name, %s: boot that image (leave image out, and it is that name), or give the inputs %s was built from", name, g.Image)))
		}
	}
	// Each declared tag alone, so that a refusal names its index.
	for i, t := range g.Tags {
		if _, err := vmimage.GroupTags(g.OS, version, []string{t}); err != nil {
			var ie *vmimage.InputError
			if errors.As(err, &ie) && ie.Key == vmimage.TagsKey {
				errs = append(errs, field.Invalid(p.Child("tags").Index(i), t, ie.Problem))
				continue
			}
			return append(errs, inputError(*g, p, err))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	tags, err := vmimage.GroupTags(g.OS, version, g.Tags)
	if err != nil {
		return append(errs, inputError(*g, p, err))
	}
	g.Tags = tags
	return nil
}
