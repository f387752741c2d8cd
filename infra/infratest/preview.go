package infratest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
)

// Recorded is what a preview compares of one registration: its URN, its
// type, its provider and a digest of each of its inputs. Secrets are only
// ever digested, so a recording holds no secret in clear.
type Recorded struct {
	URN      string `json:"urn"`
	Token    string `json:"type"`
	Custom   bool   `json:"custom,omitempty"`
	Provider string `json:"provider,omitempty"`
	// Inputs are the digests of the inputs by top-level key.
	Inputs map[string]string `json:"inputs,omitempty"`
}

// Record is the recording of what the program registered, in URN order.
func Record(rs []Resource) []Recorded {
	out := make([]Recorded, 0, len(rs))
	for _, r := range rs {
		rec := Recorded{URN: r.URN, Token: r.Token, Custom: r.Custom, Provider: r.Provider}
		for k, v := range r.Inputs {
			if rec.Inputs == nil {
				rec.Inputs = map[string]string{}
			}
			rec.Inputs[string(k)] = digest(v)
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URN < out[j].URN })
	return out
}

// WriteRecording writes a recording to path as indented JSON.
func WriteRecording(path string, rec []Recorded) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadRecording reads a recording WriteRecording wrote.
func ReadRecording(path string) ([]Recorded, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec []Recorded
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rec, nil
}

// digest is a short hash of the canonical JSON of v.
func digest(v resource.PropertyValue) string {
	b, err := json.Marshal(canonical(v))
	if err != nil {
		return "unencodable: " + err.Error()
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:12])
}

// canonical is v as plain JSON values; secrets, computed values, outputs
// and resource references are marked so that a value and its secret differ.
func canonical(v resource.PropertyValue) any {
	switch {
	case v.IsNull():
		return nil
	case v.IsBool():
		return v.BoolValue()
	case v.IsNumber():
		return v.NumberValue()
	case v.IsString():
		return v.StringValue()
	case v.IsArray():
		out := make([]any, 0, len(v.ArrayValue()))
		for _, e := range v.ArrayValue() {
			out = append(out, canonical(e))
		}
		return out
	case v.IsObject():
		out := map[string]any{}
		for k, e := range v.ObjectValue() {
			out[string(k)] = canonical(e)
		}
		return out
	case v.IsSecret():
		return map[string]any{"secret": canonical(v.SecretValue().Element)}
	case v.IsComputed():
		return map[string]any{"computed": canonical(v.Input().Element)}
	case v.IsOutput():
		o := v.OutputValue()
		return map[string]any{"output": canonical(o.Element), "known": o.Known, "secret": o.Secret}
	case v.IsResourceReference():
		r := v.ResourceReferenceValue()
		return map[string]any{"urn": string(r.URN), "id": canonical(r.ID)}
	}
	return fmt.Sprintf("%v", v)
}

// AliasURNs are the URNs each resource answers for beside its own, as the
// engine resolves the aliases it was sent: an alias spec names the old
// name, type and parent (the resource's own where it leaves one out), and
// a child answers, under its own name and type, for every URN its parent
// answers for (so that moving a component moves its children with it).
func AliasURNs(rs []Resource) map[string][]string {
	byURN := make(map[string]Resource, len(rs))
	for _, r := range rs {
		byURN[r.URN] = r
	}
	memo := map[string][]string{}
	var of func(u string) []string
	of = func(u string) []string {
		if got, ok := memo[u]; ok {
			return got
		}
		memo[u] = nil // a cycle answers for nothing
		r, ok := byURN[u]
		if !ok {
			return nil
		}
		var out []string
		add := func(a string) {
			if a != u && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
		for _, a := range r.Aliases {
			if a.GetUrn() != "" {
				add(a.GetUrn())
				continue
			}
			sp := a.GetSpec()
			if sp == nil {
				continue
			}
			name, tok := sp.GetName(), sp.GetType()
			if name == "" {
				name = r.Name
			}
			if tok == "" {
				tok = r.Token
			}
			var parents []string
			switch {
			case sp.GetNoParent():
				parents = []string{stackURN(r)}
			case sp.GetParentUrn() != "":
				parents = []string{sp.GetParentUrn()}
			default:
				parents = append([]string{r.Parent}, of(r.Parent)...)
			}
			for _, p := range parents {
				add(urn(p, tok, name))
			}
		}
		if r.Parent != "" {
			for _, p := range of(r.Parent) {
				add(urn(p, r.Token, r.Name))
			}
		}
		memo[u] = out
		return out
	}
	out := map[string][]string{}
	for _, r := range rs {
		if a := of(r.URN); len(a) > 0 {
			out[r.URN] = a
		}
	}
	return out
}

// stackURN is the URN of the stack r belongs to.
func stackURN(r Resource) string {
	parts := strings.SplitN(r.URN, "::", 4)
	if len(parts) != 4 {
		return ""
	}
	stack := strings.TrimPrefix(parts[0], "urn:pulumi:")
	return fmt.Sprintf("urn:pulumi:%s::%s::pulumi:pulumi:Stack::%s-%s", stack, parts[1], parts[1], stack)
}

// Compare is what a preview of the program registering after would show
// against the state before recorded, but moves: every resource of before
// must be registered again, under its URN or through an alias to it (else
// the engine deletes it, and creates the new one: a replacement), of the
// same type, on the same provider and with the same inputs (else an
// update); and no custom resource may be new (a create). New component
// resources are moves' new homes and hold nothing in the cloud, so they
// are allowed. Each difference is one line.
func Compare(before []Recorded, after []Resource) []string {
	now := map[string]Recorded{}
	for _, r := range Record(after) {
		now[r.URN] = r
	}
	claims := map[string][]string{}
	for _, r := range after {
		claims[r.URN] = append(claims[r.URN], r.URN)
	}
	for u, as := range AliasURNs(after) {
		for _, a := range as {
			claims[a] = append(claims[a], u)
		}
	}
	var diffs []string
	claimed := map[string]bool{}
	for _, b := range before {
		c := claims[b.URN]
		switch len(c) {
		case 0:
			diffs = append(diffs, fmt.Sprintf("%s (%s) would be deleted (replaced): no resource has this URN or an alias to it", b.URN, b.Token))
			continue
		case 1:
		default:
			sort.Strings(c)
			diffs = append(diffs, fmt.Sprintf("%s is claimed by %d resources: %s", b.URN, len(c), strings.Join(c, ", ")))
			continue
		}
		n := now[c[0]]
		claimed[n.URN] = true
		what := b.URN
		if n.URN != b.URN {
			what = b.URN + " (now " + n.URN + ")"
		}
		if n.Token != b.Token && b.Custom {
			diffs = append(diffs, fmt.Sprintf("%s: type %s, was %s", what, n.Token, b.Token))
		}
		if n.Provider != b.Provider {
			diffs = append(diffs, fmt.Sprintf("%s: provider %s, was %s", what, n.Provider, b.Provider))
		}
		var keys []string
		for k := range b.Inputs {
			keys = append(keys, k)
		}
		for k := range n.Inputs {
			if _, ok := b.Inputs[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if b.Inputs[k] != n.Inputs[k] {
				diffs = append(diffs, fmt.Sprintf("%s: input %s changed", what, k))
			}
		}
	}
	for _, r := range Record(after) {
		if r.Custom && !claimed[r.URN] {
			diffs = append(diffs, fmt.Sprintf("%s (%s) would be created", r.URN, r.Token))
		}
	}
	return diffs
}
