package crds

import (
	"encoding/json"
	"maps"
	"testing"
)

// members reads an object's members as json.Unmarshal into a map of
// json.RawMessage does, and gives up (for the usual decoder) on what it
// does not follow.
func TestMembersReadsWhatUnmarshalReads(t *testing.T) {
	for _, in := range []string{
		`{}`, ` { } `,
		`{"a":1,"b":"x","c":null,"d":true}`,
		`{"spec":{"tags":["a,b","c}]"],"m":{"x":[1,{"y":"\"}"}]}},"kind":"RunnerSet"}`,
		"{ \"a\" :\n [ 1 , 2 ] ,\t\"b\" : { \"c\" : \"\\\\\" } }",
		`{"a\"b":1,"\u0063":2}`,
		`{"a":1,"a":2}`,
		`{"a":-1.5e3,"b":[],"c":{}}`,
	} {
		got, ok := members([]byte(in))
		if !ok {
			t.Errorf("%s: not read", in)
			continue
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(got, want, func(g []byte, w json.RawMessage) bool { return string(g) == string(w) }) {
			t.Errorf("%s: read %q, json.Unmarshal %q", in, got, want)
		}
	}
	for _, in := range []string{``, `null`, `[]`, `"x"`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1}x`, `{"a":"x}`, `{"a":[1}`, `{a:1}`} {
		if m, ok := members([]byte(in)); ok {
			t.Errorf("%s: read as %q", in, m)
		}
	}
}
