package oracle

import (
	"bytes"
	"os"
	"slices"
	"testing"
)

// The snapshot the controller embeds is the one the pinned gitlab-runner
// source gives now: a new pin without make generate fails here.
func TestEmbeddedSnapshotIsTheOneThePinnedSourceGives(t *testing.T) {
	sn, err := loadSchema(t).LoadSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := sn.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, embeddedSnapshot) {
		t.Fatal("snapshot.json differs from what gitlab-runner's source gives: run make generate")
	}
}

// A decoded snapshot judges configs as the schema read from source does.
func TestEmbeddedSchemaChecksLikeTheLoadedOne(t *testing.T) {
	loaded := loadSchema(t)
	sn, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if sn.Version != GitLabRunnerVersion {
		t.Fatalf("embedded snapshot is of %s, the oracle pins %s: run make generate", sn.Version, GitLabRunnerVersion)
	}
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	bad := []byte("[[runners]]\nname = 1\nexecutor = \"kubernetes\"\n[runners.kubernetes]\nnamespac = \"x\"\npoll_timeout = \"3m\"\n")
	inputs := [][]byte{bad}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		inputs = append(inputs, readTestdata(t, e.Name()))
	}
	for i, in := range inputs {
		a, b := problemStrings(t, loaded.Check(in)), problemStrings(t, sn.Schema.Check(in))
		if !slices.Equal(a, b) {
			t.Errorf("input %d: loaded schema says %q, embedded says %q", i, a, b)
		}
	}
	if len(problemStrings(t, sn.Schema.Check(bad))) != 3 {
		t.Errorf("the embedded schema missed a problem of %s: %q", bad, problemStrings(t, sn.Schema.Check(bad)))
	}
}

func TestFeatureFlagsAreReadFromGitLabRunnersSource(t *testing.T) {
	sn, err := loadSchema(t).LoadSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"FF_USE_ADVANCED_POD_SPEC_CONFIGURATION", "FF_PRINT_POD_EVENTS", "FF_DISABLE_AUTOMATIC_TOKEN_ROTATION", "FF_TIMESTAMPS"} {
		if _, ok := sn.FeatureFlag(name); !ok {
			t.Errorf("feature flag %s not found among %d", name, len(sn.FeatureFlags))
		}
	}
	if _, ok := sn.FeatureFlag("FF_NOT_A_FLAG"); ok {
		t.Error("FF_NOT_A_FLAG found")
	}
	if ff, _ := sn.FeatureFlag("FF_USE_FASTZIP"); !ff.Deprecated {
		t.Error("FF_USE_FASTZIP is deprecated in runner 19.4's source, read as not")
	}
	if len(sn.FeatureFlags) < 40 {
		t.Errorf("only %d feature flags read", len(sn.FeatureFlags))
	}
}
