package crds

import (
	"bytes"
	"encoding/json"
)

// members returns the members of the JSON object j, each value as the
// bytes of j it spans (not copied), as json.Unmarshal into a
// map[string]json.RawMessage would (the last of a key given twice), without
// decoding or copying the values. ok is false when j is not an object this
// reader follows; the caller then decodes j the usual way.
func members(j []byte) (m map[string][]byte, ok bool) {
	i := ws(j, 0)
	if i >= len(j) || j[i] != '{' {
		return nil, false
	}
	m = map[string][]byte{}
	i = ws(j, i+1)
	if i < len(j) && j[i] == '}' {
		return m, ws(j, i+1) == len(j)
	}
	for {
		if i >= len(j) || j[i] != '"' {
			return nil, false
		}
		end := skipString(j, i)
		if end < 0 {
			return nil, false
		}
		key := string(j[i+1 : end-1])
		if bytes.IndexByte(j[i:end], '\\') >= 0 {
			if err := json.Unmarshal(j[i:end], &key); err != nil {
				return nil, false
			}
		}
		i = ws(j, end)
		if i >= len(j) || j[i] != ':' {
			return nil, false
		}
		start := ws(j, i+1)
		end = skipValue(j, start)
		if end < 0 {
			return nil, false
		}
		m[key] = j[start:end]
		i = ws(j, end)
		switch {
		case i < len(j) && j[i] == ',':
			i = ws(j, i+1)
		case i < len(j) && j[i] == '}':
			return m, ws(j, i+1) == len(j)
		default:
			return nil, false
		}
	}
}

func ws(j []byte, i int) int {
	for i < len(j) && (j[i] == ' ' || j[i] == '\t' || j[i] == '\n' || j[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at j[i] (a
// quote), or -1.
func skipString(j []byte, i int) int {
	for i++; i < len(j); i++ {
		switch j[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index after the value starting at j[i], or -1.
// It checks only what it needs to find the value's end: the decoder of
// the value checks the rest.
func skipValue(j []byte, i int) int {
	if i >= len(j) {
		return -1
	}
	switch j[i] {
	case '"':
		return skipString(j, i)
	case '{', '[':
		depth := 0
		for i < len(j) {
			switch j[i] {
			case '"':
				if i = skipString(j, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	start := i
	for i < len(j) {
		switch j[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if i == start {
				return -1
			}
			return i
		}
		i++
	}
	return -1
}
