// Package oracle checks gitlab-runner config.toml files against the config
// structs of a pinned gitlab-runner release.
//
// gitlab-runner decodes config.toml with github.com/BurntSushi/toml into
// common.Config and silently ignores keys it does not know, so a typo in a
// generated config (node_selectors instead of node_selector) is a setting that
// simply never takes effect. This package reads gitlab-runner's own Go source
// (downloaded through the Go module proxy, never compiled: its dependencies do
// not build here) and walks the struct fields of common.Config by their toml
// tags, following BurntSushi/toml's decoding rules. The resulting Schema can
// then tell whether a config.toml would be understood by that release: every
// key known, every value of a type the field can be decoded from.
package oracle

import (
	"context"
	"errors"
	"fmt"
	"github.com/runnerfleet/runnerfleet/internal/gomod"
	"github.com/runnerfleet/runnerfleet/internal/suggest"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"
)

const (
	// GitLabRunnerModule is the module path of gitlab-runner.
	GitLabRunnerModule = "gitlab.com/gitlab-org/gitlab-runner"
	// GitLabRunnerVersion is the gitlab-runner module version (runner 19.4)
	// whose config structs the oracle checks against.
	GitLabRunnerVersion = "v1.11.1-0.20260903214710-fc1f1862bd91"
	// GitLabRunnerRelease is the runner release of GitLabRunnerVersion, for messages.
	GitLabRunnerRelease = "19.4"
)

// rootPackage and rootType name the struct config.toml is decoded into.
const (
	rootPackage = GitLabRunnerModule + "/common"
	rootType    = "Config"
)

// Kind is the kind of TOML value a Go type accepts.
type Kind uint8

const (
	// Invalid marks a Go type BurntSushi/toml cannot decode into (channels,
	// functions, non-empty interfaces, maps with non-string keys); any value
	// given for it makes gitlab-runner fail to load the config.
	Invalid Kind = iota
	String
	Bool
	Int   // signed integers; Type.Bits says how wide
	Uint  // unsigned integers; Type.Bits says how wide
	Float // float32 and float64; integers are accepted too
	// Duration is time.Duration: a string such as "3h" or an integer of
	// nanoseconds.
	Duration
	Struct // a TOML table with known keys
	Map    // a TOML table with arbitrary keys, values of Type.Elem
	Slice  // a TOML array (or array of tables) of Type.Elem
	Array  // a TOML array of exactly Type.Len elements of Type.Elem
	Any    // interface{} / any: every value is accepted
	// Opaque is a type the oracle cannot see into: it has its own
	// UnmarshalTOML or UnmarshalText method, or it comes from a package outside
	// the gitlab-runner module. Every value is accepted; Type.Reason says why.
	Opaque
)

var kindNames = [...]string{
	Invalid:  "invalid",
	String:   "string",
	Bool:     "bool",
	Int:      "int",
	Uint:     "uint",
	Float:    "float",
	Duration: "duration",
	Struct:   "struct",
	Map:      "map",
	Slice:    "slice",
	Array:    "array",
	Any:      "any",
	Opaque:   "opaque",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Type is one node of the schema: the shape of values a Go type accepts when
// BurntSushi/toml decodes into it. Pointers are transparent (*T is T). The
// graph may be cyclic for recursive types. A Type must not be modified.
type Type struct {
	Kind Kind
	// Name is the Go type's qualified name ("common.KubernetesConfig",
	// "time.Duration"); empty for unnamed types such as []string.
	Name string
	// Bits is the width of Int, Uint and Float kinds; 0 for int and uint.
	Bits int
	// Elem is the value type of a Map and the element type of a Slice or Array.
	Elem *Type
	// Len is the length of an Array.
	Len int
	// Fields are the TOML keys of a Struct, in Go declaration order after
	// embedded structs are inlined.
	Fields []*Field
	// Open is set on a Struct that embeds a struct from outside the module:
	// its keys are not all known, so unknown keys are not reported.
	Open bool
	// Reason explains an Opaque, Invalid or Open type.
	Reason string

	byKey map[string]*Field
}

// Field is one TOML key of a struct.
type Field struct {
	// Key is the TOML key: the toml tag's name, or the Go field name for
	// untagged fields (matched case-insensitively, as BurntSushi/toml does).
	Key string
	// GoName is the Go field name.
	GoName string
	// Tagged reports whether the key comes from a toml tag.
	Tagged bool
	Type   *Type
}

// String describes the type for messages: its name, or its shape.
func (t *Type) String() string {
	if t.Name != "" {
		return t.Name
	}
	switch t.Kind {
	case Int, Uint:
		if t.Bits == 0 {
			return t.Kind.String()
		}
		return t.Kind.String() + strconv.Itoa(t.Bits)
	case Float:
		return "float" + strconv.Itoa(t.Bits)
	case Map:
		return "map[string]" + t.Elem.String()
	case Slice:
		return "[]" + t.Elem.String()
	case Array:
		return "[" + strconv.Itoa(t.Len) + "]" + t.Elem.String()
	case Struct:
		return "struct"
	}
	return t.Kind.String()
}

// Field returns the struct field that BurntSushi/toml decodes the TOML key
// into: the field whose key equals it, else the first whose key matches it
// case-insensitively. It returns nil for unknown keys and non-struct types.
func (t *Type) Field(key string) *Field {
	if t == nil || t.Kind != Struct {
		return nil
	}
	if f, ok := t.byKey[key]; ok {
		return f
	}
	for _, f := range t.Fields {
		if strings.EqualFold(f.Key, key) {
			return f
		}
	}
	return nil
}

// Keys returns the struct's TOML keys, sorted; nil for non-struct types.
func (t *Type) Keys() []string {
	if t == nil || t.Kind != Struct {
		return nil
	}
	keys := make([]string, len(t.Fields))
	for i, f := range t.Fields {
		keys[i] = f.Key
	}
	sort.Strings(keys)
	return keys
}

// Schema is the walked tree of gitlab-runner's common.Config.
type Schema struct {
	// Root is common.Config.
	Root *Type
	// ModuleDir is the gitlab-runner module source directory it was read from.
	ModuleDir string
}

// OpaqueKey is a place in the schema whose values the oracle accepts without
// looking inside.
type OpaqueKey struct {
	// Path is the dotted key path; arrays are transparent and "*" stands for
	// any key of a map ("runners.kubernetes.volumes.nfs").
	Path string
	// Type is the Go type at that path.
	Type string
	// Reason says why it is opaque.
	Reason string
}

var (
	loadMu    sync.Mutex
	loadedDir string
	loaded    *Schema
)

// Load downloads gitlab-runner GitLabRunnerVersion through the Go module proxy
// (the go command's module cache makes that a no-op after the first time) and
// parses its config structs. Both steps are done once per process; a failure
// is not cached, so a later call retries.
func Load(ctx context.Context) (*Schema, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	if loaded != nil {
		return loaded, nil
	}
	if loadedDir == "" {
		dir, err := gomod.Download(ctx, GitLabRunnerModule, GitLabRunnerVersion)
		if err != nil {
			return nil, fmt.Errorf("oracle: %w", err)
		}
		loadedDir = dir
	}
	s, err := LoadDir(loadedDir)
	if err != nil {
		return nil, err
	}
	loaded = s
	return s, nil
}

// LoadDir parses the config structs from gitlab-runner's source in dir, the
// root of an already downloaded module.
func LoadDir(dir string) (*Schema, error) {
	l := newLoader(dir)
	pkg, err := l.pkg(rootPackage)
	if err != nil {
		return nil, fmt.Errorf("oracle: loading gitlab-runner config structs from %s: %w", dir, err)
	}
	if pkg == nil || pkg.types[rootType] == nil {
		return nil, fmt.Errorf("oracle: loading gitlab-runner config structs from %s: no type %s in package %s", dir, rootType, rootPackage)
	}
	root := l.named(pkg, rootType)
	if l.err != nil {
		return nil, fmt.Errorf("oracle: loading gitlab-runner config structs from %s: %w", dir, l.err)
	}
	if root.Kind != Struct {
		return nil, fmt.Errorf("oracle: loading gitlab-runner config structs from %s: common.%s is %s, not a struct", dir, rootType, root.Kind)
	}
	return &Schema{Root: root, ModuleDir: dir}, nil
}

// loader parses packages of the gitlab-runner module on demand and builds
// Types from their declarations.
type loader struct {
	modDir string
	fset   *token.FileSet
	build  build.Context
	pkgs   map[string]*pkgInfo // by import path; nil value: not in the module
	names  map[string]string   // package names, by import path
	namedT map[string]*Type    // named type, by "importpath.Name"
	under  map[string]*Type    // structure of a named type, ignoring its methods
	err    error               // first parse error
}

type pkgInfo struct {
	path    string // import path
	name    string // package clause
	types   map[string]*typeDecl
	methods map[string]map[string]bool // receiver type name -> method names
}

type typeDecl struct {
	spec *ast.TypeSpec
	file *fileInfo
}

type fileInfo struct {
	pkg     *pkgInfo
	imports map[string]string // local package name -> import path
}

func newLoader(dir string) *loader {
	ctx := build.Default
	// gitlab-runner fleets run Linux; pick that variant of per-OS files.
	ctx.GOOS, ctx.GOARCH = "linux", "amd64"
	return &loader{
		modDir: dir,
		fset:   token.NewFileSet(),
		build:  ctx,
		pkgs:   map[string]*pkgInfo{},
		names:  map[string]string{},
		namedT: map[string]*Type{},
		under:  map[string]*Type{},
	}
}

// pkg returns the parsed package with the import path, or nil if the path is
// outside the module (or has no Go files in it). A read or parse error is
// also kept in l.err, so that LoadDir fails even where a caller ignores it.
func (l *loader) pkg(importPath string) (*pkgInfo, error) {
	if p, ok := l.pkgs[importPath]; ok {
		return p, nil
	}
	l.pkgs[importPath] = nil
	p, err := l.parsePkg(importPath)
	if err != nil {
		err = fmt.Errorf("parsing package %s: %w", importPath, err)
		l.setErr(err)
		return nil, err
	}
	if p != nil {
		l.pkgs[importPath] = p
	}
	return p, nil
}

func (l *loader) parsePkg(importPath string) (*pkgInfo, error) {
	rel, ok := l.relDir(importPath)
	if !ok {
		return nil, nil
	}
	dir := filepath.Join(l.modDir, filepath.FromSlash(rel))
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && rel != "" {
			return nil, nil
		}
		return nil, err
	}
	p := &pkgInfo{path: importPath, types: map[string]*typeDecl{}, methods: map[string]map[string]bool{}}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := l.build.MatchFile(dir, name); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(l.fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if p.name == "" {
			p.name = f.Name.Name
		}
		if f.Name.Name != p.name {
			continue // e.g. a stray package main file kept out by a build tag we do not know
		}
		fi := &fileInfo{pkg: p, imports: map[string]string{}}
		for _, imp := range f.Imports {
			ipath, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				continue
			}
			local := ""
			if imp.Name != nil {
				local = imp.Name.Name
			} else {
				local = l.pkgName(ipath)
			}
			if local != "_" && local != "." {
				fi.imports[local] = ipath
			}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				if d.Tok != token.TYPE {
					continue
				}
				for _, s := range d.Specs {
					ts := s.(*ast.TypeSpec)
					p.types[ts.Name.Name] = &typeDecl{spec: ts, file: fi}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					continue
				}
				if recv := receiverName(d.Recv.List[0].Type); recv != "" {
					if p.methods[recv] == nil {
						p.methods[recv] = map[string]bool{}
					}
					p.methods[recv][d.Name.Name] = true
				}
			}
		}
	}
	if p.name == "" {
		return nil, nil
	}
	return p, nil
}

// pkgName returns the package name of an import path: read from the package
// clause for packages in the module, guessed from the path for others.
func (l *loader) pkgName(importPath string) string {
	if name, ok := l.names[importPath]; ok {
		return name
	}
	name := ""
	if rel, ok := l.relDir(importPath); ok {
		dir := filepath.Join(l.modDir, filepath.FromSlash(rel))
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			if ok, err := l.build.MatchFile(dir, n); err != nil || !ok {
				continue
			}
			f, err := parser.ParseFile(l.fset, filepath.Join(dir, n), nil, parser.PackageClauseOnly)
			if err == nil {
				name = f.Name.Name
				break
			}
		}
	}
	if name == "" {
		name = guessPackageName(importPath)
	}
	l.names[importPath] = name
	return name
}

// relDir returns the directory of a module package relative to the module
// root; ok is false for import paths outside the module.
func (l *loader) relDir(importPath string) (rel string, ok bool) {
	if importPath == GitLabRunnerModule {
		return "", true
	}
	rel, ok = strings.CutPrefix(importPath, GitLabRunnerModule+"/")
	return rel, ok
}

// receiverName returns the type name of a method receiver (T, *T, T[P]).
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// guessPackageName guesses the package name of an import outside the module
// from its path; it is only used to name opaque types in messages.
func guessPackageName(importPath string) string {
	base := path.Base(importPath)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		base = path.Base(path.Dir(importPath))
	}
	base = strings.TrimPrefix(base, "go-")
	base = strings.TrimSuffix(strings.TrimSuffix(base, "-go"), ".go")
	if i := strings.IndexAny(base, ".-"); i > 0 {
		base = base[:i]
	}
	return base
}

var unmarshalMethods = []string{"UnmarshalTOML", "UnmarshalText"}

// named returns the Type of the named type declared in p: Opaque if it (or a
// struct it embeds) has an UnmarshalTOML or UnmarshalText method, which
// BurntSushi/toml hands the value to; otherwise its structure.
func (l *loader) named(p *pkgInfo, name string) *Type {
	key := p.path + "." + name
	if t, ok := l.namedT[key]; ok {
		return t
	}
	d := p.types[name]
	if d == nil {
		t := &Type{Kind: Opaque, Name: p.name + "." + name, Reason: "declaration not found in " + p.path}
		l.namedT[key] = t
		return t
	}
	if d.spec.Assign.IsValid() { // type alias: the aliased type, methods and all
		l.namedT[key] = &Type{Kind: Opaque, Name: p.name + "." + name, Reason: "recursive alias"}
		t := l.expr(d.file, d.spec.Type)
		l.namedT[key] = t
		return t
	}
	if m := l.unmarshaler(p, name, map[string]bool{}); m != "" {
		t := &Type{Kind: Opaque, Name: p.name + "." + name, Reason: "decoded by its own " + m + " method"}
		l.namedT[key] = t
		return t
	}
	t := l.structure(p, name)
	l.namedT[key] = t
	return t
}

// unmarshaler returns the name of an UnmarshalTOML or UnmarshalText method
// that the named type has, declared on it or promoted from an embedded field.
func (l *loader) unmarshaler(p *pkgInfo, name string, seen map[string]bool) string {
	key := p.path + "." + name
	if seen[key] {
		return ""
	}
	seen[key] = true
	for _, m := range unmarshalMethods {
		if p.methods[name][m] {
			return m
		}
	}
	d := p.types[name]
	if d == nil {
		return ""
	}
	st, ok := unparen(d.spec.Type).(*ast.StructType)
	if !ok {
		return ""
	}
	for _, f := range st.Fields.List {
		if len(f.Names) != 0 {
			continue
		}
		if ep, en := l.namedRef(d.file, f.Type); ep != nil {
			if m := l.unmarshaler(ep, en, seen); m != "" {
				return m + " (promoted from embedded " + ep.name + "." + en + ")"
			}
		}
	}
	return ""
}

// namedRef resolves a (possibly pointer) type expression naming a type
// declared in the module to its package and name.
func (l *loader) namedRef(f *fileInfo, e ast.Expr) (*pkgInfo, string) {
	e = unparen(e)
	if s, ok := e.(*ast.StarExpr); ok {
		e = unparen(s.X)
	}
	switch x := e.(type) {
	case *ast.Ident:
		if f.pkg.types[x.Name] != nil {
			return f.pkg, x.Name
		}
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			if ipath, ok := f.imports[id.Name]; ok {
				if p, _ := l.pkg(ipath); p != nil && p.types[x.Sel.Name] != nil {
					return p, x.Sel.Name
				}
			}
		}
	}
	return nil, ""
}

// structure returns the structure of the named type declared in p, ignoring
// its own methods (as a type definition `type A B` does with B's methods).
func (l *loader) structure(p *pkgInfo, name string) *Type {
	key := p.path + "." + name
	if t, ok := l.under[key]; ok {
		return t
	}
	qualified := p.name + "." + name
	t := &Type{Name: qualified}
	l.under[key] = t
	d := p.types[name]
	if d == nil {
		t.Kind, t.Reason = Opaque, "declaration not found in "+p.path
		return t
	}
	if d.spec.TypeParams != nil {
		t.Kind, t.Reason = Opaque, "generic type"
		return t
	}
	switch x := unparen(d.spec.Type).(type) {
	case *ast.StructType:
		t.Kind = Struct
		l.fillStruct(t, d.file, x)
		return t
	case *ast.Ident, *ast.SelectorExpr:
		*t = *l.definedFrom(d.file, x)
	default:
		*t = *l.expr(d.file, x)
	}
	t.Name = qualified
	return t
}

// definedFrom returns what a type definition `type A B` gets from B, the type
// named by e: B's structure, but not B's methods.
func (l *loader) definedFrom(f *fileInfo, e ast.Expr) *Type {
	if bp, bn := l.namedRef(f, e); bp != nil {
		if d := bp.types[bn]; d.spec.Assign.IsValid() {
			return l.definedFrom(d.file, d.spec.Type) // through the alias
		}
		return l.structure(bp, bn)
	}
	if sel, ok := unparen(e).(*ast.SelectorExpr); ok && isTimeDuration(f, sel) {
		// BurntSushi/toml parses duration strings for time.Duration itself
		// only; a type defined from it takes integers.
		return &Type{Kind: Int, Bits: 64}
	}
	return l.expr(f, e)
}

func isTimeDuration(f *fileInfo, sel *ast.SelectorExpr) bool {
	id, ok := sel.X.(*ast.Ident)
	return ok && f.imports[id.Name] == "time" && sel.Sel.Name == "Duration"
}

var basicTypes = map[string]Type{
	"string":  {Kind: String},
	"bool":    {Kind: Bool},
	"int":     {Kind: Int},
	"int8":    {Kind: Int, Bits: 8},
	"int16":   {Kind: Int, Bits: 16},
	"int32":   {Kind: Int, Bits: 32},
	"rune":    {Kind: Int, Bits: 32},
	"int64":   {Kind: Int, Bits: 64},
	"uint":    {Kind: Uint},
	"uintptr": {Kind: Uint},
	"uint8":   {Kind: Uint, Bits: 8},
	"byte":    {Kind: Uint, Bits: 8},
	"uint16":  {Kind: Uint, Bits: 16},
	"uint32":  {Kind: Uint, Bits: 32},
	"uint64":  {Kind: Uint, Bits: 64},
	"float32": {Kind: Float, Bits: 32},
	"float64": {Kind: Float, Bits: 64},
	"any":     {Kind: Any},
}

// expr returns the Type of a type expression in file f.
func (l *loader) expr(f *fileInfo, e ast.Expr) *Type {
	switch x := e.(type) {
	case *ast.ParenExpr:
		return l.expr(f, x.X)
	case *ast.StarExpr:
		return l.expr(f, x.X)
	case *ast.Ident:
		if f.pkg.types[x.Name] != nil {
			return l.named(f.pkg, x.Name)
		}
		if b, ok := basicTypes[x.Name]; ok {
			return &b
		}
		return &Type{Kind: Invalid, Name: x.Name, Reason: "BurntSushi/toml cannot decode into " + x.Name}
	case *ast.SelectorExpr:
		id, ok := x.X.(*ast.Ident)
		if !ok {
			return &Type{Kind: Opaque, Reason: "unresolvable type expression"}
		}
		ipath, ok := f.imports[id.Name]
		if !ok {
			return &Type{Kind: Opaque, Name: id.Name + "." + x.Sel.Name, Reason: "type from an unknown package " + id.Name}
		}
		if ipath == "time" && x.Sel.Name == "Duration" {
			return &Type{Kind: Duration, Name: "time.Duration"}
		}
		if p, err := l.pkg(ipath); err != nil {
			l.setErr(err)
		} else if p != nil {
			if p.types[x.Sel.Name] != nil {
				return l.named(p, x.Sel.Name)
			}
			return &Type{Kind: Opaque, Name: p.name + "." + x.Sel.Name, Reason: "declaration not found in " + ipath}
		}
		return &Type{Kind: Opaque, Name: id.Name + "." + x.Sel.Name, Reason: "type from " + ipath + ", outside the gitlab-runner module"}
	case *ast.ArrayType:
		elem := l.expr(f, x.Elt)
		if x.Len == nil {
			return &Type{Kind: Slice, Elem: elem}
		}
		if lit, ok := unparen(x.Len).(*ast.BasicLit); ok && lit.Kind == token.INT {
			if n, err := strconv.Atoi(lit.Value); err == nil {
				return &Type{Kind: Array, Elem: elem, Len: n}
			}
		}
		// A constant we do not evaluate: check elements, not the length.
		return &Type{Kind: Slice, Elem: elem}
	case *ast.MapType:
		key := l.expr(f, x.Key)
		if key.Kind != String && key.Kind != Any {
			return &Type{Kind: Invalid, Reason: "BurntSushi/toml only decodes into maps with string keys, not " + key.String()}
		}
		return &Type{Kind: Map, Elem: l.expr(f, x.Value)}
	case *ast.InterfaceType:
		if x.Methods == nil || len(x.Methods.List) == 0 {
			return &Type{Kind: Any}
		}
		return &Type{Kind: Invalid, Reason: "BurntSushi/toml only decodes into empty interfaces"}
	case *ast.StructType:
		t := &Type{Kind: Struct}
		l.fillStruct(t, f, x)
		return t
	case *ast.IndexExpr, *ast.IndexListExpr:
		return &Type{Kind: Opaque, Reason: "instantiated generic type"}
	case *ast.ChanType:
		return &Type{Kind: Invalid, Reason: "BurntSushi/toml cannot decode into a channel"}
	case *ast.FuncType:
		return &Type{Kind: Invalid, Reason: "BurntSushi/toml cannot decode into a func"}
	}
	return &Type{Kind: Opaque, Reason: fmt.Sprintf("unsupported type expression %T", e)}
}

func (l *loader) setErr(err error) {
	if l.err == nil {
		l.err = err
	}
}

func unparen(e ast.Expr) ast.Expr {
	for {
		p, ok := e.(*ast.ParenExpr)
		if !ok {
			return e
		}
		e = p.X
	}
}

// candidate is a struct field found while collecting a struct's keys, as
// BurntSushi/toml's typeFields does.
type candidate struct {
	key    string
	goName string
	tagged bool
	index  []int
	file   *fileInfo
	typ    ast.Expr
}

// embedded is a struct type whose fields are inlined into the struct being
// filled.
type embedded struct {
	key   string // identity for the visited set
	file  *fileInfo
	st    *ast.StructType
	index []int
}

// fillStruct collects the TOML keys of a struct the way BurntSushi/toml's
// typeFields does: breadth first through untagged embedded structs, unexported
// fields and `toml:"-"` skipped, the shallowest (then the only tagged) field
// winning each name, ambiguous names dropped.
func (l *loader) fillStruct(t *Type, f *fileInfo, root *ast.StructType) {
	var fields []candidate
	var open []string
	visited := map[string]bool{}
	next := []embedded{{key: fmt.Sprintf("%p", root), file: f, st: root}}
	nextCount := map[string]int{}
	for len(next) > 0 {
		current := next
		count := nextCount
		next, nextCount = nil, map[string]int{}
		for _, e := range current {
			if visited[e.key] {
				continue
			}
			visited[e.key] = true
			i := -1
			for _, af := range e.st.Fields.List {
				tag := ""
				if af.Tag != nil {
					if s, err := strconv.Unquote(af.Tag.Value); err == nil {
						tag = reflect.StructTag(s).Get("toml")
					}
				}
				names := af.Names
				anonymous := len(names) == 0
				if anonymous {
					names = []*ast.Ident{{Name: embeddedName(af.Type)}}
				}
				for _, n := range names {
					i++
					if !anonymous && !ast.IsExported(n.Name) {
						continue
					}
					if tag == "-" {
						continue
					}
					keyName, _, _ := strings.Cut(tag, ",")
					index := append(slices.Clone(e.index), i)
					if anonymous && keyName == "" {
						// An untagged embedded struct (or pointer to one) is inlined.
						ep, en := l.namedRef(e.file, af.Type)
						switch {
						case ep != nil && ep.types[en].spec.Assign.IsValid():
							// Alias of some type; inline it if it names a module struct.
							if ap, an := l.namedRef(ep.types[en].file, ep.types[en].spec.Type); ap != nil {
								ep, en = ap, an
							} else {
								ep = nil
							}
						}
						if ep != nil {
							ed := ep.types[en]
							if st, ok := unparen(ed.spec.Type).(*ast.StructType); ok {
								k := ep.path + "." + en
								nextCount[k]++
								if nextCount[k] == 1 {
									next = append(next, embedded{key: k, file: ed.file, st: st, index: index})
								}
								continue
							}
						} else if _, isIdent := unparen(stripStar(af.Type)).(*ast.Ident); !isIdent {
							// Embedded type from outside the module: if it is a
							// struct, its fields are keys we cannot see.
							open = append(open, exprString(af.Type))
							continue
						}
						if !ast.IsExported(n.Name) {
							continue // BurntSushi/toml cannot set it
						}
					}
					c := candidate{key: keyName, goName: n.Name, tagged: keyName != "", index: index, file: e.file, typ: af.Type}
					if c.key == "" {
						c.key = n.Name
					}
					fields = append(fields, c)
					if count[e.key] > 1 {
						fields = append(fields, c) // duplicated embedding: annihilated below
					}
				}
			}
		}
	}

	sort.SliceStable(fields, func(i, j int) bool {
		a, b := fields[i], fields[j]
		if a.key != b.key {
			return a.key < b.key
		}
		if len(a.index) != len(b.index) {
			return len(a.index) < len(b.index)
		}
		if a.tagged != b.tagged {
			return a.tagged
		}
		return slices.Compare(a.index, b.index) < 0
	})
	var out []candidate
	for i := 0; i < len(fields); {
		j := i + 1
		for j < len(fields) && fields[j].key == fields[i].key {
			j++
		}
		if c, ok := dominant(fields[i:j]); ok {
			out = append(out, c)
		}
		i = j
	}
	sort.SliceStable(out, func(i, j int) bool { return slices.Compare(out[i].index, out[j].index) < 0 })

	t.Fields = make([]*Field, len(out))
	t.byKey = make(map[string]*Field, len(out))
	for i, c := range out {
		fld := &Field{Key: c.key, GoName: c.goName, Tagged: c.tagged, Type: l.expr(c.file, c.typ)}
		t.Fields[i] = fld
		t.byKey[c.key] = fld
	}
	if len(open) > 0 {
		t.Open = true
		t.Reason = "embeds " + strings.Join(open, ", ") + " from outside the gitlab-runner module"
	}
}

// dominant picks the field that wins a name, as BurntSushi/toml's
// dominantField does. fields are sorted by depth, then tagged first.
func dominant(fields []candidate) (candidate, bool) {
	depth := len(fields[0].index)
	tagged := -1
	n := len(fields)
	for i, f := range fields {
		if len(f.index) > depth {
			n = i
			break
		}
		if f.tagged {
			if tagged >= 0 {
				return candidate{}, false
			}
			tagged = i
		}
	}
	if tagged >= 0 {
		return fields[tagged], true
	}
	if n > 1 {
		return candidate{}, false
	}
	return fields[0], true
}

func stripStar(e ast.Expr) ast.Expr {
	if s, ok := unparen(e).(*ast.StarExpr); ok {
		return s.X
	}
	return e
}

// embeddedName is the field name of an embedded field: its type's name.
func embeddedName(e ast.Expr) string {
	switch x := unparen(stripStar(e)).(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.IndexExpr:
		return embeddedName(x.X)
	case *ast.IndexListExpr:
		return embeddedName(x.X)
	}
	return ""
}

func exprString(e ast.Expr) string {
	switch x := unparen(e).(type) {
	case *ast.StarExpr:
		return "*" + exprString(x.X)
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	case *ast.Ident:
		return x.Name
	}
	return fmt.Sprintf("%T", e)
}

// Lookup returns the Type at a dotted key path ("runners.kubernetes"); "" is
// common.Config itself. Arrays are stepped through transparently, "[N]"
// suffixes are ignored, "*" steps into a map's values, and keys match as
// BurntSushi/toml matches them. It returns nil if the path is unknown.
func (s *Schema) Lookup(keyPath string) *Type {
	t := s.Root
	if keyPath == "" {
		return t
	}
	for seg := range strings.SplitSeq(keyPath, ".") {
		if i := strings.IndexByte(seg, '['); i >= 0 {
			seg = seg[:i]
		}
		t = elemOf(t)
		switch {
		case t.Kind == Struct:
			f := t.Field(seg)
			if f == nil {
				return nil
			}
			t = f.Type
		case t.Kind == Map && seg == "*":
			t = t.Elem
		default:
			return nil
		}
	}
	return t
}

// elemOf steps through arrays to their element type.
func elemOf(t *Type) *Type {
	for t.Kind == Slice || t.Kind == Array {
		t = t.Elem
	}
	return t
}

// Keys returns the known TOML keys, sorted, of the table at a dotted key path
// such as "runners.kubernetes" (see Lookup); "" gives the top-level keys. It
// returns nil if the path is unknown or is not a table with fixed keys.
func (s *Schema) Keys(keyPath string) []string {
	t := s.Lookup(keyPath)
	if t == nil {
		return nil
	}
	return elemOf(t).Keys()
}

// Opaque lists the places in the schema whose values are accepted without
// being checked (Opaque types, and Open structs), sorted by path.
func (s *Schema) Opaque() []OpaqueKey {
	var out []OpaqueKey
	onPath := map[*Type]bool{}
	var walk func(p string, t *Type)
	walk = func(p string, t *Type) {
		if onPath[t] {
			return
		}
		onPath[t] = true
		defer delete(onPath, t)
		switch t.Kind {
		case Opaque:
			out = append(out, OpaqueKey{Path: p, Type: t.String(), Reason: t.Reason})
		case Slice, Array:
			walk(p, t.Elem)
		case Map:
			walk(p+".*", t.Elem)
		case Struct:
			if t.Open {
				out = append(out, OpaqueKey{Path: p, Type: t.String(), Reason: t.Reason})
			}
			for _, f := range t.Fields {
				walk(joinKey(p, f.Key), f.Type)
			}
		}
	}
	walk("", s.Root)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Problem is one reason a config.toml does not fit gitlab-runner's structs.
type Problem struct {
	// Path is the full key path, e.g. "runners[0].kubernetes.privileged".
	Path string
	// Message says what is wrong there.
	Message string
}

func (p *Problem) Error() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Problems returns the Problems in an error returned by Check.
func Problems(err error) []*Problem {
	var out []*Problem
	var walk func(error)
	walk = func(err error) {
		if p, ok := err.(*Problem); ok {
			out = append(out, p)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

// Check decodes configTOML as gitlab-runner does (BurntSushi/toml) and walks
// it against the schema. It returns nil if every key is known and every value
// can be decoded into its field; otherwise an errors.Join of one *Problem per
// problem, in key order, each naming the full key path. A TOML syntax error is
// returned as is, wrapped.
func (s *Schema) Check(configTOML []byte) error {
	var doc map[string]any
	if _, err := toml.Decode(string(configTOML), &doc); err != nil {
		return fmt.Errorf("oracle: config.toml is not valid TOML: %w", err)
	}
	c := &checker{}
	c.check("", s.Root, doc)
	if len(c.problems) == 0 {
		return nil
	}
	return errors.Join(c.problems...)
}

type checker struct {
	problems []error
}

func (c *checker) add(p string, format string, args ...any) {
	c.problems = append(c.problems, &Problem{Path: p, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) mismatch(p string, want string, v any) {
	c.add(p, "want %s, got %s", want, describe(v))
}

// check walks value v, found at key path p, against type t.
func (c *checker) check(p string, t *Type, v any) {
	switch t.Kind {
	case Any, Opaque:
	case Invalid:
		c.add(p, "gitlab-runner cannot load any value here: %s", t.Reason)
	case String:
		if _, ok := v.(string); !ok {
			c.mismatch(p, "string", v)
		}
	case Bool:
		if _, ok := v.(bool); !ok {
			c.mismatch(p, "bool", v)
		}
	case Int, Uint:
		n, ok := v.(int64)
		if !ok {
			c.mismatch(p, "integer", v)
			return
		}
		if !intFits(t, n) {
			c.add(p, "want %s, got integer %d (out of range)", t, n)
		}
	case Float:
		switch n := v.(type) {
		case float64:
			if t.Bits == 32 && (n < -maxFloat32 || n > maxFloat32) {
				c.add(p, "want float32, got float %v (out of range)", n)
			}
		case int64:
			// BurntSushi/toml's limits for integers it converts to floats.
			limit := int64(1<<53 - 1)
			if t.Bits == 32 {
				limit = 1<<24 - 1
			}
			if n < -limit || n > limit {
				c.add(p, "want %s, got integer %d (not exactly representable)", t, n)
			}
		default:
			c.mismatch(p, "float", v)
		}
	case Duration:
		switch d := v.(type) {
		case int64:
		case string:
			if _, err := time.ParseDuration(d); err != nil {
				c.add(p, "want duration, got string %q that is not one (like \"30s\", \"1h30m\")", d)
			}
		default:
			c.mismatch(p, "duration (a string like \"30s\" or an integer of nanoseconds)", v)
		}
	case Slice, Array:
		items, ok := arrayItems(v)
		if !ok {
			want := "array"
			if elemOf(t).Kind == Struct {
				want = "array of tables"
			}
			c.mismatch(p, want, v)
			return
		}
		if t.Kind == Array && len(items) != t.Len {
			c.add(p, "want array of exactly %d elements, got %d", t.Len, len(items))
		}
		for i, item := range items {
			c.check(p+"["+strconv.Itoa(i)+"]", t.Elem, item)
		}
	case Map:
		m, ok := v.(map[string]any)
		if !ok {
			c.mismatch(p, "table", v)
			return
		}
		for _, k := range sortedKeys(m) {
			c.check(joinKey(p, k), t.Elem, m[k])
		}
	case Struct:
		m, ok := v.(map[string]any)
		if !ok {
			c.mismatch(p, "table ("+t.String()+")", v)
			return
		}
		for _, k := range sortedKeys(m) {
			kp := joinKey(p, k)
			f := t.Field(k)
			if f == nil {
				if !t.Open {
					c.unknown(kp, t, k)
				}
				continue
			}
			c.check(kp, f.Type, m[k])
		}
	}
}

const maxFloat32 = 3.40282346638528859811704183484516925440e+38

func intFits(t *Type, n int64) bool {
	if t.Kind == Uint {
		if n < 0 {
			return false // BurntSushi/toml would wrap it around to a huge number
		}
		switch t.Bits {
		case 8:
			return n <= 1<<8-1
		case 16:
			return n <= 1<<16-1
		case 32:
			return n <= 1<<32-1
		}
		return true
	}
	switch t.Bits {
	case 8:
		return n >= -1<<7 && n <= 1<<7-1
	case 16:
		return n >= -1<<15 && n <= 1<<15-1
	case 32:
		return n >= -1<<31 && n <= 1<<31-1
	}
	return true
}

func (c *checker) unknown(p string, t *Type, key string) {
	owner := t.String()
	if t.Name == "" {
		owner = "this table"
	}
	msg := fmt.Sprintf("unknown key (gitlab-runner's %s has no toml key %q)", owner, key)
	if s := closest(key, t.Fields); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	c.problems = append(c.problems, &Problem{Path: p, Message: msg})
}

// closest returns the field key nearest to key, if it is a plausible typo.
func closest(key string, fields []*Field) string {
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.Key
	}
	return suggest.Closest(key, keys)
}

func arrayItems(v any) ([]any, bool) {
	switch a := v.(type) {
	case []any:
		return a, true
	case []map[string]any:
		items := make([]any, len(a))
		for i, m := range a {
			items[i] = m
		}
		return items, true
	}
	return nil, false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// joinKey appends a key to a dotted path, quoting it if it is not a bare key.
func joinKey(p, key string) string {
	if !isBareKey(key) {
		key = strconv.Quote(key)
	}
	if p == "" {
		return key
	}
	return p + "." + key
}

func isBareKey(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if r != '_' && r != '-' && (r > unicode.MaxASCII || !(unicode.IsLetter(r) || unicode.IsDigit(r))) {
			return false
		}
	}
	return true
}

// describe names a decoded TOML value's type, with the value if it is short.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 60 {
			return fmt.Sprintf("string %q…", x[:60])
		}
		return fmt.Sprintf("string %q", x)
	case int64:
		return fmt.Sprintf("integer %d", x)
	case float64:
		return fmt.Sprintf("float %v", x)
	case bool:
		return fmt.Sprintf("bool %t", x)
	case time.Time:
		return "datetime " + x.Format(time.RFC3339Nano)
	case map[string]any:
		return "table"
	case []map[string]any:
		return "array of tables"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}
