package vmimage_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
)

func inputs() vmimage.Inputs {
	return vmimage.Inputs{
		Family: "wsrm", OS: vmimage.OSWindows, OSVersion: "2022",
		RunnerVersion: "v17.5.0", AgentVersion: "0.1.0",
		RunnerConfig: []byte("concurrent = 4\n"),
		Files:        map[string][]byte{"install.ps1": []byte("Install-Runner\n")},
	}
}

// The name is the documented digest, computed here without Go: the
// canonical text hashed with coreutils (docs/concepts/vm-managers.md):
//
//	C=$(printf 'concurrent = 4\n' | sha256sum | cut -c1-64)
//	F=$(printf 'Install-Runner\n' | sha256sum | cut -c1-64)
//	printf 'runnerfleet-vm-image/v1\nfamily=wsrm\nos=windows\nos-version=2022\nrunner-version=17.5.0\nagent-version=0.1.0\nrunner-config=%s\nfile:install.ps1=%s\n' $C $F | sha256sum | cut -c1-16
//
// gave 9d14093beaa70684. A change of what is hashed, or how, fails here.
func TestTheImageNameIsTheDocumentedDigestOfItsInputs(t *testing.T) {
	got, err := vmimage.Name(inputs())
	if err != nil {
		t.Fatal(err)
	}
	if want := "wsrm-9d14093beaa70684"; got != want {
		t.Fatalf("name %s, want %s; canonical text:\n%s", got, want, inputs().Canonical())
	}
}

// gceImageName is GCE's documented rule for an image's name: "1-63
// characters long and match the regular expression
// [a-z]([-a-z0-9]*[a-z0-9])?" (RFC 1035).
var gceImageName = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

func TestEveryInputChangesTheNameAndTheNameIsAValidGCEName(t *testing.T) {
	base, err := vmimage.Name(inputs())
	if err != nil {
		t.Fatal(err)
	}
	same := inputs()
	same.RunnerVersion = "17.5.0" // the leading v is dropped
	if n, _ := vmimage.Name(same); n != base {
		t.Errorf("v17.5.0 and 17.5.0 named %s and %s", base, n)
	}
	for name, change := range map[string]func(*vmimage.Inputs){
		"family":         func(in *vmimage.Inputs) { in.Family = "wsrm2" },
		"os version":     func(in *vmimage.Inputs) { in.OSVersion = "21h2" },
		"runner version": func(in *vmimage.Inputs) { in.RunnerVersion = "17.5.1" },
		"agent version":  func(in *vmimage.Inputs) { in.AgentVersion = "0.1.1" },
		"config.toml":    func(in *vmimage.Inputs) { in.RunnerConfig = []byte("concurrent = 5\n") },
		"a file":         func(in *vmimage.Inputs) { in.Files["install.ps1"] = []byte("Install-Runner -Force\n") },
		"a new file":     func(in *vmimage.Inputs) { in.Files["agent.ps1"] = []byte("x") },
		"a file's name":  func(in *vmimage.Inputs) { in.Files = map[string][]byte{"setup.ps1": []byte("Install-Runner\n")} },
		"os": func(in *vmimage.Inputs) {
			in.OS = vmimage.OSLinux
		},
	} {
		in := inputs()
		in.Files = map[string][]byte{"install.ps1": []byte("Install-Runner\n")}
		change(&in)
		n, err := vmimage.Name(in)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if n == base {
			t.Errorf("a change of %s kept the name %s", name, n)
		}
	}
	long := inputs()
	long.Family = "w" + strings.Repeat("x", vmimage.MaxFamilyLength-1)
	n, err := vmimage.Name(long)
	if err != nil {
		t.Fatalf("a family of %d characters: %v", vmimage.MaxFamilyLength, err)
	}
	for _, n := range []string{base, n} {
		if len(n) > 63 || !gceImageName.MatchString(n) || !vmimage.ValidGCEName(n) {
			t.Errorf("%s (%d characters) is not a GCE image name", n, len(n))
		}
	}
	// The negative control of the rule: what GCE refuses, it refuses.
	for _, bad := range []string{"Wsrm-1", "1wsrm", "wsrm-", "wsrm_1", strings.Repeat("a", 64)} {
		if gceImageName.MatchString(bad) && len(bad) <= 63 || vmimage.ValidGCEName(bad) {
			t.Errorf("%q passed as a GCE name", bad)
		}
	}
}

// Each bad input is refused naming its key, so that a flag or a stack key
// can be named.
func TestBadImageInputsAreRefusedNamingTheKey(t *testing.T) {
	for key, change := range map[string]func(*vmimage.Inputs){
		vmimage.KeyFamily:        func(in *vmimage.Inputs) { in.Family = "w" + strings.Repeat("x", vmimage.MaxFamilyLength) },
		vmimage.KeyOS:            func(in *vmimage.Inputs) { in.OS = "macos" },
		vmimage.KeyOSVersion:     func(in *vmimage.Inputs) { in.OSVersion = "Server 2022" },
		vmimage.KeyRunnerVersion: func(in *vmimage.Inputs) { in.RunnerVersion = "" },
		vmimage.KeyAgentVersion:  func(in *vmimage.Inputs) { in.AgentVersion = "0.1.0\nos=linux" },
		vmimage.KeyRunnerConfig:  func(in *vmimage.Inputs) { in.RunnerConfig = nil },
		vmimage.KeyFile:          func(in *vmimage.Inputs) { in.Files = map[string][]byte{"a=b": nil} },
	} {
		in := inputs()
		change(&in)
		_, err := vmimage.Name(in)
		var ie *vmimage.InputError
		if !errors.As(err, &ie) || ie.Key != key {
			t.Errorf("%s: %v, want an error naming %s", key, err, key)
		}
	}
}

func TestGroupTagsAreTheOSAndItsVersionOrTheDeclaredOnes(t *testing.T) {
	tags, err := vmimage.GroupTags(vmimage.OSWindows, "2022", nil)
	if err != nil || strings.Join(tags, ",") != "windows,windows-2022" {
		t.Fatalf("default tags %v, %v", tags, err)
	}
	tags, err = vmimage.GroupTags(vmimage.OSWindows, "2022", []string{"shared-windows", "windows-2022", "windows-medium", " windows-2022 "})
	if err != nil || strings.Join(tags, ",") != "shared-windows,windows-2022,windows-medium" {
		t.Fatalf("declared tags %v, %v", tags, err)
	}
	// A version tag that names another Windows version than the image's.
	_, err = vmimage.GroupTags(vmimage.OSWindows, "2022", []string{"windows", "windows-1809"})
	var ie *vmimage.InputError
	if !errors.As(err, &ie) || ie.Key != vmimage.TagsKey || !strings.Contains(err.Error(), "windows-1809") || !strings.Contains(err.Error(), vmimage.KeyOSVersion+" is 2022") {
		t.Fatalf("windows-1809 on a 2022 image: %v", err)
	}
	for _, bad := range [][]string{{""}, {"a,b"}} {
		if _, err := vmimage.GroupTags(vmimage.OSWindows, "2022", bad); !errors.As(err, &ie) || ie.Key != vmimage.TagsKey {
			t.Errorf("tags %q: %v", bad, err)
		}
	}
	if _, err := vmimage.GroupTags("macos", "15", nil); !errors.As(err, &ie) || ie.Key != vmimage.KeyOS {
		t.Errorf("os macos: %v", err)
	}
}
