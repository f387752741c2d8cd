package main

// The image inputs of a VM manager group (fleet image-name, rotate, gc) and
// the GitLab runner of a VM group (fleet vm-runner, rotate's adoption check).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
)

// imageFlags are the inputs of a manager image, --image-<key> each.
type imageFlags struct {
	family        string
	os            string
	osVersion     string
	runnerVersion string
	agentVersion  string
	runnerConfig  string
	files         labelFlag
	// withFamily: --image-family is one of these flags (not gc's list).
	withFamily bool
}

// imageFlag is the flag of an image input key.
func imageFlag(key string) string {
	if key == vmimage.TagsKey {
		return "--runner-tag"
	}
	return "--image-" + key
}

func (f *imageFlags) bind(fs *flag.FlagSet, withFamily bool) {
	f.files = labelFlag{}
	f.withFamily = withFamily
	if withFamily {
		fs.StringVar(&f.family, "image-family", "", "the image's family, the prefix of its name (e.g. wsrm)")
	}
	fs.StringVar(&f.os, "image-os", "", "the image's operating system: "+vmimage.OSWindows+" or "+vmimage.OSLinux)
	fs.StringVar(&f.osVersion, "image-os-version", "", "the image's OS version, lower case (Windows: 2022, 21h2, 1809; Linux: e.g. debian-12); the runners' <os>-<version> tag names it")
	fs.StringVar(&f.runnerVersion, "image-runner-version", "", "the gitlab-runner version the image installs (e.g. 17.5.0)")
	fs.StringVar(&f.agentVersion, "image-agent-version", "", "the fleet-agent version the image installs (e.g. 0.1.0)")
	fs.StringVar(&f.runnerConfig, "image-runner-config", "", "file: the config.toml the image installs, as it installs it (its template, without a token)")
	fs.Var(f.files, "image-file", "name=file: another file the image build installs or runs, e.g. its install script (repeatable)")
}

// given reports whether any image input was given.
func (f *imageFlags) given() bool {
	return f.family != "" && f.withFamily || f.os != "" || f.osVersion != "" || f.runnerVersion != "" || f.agentVersion != "" || f.runnerConfig != "" || len(f.files) > 0
}

// inputs reads the files and checks the inputs, naming the flag of a bad one.
func (f *imageFlags) inputs(family string) (vmimage.Inputs, error) {
	in := vmimage.Inputs{Family: family, OS: f.os, OSVersion: f.osVersion, RunnerVersion: f.runnerVersion, AgentVersion: f.agentVersion}
	if f.withFamily {
		in.Family = f.family
	}
	if f.runnerConfig != "" {
		b, err := os.ReadFile(f.runnerConfig)
		if err != nil {
			return in, fmt.Errorf("%s: %w", imageFlag(vmimage.KeyRunnerConfig), err)
		}
		in.RunnerConfig = b
	}
	if len(f.files) > 0 {
		in.Files = map[string][]byte{}
		names := make([]string, 0, len(f.files))
		for n := range f.files {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := os.ReadFile(f.files[n])
			if err != nil {
				return in, fmt.Errorf("%s %s=%s: %w", imageFlag(vmimage.KeyFile), n, f.files[n], err)
			}
			in.Files[n] = b
		}
	}
	return in, flagError(in.Validate())
}

// flagError names the flag of an input error.
func flagError(err error) error {
	var ie *vmimage.InputError
	if errors.As(err, &ie) {
		return fmt.Errorf("%s: %s", imageFlag(ie.Key), ie.Problem)
	}
	return err
}

// imageName is `fleet image-name`: the name of the image the inputs make.
func imageName(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleet image-name", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f imageFlags
	f.bind(fs, true)
	canonical := fs.Bool("canonical", false, "print the text whose SHA-256 the name carries instead of the name")
	if err := parse(fs, args); err != nil {
		return err
	}
	in, err := f.inputs("")
	if err != nil {
		return err
	}
	if *canonical {
		_, err := io.WriteString(stdout, in.Canonical())
		return err
	}
	name, err := vmimage.Name(in)
	if err != nil {
		return flagError(err)
	}
	_, err = fmt.Fprintln(stdout, name)
	return err
}

// gitlabFlags name a GitLab and a token file.
type gitlabFlags struct {
	url       string
	tokenFile string
	runnerID  int64
}

// token reads the token file.
func (g gitlabFlags) token() (string, error) {
	b, err := os.ReadFile(g.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--gitlab-token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("--gitlab-token-file %s is empty: put a GitLab token in it", g.tokenFile)
	}
	return token, nil
}

// groupTags are the tags of the group's runners, naming the flag of a bad input.
func groupTags(osName, osVersion string, declared []string) ([]string, error) {
	tags, err := vmimage.GroupTags(osName, osVersion, declared)
	return tags, flagError(err)
}

// checkAdoptedTags checks runner id's tags in GitLab against the group's.
func checkAdoptedTags(ctx context.Context, g gitlabFlags, token, osName, osVersion string, tags []string) error {
	d, err := gitlab.GetRunner(ctx, g.url, token, g.runnerID, gitlab.Options{})
	if err != nil {
		return fmt.Errorf("--gitlab-runner-id %d: %w", g.runnerID, err)
	}
	if err := vmfleet.CheckRunnerTags(g.runnerID, osName, osVersion, d.Tags, tags); err != nil {
		var ie *vmimage.InputError
		if errors.As(err, &ie) {
			return fmt.Errorf("--gitlab-runner-id %d: %s (the group's tags come from --image-os, --image-os-version and --runner-tag)", g.runnerID, ie.Problem)
		}
		return err
	}
	return nil
}

// vmRunner is `fleet vm-runner`: the GitLab runner of a VM group, created
// with the group's tags or adopted once its tags are checked.
func vmRunner(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleet vm-runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		group, osName, osVersion, tokenOut string
		windows                            bool
		tags                               listFlag
		g                                  gitlabFlags
	)
	fs.StringVar(&group, "group", "", "the VM manager group whose runner it is")
	fs.BoolVar(&windows, "windows", false, "the Windows shared runner managers' group, "+vmfleet.WindowsGroup)
	fs.StringVar(&osName, "image-os", "", "the operating system of the group's image: "+vmimage.OSWindows+" or "+vmimage.OSLinux)
	fs.StringVar(&osVersion, "image-os-version", "", "the OS version of the group's image (e.g. 2022); the runner's <os>-<version> tag names it")
	fs.Var(&tags, "runner-tag", "a tag of the group's runners instead of <os> and <os>-<version> (repeatable); a version tag must name --image-os-version")
	fs.StringVar(&g.url, "gitlab-url", "", "the GitLab instance, e.g. https://gitlab.example.com")
	fs.StringVar(&g.tokenFile, "gitlab-token-file", "", "file holding a GitLab token: an administrator's with scope api or create_runner to create the instance runner, read_api to adopt one")
	fs.Int64Var(&g.runnerID, "gitlab-runner-id", 0, "the runner to adopt (default: the runner marked as the group's, else a new one)")
	fs.StringVar(&tokenOut, "runner-token-file", "", "file a new runner's authentication token is written to (mode 0600; it must not exist); required when a runner may be created")
	if err := parse(fs, args); err != nil {
		return err
	}
	if windows && group == "" {
		group = vmfleet.WindowsGroup
	}
	if windows && osName == "" {
		osName = vmimage.OSWindows
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"--group", group}, {"--image-os", osName}, {"--image-os-version", osVersion}, {"--gitlab-url", g.url}, {"--gitlab-token-file", g.tokenFile}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "fleet vm-runner: %s required\n", strings.Join(missing, ", "))
		return errUsage
	}
	want, err := groupTags(osName, osVersion, tags)
	if err != nil {
		return err
	}
	token, err := g.token()
	if err != nil {
		return err
	}
	if g.runnerID == 0 {
		if tokenOut == "" {
			return errors.New("--runner-token-file is required unless --gitlab-runner-id names the runner to adopt: a runner created without it would have a token nobody can read")
		}
		if _, err := os.Stat(tokenOut); err == nil {
			return fmt.Errorf("--runner-token-file %s exists: fleet vm-runner never overwrites a token; name a new file", tokenOut)
		}
	}
	api, err := gitlab.New(g.url, token, gitlab.Options{})
	if err != nil {
		return err
	}
	gr := vmfleet.GroupRunner{
		API: api, Group: group, OS: osName, OSVersion: osVersion, Tags: want, ID: g.runnerID,
		RunnerTags: func(ctx context.Context, id int64) ([]string, error) {
			d, err := gitlab.GetRunner(ctx, g.url, token, id, gitlab.Options{})
			return d.Tags, err
		},
	}
	id, tok, err := gr.Ensure(ctx)
	if err != nil {
		var ie *vmimage.InputError
		if errors.As(err, &ie) {
			return fmt.Errorf("the runner of group %s: %s (the group's tags come from --image-os, --image-os-version and --runner-tag)", group, ie.Problem)
		}
		return err
	}
	if tok == nil {
		fmt.Fprintf(stdout, "Adopted runner %d of group %s: its tags in GitLab are the group's, %s\n", id, group, strings.Join(want, ", "))
		return nil
	}
	if err := writeNew(tokenOut, tok.Value+"\n"); err != nil {
		return fmt.Errorf("runner %d was created, but --runner-token-file %s could not be written: %w; reset its token in GitLab (the token is not shown)", id, tokenOut, err)
	}
	fmt.Fprintf(stdout, "Created runner %d of group %s with tags %s; its authentication token is in %s\n", id, group, strings.Join(want, ", "), tokenOut)
	return nil
}

// writeNew writes a file that must not exist, readable by its owner alone.
func writeNew(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
