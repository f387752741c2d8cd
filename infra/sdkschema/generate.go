package sdkschema

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/format"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// The generator writes, for every resource in Resources, what the pinned
// provider SDK's own constructor carries, read from that SDK's source:
//
//   - XArgs with the SDK's input names and Input types; a nested object is a
//     *YArgs struct (a slice or map of YArgs for arrays and maps) rather
//     than the SDK's YInput interface family, whose output types and
//     registrations are what makes the real SDK slow to compile;
//   - X, the resource with every output the SDK declares, builtin outputs
//     as pulumi.StringOutput and friends, nested ones as a
//     pulumix.Output[Y] of a plain struct Y with the SDK's field names;
//   - NewX, which checks the required inputs, sets the constants (a
//     Kubernetes kind's apiVersion and kind, helm's compat), makes the
//     secret inputs secret, marks the secret outputs, adds the aliases and
//     pins the provider version, as the SDK's NewX does;
//   - deprecations as `Deprecated:` comments and in the schema, and a link
//     to the resource's documentation rather than its text.

// sdkImport is the import path of the Pulumi Go SDK's core package.
const (
	sdkImport        = "github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	sdkGenericImport = "github.com/pulumi/pulumi/sdk/v3/go/pulumix"
	runtimeImport    = "github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
)

// Generate reads Resources from the pinned SDKs' source and writes the
// typed packages under outDir (one directory per SDK package, as
// <provider>/<dir>), importable as importBase/<provider>/<dir>.
func Generate(ctx context.Context, outDir, importBase string) error {
	g := &generator{importBase: importBase, pkgs: map[string]*genPkg{}}
	for _, rp := range Resources {
		mod := moduleOf(rp.Provider)
		if mod == nil {
			return fmt.Errorf("sdkschema: no SDK module for provider %q", rp.Provider)
		}
		l, err := g.loaderFor(ctx, mod)
		if err != nil {
			return err
		}
		p, err := l.pkg(rp.Dir)
		if err != nil {
			return fmt.Errorf("sdkschema: %s %s: %w", mod.Path, rp.Dir, err)
		}
		gp := g.genPkg(mod, l, p)
		for _, tok := range rp.Tokens {
			if err := g.resource(gp, tok); err != nil {
				return fmt.Errorf("sdkschema: %s: %w", tok, err)
			}
		}
	}
	// Drain the nested types the resources reach.
	for {
		progress := false
		for _, gp := range g.sortedPkgs() {
			for len(gp.queue) > 0 {
				q := gp.queue[0]
				gp.queue = gp.queue[1:]
				if err := g.nested(gp, q); err != nil {
					return fmt.Errorf("sdkschema: %s %s: %w", gp.mod.Path, gp.p.dir, err)
				}
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	if err := os.RemoveAll(filepath.Join(outDir, "aws")); err != nil {
		return err
	}
	for _, prov := range []string{"gcp", "kubernetes"} {
		if err := os.RemoveAll(filepath.Join(outDir, prov)); err != nil {
			return err
		}
	}
	for _, gp := range g.sortedPkgs() {
		src, err := g.render(gp)
		if err != nil {
			return err
		}
		dir := filepath.Join(outDir, gp.mod.Package, filepath.FromSlash(gp.p.dir))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "zz_generated.go"), src, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func moduleOf(provider string) *Module {
	for i := range Modules {
		if Modules[i].Package == provider {
			return &Modules[i]
		}
	}
	return nil
}

type generator struct {
	importBase string
	loaders    map[string]*loader
	pkgs       map[string]*genPkg // by provider/dir
}

func (g *generator) loaderFor(ctx context.Context, mod *Module) (*loader, error) {
	if l, ok := g.loaders[mod.Package]; ok {
		return l, nil
	}
	root, err := moduleRoot(ctx, mod)
	if err != nil {
		return nil, err
	}
	if g.loaders == nil {
		g.loaders = map[string]*loader{}
	}
	l := &loader{root: root, pkgs: map[string]*pkg{}}
	g.loaders[mod.Package] = l
	return l, nil
}

// genPkg is one generated package.
type genPkg struct {
	mod *Module
	l   *loader
	p   *pkg
	// name is the Go package name, alias the name others import it as.
	name, alias string
	resources   []*genResource
	// args and plain are the nested input and output types to write, by
	// the SDK's name (FooArgs, Foo).
	args, plain map[string]bool
	queue       []nestedRef
	nestedTypes []nestedType
	imports     map[string]string // import path → alias
}

type nestedRef struct {
	name  string
	input bool
}

type genResource struct {
	Token, Name, Doc, Deprecated string
	Provider                     bool
	Args                         []field
	Outputs                      []field
	Required, SecretInputs       []string
	SecretOutputs, Aliases       []string
	Consts                       map[string]string
}

type field struct {
	Go, Tag, Type, Deprecated string
}

func (g *generator) genPkg(mod *Module, l *loader, p *pkg) *genPkg {
	key := mod.Package + "/" + p.dir
	if gp, ok := g.pkgs[key]; ok {
		return gp
	}
	name := path.Base(p.dir)
	alias := name
	if p.dir == "." {
		name, alias = mod.Package, mod.Package+"sdk"
	} else if strings.HasPrefix(name, "v") && strings.Contains(p.dir, "/") {
		alias = path.Base(path.Dir(p.dir)) + name
	}
	gp := &genPkg{mod: mod, l: l, p: p, name: name, alias: alias, args: map[string]bool{}, plain: map[string]bool{}, imports: map[string]string{}}
	g.pkgs[key] = gp
	return gp
}

func (g *generator) sortedPkgs() []*genPkg {
	keys := make([]string, 0, len(g.pkgs))
	for k := range g.pkgs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*genPkg, len(keys))
	for i, k := range keys {
		out[i] = g.pkgs[k]
	}
	return out
}

func (g *generator) importPath(gp *genPkg) string {
	return g.importBase + "/" + gp.mod.Package + path.Join("/", gp.p.dir)
}

// resource reads the SDK's constructor of tok and queues its types.
func (g *generator) resource(gp *genPkg, tok string) error {
	fn, resName, err := g.constructor(gp, tok)
	if err != nil {
		return err
	}
	r := &genResource{Token: tok, Name: resName, Provider: strings.HasPrefix(tok, "pulumi:providers:"), Consts: map[string]string{}}
	ts, ok := gp.p.types[resName]
	if !ok {
		return fmt.Errorf("no type %s in %s", resName, gp.p.dir)
	}
	r.Deprecated = deprecation(gp.p.docs[resName])
	r.Doc = docLink(gp.mod.Package, tok)

	// The exported XArgs carries the Input types, the unexported xArgs the
	// property names.
	argsTS, ok := gp.p.types[resName+"Args"]
	if !ok {
		return fmt.Errorf("no type %sArgs", resName)
	}
	tags := map[string]string{}
	for n, t := range gp.p.types {
		if !ast.IsExported(n) && strings.EqualFold(n, resName+"Args") {
			for _, f := range t.Type.(*ast.StructType).Fields.List {
				if f.Tag != nil && len(f.Names) > 0 {
					tag, _ := strconv.Unquote(f.Tag.Value)
					tags[f.Names[0].Name] = reflect.StructTag(tag).Get("pulumi")
				}
			}
		}
	}
	byGo := map[string]string{}
	for _, f := range argsTS.Type.(*ast.StructType).Fields.List {
		for _, n := range f.Names {
			typ, err := g.inType(gp, argsTS, f.Type)
			if err != nil {
				return fmt.Errorf("%sArgs.%s: %w", resName, n.Name, err)
			}
			tag := tags[n.Name]
			if tag == "" {
				return fmt.Errorf("%sArgs.%s has no property name in %sArgs", resName, n.Name, lowerFirst(resName))
			}
			byGo[n.Name] = tag
			r.Args = append(r.Args, field{Go: n.Name, Tag: tag, Type: typ, Deprecated: deprecation(f.Doc)})
		}
	}
	for _, f := range ts.Type.(*ast.StructType).Fields.List {
		if f.Tag == nil || len(f.Names) == 0 {
			continue
		}
		tag, _ := strconv.Unquote(f.Tag.Value)
		key := reflect.StructTag(tag).Get("pulumi")
		typ, err := g.outType(gp, ts, f.Type)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", resName, f.Names[0].Name, err)
		}
		r.Outputs = append(r.Outputs, field{Go: f.Names[0].Name, Tag: key, Type: typ, Deprecated: deprecation(f.Doc)})
	}

	// What the constructor's body adds.
	var berr error
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.IfStmt:
			// if args.F == nil { return nil, errors.New("invalid value for required argument 'F'") }
			if be, ok := x.Cond.(*ast.BinaryExpr); ok && be.Op == token.EQL {
				if f := argsField(be.X); f != "" && isNil(be.Y) && returnsError(x.Body) {
					r.Required = append(r.Required, byGo[f])
				}
			}
		case *ast.AssignStmt:
			if len(x.Lhs) != 1 || len(x.Rhs) != 1 {
				return true
			}
			f := argsField(x.Lhs[0])
			if f == "" {
				return true
			}
			if lit, ok := constString(x.Rhs[0]); ok {
				r.Consts[byGo[f]] = lit
			} else if isToSecret(x.Rhs[0]) {
				r.SecretInputs = append(r.SecretInputs, byGo[f])
			}
		case *ast.CallExpr:
			sel, ok := x.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "AdditionalSecretOutputs":
				r.SecretOutputs = append(r.SecretOutputs, stringLits(x)...)
			case "Aliases":
				ast.Inspect(x, func(n ast.Node) bool {
					kv, ok := n.(*ast.KeyValueExpr)
					if ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Type" {
							if s, ok := constString(kv.Value); ok {
								r.Aliases = append(r.Aliases, s)
							} else {
								berr = fmt.Errorf("an alias of a type that is not a string literal")
							}
						}
					}
					return true
				})
			}
		}
		return true
	})
	if berr != nil {
		return berr
	}
	for _, s := range [][]string{r.Required, r.SecretInputs, r.SecretOutputs, r.Aliases} {
		sort.Strings(s)
	}
	gp.resources = append(gp.resources, r)
	return nil
}

// constructor finds the New function of package gp that registers tok.
func (g *generator) constructor(gp *genPkg, tok string) (*ast.FuncDecl, string, error) {
	for _, fn := range gp.p.funcs {
		var found bool
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "RegisterResource" && len(c.Args) > 0 {
				if s, ok := constString(c.Args[0]); ok && s == tok {
					found = true
				}
			}
			return true
		})
		if found {
			return fn, strings.TrimPrefix(fn.Name.Name, "New"), nil
		}
	}
	return nil, "", fmt.Errorf("no constructor registers it in %s", gp.p.dir)
}

// docLink is the resource's page in Pulumi's registry documentation.
func docLink(provider, tok string) string {
	const base = "https://www.pulumi.com/registry/packages/"
	if strings.HasPrefix(tok, "pulumi:providers:") {
		return base + provider + "/api-docs/provider/"
	}
	parts := strings.Split(tok, ":") // pkg:module/file:Type
	if len(parts) != 3 {
		return base + provider + "/"
	}
	module := parts[1]
	if provider == "kubernetes" {
		// kubernetes:apps/v1:Deployment → apps/v1/deployment
		group, version, _ := strings.Cut(module, "/")
		group = strings.TrimSuffix(strings.TrimSuffix(group, ".k8s.io"), ".authorization")
		group = strings.TrimSuffix(group, ".sh")
		return base + "kubernetes/api-docs/" + group + "/" + version + "/" + strings.ToLower(parts[2]) + "/"
	}
	mod, _, _ := strings.Cut(module, "/")
	return base + provider + "/api-docs/" + mod + "/" + strings.ToLower(parts[2]) + "/"
}

// deprecation returns the Deprecated: paragraph of a doc comment.
func deprecation(doc *ast.CommentGroup) string {
	if doc == nil {
		return ""
	}
	text := doc.Text()
	i := strings.Index(text, "Deprecated:")
	if i < 0 {
		return ""
	}
	d := text[i+len("Deprecated:"):]
	if j := strings.Index(d, "\n\n"); j >= 0 {
		d = d[:j]
	}
	return strings.Join(strings.Fields(d), " ")
}

func argsField(e ast.Expr) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if id, ok := sel.X.(*ast.Ident); ok && id.Name == "args" {
		return sel.Sel.Name
	}
	return ""
}

func isNil(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == "nil"
}

func returnsError(b *ast.BlockStmt) bool {
	if len(b.List) != 1 {
		return false
	}
	r, ok := b.List[0].(*ast.ReturnStmt)
	return ok && len(r.Results) == 2 && isNil(r.Results[0])
}

// constString reads "x", pulumi.String("x") and pulumi.StringPtr("x").
func constString(e ast.Expr) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind == token.STRING {
			s, err := strconv.Unquote(x.Value)
			return s, err == nil
		}
	case *ast.CallExpr:
		if sel, ok := x.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "String" || sel.Sel.Name == "StringPtr") && len(x.Args) == 1 {
			return constString(x.Args[0])
		}
	}
	return "", false
}

func isToSecret(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "ToSecret" {
				found = true
			}
		}
		return true
	})
	return found
}

func stringLits(c *ast.CallExpr) []string {
	var out []string
	ast.Inspect(c, func(n ast.Node) bool {
		if s, ok := constString2(n); ok {
			out = append(out, s)
		}
		return true
	})
	return out
}

func constString2(n ast.Node) (string, bool) {
	lit, ok := n.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// ref resolves a type name used in package gp's file of ts: a local name,
// or a selector into another SDK package or the Pulumi SDK.
type ref struct {
	pulumi bool    // a type of the Pulumi SDK (pulumi.StringInput)
	gp     *genPkg // the SDK package otherwise
	name   string
}

func (g *generator) ref(gp *genPkg, ts *ast.TypeSpec, e ast.Expr) (ref, bool) {
	switch x := e.(type) {
	case *ast.Ident:
		return ref{gp: gp, name: x.Name}, true
	case *ast.SelectorExpr:
		q := x.X.(*ast.Ident).Name
		dir := gp.p.imports[ts][q]
		if dir == "" {
			return ref{pulumi: true, name: q + "." + x.Sel.Name}, true
		}
		p, err := gp.l.pkg(dir)
		if err != nil {
			return ref{}, false
		}
		return ref{gp: g.genPkg(gp.mod, gp.l, p), name: x.Sel.Name}, true
	}
	return ref{}, false
}

// qual is the name of r's type n as written in package from.
func (g *generator) qual(from, in *genPkg, n string) string {
	if from == in {
		return n
	}
	from.imports[g.importPath(in)] = in.alias
	return in.alias + "." + n
}

func basicInput(kind string) string {
	switch kind {
	case "string":
		return "String"
	case "bool":
		return "Bool"
	case "int":
		return "Int"
	case "float64":
		return "Float64"
	}
	return ""
}

// sdkRef resolves e, an input or output type (what) of a field of ts, to
// the SDK package and name it refers to; a type of Pulumi's own SDK comes
// back as builtin, the name to write.
func (g *generator) sdkRef(gp *genPkg, ts *ast.TypeSpec, e ast.Expr, what string) (r ref, builtin string, err error) {
	r, ok := g.ref(gp, ts, e)
	switch {
	case !ok:
		return r, "", fmt.Errorf("unsupported %s type %T", what, e)
	case !r.pulumi:
		return r, "", nil
	case strings.HasPrefix(r.name, "pulumi."):
		return r, r.name, nil
	}
	return r, "", fmt.Errorf("%s type %s from outside the SDK", what, r.name)
}

// inType maps an Input type of the SDK to the generated one.
func (g *generator) inType(gp *genPkg, ts *ast.TypeSpec, e ast.Expr) (string, error) {
	r, builtin, err := g.sdkRef(gp, ts, e, "input")
	if builtin != "" || err != nil {
		return builtin, err
	}
	return g.inName(gp, r.gp, r.name)
}

// inName maps the SDK's Input type name n of package in (FooInput,
// FooPtrInput, FooArrayInput, FooMapInput, an enum's FooInput) to a type
// written in package from.
func (g *generator) inName(from, in *genPkg, n string) (string, error) {
	base, ok := strings.CutSuffix(n, "Input")
	if !ok {
		return "", fmt.Errorf("input type %s does not end in Input", n)
	}
	return g.inBase(from, in, base, n)
}

func (g *generator) inBase(from, in *genPkg, base, n string) (string, error) {
	if ts, ok := in.p.types[base+"Args"]; ok {
		if _, ok := ts.Type.(*ast.StructType); ok {
			g.queue(in, base+"Args", true)
			return "*" + g.qual(from, in, base+"Args"), nil
		}
	}
	if ts, ok := in.p.types[base]; ok {
		switch x := ts.Type.(type) {
		case *ast.ArrayType:
			el, err := g.inElem(from, in, ts, x.Elt)
			return "[]" + el, err
		case *ast.MapType:
			el, err := g.inElem(from, in, ts, x.Value)
			return "map[string]" + el, err
		case *ast.Ident:
			if b := basicInput(x.Name); b != "" { // an enum
				return "pulumi." + b + "Input", nil
			}
		}
	}
	if t, ok := strings.CutSuffix(base, "Ptr"); ok {
		s, err := g.inBase(from, in, t, n)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(s, "pulumi.") { // an enum pointer
			return strings.TrimSuffix(s, "Input") + "PtrInput", nil
		}
		return s, nil
	}
	return "", fmt.Errorf("cannot resolve input type %s of %s", n, in.p.dir)
}

// inElem is the element type of an SDK array or map input (FooInput).
func (g *generator) inElem(from, in *genPkg, ts *ast.TypeSpec, e ast.Expr) (string, error) {
	r, ok := g.ref(in, ts, e)
	if !ok {
		return "", fmt.Errorf("unsupported element type %T", e)
	}
	if r.pulumi {
		return r.name, nil
	}
	s, err := g.inName(from, r.gp, r.name)
	return strings.TrimPrefix(s, "*"), err
}

// outType maps an Output type of the SDK to the generated one.
func (g *generator) outType(gp *genPkg, ts *ast.TypeSpec, e ast.Expr) (string, error) {
	r, builtin, err := g.sdkRef(gp, ts, e, "output")
	if builtin != "" || err != nil {
		return builtin, err
	}
	base, ok := strings.CutSuffix(r.name, "Output")
	if !ok {
		return "", fmt.Errorf("output type %s does not end in Output", r.name)
	}
	el, basic, err := g.plainOf(gp, r.gp, base)
	if err != nil {
		return "", err
	}
	if basic != "" { // an enum: the builtin output of its kind
		return "pulumi." + basic + "Output", nil
	}
	gp.imports[sdkGenericImport] = "pulumix"
	return "pulumix.Output[" + el + "]", nil
}

// plainOf is the plain type the SDK's output name base (Foo, FooPtr,
// FooArray, FooMap, …) resolves to, written in package from; basic is the
// builtin kind of an enum.
func (g *generator) plainOf(from, in *genPkg, base string) (string, string, error) {
	if ts, ok := in.p.types[base]; ok {
		switch x := ts.Type.(type) {
		case *ast.StructType:
			g.queue(in, base, false)
			return g.qual(from, in, base), "", nil
		case *ast.Ident:
			if b := basicInput(x.Name); b != "" {
				return x.Name, b, nil
			}
		}
	}
	for _, s := range []struct{ suffix, prefix string }{{"Ptr", "*"}, {"Array", "[]"}, {"Map", "map[string]"}} {
		if t, ok := strings.CutSuffix(base, s.suffix); ok && t != "" {
			el, basic, err := g.plainOf(from, in, t)
			if err == nil {
				if basic != "" {
					return s.prefix + el, "", nil
				}
				return s.prefix + el, "", nil
			}
		}
	}
	return "", "", fmt.Errorf("cannot resolve output type %sOutput of %s", base, in.p.dir)
}

func (g *generator) queue(gp *genPkg, name string, input bool) {
	set := gp.plain
	if input {
		set = gp.args
	}
	if set[name] {
		return
	}
	set[name] = true
	gp.queue = append(gp.queue, nestedRef{name: name, input: input})
}

// nested reads a nested Args (input) or plain (output) struct.
func (g *generator) nested(gp *genPkg, q nestedRef) error {
	ts := gp.p.types[q.name]
	st := ts.Type.(*ast.StructType)
	var fields []field
	for _, f := range st.Fields.List {
		if f.Tag == nil || len(f.Names) == 0 {
			continue
		}
		tag, _ := strconv.Unquote(f.Tag.Value)
		key := reflect.StructTag(tag).Get("pulumi")
		var typ string
		var err error
		if q.input {
			typ, err = g.inType(gp, ts, f.Type)
		} else {
			typ, err = g.plainType(gp, ts, f.Type)
		}
		if err != nil {
			return fmt.Errorf("%s.%s: %w", q.name, f.Names[0].Name, err)
		}
		fields = append(fields, field{Go: f.Names[0].Name, Tag: key, Type: typ, Deprecated: deprecation(f.Doc)})
	}
	gp.nestedTypes = append(gp.nestedTypes, nestedType{name: q.name, input: q.input, fields: fields, deprecated: deprecation(gp.p.docs[q.name])})
	return nil
}

// plainType maps a field type of a plain SDK struct.
func (g *generator) plainType(gp *genPkg, ts *ast.TypeSpec, e ast.Expr) (string, error) {
	switch x := e.(type) {
	case *ast.StarExpr:
		s, err := g.plainType(gp, ts, x.X)
		return "*" + s, err
	case *ast.ArrayType:
		s, err := g.plainType(gp, ts, x.Elt)
		return "[]" + s, err
	case *ast.MapType:
		s, err := g.plainType(gp, ts, x.Value)
		return "map[string]" + s, err
	case *ast.InterfaceType:
		return "interface{}", nil
	case *ast.Ident:
		switch x.Name {
		case "string", "bool", "int", "float64", "any":
			return x.Name, nil
		}
	}
	r, ok := g.ref(gp, ts, e)
	if !ok {
		return "", fmt.Errorf("unsupported plain type %T", e)
	}
	if r.pulumi {
		return r.name, nil
	}
	t, ok := r.gp.p.types[r.name]
	if !ok {
		return "", fmt.Errorf("no type %s in %s", r.name, r.gp.p.dir)
	}
	switch x := t.Type.(type) {
	case *ast.StructType:
		g.queue(r.gp, r.name, false)
		return g.qual(gp, r.gp, r.name), nil
	case *ast.Ident: // an enum
		return x.Name, nil
	}
	return "", fmt.Errorf("unsupported plain type %s", r.name)
}

type nestedType struct {
	name       string
	input      bool
	fields     []field
	deprecated string
}

func (g *generator) render(gp *genPkg) ([]byte, error) {
	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	srcDir := path.Join(gp.mod.Root, gp.p.dir)
	w("// Code generated by infra/sdkschema from %s@%s/%s; DO NOT EDIT.\n\n", gp.mod.Path, gp.mod.Version, srcDir)
	w("// Package %s holds the typed resources of %s %s that runnerfleet\n", gp.name, gp.mod.Path, gp.mod.Version)
	w("// declares, with the names, types, required inputs, secrets and aliases of\n// that SDK's package %s. See infra/sdkschema.\n", srcDir)
	w("package %s\n\n", gp.name)

	gp.imports[sdkImport] = "pulumi"
	if len(gp.resources) > 0 {
		gp.imports[runtimeImport] = "rf"
	}
	paths := make([]string, 0, len(gp.imports))
	for p := range gp.imports {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	w("import (\n")
	for _, p := range paths {
		w("\t%s %q\n", gp.imports[p], p)
	}
	w(")\n\n")
	w("var _ pulumi.Input\n\n")

	for _, r := range gp.resources {
		state := "pulumi.CustomResourceState"
		if r.Provider {
			state = "pulumi.ProviderResourceState"
		}
		w("// %s is %s, pinned to %s %s.\n//\n// Documentation: %s\n", r.Name, r.Token, gp.mod.Package, gp.mod.Version, r.Doc)
		if r.Deprecated != "" {
			w("//\n// Deprecated: %s\n", r.Deprecated)
		}
		w("type %s struct {\n\t%s\n\n", r.Name, state)
		writeFields(w, r.Outputs)
		w("}\n\n")
		w("// %sArgs are the inputs of %s.\ntype %sArgs struct {\n", r.Name, r.Name, r.Name)
		writeFields(w, r.Args)
		w("}\n\n")
		lower := lowerFirst(r.Name) + "Schema"
		w("var %s = &rf.Schema{\n\tToken: %q,\n\tDoc: %q,\n", lower, r.Token, r.Doc)
		if r.Deprecated != "" {
			w("\tDeprecated: %q,\n", r.Deprecated)
		}
		writeList(w, "Inputs", tags(r.Args))
		writeList(w, "Outputs", tags(r.Outputs))
		writeList(w, "Required", r.Required)
		writeList(w, "SecretInputs", r.SecretInputs)
		writeList(w, "SecretOutputs", r.SecretOutputs)
		writeList(w, "Aliases", r.Aliases)
		if len(r.Consts) > 0 {
			keys := make([]string, 0, len(r.Consts))
			for k := range r.Consts {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			w("\tConsts: map[string]string{")
			for _, k := range keys {
				w("%q: %q, ", k, r.Consts[k])
			}
			w("},\n")
		}
		if dep := deprecatedInputs(r.Args); len(dep) > 0 {
			w("\tDeprecatedInputs: map[string]string{\n")
			for _, f := range dep {
				w("\t\t%q: %q,\n", f.Tag, f.Deprecated)
			}
			w("\t},\n")
		}
		w("}\n\n")
		w("func init() {\n\trf.AddSchema(%s, func(ctx *pulumi.Context, name string, fields map[string]any, opts ...pulumi.ResourceOption) (pulumi.CustomResource, error) {\n", lower)
		w("\t\tvar args %sArgs\n\t\tif err := rf.Decode(fields, &args); err != nil {\n\t\t\treturn nil, err\n\t\t}\n\t\treturn New%s(ctx, name, &args, opts...)\n\t})\n}\n\n", r.Name, r.Name)
		w("// New%s declares a %s as the SDK's New%s would.\n", r.Name, r.Token, r.Name)
		w("func New%s(ctx *pulumi.Context, name string, args *%sArgs, opts ...pulumi.ResourceOption) (*%s, error) {\n", r.Name, r.Name, r.Name)
		w("\tif args == nil {\n\t\targs = &%sArgs{}\n\t}\n", r.Name)
		w("\tvar res %s\n\tif err := rf.Declare(ctx, %s, name, args, &res, opts...); err != nil {\n\t\treturn nil, err\n\t}\n\treturn &res, nil\n}\n\n", r.Name, lower)
		w("// Get%s reads an existing %s of the given ID as the SDK's Get%s would.\n", r.Name, r.Token, r.Name)
		w("func Get%s(ctx *pulumi.Context, name string, id pulumi.IDInput, opts ...pulumi.ResourceOption) (*%s, error) {\n", r.Name, r.Name)
		w("\tvar res %s\n\tif err := rf.Read(ctx, %s, name, id, &res, opts...); err != nil {\n\t\treturn nil, err\n\t}\n\treturn &res, nil\n}\n\n", r.Name, lower)
	}
	sort.Slice(gp.nestedTypes, func(i, j int) bool { return gp.nestedTypes[i].name < gp.nestedTypes[j].name })
	for _, n := range gp.nestedTypes {
		if n.input {
			w("// %s are the inputs of the SDK's %s.\n", n.name, n.name)
		} else {
			w("// %s is the value of the SDK's %sOutput.\n", n.name, n.name)
		}
		if n.deprecated != "" {
			w("//\n// Deprecated: %s\n", n.deprecated)
		}
		w("type %s struct {\n", n.name)
		writeFields(w, n.fields)
		w("}\n\n")
	}
	src, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("formatting %s: %w\n%s", gp.p.dir, err, b.String())
	}
	return src, nil
}

func writeFields(w func(string, ...any), fs []field) {
	for _, f := range fs {
		if f.Deprecated != "" {
			w("\t// Deprecated: %s\n", f.Deprecated)
		}
		w("\t%s %s `pulumi:%q`\n", f.Go, f.Type, f.Tag)
	}
}

func writeList(w func(string, ...any), name string, l []string) {
	if len(l) == 0 {
		return
	}
	w("\t%s: []string{", name)
	for _, s := range l {
		w("%q, ", s)
	}
	w("},\n")
}

func tags(fs []field) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Tag
	}
	sort.Strings(out)
	return out
}

func deprecatedInputs(fs []field) []field {
	var out []field
	for _, f := range fs {
		if f.Deprecated != "" {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out
}
