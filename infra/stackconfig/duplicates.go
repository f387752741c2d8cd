package stackconfig

import (
	"bytes"
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsyaml "sigs.k8s.io/yaml"
)

// givenTwice is the message of a key given more than once: every YAML and
// JSON decoder the stack config passes through keeps one of them (the
// last) and drops the others without a word.
const givenTwice = "given more than once in the same object; only the last would count and the others would be dropped without a word: keep one"

// duplicateKeys reports every key given twice in an object of raw, which
// must be valid JSON, with its path under root. It reads the bytes once
// and allocates only for objects and for what it reports.
func duplicateKeys(raw []byte, root *field.Path) field.ErrorList {
	s := dupScan{b: raw, root: root}
	s.value()
	return s.errs
}

type dupScan struct {
	b    []byte
	i    int
	path []pathPart
	root *field.Path
	errs field.ErrorList
}

// pathPart is a key (key != nil) or an index on the way to a value.
type pathPart struct {
	key   []byte
	index int
}

func (s *dupScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *dupScan) value() {
	s.ws()
	if s.i >= len(s.b) {
		return
	}
	switch s.b[s.i] {
	case '{':
		s.object()
	case '[':
		s.array()
	case '"':
		s.str()
	default: // a number, true, false or null
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				return
			}
			s.i++
		}
	}
}

// str reads a string and returns its value, unescaped when it needs to be.
func (s *dupScan) str() []byte {
	s.i++ // the opening quote
	start, escaped := s.i, false
	for s.i < len(s.b) && s.b[s.i] != '"' {
		if s.b[s.i] == '\\' {
			escaped = true
			s.i++
		}
		s.i++
	}
	raw := s.b[start:s.i]
	s.i++ // the closing quote
	if !escaped {
		return raw
	}
	var v string
	if err := json.Unmarshal(s.b[start-1:s.i], &v); err != nil {
		return raw
	}
	return []byte(v)
}

func (s *dupScan) object() {
	s.i++ // {
	var keys [][]byte
	for s.i < len(s.b) {
		s.ws()
		switch s.b[s.i] {
		case '}':
			s.i++
			return
		case ',':
			s.i++
			continue
		}
		k := s.str()
		for _, seen := range keys {
			if bytes.Equal(seen, k) {
				s.errs = append(s.errs, &field.Error{Type: field.ErrorTypeDuplicate, Field: s.at(k).String(), BadValue: string(k), Detail: givenTwice})
				break
			}
		}
		keys = append(keys, k)
		s.ws()
		s.i++ // :
		s.path = append(s.path, pathPart{key: k})
		s.value()
		s.path = s.path[:len(s.path)-1]
	}
}

func (s *dupScan) array() {
	s.i++ // [
	for n := 0; s.i < len(s.b); n++ {
		s.ws()
		switch s.b[s.i] {
		case ']':
			s.i++
			return
		case ',':
			s.i++
		}
		s.ws()
		if s.b[s.i] == ']' {
			continue
		}
		s.path = append(s.path, pathPart{index: n})
		s.value()
		s.path = s.path[:len(s.path)-1]
	}
}

// at is the path of key in the object being read.
func (s *dupScan) at(key []byte) *field.Path {
	p := s.root
	for _, part := range s.path {
		if part.key != nil {
			p = p.Child(string(part.key))
		} else {
			p = p.Index(part.index)
		}
	}
	return p.Child(string(key))
}

// StackFile reads the config of a stack config file (Pulumi.<stack>.yaml),
// each key's value as JSON, as the Pulumi CLI reads it. A key given twice
// anywhere in the file is refused with its path (the fleet's keys under
// Root) and both lines, where a YAML decoder would keep the last.
func StackFile(b []byte) (map[string]json.RawMessage, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	var errs field.ErrorList
	for _, top := range doc.Content {
		errs = append(errs, yamlDuplicates(top, nil)...)
	}
	if len(errs) > 0 {
		return nil, asError(errs)
	}
	var file struct {
		Config map[string]json.RawMessage `json:"config"`
	}
	if err := sigsyaml.Unmarshal(b, &file); err != nil {
		return nil, err
	}
	return file.Config, nil
}

// yamlDuplicates reports the keys given twice in n and below it; p is n's
// path, nil for the file's top.
func yamlDuplicates(n *yaml.Node, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch n.Kind {
	case yaml.MappingNode:
		first := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				continue // <<: an alias's keys, which the mapping's own override
			}
			kp := yamlChild(p, k.Value)
			if line, ok := first[k.Value]; ok {
				errs = append(errs, &field.Error{Type: field.ErrorTypeDuplicate, Field: kp.String(), BadValue: k.Value,
					Detail: fmt.Sprintf("on lines %d and %d: %s", line, k.Line, givenTwice)})
			} else {
				first[k.Value] = k.Line
			}
			errs = append(errs, yamlDuplicates(v, kp)...)
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			errs = append(errs, yamlDuplicates(e, p.Index(i))...)
		}
	}
	return errs
}

// yamlChild is the path of key under p; the fleet's keys are named from
// Root, as Decode names them.
func yamlChild(p *field.Path, key string) *field.Path {
	switch {
	case p == nil:
		return field.NewPath(key)
	case p.String() == "config" && key == "runnerfleet:"+Key:
		return Root
	}
	return p.Child(key)
}
