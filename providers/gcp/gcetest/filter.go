package gcetest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// filter is a parsed Compute API list filter, the subset fleet code uses:
//
//	(labels.role = "manager") (labels.fleet = "blue")   juxtaposition is AND
//	labels.role = "manager" AND status != "TERMINATED"
//	family = "runner-image"
//	name eq "wsrm-.*"                                   legacy RE2 syntax
//
// OR and the other comparison operators are refused with 400 like an
// expression the API cannot parse.
type filter []cond

type cond struct {
	field, op, value string
	re               *regexp.Regexp
}

func (f filter) match(lookup func(field string) (string, bool)) bool {
	for _, c := range f {
		v, ok := lookup(c.field)
		var eq bool
		switch c.op {
		case "=", "!=":
			eq = ok && v == c.value
		case "eq", "ne":
			eq = ok && c.re.MatchString(v)
		}
		if c.op == "!=" || c.op == "ne" {
			eq = !eq
		}
		if !eq {
			return false
		}
	}
	return true
}

func parseFilter(s string) (filter, error) {
	toks, err := tokenize(s)
	if err != nil {
		return nil, err
	}
	var f filter
	for i := 0; i < len(toks); {
		t := toks[i]
		switch {
		case t == "AND":
			i++
			continue
		case t == "OR":
			return nil, fmt.Errorf("OR is not supported by this fake")
		case t == "(":
			if i+4 >= len(toks) || toks[i+4] != ")" {
				return nil, fmt.Errorf("unbalanced parenthesis")
			}
			c, err := makeCond(toks[i+1], toks[i+2], toks[i+3])
			if err != nil {
				return nil, err
			}
			f = append(f, c)
			i += 5
		default:
			if i+2 >= len(toks) {
				return nil, fmt.Errorf("incomplete expression at %q", t)
			}
			c, err := makeCond(toks[i], toks[i+1], toks[i+2])
			if err != nil {
				return nil, err
			}
			f = append(f, c)
			i += 3
		}
	}
	return f, nil
}

var fieldRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)*$`)

func makeCond(field, op, value string) (cond, error) {
	if !fieldRE.MatchString(field) {
		return cond{}, fmt.Errorf("bad field %q", field)
	}
	value = unquote(value)
	c := cond{field: field, op: op, value: value}
	switch op {
	case "=", "!=":
	case "eq", "ne":
		re, err := regexp.Compile("^(?:" + value + ")$")
		if err != nil {
			return cond{}, err
		}
		c.re = re
	default:
		return cond{}, fmt.Errorf("unsupported operator %q", op)
	}
	return c, nil
}

func unquote(v string) string {
	if len(v) >= 2 && v[0] == '"' {
		if u, err := strconv.Unquote(v); err == nil {
			return u
		}
		return v[1 : len(v)-1]
	}
	return v
}

func tokenize(s string) ([]string, error) {
	var toks []string
	r := []rune(s)
	for i := 0; i < len(r); {
		c := r[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '(' || c == ')':
			toks = append(toks, string(c))
			i++
		case c == '"':
			j := i + 1
			for ; j < len(r) && r[j] != '"'; j++ {
				if r[j] == '\\' {
					j++
				}
			}
			if j >= len(r) {
				return nil, fmt.Errorf("unterminated string")
			}
			toks = append(toks, string(r[i:j+1]))
			i = j + 1
		case c == '!' && i+1 < len(r) && r[i+1] == '=':
			toks = append(toks, "!=")
			i += 2
		case c == '=':
			toks = append(toks, "=")
			i++
		default:
			j := i
			for j < len(r) && !unicode.IsSpace(r[j]) && r[j] != '(' && r[j] != ')' && r[j] != '=' && !(r[j] == '!' && j+1 < len(r) && r[j+1] == '=') {
				j++
			}
			toks = append(toks, string(r[i:j]))
			i = j
		}
	}
	return toks, nil
}

// lookupFields builds a filter lookup from plain fields and labels.
func lookupFields(fields map[string]string, labels map[string]string) func(string) (string, bool) {
	return func(f string) (string, bool) {
		if k, ok := strings.CutPrefix(f, "labels."); ok {
			v, ok := labels[k]
			return v, ok
		}
		v, ok := fields[f]
		return v, ok
	}
}
