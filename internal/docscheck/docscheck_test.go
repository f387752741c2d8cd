package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The repository's own documents: every make target exists, every path a
// command or link names exists, every relative link resolves (to its
// heading too), and every page under docs/ is reachable from README.md.
// The fleet commands are checked against the real command tree by
// cmd/fleet's TestDocsFleetCommandsExist.
func TestTheRepositorysDocsHoldTogether(t *testing.T) {
	c, err := New("../..")
	if err != nil {
		t.Fatal(err)
	}
	c.Pending = Pending
	docs, err := Files("../..")
	if err != nil {
		t.Fatal(err)
	}
	var cmds, links int
	for _, d := range docs {
		cmds += len(Commands(d))
		links += len(Links(d))
	}
	// A check that read nothing would pass: the README alone has a dozen
	// commands and links.
	if len(docs) < 3 || cmds < 10 || links < 10 || !c.Targets["test"] || !c.Targets["up"] {
		t.Fatalf("read %d documents, %d commands, %d links, make targets %v: the check missed the tree", len(docs), cmds, links, sortedKeys(c.Targets))
	}
	for _, p := range c.Check(docs) {
		t.Error(p)
	}
}

// writeRepo makes a repository with a Makefile, a chart file, README.md
// and the given docs.
func writeRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	all := map[string]string{
		"Makefile":                      ".PHONY: up\nup: build ## the main job\n\tbin/fleet up\n\nVAR := x\nbuild:\n\tgo build\n",
		".gitignore":                    "/bin/\n",
		"charts/manifests/install.yaml": "kind: List\n",
		"ARCHITECTURE.md":               "# Architecture\n",
	}
	for k, v := range files {
		all[k] = v
	}
	for p, src := range all {
		f := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func check(t *testing.T, root string) []string {
	t.Helper()
	c, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range c.Check(docs) {
		out = append(out, p.String())
	}
	return out
}

const goodReadme = "# x\n\n```sh\nmake up   # the main job\nkubectl apply --server-side -f charts/manifests/install.yaml\n```\n\n" +
	"See [the docs](docs/README.md) and [up](#x).\n"

// The negative control: the same repository passes, and each mistake a
// page can make fails with the file and line that make it.
func TestEachMistakeFailsNamingFileAndLine(t *testing.T) {
	good := map[string]string{
		"README.md":             goodReadme,
		"docs/README.md":        "# Docs\n\n- [Install](tasks/install.md#helm)\n- [Up](../README.md#x)\n",
		"docs/tasks/install.md": "# Install\n\n## Helm\n\n```console\n$ make build\nmake nothing   (output, not a command)\n```\n",
	}
	if got := check(t, writeRepo(t, good)); len(got) != 0 {
		t.Fatalf("a good repository: %v", got)
	}
	for _, tc := range []struct {
		name, file, src, want string
	}{
		{"unknown make target", "docs/tasks/install.md", "# Install\n\n## Helm\n\n```sh\nmake upp\n```\n",
			`docs/tasks/install.md:6: ` + "`make upp`" + `: the Makefile has no target "upp"`},
		{"missing path in a command", "docs/tasks/install.md", "# Install\n\n## Helm\n\n```bash\nkubectl apply -f \\\n  charts/manifests/instal.yaml\n```\n",
			"docs/tasks/install.md:6: `kubectl apply -f charts/manifests/instal.yaml`: charts/manifests/instal.yaml does not exist"},
		{"broken link", "docs/README.md", "# Docs\n\n- [Install](tasks/instal.md) [Install](tasks/install.md)\n",
			`docs/README.md:3: link "tasks/instal.md": docs/tasks/instal.md does not exist`},
		{"broken anchor", "docs/README.md", "# Docs\n\n- [Install](tasks/install.md#helmm)\n",
			`docs/README.md:3: link "tasks/install.md#helmm": docs/tasks/install.md has no heading with anchor #helmm`},
		{"link out of the repository", "docs/README.md", "# Docs\n\n[x](../../etc/passwd) [Install](tasks/install.md)\n",
			`docs/README.md:3: link "../../etc/passwd" leaves the repository`},
		{"unreachable page", "docs/README.md", "# Docs\n\nnothing linked\n",
			"docs/tasks/install.md:1: no chain of links from README.md reaches this page"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range good {
				files[k] = v
			}
			files[tc.file] = tc.src
			got := check(t, writeRepo(t, files))
			if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
				t.Errorf("got %q, want one problem starting %q", got, tc.want)
			}
		})
	}
}

// A pending link (a page another change adds) is no problem while it is
// missing, and is one once the page exists.
func TestPendingLinksMustBeDroppedOnceThePageExists(t *testing.T) {
	files := map[string]string{"README.md": "# x\n\n[later](docs/operations/later.md)\n"}
	c, _ := New(writeRepo(t, files))
	c.Pending = map[string]string{"docs/operations/later.md": "another branch"}
	docs, _ := Files(c.Root)
	if got := c.Check(docs); len(got) != 0 {
		t.Fatalf("pending and missing: %v", got)
	}
	files["docs/operations/later.md"] = "# Later\n"
	c2, _ := New(writeRepo(t, files))
	c2.Pending = c.Pending
	docs, _ = Files(c2.Root)
	got := c2.Check(docs)
	if len(got) != 1 || !strings.Contains(got[0].String(), "docs/operations/later.md:1: exists now") {
		t.Fatalf("pending and present: %v", got)
	}
}

func TestCommandsAreCutIntoWords(t *testing.T) {
	d := Doc{"x.md", []byte("text\n```sh\n# a comment\nKUBEBUILDER_ASSETS=$(hack/tools.sh envtest) go test ./x/ && make up # runs\n" +
		"fleet rotate --provider gce \\\n  --image 'a b' | tee log; sudo make down\n```\n```yaml\nmake: no\n```\n" +
		"```console\n$ fleet status -o json\nNAME READY\n```\n")}
	var got []string
	for _, c := range Commands(d) {
		got = append(got, fmt.Sprintf("%s@%d", strings.Join(c.Args, "|"), c.Line))
	}
	want := []string{"go|test|./x/@4", "make|up@4", "fleet|rotate|--provider|gce|--image|a b@5", "tee|log@5", "make|down@5", "fleet|status|-o|json@12"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestSlugsAreGitHubs(t *testing.T) {
	for in, want := range map[string]string{
		"The two commands":                      "the-two-commands",
		"Managers on VMs: `fleet rotate`, `gc`": "managers-on-vms-fleet-rotate-gc",
		"Job settings and `configOverride`":     "job-settings-and-configoverride",
		"[Link](x.md) text":                     "link-text",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
	a := Anchors(Doc{"x.md", []byte("# A\n## A\n```\n# not a heading\n```\n#nope\n")})
	if !reflect.DeepEqual(a, map[string]bool{"a": true, "a-1": true}) {
		t.Errorf("anchors %v", a)
	}
}

// The reference pages list every field of their CRD, and no field it does
// not have: a field added to the API without a row, or a row left behind
// by a rename, fails here with the row to add or the line to fix.
func TestTheReferenceListsEveryCRDField(t *testing.T) {
	for page, crd := range map[string]string{
		"docs/reference/runnerset.md":   "runnerset/crds/runnerfleet.dev_runnersets.yaml",
		"docs/reference/runnerclass.md": "runnerset/crds/runnerfleet.dev_runnerclasses.yaml",
	} {
		src, err := os.ReadFile(filepath.Join("../..", page))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join("../..", crd))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(ReferenceFields(Doc{page, src})); n < 20 {
			t.Errorf("%s lists %d fields: the check read no table", page, n)
		}
		for _, p := range CheckReference(Doc{page, src}, y, ReferenceDepth) {
			t.Error(p)
		}
	}
}

const smallCRD = `
spec:
  versions:
  - name: v1
    schema:
      openAPIV3Schema:
        properties:
          spec:
            properties:
              a: {type: string, description: A is kept.}
              b:
                type: array
                items:
                  type: object
                  properties:
                    c: {type: integer, default: 3, description: C is new.}
`

// The negative control: a field the page lacks and a row the CRD lacks
// each fail, the first with its row, the second with its line.
func TestTheReferenceCheckNamesMissingAndStaleRows(t *testing.T) {
	doc := Doc{"docs/reference/x.md", []byte("# X\n\n| field | type | default | description |\n| --- | --- | --- | --- |\n| `spec.a` | string | | A. |\n| `spec.b` | []object | | B. |\n| `spec.z` | string | | gone |\n")}
	var got []string
	for _, p := range CheckReference(doc, []byte(smallCRD), ReferenceDepth) {
		got = append(got, p.String())
	}
	want := []string{
		"docs/reference/x.md:1: the source has spec.b[].c, which the page does not list; add the row\n| `spec.b[].c` | integer | `3` | C is new. |",
		"docs/reference/x.md:7: the source has no spec.z (removed or renamed?): fix or remove the row",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
