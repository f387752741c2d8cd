package infratest

import (
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// moved registers a custom resource "r" with input v under a
// component of type tok, aliased to the old parent type old when old is
// not empty, and optionally one extra custom resource.
func moved(t *testing.T, tok, old, v string, extra bool) []Resource {
	t.Helper()
	// Kubernetes custom resources are not checked against a schema.
	m := &Mocks{Outputs: DefaultOutputs()}
	err := Run(m, "test", nil, nil, func(ctx *pulumi.Context) error {
		var opts []pulumi.ResourceOption
		if old != "" {
			opts = append(opts, pulumi.Aliases([]pulumi.Alias{{Type: pulumi.String(old)}}))
		}
		c := &struct{ pulumi.ResourceState }{}
		if err := ctx.RegisterComponentResource(tok, "c", c, opts...); err != nil {
			return err
		}
		r := &struct{ pulumi.CustomResourceState }{}
		if err := ctx.RegisterResource("kubernetes:example.com/v1:Thing", "r", pulumi.Map{"v": pulumi.String(v)}, r, pulumi.Parent(c)); err != nil {
			return err
		}
		if extra {
			x := &struct{ pulumi.CustomResourceState }{}
			return ctx.RegisterResource("kubernetes:example.com/v1:Thing", "x", pulumi.Map{}, x, pulumi.Parent(c))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m.Resources()
}

// A component moved to a new type keeps its child through an alias on the
// component alone (the child inherits it, as in the engine); without the
// alias the child would be replaced, a changed input is an update, and a
// new custom resource a create: each is a difference.
func TestCompareSeesOnlyMovesThroughAliases(t *testing.T) {
	before := Record(moved(t, "test:old:C", "", "a", false))
	for _, c := range []struct {
		name  string
		after []Resource
		want  string
	}{
		{"moved with an alias", moved(t, "test:new:C", "test:old:C", "a", false), ""},
		{"moved without an alias", moved(t, "test:new:C", "", "a", false), "would be deleted (replaced)"},
		{"an input changed", moved(t, "test:new:C", "test:old:C", "b", false), "input v changed"},
		{"a resource added", moved(t, "test:new:C", "test:old:C", "a", true), "would be created"},
	} {
		t.Run(c.name, func(t *testing.T) {
			diffs := strings.Join(Compare(before, c.after), "\n")
			if c.want == "" && diffs != "" || c.want != "" && !strings.Contains(diffs, c.want) {
				t.Errorf("differences:\n%s\nwant %q", diffs, c.want)
			}
		})
	}
}
