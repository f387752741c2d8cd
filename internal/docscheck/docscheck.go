// Package docscheck holds the documentation to the code it describes: every
// command in a fenced shell block of README.md and docs/ is checked against
// its real consumer (a make target against the Makefile, a repository path
// against the tree, a fleet command against the fleet CLI's command tree,
// given by cmd/fleet's test), every relative link of README.md,
// ARCHITECTURE.md and docs/ must resolve to a file (and to a heading, when
// it names one), every page under docs/ must be reachable by links from
// README.md, and the reference pages must list every field of their CRD
// (reference.go). Each problem names its file and line.
//
// It reads files and nothing else: no network, no process, no build.
package docscheck

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"
)

// Problem is one thing a document says that the repository does not hold.
type Problem struct {
	File string // slash-separated, relative to the repository root
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// Command is one shell command of a fenced code block: its words, with
// environment assignments and quotes removed.
type Command struct {
	File string
	Line int
	Args []string
}

func (c Command) String() string { return strings.Join(c.Args, " ") }

// Link is a relative link of a document.
type Link struct {
	File   string
	Line   int
	Target string
}

// Doc is a markdown file, its path relative to the repository root.
type Doc struct {
	Path string
	Src  []byte
}

// Files are the documents the check reads: README.md, ARCHITECTURE.md and
// every markdown file under docs/, in path order.
func Files(root string) ([]Doc, error) {
	var out []Doc
	for _, p := range []string{"README.md", "ARCHITECTURE.md"} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return nil, err
		}
		out = append(out, Doc{p, b})
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, Doc{filepath.ToSlash(rel), b})
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// shellInfo are the info strings of the fenced blocks whose lines are
// commands; console and shell-session blocks hold commands after "$ ".
var shellInfo = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "shell-session": true}

// Commands returns the commands of d's fenced shell blocks.
func Commands(d Doc) []Command {
	var out []Command
	lines := strings.Split(string(d.Src), "\n")
	for i := 0; i < len(lines); i++ {
		fence, info, ok := openFence(lines[i])
		if !ok {
			continue
		}
		prompt := info == "console" || info == "shell-session"
		shell := shellInfo[info]
		i++
		for ; i < len(lines) && !closesFence(lines[i], fence); i++ {
			if !shell {
				continue
			}
			start := i
			line := strings.TrimSpace(lines[i])
			if prompt {
				if !strings.HasPrefix(line, "$ ") {
					continue
				}
				line = strings.TrimPrefix(line, "$ ")
			}
			for strings.HasSuffix(line, `\`) && i+1 < len(lines) && !closesFence(lines[i+1], fence) {
				i++
				line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
			}
			for _, words := range split(line) {
				if len(words) > 0 {
					out = append(out, Command{d.Path, start + 1, words})
				}
			}
		}
	}
	return out
}

// openFence reports whether line opens a fenced code block, with the fence
// and the first word of its info string.
func openFence(line string) (fence, info string, ok bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return "", "", false
	}
	for _, c := range []string{"```", "~~~"} {
		if strings.HasPrefix(t, c) {
			n := len(t) - len(strings.TrimLeft(t, c[:1]))
			info := strings.Fields(strings.TrimSpace(t[n:]) + " ")
			first := ""
			if len(info) > 0 {
				first = strings.ToLower(info[0])
			}
			return t[:n], first, true
		}
	}
	return "", "", false
}

func closesFence(line, fence string) bool {
	t := strings.TrimSpace(line)
	return strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == ""
}

// split cuts a shell line into its commands (at |, &&, ||, ; and a
// comment) and each command into words: quotes removed, a $(…) kept as one
// word, leading VAR=value assignments and sudo, env, time dropped.
func split(line string) [][]string {
	var cmds [][]string
	var words []string
	var w strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	end := func() {
		flush()
		cmds = append(cmds, trimPrefixWords(words))
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			w.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			depth, j := 0, i+1
			for ; j < len(line); j++ {
				if line[j] == '(' {
					depth++
				} else if line[j] == ')' {
					depth--
					if depth == 0 {
						break
					}
				}
			}
			w.WriteString(line[i:min(j+1, len(line))])
			inWord = true
			i = j
		case c == '#' && !inWord:
			end()
			return cmds
		case c == '|' || c == ';' || c == '&':
			end()
			if i+1 < len(line) && (line[i+1] == '|' || line[i+1] == '&') {
				i++
			}
		case c == ' ' || c == '\t':
			flush()
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	end()
	return cmds
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func trimPrefixWords(words []string) []string {
	for len(words) > 0 && (assignment.MatchString(words[0]) || words[0] == "sudo" || words[0] == "env" || words[0] == "time") {
		words = words[1:]
	}
	return words
}

// Links returns d's relative links: inline links and link reference
// definitions outside code, with their line.
func Links(d Doc) []Link {
	var out []Link
	lines := strings.Split(string(d.Src), "\n")
	for i := 0; i < len(lines); i++ {
		if fence, _, ok := openFence(lines[i]); ok {
			for i++; i < len(lines) && !closesFence(lines[i], fence); i++ {
			}
			continue
		}
		line := codeSpan.ReplaceAllString(lines[i], "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refDefinition.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			t = strings.Trim(t, "<>")
			if u, err := url.Parse(t); err == nil && u.Scheme != "" {
				continue
			}
			out = append(out, Link{d.Path, i + 1, t})
		}
	}
	return out
}

var (
	codeSpan      = regexp.MustCompile("`[^`]*`")
	inlineLink    = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refDefinition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
)

// Anchors are the heading anchors GitHub gives d's headings.
func Anchors(d Doc) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines := strings.Split(string(d.Src), "\n")
	for i := 0; i < len(lines); i++ {
		if fence, _, ok := openFence(lines[i]); ok {
			for i++; i < len(lines) && !closesFence(lines[i], fence); i++ {
			}
			continue
		}
		t := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(t, "#") {
			continue
		}
		h := strings.TrimLeft(t, "#")
		if len(t)-len(h) > 6 || (h != "" && h[0] != ' ') {
			continue
		}
		s := Slug(h)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var linkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// Slug is the anchor GitHub makes of a heading: its text lower-cased,
// punctuation dropped, spaces turned into hyphens.
func Slug(heading string) string {
	h := linkText.ReplaceAllString(strings.TrimSpace(heading), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// MakeTargets reads the targets a Makefile defines.
func MakeTargets(makefile []byte) map[string]bool {
	out := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(makefile))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '\t' || line[0] == '#' || line[0] == '.' {
			continue
		}
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(rest, "=") || strings.ContainsAny(name, " \t$=?+") {
			continue
		}
		out[name] = true
	}
	return out
}

// Checker checks documents against one repository.
type Checker struct {
	// Root is the repository's root directory.
	Root string
	// Targets are the Makefile's targets.
	Targets map[string]bool
	// Pending are link targets (root-relative) that another change adds:
	// a link to one is not a problem while it does not exist, and the
	// entry is one once it does (remove it then).
	Pending map[string]string
	// top are the root's entries a command word may name: every file and
	// directory but hidden ones and those .gitignore names.
	top map[string]bool
}

// New reads the Makefile and the root's entries of the repository at root.
func New(root string) (*Checker, error) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, err
	}
	c := &Checker{Root: root, Targets: MakeTargets(mk), top: map[string]bool{}}
	ignored := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "/") {
				ignored[strings.Trim(l, "/")] = true
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") && !ignored[e.Name()] {
			c.top[e.Name()] = true
		}
	}
	return c, nil
}

// Check runs every check but the fleet commands' on docs.
func (c *Checker) Check(docs []Doc) []Problem {
	var out []Problem
	for _, d := range docs {
		for _, cmd := range Commands(d) {
			out = append(out, c.checkCommand(cmd)...)
		}
		for _, l := range Links(d) {
			if msg := c.checkLink(l); msg != "" {
				out = append(out, Problem{l.File, l.Line, msg})
			}
		}
	}
	out = append(out, c.Unreachable(docs)...)
	for p, why := range c.Pending {
		if c.exists(p) {
			out = append(out, Problem{p, 1, fmt.Sprintf("exists now: remove it from the check's pending links (%s)", why)})
		}
	}
	return out
}

// FleetCommands are the docs' commands that run the fleet CLI, without the
// program's name.
func FleetCommands(docs []Doc) []Command {
	var out []Command
	for _, d := range docs {
		for _, cmd := range Commands(d) {
			if isFleet(cmd.Args[0]) {
				out = append(out, Command{cmd.File, cmd.Line, cmd.Args[1:]})
			}
		}
	}
	return out
}

func isFleet(word string) bool {
	return word == "fleet" || path.Base(word) == "fleet" && path.Dir(word) == "bin"
}

func (c *Checker) checkCommand(cmd Command) []Problem {
	var out []Problem
	bad := func(format string, args ...any) {
		out = append(out, Problem{cmd.File, cmd.Line, fmt.Sprintf("`%s`: ", cmd) + fmt.Sprintf(format, args...)})
	}
	if cmd.Args[0] == "make" {
		for _, a := range cmd.Args[1:] {
			if strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
				continue
			}
			if !c.Targets[a] {
				bad("the Makefile has no target %q (targets: %s)", a, strings.Join(sortedKeys(c.Targets), ", "))
			}
		}
	}
	for _, a := range cmd.Args {
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
			a = v
		}
		if p, ok := c.repoPath(a); ok && !c.exists(p) {
			bad("%s does not exist in the repository", p)
		}
	}
	return out
}

// repoPath reports whether word names a path in the repository: its first
// element is one of the root's entries and it holds no placeholder or
// pattern.
func (c *Checker) repoPath(word string) (string, bool) {
	if strings.ContainsAny(word, "<>*{}$?[]…") || strings.Contains(word, "...") || strings.Contains(word, "://") {
		return "", false
	}
	p := strings.TrimPrefix(word, "./")
	first, _, _ := strings.Cut(p, "/")
	if !c.top[first] {
		return "", false
	}
	return path.Clean(p), true
}

func (c *Checker) exists(p string) bool {
	_, err := os.Stat(filepath.Join(c.Root, filepath.FromSlash(p)))
	return err == nil
}

// resolve returns the root-relative path and anchor a link of file
// points to.
func resolve(file, target string) (p, anchor string) {
	p, anchor, _ = strings.Cut(target, "#")
	p, _, _ = strings.Cut(p, "?")
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	if p == "" {
		return file, anchor
	}
	return path.Clean(path.Join(path.Dir(file), p)), anchor
}

func (c *Checker) checkLink(l Link) string {
	p, anchor := resolve(l.File, l.Target)
	if p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Sprintf("link %q leaves the repository", l.Target)
	}
	if !c.exists(p) {
		if _, ok := c.Pending[p]; ok {
			return ""
		}
		return fmt.Sprintf("link %q: %s does not exist", l.Target, p)
	}
	if anchor == "" || !strings.HasSuffix(p, ".md") {
		return ""
	}
	src, err := os.ReadFile(filepath.Join(c.Root, filepath.FromSlash(p)))
	if err != nil {
		return fmt.Sprintf("link %q: %v", l.Target, err)
	}
	if !Anchors(Doc{p, src})[anchor] {
		return fmt.Sprintf("link %q: %s has no heading with anchor #%s", l.Target, p, anchor)
	}
	return ""
}

// Unreachable returns a problem for every page under docs/ that no chain of
// links from README.md reaches. A link to a directory reaches its
// README.md.
func (c *Checker) Unreachable(docs []Doc) []Problem {
	byPath := map[string]Doc{}
	for _, d := range docs {
		byPath[d.Path] = d
	}
	reached := map[string]bool{"README.md": true}
	todo := []string{"README.md"}
	for len(todo) > 0 {
		d, ok := byPath[todo[0]]
		todo = todo[1:]
		if !ok {
			continue
		}
		for _, l := range Links(d) {
			p, _ := resolve(d.Path, l.Target)
			if !strings.HasSuffix(p, ".md") {
				p = path.Join(p, "README.md")
			}
			if !reached[p] {
				reached[p] = true
				todo = append(todo, p)
			}
		}
	}
	var out []Problem
	for _, d := range docs {
		if strings.HasPrefix(d.Path, "docs/") && !reached[d.Path] {
			out = append(out, Problem{d.Path, 1, "no chain of links from README.md reaches this page: link it from docs/README.md or a page it links"})
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Pending are the pages another branch adds, linked before they land here.
var Pending = map[string]string{}
