package checkout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRootIsTheModuleAboveTheWorkingDirectory(t *testing.T) {
	got, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	want, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("Root() = %s, want %s", got, want)
	}
	if _, err := os.Stat(filepath.Join(got, "hack", "tools.sh")); err != nil {
		t.Errorf("the checkout has no hack/tools.sh: %v", err)
	}
}

func TestRootSkipsAStartOutsideACheckoutAndAnotherModule(t *testing.T) {
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/"+filepath.Base(Module)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(other, "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Root(deep); err == nil || !strings.Contains(err.Error(), Module) {
		t.Errorf("Root below another module's go.mod: %v, want an error naming %s", err, Module)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Root(deep, here)
	if err != nil || got != filepath.Dir(filepath.Dir(here)) {
		t.Errorf("Root(outside, inside) = %q, %v; want the checkout of the second start", got, err)
	}
}
