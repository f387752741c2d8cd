// Package stackconfig decodes and validates the runnerfleet stack config
// (the runnerfleet:fleet key of stacks/Pulumi.<stack>.yaml) before the
// program declares any resource. Every problem is reported at once, each
// naming its key and the fix.
package stackconfig

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runnerfleet/runnerfleet/internal/suggest"
)

// Strict decodes raw JSON into out, refusing keys out's type does not have
// and keys given twice in one object (of which encoding/json, like every
// YAML decoder, keeps the last without a word).
// Unlike json.Decoder.DisallowUnknownFields, which stops at the first unknown
// key and does not say where it is, every unknown key is reported with its
// path and the keys allowed there. The known keys are still decoded, so that
// the caller can validate them and report everything at once; decoded is
// false when out could not be filled (malformed JSON, a value of the wrong
// type).
func Strict(raw []byte, out any, root *field.Path) (errs field.ErrorList, decoded bool) {
	if decodedAsIs(raw, out) {
		return nil, true
	}
	return strictLong(raw, out, root)
}

// strictLong is Strict without its fast way: it reads raw as a generic
// tree to name every problem.
func strictLong(raw []byte, out any, root *field.Path) (errs field.ErrorList, decoded bool) {
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return field.ErrorList{field.Invalid(root, string(raw), "not a JSON object: "+err.Error())}, false
	}
	errs = duplicateKeys(raw, root)
	errs = append(errs, unknownKeys(generic, reflect.TypeOf(out).Elem(), root)...)
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(out); err != nil {
		if len(errs) > 0 {
			// A value that failed its own decoder is already named above.
			var te *json.UnmarshalTypeError
			if !asTypeError(err, &te) {
				return errs, false
			}
		}
		var te *json.UnmarshalTypeError
		if ok := asTypeError(err, &te); ok {
			for _, e := range errs {
				if e.Type == field.ErrorTypeTypeInvalid {
					return errs, false // every wrongly typed value is named above
				}
			}
			p := root
			if te.Field != "" {
				p = pathOf(root, te.Field)
			}
			return append(errs, field.TypeInvalid(p, te.Value, fmt.Sprintf("want %s", kindName(te.Type)))), false
		}
		return append(errs, field.Invalid(root, "", err.Error())), false
	}
	return errs, true
}

func asTypeError(err error, te **json.UnmarshalTypeError) bool {
	t, ok := err.(*json.UnmarshalTypeError)
	if ok {
		*te = t
	}
	return ok
}

// pathOf turns encoding/json's dotted field path (teams.0.tags) into a
// field path (teams[0].tags).
func pathOf(root *field.Path, dotted string) *field.Path {
	p := root
	for _, part := range strings.Split(dotted, ".") {
		if i, err := strconv.Atoi(part); err == nil {
			p = p.Index(i)
			continue
		}
		p = p.Child(part)
	}
	return p
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

var unmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
var textUnmarshaler = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()

func unknownKeys(v any, t reflect.Type, p *field.Path) field.ErrorList {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// Types that decode themselves (durations, quantities) are theirs to
	// judge: decode the value here, so that their error names its key.
	if decodesItself(t) {
		b, err := json.Marshal(v)
		if err == nil {
			err = json.Unmarshal(b, reflect.New(t).Interface())
		}
		if err != nil {
			return field.ErrorList{field.Invalid(p, v, err.Error())}
		}
		return nil
	}
	if v != nil && !fits(v, t) {
		// Reported here, for every value, rather than by the decoder,
		// which stops at the first.
		return field.ErrorList{field.TypeInvalid(p, jsonKind(v), "want "+kindName(t))}
	}
	var errs field.ErrorList
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil // the decoder reports the type
		}
		fields := fieldsOf(t)
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			ft, ok := fields[k]
			if !ok {
				known := slices.Sorted(maps.Keys(fields))
				msg := "unknown key; remove it"
				if s := suggest.Closest(k, known); s != "" {
					msg = fmt.Sprintf("unknown key; did you mean %q?", s)
				}
				errs = append(errs, field.Forbidden(p.Child(k), fmt.Sprintf("%s (the keys allowed here are: %s)", msg, strings.Join(known, ", "))))
				continue
			}
			errs = append(errs, unknownKeys(obj[k], ft, p.Child(k))...)
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return nil
		}
		for i, e := range arr {
			errs = append(errs, unknownKeys(e, t.Elem(), p.Index(i))...)
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		for k, e := range obj {
			errs = append(errs, unknownKeys(e, t.Elem(), p.Key(k))...)
		}
	}
	return errs
}

// fits reports whether the decoded JSON value v can be decoded into t.
func fits(v any, t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String:
		_, ok := v.(string)
		return ok
	case reflect.Bool:
		_, ok := v.(bool)
		return ok
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(float64)
		return ok && n == math.Trunc(n)
	case reflect.Float32, reflect.Float64:
		_, ok := v.(float64)
		return ok
	case reflect.Slice, reflect.Array:
		_, ok := v.([]any)
		return ok
	case reflect.Map, reflect.Struct:
		_, ok := v.(map[string]any)
		return ok
	}
	return true
}

// jsonKind names the JSON type of v as encoding/json's errors do.
func jsonKind(v any) string {
	switch n := v.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	case float64:
		return "number " + strconv.FormatFloat(n, 'g', -1, 64)
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// The answers of decodesItself and jsonFields, by type: a stack config of
// thousands of teams asks them for every value.
var selfDecoding, structFields sync.Map

// decodesItself reports whether t has a JSON or text decoder of its own.
func decodesItself(t reflect.Type) bool {
	if v, ok := selfDecoding.Load(t); ok {
		return v.(bool)
	}
	yes := reflect.PointerTo(t).Implements(unmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)
	selfDecoding.Store(t, yes)
	return yes
}

// fieldsOf is jsonFields(t), computed once per type.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if v, ok := structFields.Load(t); ok {
		return v.(map[string]reflect.Type)
	}
	f := jsonFields(t)
	structFields.Store(t, f)
	return f
}

// jsonFields returns a struct's JSON keys and their types, flattening
// embedded structs the way encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		ft := f.Type
		if f.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					out[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
