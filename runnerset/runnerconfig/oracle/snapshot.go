package oracle

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
)

// FeatureFlag is one of gitlab-runner's feature flags, as its
// helpers/featureflags package lists them.
type FeatureFlag struct {
	Name       string `json:"name"`
	Deprecated bool   `json:"deprecated,omitempty"`
}

// FeatureFlags reads gitlab-runner's feature flags from its
// helpers/featureflags/flags.go in the module source dir: the Name of
// every element of its flags list, constants resolved. They are sorted by
// name.
func FeatureFlags(dir string) ([]FeatureFlag, error) {
	file := filepath.Join(dir, "helpers", "featureflags", "flags.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("oracle: reading gitlab-runner's feature flags: %w", err)
	}
	consts := map[string]string{}
	var list *ast.CompositeLit
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			vs, ok := s.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, n := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if g.Tok == token.CONST {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						consts[n.Name], _ = strconv.Unquote(lit.Value)
					}
				}
				if g.Tok == token.VAR && n.Name == "flags" {
					list, _ = vs.Values[i].(*ast.CompositeLit)
				}
			}
		}
	}
	if list == nil {
		return nil, fmt.Errorf("oracle: reading gitlab-runner's feature flags: no flags list in %s", file)
	}
	var out []FeatureFlag
	for _, e := range list.Elts {
		el, ok := e.(*ast.CompositeLit)
		if !ok {
			continue
		}
		var ff FeatureFlag
		for _, kv := range el.Elts {
			kv, ok := kv.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, _ := kv.Key.(*ast.Ident)
			if key == nil {
				continue
			}
			switch key.Name {
			case "Name":
				switch v := kv.Value.(type) {
				case *ast.Ident:
					name, ok := consts[v.Name]
					if !ok {
						return nil, fmt.Errorf("oracle: reading gitlab-runner's feature flags: constant %s not found in %s", v.Name, file)
					}
					ff.Name = name
				case *ast.BasicLit:
					ff.Name, _ = strconv.Unquote(v.Value)
				}
			case "Deprecated":
				if id, ok := kv.Value.(*ast.Ident); ok {
					ff.Deprecated = id.Name == "true"
				}
			}
		}
		if ff.Name == "" {
			return nil, fmt.Errorf("oracle: reading gitlab-runner's feature flags: an element of flags has no Name in %s", file)
		}
		out = append(out, ff)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Snapshot is what the controller needs of gitlab-runner at run time,
// where its source cannot be downloaded: the schema of config.toml and the
// feature flags. It is written by Snapshot.Encode into snapshot.json (make
// generate, from the pinned gitlab-runner source) and read by Embedded; a
// test checks the embedded one equals what Load reads now.
type Snapshot struct {
	// Version is GitLabRunnerVersion when it was written.
	Version      string
	Schema       *Schema
	FeatureFlags []FeatureFlag
}

// LoadSnapshot reads a Snapshot from the gitlab-runner source s was loaded from.
func (s *Schema) LoadSnapshot() (*Snapshot, error) {
	ffs, err := FeatureFlags(s.ModuleDir)
	if err != nil {
		return nil, err
	}
	return &Snapshot{Version: GitLabRunnerVersion, Schema: s, FeatureFlags: ffs}, nil
}

// FeatureFlag returns the feature flag of that name, and whether gitlab-runner has it.
func (sn *Snapshot) FeatureFlag(name string) (FeatureFlag, bool) {
	i := sort.Search(len(sn.FeatureFlags), func(i int) bool { return sn.FeatureFlags[i].Name >= name })
	if i < len(sn.FeatureFlags) && sn.FeatureFlags[i].Name == name {
		return sn.FeatureFlags[i], true
	}
	return FeatureFlag{}, false
}

// FeatureFlagNames are the names of the feature flags, sorted.
func (sn *Snapshot) FeatureFlagNames() []string {
	out := make([]string, len(sn.FeatureFlags))
	for i, f := range sn.FeatureFlags {
		out[i] = f.Name
	}
	return out
}

// The JSON form of a Snapshot: the schema's types as a table, each
// referring to others by index, since the type graph shares nodes and may
// be cyclic.
type snapshotJSON struct {
	Version      string        `json:"version"`
	FeatureFlags []FeatureFlag `json:"featureFlags"`
	Root         int           `json:"root"`
	Types        []typeJSON    `json:"types"`
}

type typeJSON struct {
	Kind   string      `json:"kind"`
	Name   string      `json:"name,omitempty"`
	Bits   int         `json:"bits,omitempty"`
	Elem   *int        `json:"elem,omitempty"`
	Len    int         `json:"len,omitempty"`
	Fields []fieldJSON `json:"fields,omitempty"`
	Open   bool        `json:"open,omitempty"`
	Reason string      `json:"reason,omitempty"`
}

type fieldJSON struct {
	Key    string `json:"key"`
	GoName string `json:"goName,omitempty"`
	Tagged bool   `json:"tagged,omitempty"`
	Type   int    `json:"type"`
}

// Encode writes sn as indented JSON, the same bytes for the same snapshot.
func (sn *Snapshot) Encode() ([]byte, error) {
	ids := map[*Type]int{}
	var types []typeJSON
	var visit func(t *Type) int
	visit = func(t *Type) int {
		if id, ok := ids[t]; ok {
			return id
		}
		id := len(types)
		ids[t] = id
		types = append(types, typeJSON{})
		j := typeJSON{Kind: t.Kind.String(), Name: t.Name, Bits: t.Bits, Len: t.Len, Open: t.Open, Reason: t.Reason}
		if t.Elem != nil {
			e := visit(t.Elem)
			j.Elem = &e
		}
		for _, f := range t.Fields {
			j.Fields = append(j.Fields, fieldJSON{Key: f.Key, GoName: f.GoName, Tagged: f.Tagged, Type: visit(f.Type)})
		}
		types[id] = j
		return id
	}
	out := snapshotJSON{Version: sn.Version, FeatureFlags: sn.FeatureFlags, Root: visit(sn.Schema.Root), Types: types}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeSnapshot reads what Encode wrote.
func DecodeSnapshot(b []byte) (*Snapshot, error) {
	var in snapshotJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("oracle: decoding snapshot: %w", err)
	}
	kinds := map[string]Kind{}
	for k, n := range kindNames {
		kinds[n] = Kind(k)
	}
	types := make([]*Type, len(in.Types))
	for i := range types {
		types[i] = &Type{}
	}
	ref := func(i int) (*Type, error) {
		if i < 0 || i >= len(types) {
			return nil, fmt.Errorf("oracle: decoding snapshot: type %d out of range", i)
		}
		return types[i], nil
	}
	for i, j := range in.Types {
		k, ok := kinds[j.Kind]
		if !ok {
			return nil, fmt.Errorf("oracle: decoding snapshot: unknown kind %q", j.Kind)
		}
		t := types[i]
		*t = Type{Kind: k, Name: j.Name, Bits: j.Bits, Len: j.Len, Open: j.Open, Reason: j.Reason}
		if j.Elem != nil {
			e, err := ref(*j.Elem)
			if err != nil {
				return nil, err
			}
			t.Elem = e
		}
		if k == Struct {
			t.byKey = make(map[string]*Field, len(j.Fields))
		}
		for _, f := range j.Fields {
			ft, err := ref(f.Type)
			if err != nil {
				return nil, err
			}
			fld := &Field{Key: f.Key, GoName: f.GoName, Tagged: f.Tagged, Type: ft}
			t.Fields = append(t.Fields, fld)
			t.byKey[f.Key] = fld
		}
	}
	root, err := ref(in.Root)
	if err != nil {
		return nil, err
	}
	return &Snapshot{Version: in.Version, Schema: &Schema{Root: root}, FeatureFlags: in.FeatureFlags}, nil
}

//go:embed snapshot.json
var embeddedSnapshot []byte

var (
	embeddedOnce sync.Once
	embeddedSn   *Snapshot
	embeddedErr  error
)

// Embedded is the Snapshot of GitLabRunnerVersion built into the binary
// (snapshot.json), decoded once.
func Embedded() (*Snapshot, error) {
	embeddedOnce.Do(func() { embeddedSn, embeddedErr = DecodeSnapshot(embeddedSnapshot) })
	return embeddedSn, embeddedErr
}

// EmbeddedBytes is snapshot.json as built into the binary.
func EmbeddedBytes() []byte { return embeddedSnapshot }
