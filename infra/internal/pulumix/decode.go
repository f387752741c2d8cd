package pulumix

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/runnerfleet/runnerfleet/internal/suggest"
)

// Decode fills generated Args (a pointer to a struct with `pulumi:"name"`
// tags) from plain values: maps, slices, strings, bools and numbers as an
// unstructured object holds them, and pulumi Inputs for values only known
// at deploy time. A key the Args do not have, or a value of the wrong
// shape, is an error that names its path.
func Decode(fields map[string]any, into any) error {
	v := reflect.ValueOf(into)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("pulumix: Decode into a %T, not a pointer to Args", into)
	}
	var errs []string
	decodeStruct(fields, v.Elem(), "", &errs)
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func decodeStruct(fields map[string]any, v reflect.Value, path string, errs *[]string) {
	t := v.Type()
	byTag := map[string]int{}
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("pulumi"); tag != "" {
			byTag[tag] = i
		}
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		i, ok := byTag[k]
		if !ok {
			known := slices.Collect(maps.Keys(byTag))
			msg := fmt.Sprintf("%s: unknown input of %s", join(path, k), strings.TrimSuffix(t.Name(), "Args"))
			if s := suggest.Closest(k, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			*errs = append(*errs, msg)
			continue
		}
		if fields[k] == nil {
			continue
		}
		decodeValue(fields[k], v.Field(i), join(path, k), errs)
	}
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// builtins are the concrete Pulumi values a plain value may become, tried in
// order for an Input interface field.
func builtins(x any) []pulumi.Input {
	switch y := x.(type) {
	case string:
		return []pulumi.Input{pulumi.String(y)}
	case bool:
		return []pulumi.Input{pulumi.Bool(y)}
	case int:
		return []pulumi.Input{pulumi.Int(y), pulumi.Float64(float64(y))}
	case int64:
		return []pulumi.Input{pulumi.Int(int(y)), pulumi.Float64(float64(y))}
	case float64:
		out := []pulumi.Input{pulumi.Float64(y)}
		if y == float64(int(y)) {
			out = append([]pulumi.Input{pulumi.Int(int(y))}, out...)
		}
		return out
	case []any:
		out := []pulumi.Input{}
		if ss, ok := stringArray(y); ok {
			out = append(out, ss)
		}
		return append(out, ToInput(y))
	case map[string]any:
		out := []pulumi.Input{}
		if m, ok := stringMap(y); ok {
			out = append(out, m)
		}
		return append(out, ToInput(y))
	}
	return nil
}

// asString is a string or a string Input as a StringInput.
func asString(e any) (pulumi.StringInput, bool) {
	switch s := e.(type) {
	case string:
		return pulumi.String(s), true
	case pulumi.StringInput:
		return s, true
	}
	return nil, false
}

func stringArray(a []any) (pulumi.StringArray, bool) {
	out := make(pulumi.StringArray, len(a))
	for i, e := range a {
		s, ok := asString(e)
		if !ok {
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

func stringMap(m map[string]any) (pulumi.StringMap, bool) {
	out := make(pulumi.StringMap, len(m))
	for k, e := range m {
		s, ok := asString(e)
		if !ok {
			return nil, false
		}
		out[k] = s
	}
	return out, true
}

func decodeValue(x any, v reflect.Value, path string, errs *[]string) {
	t := v.Type()
	bad := func(want string) {
		*errs = append(*errs, fmt.Sprintf("%s: want %s, got %T", path, want, x))
	}
	switch t.Kind() {
	case reflect.Interface:
		if in, ok := x.(pulumi.Input); ok {
			if reflect.TypeOf(in).Implements(t) {
				v.Set(reflect.ValueOf(in))
				return
			}
			bad(t.String())
			return
		}
		for _, in := range builtins(x) {
			if reflect.TypeOf(in).Implements(t) {
				v.Set(reflect.ValueOf(in))
				return
			}
		}
		bad(t.String())
	case reflect.Pointer:
		m, ok := x.(map[string]any)
		if !ok || t.Elem().Kind() != reflect.Struct {
			bad("an object")
			return
		}
		p := reflect.New(t.Elem())
		decodeStruct(m, p.Elem(), path, errs)
		v.Set(p)
	case reflect.Struct:
		m, ok := x.(map[string]any)
		if !ok {
			bad("an object")
			return
		}
		decodeStruct(m, v, path, errs)
	case reflect.Slice:
		a, ok := x.([]any)
		if !ok {
			bad("an array")
			return
		}
		s := reflect.MakeSlice(t, len(a), len(a))
		for i, e := range a {
			if e != nil {
				decodeValue(e, s.Index(i), fmt.Sprintf("%s[%d]", path, i), errs)
			}
		}
		v.Set(s)
	case reflect.Map:
		m, ok := x.(map[string]any)
		if !ok {
			bad("an object")
			return
		}
		out := reflect.MakeMapWithSize(t, len(m))
		for k, e := range m {
			if e == nil {
				continue
			}
			ev := reflect.New(t.Elem()).Elem()
			decodeValue(e, ev, path+"."+k, errs)
			out.SetMapIndex(reflect.ValueOf(k), ev)
		}
		v.Set(out)
	default:
		bad(t.String())
	}
}
