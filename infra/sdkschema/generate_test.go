package sdkschema

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed infra/internal/sdk is what the generator writes from the
// pinned SDKs today: a hand edit, or a change to Resources or the
// generator without make generate, fails here as well as in make verify.
func TestGeneratedPackagesAreUpToDate(t *testing.T) {
	tmp := t.TempDir()
	if err := Generate(context.Background(), tmp, "github.com/runnerfleet/runnerfleet/infra/internal/sdk"); err != nil {
		t.Fatal(err)
	}
	const committed = "../internal/sdk"
	seen := map[string]bool{}
	err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(tmp, p)
		seen[rel] = true
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(committed, rel))
		if err != nil {
			t.Errorf("%s is generated but not committed: run make generate", rel)
			return nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the generator writes: run make generate", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(committed, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, "zz_generated.go") {
			return err
		}
		rel, _ := filepath.Rel(committed, p)
		if !seen[rel] {
			t.Errorf("%s is committed but no longer generated: run make generate", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// What the generator reads from the SDKs' constructors, checked on
// resources whose SDK source says so: required inputs, constants, secret
// inputs and outputs, aliases, deprecations.
func TestGeneratedFacts(t *testing.T) {
	tmp := t.TempDir()
	if err := Generate(context.Background(), tmp, "x"); err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(tmp, rel, "zz_generated.go"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for rel, wants := range map[string][]string{
		"aws/eks":            {`Required: []string{"roleArn", "vpcConfig"}`, "CertificateAuthority       pulumix.Output[ClusterCertificateAuthority]"},
		"aws/s3":             {`Aliases: []string{"aws:s3/bucket:Bucket"}`},
		"aws/ec2":            {`"vpc": "vpc is deprecated. Use domain instead."`, "// Deprecated: vpc is deprecated. Use domain instead."},
		"kubernetes/core/v1": {`SecretInputs:  []string{"data", "stringData"}`, `SecretOutputs: []string{"data", "stringData"}`, `Consts:        map[string]string{"apiVersion": "v1", "kind": "Secret"}`},
		"kubernetes/helm/v3": {`Consts:   map[string]string{"compat": "true"}`},
		"kubernetes/apps/v1": {`"kubernetes:extensions/v1beta1:Deployment"`},
	} {
		src := read(rel)
		for _, w := range wants {
			if !strings.Contains(src, w) {
				t.Errorf("%s: no %s", rel, w)
			}
		}
	}
}
