// Package sdkschema reads the resource schemas of Pulumi providers from the
// source of their generated Go SDKs (pulumi-aws, pulumi-gcp,
// pulumi-kubernetes) at the versions pinned in Modules. It does two things
// with them:
//
//   - Generate writes the typed constructors, Args and outputs of exactly
//     the resources in Resources into infra/internal/sdk (make generate), so
//     that the program gets the SDKs' types and constructor behaviour
//     without compiling the SDKs, whose cold compile (25 minutes and 7.5 GB
//     for aws ec2/eks/iam and gcp compute/container on two cores) would not
//     fit the CI budget;
//   - Load and Check let the mock tests check every registration as the
//     provider would: a type token the provider has, input names it knows
//     (with a did-you-mean), values of the right shape and the required
//     inputs, nested objects included.
package sdkschema

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/runnerfleet/runnerfleet/internal/gomod"
	"github.com/runnerfleet/runnerfleet/internal/suggest"
)

// Module is one provider's Go SDK.
type Module struct {
	// Package is the provider's package name, the first part of its tokens.
	Package string
	// Path and Version name the SDK module.
	Path, Version string
	// Root is the directory inside the module that holds the Go packages.
	Root string
}

// Modules are the provider SDKs whose schemas runnerfleet registers against.
// The versions are the ones the program pins its resources to (see
// infra/internal/pulumix), so the schema checked is the schema deployed.
var Modules = []Module{
	{Package: "aws", Path: "github.com/pulumi/pulumi-aws/sdk/v6", Version: "v6.83.4", Root: "go/aws"},
	{Package: "gcp", Path: "github.com/pulumi/pulumi-gcp/sdk/v9", Version: "v9.6.0", Root: "go/gcp"},
	{Package: "kubernetes", Path: "github.com/pulumi/pulumi-kubernetes/sdk/v4", Version: "v4.29.0", Root: "go/kubernetes"},
}

// Kind is the shape of a value.
type Kind int

const (
	Any Kind = iota
	String
	Bool
	Number
	Array
	Map
	Object
)

func (k Kind) String() string {
	return [...]string{"any", "string", "bool", "number", "array", "map", "object"}[k]
}

// Type is the schema of a value.
type Type struct {
	Kind Kind
	// Name is the Go type's name, for messages.
	Name string
	// Elem is the element type of an Array or Map.
	Elem *Type
	// Fields are an Object's inputs by name; Required lists those without
	// which the provider refuses the resource.
	Fields   map[string]*Type
	Required []string
}

// Schema maps resource type tokens to their input types.
type Schema struct {
	Resources map[string]*Type
	// Dirs are the module directories the schema was read from.
	Dirs map[string]string
}

var (
	loadMu sync.Mutex
	loaded = map[string]*Schema{}
)

// Load downloads the SDK modules (a no-op once they are in the module cache)
// and reads the resources of the named packages under the named Go package
// directories, for example Load(ctx, "aws:ec2", "aws:iam", "kubernetes:helm/v3").
// Each argument is provider:dir, dir relative to the module's Root. A load
// is done once per process.
func Load(ctx context.Context, pkgs ...string) (*Schema, error) {
	key := strings.Join(pkgs, ",")
	loadMu.Lock()
	defer loadMu.Unlock()
	if s, ok := loaded[key]; ok {
		return s, nil
	}
	s := &Schema{Resources: map[string]*Type{}, Dirs: map[string]string{}}
	for _, p := range pkgs {
		provider, dir, ok := strings.Cut(p, ":")
		if !ok {
			return nil, fmt.Errorf("sdkschema: %q is not provider:dir", p)
		}
		var mod *Module
		for i := range Modules {
			if Modules[i].Package == provider {
				mod = &Modules[i]
			}
		}
		if mod == nil {
			return nil, fmt.Errorf("sdkschema: no SDK module for provider %q", provider)
		}
		root, ok := s.Dirs[provider]
		if !ok {
			var err error
			if root, err = moduleRoot(ctx, mod); err != nil {
				return nil, err
			}
			s.Dirs[provider] = root
		}
		l := &loader{root: root, pkgs: map[string]*pkg{}}
		if err := l.resources(dir, s.Resources); err != nil {
			return nil, fmt.Errorf("sdkschema: %s %s: %w", mod.Path, dir, err)
		}
	}
	loaded[key] = s
	return s, nil
}

// moduleRoot downloads mod (a no-op once it is in the module cache) and
// returns the directory of its Go packages.
func moduleRoot(ctx context.Context, mod *Module) (string, error) {
	d, err := gomod.Download(ctx, mod.Path, mod.Version)
	if err != nil {
		return "", fmt.Errorf("sdkschema: %w", err)
	}
	return filepath.Join(d, mod.Root), nil
}

// Check returns what is wrong with the inputs registered for a resource of
// the given type token, one message per problem, each naming the input's path.
func (s *Schema) Check(tok string, inputs resource.PropertyMap) []string {
	t, ok := s.Resources[tok]
	if !ok {
		return []string{fmt.Sprintf("%s: no such resource type in the provider SDKs (%s)", tok, s.near(tok))}
	}
	var errs []string
	checkObject(t, resource.NewObjectProperty(inputs), tok, &errs)
	return errs
}

// near lists the known tokens that share tok's module, for messages.
func (s *Schema) near(tok string) string {
	mod := tok
	if i := strings.LastIndex(tok, ":"); i > 0 {
		mod = tok[:i]
		if j := strings.LastIndex(mod, "/"); j > 0 {
			mod = mod[:j]
		}
	}
	var out []string
	for k := range s.Resources {
		if strings.HasPrefix(k, mod) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if len(out) > 8 {
		out = append(out[:8], "…")
	}
	if len(out) == 0 {
		return "no resource of " + mod + " was loaded"
	}
	return "known: " + strings.Join(out, ", ")
}

func checkObject(t *Type, v resource.PropertyValue, path string, errs *[]string) {
	v, known := unwrap(v)
	if !known {
		return
	}
	if !v.IsObject() {
		*errs = append(*errs, fmt.Sprintf("%s: want an object (%s), got %s", path, t.Name, v.TypeString()))
		return
	}
	obj := v.ObjectValue()
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	for _, k := range keys {
		ft, ok := t.Fields[k]
		if !ok {
			*errs = append(*errs, fmt.Sprintf("%s.%s: unknown input of %s%s", path, k, t.Name, suggestion(k, t.Fields)))
			continue
		}
		check(ft, obj[resource.PropertyKey(k)], path+"."+k, errs)
	}
	for _, r := range t.Required {
		if pv, ok := obj[resource.PropertyKey(r)]; !ok || pv.IsNull() {
			*errs = append(*errs, fmt.Sprintf("%s.%s: required input of %s is missing", path, r, t.Name))
		}
	}
}

func check(t *Type, v resource.PropertyValue, path string, errs *[]string) {
	v, known := unwrap(v)
	if !known || v.IsNull() {
		return
	}
	ok := true
	switch t.Kind {
	case Any:
	case String:
		ok = v.IsString()
	case Bool:
		ok = v.IsBool()
	case Number:
		ok = v.IsNumber()
	case Array:
		if ok = v.IsArray(); ok {
			for i, e := range v.ArrayValue() {
				check(t.Elem, e, fmt.Sprintf("%s[%d]", path, i), errs)
			}
		}
	case Map:
		if ok = v.IsObject(); ok {
			for k, e := range v.ObjectValue() {
				check(t.Elem, e, path+"."+string(k), errs)
			}
		}
	case Object:
		checkObject(t, v, path, errs)
		return
	}
	if !ok {
		*errs = append(*errs, fmt.Sprintf("%s: want %s (%s), got %s", path, t.Kind, t.Name, v.TypeString()))
	}
}

// unwrap removes secrets and outputs; known is false for an unknown value.
func unwrap(v resource.PropertyValue) (resource.PropertyValue, bool) {
	for {
		switch {
		case v.IsSecret():
			v = v.SecretValue().Element
		case v.IsOutput():
			o := v.OutputValue()
			if !o.Known {
				return v, false
			}
			v = o.Element
		case v.IsComputed():
			return v, false
		default:
			return v, true
		}
	}
}

func suggestion(k string, fields map[string]*Type) string {
	known := make([]string, 0, len(fields))
	for f := range fields {
		known = append(known, f)
	}
	if s := suggest.Closest(k, known); s != "" {
		return fmt.Sprintf("; did you mean %q?", s)
	}
	return ""
}

// loader parses the SDK's Go packages on demand.
type loader struct {
	root string
	pkgs map[string]*pkg
}

type pkg struct {
	dir   string
	types map[string]*ast.TypeSpec
	// imports maps each file's import names to package directories relative
	// to the root ("" for packages outside the SDK).
	imports map[*ast.TypeSpec]map[string]string
	done    map[string]*Type
	// docs are the types' doc comments, funcs the package's New functions.
	docs  map[string]*ast.CommentGroup
	funcs []*ast.FuncDecl
}

func (l *loader) pkg(dir string) (*pkg, error) {
	if p, ok := l.pkgs[dir]; ok {
		return p, nil
	}
	abs := filepath.Join(l.root, filepath.FromSlash(dir))
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil, err
	}
	p := &pkg{dir: dir, types: map[string]*ast.TypeSpec{}, imports: map[*ast.TypeSpec]map[string]string{}, done: map[string]*Type{}, docs: map[string]*ast.CommentGroup{}}
	fset := token.NewFileSet()
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(abs, e.Name()), nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return nil, err
		}
		imports := map[string]string{}
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			name := ip[strings.LastIndex(ip, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = l.rel(ip)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Body != nil && strings.HasPrefix(fn.Name.Name, "New") {
				p.funcs = append(p.funcs, fn)
				continue
			}
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, sp := range g.Specs {
				ts := sp.(*ast.TypeSpec)
				p.types[ts.Name.Name] = ts
				p.imports[ts] = imports
				p.docs[ts.Name.Name] = ts.Doc
				if ts.Doc == nil && len(g.Specs) == 1 {
					p.docs[ts.Name.Name] = g.Doc
				}
			}
		}
	}
	l.pkgs[dir] = p
	return p, nil
}

// rel maps an import path to a directory under the root, "" when outside.
func (l *loader) rel(importPath string) string {
	// The root ends in the SDK's module-relative Go directory (go/aws), and
	// imports inside the SDK spell the module path followed by it.
	marker := "/" + filepath.ToSlash(filepath.Base(filepath.Dir(l.root))) + "/" + filepath.Base(l.root) + "/"
	if i := strings.Index(importPath, marker); i >= 0 {
		return importPath[i+len(marker):]
	}
	if strings.HasSuffix(importPath, "/"+filepath.Base(filepath.Dir(l.root))+"/"+filepath.Base(l.root)) {
		return "."
	}
	return ""
}

// resources finds every ctx.RegisterResource("<token>", name, args, …) in the
// package and reads the input type <resource>Args next to it.
func (l *loader) resources(dir string, out map[string]*Type) error {
	abs := filepath.Join(l.root, filepath.FromSlash(dir))
	entries, err := os.ReadDir(abs)
	if err != nil {
		return err
	}
	p, err := l.pkg(dir)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	found := 0
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(abs, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "New") || fn.Body == nil {
				continue
			}
			var tok string
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := c.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "RegisterResource" || len(c.Args) < 1 {
					return true
				}
				if lit, ok := c.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					tok, _ = strconv.Unquote(lit.Value)
				}
				return true
			})
			if tok == "" {
				continue
			}
			res := strings.TrimPrefix(fn.Name.Name, "New")
			// The input type is the unexported <resource>Args; the generator
			// lower-cases a leading acronym whole (sslcertificateArgs).
			argsName := ""
			for n := range p.types {
				if !ast.IsExported(n) && strings.EqualFold(n, res+"Args") {
					argsName = n
				}
			}
			if argsName == "" {
				return fmt.Errorf("%s registers %s but has no type %sArgs", fn.Name.Name, tok, lowerFirst(res))
			}
			t, err := l.typeOf(p, argsName)
			if err != nil {
				return fmt.Errorf("%s: %w", tok, err)
			}
			out[tok] = t
			found++
		}
	}
	if found == 0 {
		return fmt.Errorf("no resources found in %s", abs)
	}
	return nil
}

func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(r)) + s[n:]
}

// typeOf returns the schema of the named type of package p.
func (l *loader) typeOf(p *pkg, name string) (*Type, error) {
	if t, ok := p.done[name]; ok {
		return t, nil
	}
	ts, ok := p.types[name]
	if !ok {
		return nil, fmt.Errorf("no type %s in %s", name, p.dir)
	}
	t := &Type{Name: name}
	p.done[name] = t // before recursing: types may refer to themselves
	switch x := ts.Type.(type) {
	case *ast.StructType:
		t.Kind = Object
		t.Fields = map[string]*Type{}
		for _, f := range x.Fields.List {
			if f.Tag == nil || len(f.Names) == 0 {
				continue
			}
			tag, _ := strconv.Unquote(f.Tag.Value)
			key := reflect.StructTag(tag).Get("pulumi")
			if key == "" {
				continue
			}
			ft, err := l.expr(p, ts, f.Type)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", name, f.Names[0].Name, err)
			}
			t.Fields[key] = ft
			switch f.Type.(type) {
			case *ast.StarExpr, *ast.ArrayType, *ast.MapType, *ast.InterfaceType:
			default:
				if id, ok := f.Type.(*ast.Ident); !ok || id.Name != "interface{}" {
					t.Required = append(t.Required, key)
				}
			}
		}
		sort.Strings(t.Required)
	default:
		ft, err := l.expr(p, ts, ts.Type)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		*t = *ft
		t.Name = name
	}
	return t, nil
}

func (l *loader) expr(p *pkg, ts *ast.TypeSpec, e ast.Expr) (*Type, error) {
	switch x := e.(type) {
	case *ast.StarExpr:
		return l.expr(p, ts, x.X)
	case *ast.ArrayType:
		el, err := l.expr(p, ts, x.Elt)
		if err != nil {
			return nil, err
		}
		return &Type{Kind: Array, Name: "[]" + el.Name, Elem: el}, nil
	case *ast.MapType:
		el, err := l.expr(p, ts, x.Value)
		if err != nil {
			return nil, err
		}
		return &Type{Kind: Map, Name: "map[string]" + el.Name, Elem: el}, nil
	case *ast.InterfaceType:
		return &Type{Kind: Any, Name: "interface{}"}, nil
	case *ast.Ident:
		switch x.Name {
		case "string":
			return &Type{Kind: String, Name: x.Name}, nil
		case "bool":
			return &Type{Kind: Bool, Name: x.Name}, nil
		case "int", "float64":
			return &Type{Kind: Number, Name: x.Name}, nil
		case "any":
			return &Type{Kind: Any, Name: x.Name}, nil
		}
		return l.typeOf(p, x.Name)
	case *ast.SelectorExpr:
		pkgName := x.X.(*ast.Ident).Name
		dir := p.imports[ts][pkgName]
		if dir == "" {
			// pulumi.Archive, pulumi.AssetOrArchive and friends.
			return &Type{Kind: Any, Name: pkgName + "." + x.Sel.Name}, nil
		}
		q, err := l.pkg(dir)
		if err != nil {
			return nil, err
		}
		return l.typeOf(q, x.Sel.Name)
	}
	return nil, fmt.Errorf("unsupported type expression %T", e)
}
