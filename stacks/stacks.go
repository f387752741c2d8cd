// Package stacks embeds the stack configs (Pulumi.<stack>.yaml), so that
// fleet knows them and deploys them from any directory, not only from a
// checkout.
package stacks

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed Pulumi.*.yaml
var files embed.FS

// Names are the stacks there are, sorted.
func Names() []string {
	paths, _ := fs.Glob(files, "Pulumi.*.yaml")
	var out []string
	for _, p := range paths {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(p, "Pulumi."), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// Config is the stack config of name, as committed.
func Config(name string) ([]byte, error) {
	b, err := files.ReadFile("Pulumi." + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no stack %q: the stacks are %s (or give your own with --config FILE)", name, strings.Join(Names(), ", "))
	}
	return b, nil
}
